#!/bin/bash
# Two-guest 8 B ping-pong per variant with ftrace in both guests over a
# window of the run: the lab NIC's interrupts, received and transmitted
# packets and the system calls other than sched_yield, timestamped with
# the guest's TSC-based local clock.  Raw traces to OUT/trace-hH-NV.txt.
#   usage: tools/vm --hosts 2 --out DIR -- docs/perf/host-view/h2trace.sh
#          [KPROBES=0] [PROBES_trdma=LIST] [PROBES_siw=LIST] SIWKO N VARIANT...
# The kprobes (each a few us in a TCG guest; KPROBES=0: none) name the
# same steps of both transports; PROBES_trdma and PROBES_siw add
# functions, "[r:]MODULE:FUNCTION" (r: where it returns).  VARIANT as in
# ../ack-slack/variant.sh.
# shellcheck disable=SC2034,SC2154  # variant.sh sets and reads them
set -uo pipefail
ifname=${TRDMA_LAB_IF:?}
KPROBES=1
while [[ $1 == PROBES_trdma=* || $1 == PROBES_siw=* || $1 == KPROBES=* ]]; do
	declare "$1"
	shift
done
siwko=$1 n=$2
shift 2
# shellcheck disable=SC2034
build=build pass=0 fail=0
. tests/lab/lib.sh
# shellcheck source=docs/perf/ack-slack/variant.sh
. docs/perf/ack-slack/variant.sh
me=$TRDMA_LAB_HOST
out=${TRDMA_LAB_OUT:?}
T=/sys/kernel/tracing
[ -e $T/trace ] || mount -t tracefs nodev $T
variant_modules
echo local >$T/trace_clock
echo 8192 >$T/buffer_size_kb
for v in "$@"; do
	variant_next "$v"
	variant_server ib_send_lat -s 8 -n "$n"
	tools/lab/barrier -t 200 "$tag-up"
	echo 0 >$T/tracing_on
	echo >$T/trace
	echo "name == \"$ifname\"" >$T/events/net/netif_receive_skb/filter
	echo "name == \"$ifname\"" >$T/events/net/net_dev_start_xmit/filter
	echo 1 >$T/events/net/netif_receive_skb/enable
	echo 1 >$T/events/net/net_dev_start_xmit/enable
	echo 1 >$T/events/irq/irq_handler_entry/enable
	echo 'id != 24' >$T/events/raw_syscalls/sys_enter/filter
	echo 1 >$T/events/raw_syscalls/sys_enter/enable
	echo 'id != 24' >$T/events/raw_syscalls/sys_exit/filter
	echo 1 >$T/events/raw_syscalls/sys_exit/enable
	echo 'vec == 3' >$T/events/irq/softirq_entry/filter
	echo 'vec == 3' >$T/events/irq/softirq_exit/filter
	echo 1 >$T/events/irq/softirq_entry/enable
	echo 1 >$T/events/irq/softirq_exit/enable
	if [ "$KPROBES" = 0 ]; then
		:
	elif [ "$tr" = trdma ]; then
		m=trdma upcall=trdma_rx_data_ready cqe=trdma_cq_post post=trdma_post_send
		entry=ib_uverbs_ioctl
	else
		m=siw upcall=siw_qp_llp_data_ready cqe=siw_rqe_complete post=siw_post_send
		entry=ib_uverbs_write
	fi
	[ "$KPROBES" = 0 ] || {
		echo 'p:kp/tcp_v4_rcv tcp_v4_rcv'
		echo 'p:kp/tcp_rcv_established tcp_rcv_established'
		echo "p:kp/upcall $m:$upcall"
		echo "p:kp/cqe $m:$cqe"
		echo "r:kp/upcall_ret $m:$upcall"
		echo 'p:kp/hrtimer_start hrtimer_start_range_ns'
		echo "p:kp/uverbs $entry"
		echo 'p:kp/uverbs_post_send ib_uverbs_post_send'
		echo "p:kp/post $m:$post"
		echo 'p:kp/tcp_sendmsg_locked tcp_sendmsg_locked'
		echo 'p:kp/ip_queue_xmit __ip_queue_xmit'
		echo 'p:kp/dev_queue_xmit __dev_queue_xmit'
		# PROBES_trdma, PROBES_siw: more functions, "[r:]MODULE:FUNCTION"
		# (r: where it returns).
		eval "extra=\${PROBES_$tr:-}"
		for pr in $extra; do
			case $pr in
			r:*) pr=${pr#r:}; echo "r:kp/${pr#*:}_ret $pr" ;;
			*) echo "p:kp/${pr#*:} $pr" ;;
			esac
		done
	} >$T/kprobe_events
	[ "$KPROBES" = 0 ] || echo 1 >$T/events/kp/enable
	( sleep 6; echo 1 >$T/tracing_on; sleep 2; echo 0 >$T/tracing_on ) &
	if [ "$me" = 2 ]; then
		wait $spid
	else
		variant_client ib_send_lat -s 8 -n "$n"
	fi
	wait
	echo 0 >$T/events/enable
	cp $T/trace "$out/trace-h$me-$nv.txt"
	echo >$T/kprobe_events # (resets the buffer: after the copy)
	tools/lab/barrier -t 200 "$tag-done"
	fig=$(grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/c.log | tail -1 | awk '{print $5, $6}')
	[ "$me" = 2 ] || echo "$v (#$nv): typical, average us: ${fig:--}"
	variant_down
done
