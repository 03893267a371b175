# shellcheck shell=bash
# Sourced by h2trace.sh and l1trace.sh: ftrace in a lab guest, with the
# guest's TSC-based local clock.
#   steps_init KB: tracefs mounted, the clock set, KB of buffer per CPU
#   steps_syscalls: perftest's system calls in and out (not sched_yield)
#   steps_kprobes TRANSPORT [WHICH...]: kprobes "kp/NAME" at the same steps
#     of trdma and siw, WHICH of them (default: all): post (the driver's
#     post_send), uverbs (the uverbs entry: the ioctl trdma's provider
#     rings through, the write() siw's does), uverbs_post_send,
#     tcp_sendmsg_locked, ip_queue_xmit, dev_queue_xmit, tcp_v4_rcv,
#     tcp_rcv_established, upcall, cqe (trdma: every completion; siw: a
#     receive's), upcall_ret, hrtimer_start, spin_slow; then $extra's
#     "[r:]MODULE:FUNCTION" words (r: where it returns)
#   steps_save FILE: stops, copies the trace to FILE, removes the kprobes
T=/sys/kernel/tracing
steps_init() {
	[ -e $T/trace ] || mount -t tracefs nodev $T
	echo local >$T/trace_clock
	echo "$1" >$T/buffer_size_kb
}
steps_syscalls() {
	local e
	for e in sys_enter sys_exit; do
		echo 'id != 24' >$T/events/raw_syscalls/$e/filter
		echo 1 >$T/events/raw_syscalls/$e/enable
	done
}
steps_kprobes() {
	local tr=$1 m upcall cqe post entry w pr
	shift
	if [ "$tr" = trdma ]; then
		m=trdma upcall=trdma_rx_data_ready cqe=trdma_cq_post post=trdma_post_send
		entry=ib_uverbs_ioctl
	else
		m=siw upcall=siw_qp_llp_data_ready cqe=siw_rqe_complete post=siw_post_send
		entry=ib_uverbs_write
	fi
	[ $# -gt 0 ] || set -- post uverbs uverbs_post_send tcp_sendmsg_locked \
		ip_queue_xmit dev_queue_xmit tcp_v4_rcv tcp_rcv_established \
		upcall cqe upcall_ret hrtimer_start spin_slow
	{
		for w in "$@"; do
			case $w in
			post) echo "p:kp/post $m:$post" ;;
			uverbs) echo "p:kp/uverbs $entry" ;;
			uverbs_post_send) echo 'p:kp/uverbs_post_send ib_uverbs_post_send' ;;
			tcp_sendmsg_locked | tcp_v4_rcv | tcp_rcv_established)
				echo "p:kp/$w $w" ;;
			ip_queue_xmit | dev_queue_xmit) echo "p:kp/$w __$w" ;;
			upcall) echo "p:kp/upcall $m:$upcall" ;;
			cqe) echo "p:kp/cqe $m:$cqe" ;;
			upcall_ret) echo "r:kp/upcall_ret $m:$upcall" ;;
			hrtimer_start) echo 'p:kp/hrtimer_start hrtimer_start_range_ns' ;;
			spin_slow) echo 'p:kp/spin_slow native_queued_spin_lock_slowpath' ;;
			esac
		done
		for pr in ${extra:-}; do
			case $pr in
			r:*) pr=${pr#r:}; echo "r:kp/${pr#*:}_ret $pr" ;;
			*) echo "p:kp/${pr#*:} $pr" ;;
			esac
		done
	} >$T/kprobe_events
	echo 1 >$T/events/kp/enable
}
steps_save() {
	echo 0 >$T/tracing_on
	echo 0 >$T/events/enable
	cp $T/trace "$1"
	# Removing kprobes resets the buffer: after the copy.
	echo >$T/kprobe_events
}
