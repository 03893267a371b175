#!/bin/bash
# One-guest 8 B ping-pong per transport (trdma on the lab's netdev, siw on
# a dummy netdev and address of its own, as tools/bench sets them up) with
# ftrace over a window of the run: perftest's system calls (other than
# sched_yield) and kprobes at the same steps of both transports, on every
# CPU, timestamped with the guest's TSC-based local clock.  Raw traces to
# OUT/l1-NV-TRANSPORT.txt.
#   usage: tools/vm --out DIR -- docs/perf/host-view/l1trace.sh SIWKO N TRANSPORT...
# shellcheck disable=SC2034  # lib.sh's
set -uo pipefail
ifname=${TRDMA_LAB_IF:?}
siwko=$1 n=$2
shift 2
build=build pass=0 fail=0
. tests/lab/lib.sh
out=${TRDMA_LAB_OUT:?}
T=/sys/kernel/tracing
[ -e $T/trace ] || mount -t tracefs nodev $T
modprobe trdma && rmmod trdma
modprobe ib_uverbs; modprobe libcrc32c; modprobe crc32c_generic
echo local >$T/trace_clock
echo 16384 >$T/buffer_size_kb
nv=0
for tr in "$@"; do
	nv=$((nv + 1))
	if [ "$tr" = trdma ]; then
		modprobe trdma || exit 1
		rdma link add trdma0 type trdma netdev "$ifname" || exit 1
		dev=trdma0 addr=127.0.0.1
		opts=(-d trdma0 -x "$(v4gid trdma0)")
		m=trdma upcall=trdma_rx_data_ready cqe=trdma_cq_post post=trdma_post_send
	else
		insmod "$siwko" || exit 1
		modprobe dummy numdummies=0
		ip link add l1siw0 type dummy && ip addr add 10.233.0.1/24 dev l1siw0 &&
			ip link set l1siw0 up || exit 1
		rdma link add siw0 type siw netdev l1siw0 || exit 1
		dev=siw0 addr=10.233.0.1
		opts=(-d siw0 -R)
		m=siw upcall=siw_qp_llp_data_ready cqe=siw_rqe_complete post=siw_post_send
	fi
	echo 0 >$T/tracing_on
	echo >$T/trace
	echo 'id != 24' >$T/events/raw_syscalls/sys_enter/filter
	echo 'id != 24' >$T/events/raw_syscalls/sys_exit/filter
	echo 1 >$T/events/raw_syscalls/sys_enter/enable
	echo 1 >$T/events/raw_syscalls/sys_exit/enable
	{
		echo "p:kp/post $m:$post"
		echo 'p:kp/tcp_sendmsg_locked tcp_sendmsg_locked'
		echo 'p:kp/ip_queue_xmit __ip_queue_xmit'
		echo 'p:kp/dev_queue_xmit __dev_queue_xmit'
		echo 'p:kp/tcp_v4_rcv tcp_v4_rcv'
		echo 'p:kp/tcp_rcv_established tcp_rcv_established'
		echo "p:kp/upcall $m:$upcall"
		echo "p:kp/cqe $m:$cqe"
		echo "r:kp/upcall_ret $m:$upcall"
		echo 'p:kp/hrtimer_start hrtimer_start_range_ns'
		echo 'p:kp/spin_slow native_queued_spin_lock_slowpath'
	} >$T/kprobe_events
	echo 1 >$T/events/kp/enable
	timeout 300 ib_send_lat -s 8 -n "$n" -F "${opts[@]}" >/tmp/s.log 2>&1 &
	spid=$!
	if [ "$tr" = trdma ]; then tools/lab/wait-listen -t 30 18515; else sleep 10; fi
	( sleep 4; echo 1 >$T/tracing_on; sleep 1; echo 0 >$T/tracing_on ) &
	timeout 300 ib_send_lat -s 8 -n "$n" -F "${opts[@]}" "$addr" >/tmp/c.log 2>&1 ||
		echo "FAILED: $(tail -3 /tmp/c.log | tr '\n' ' ')"
	wait
	echo 0 >$T/events/enable
	cp $T/trace "$out/l1-$nv-$tr.txt"
	echo >$T/kprobe_events
	fig=$(grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/c.log | tail -1 | awk '{print $5, $6}')
	echo "$tr (#$nv): typical, average us: ${fig:--}"
	rdma link delete "$dev"
	if [ "$tr" = trdma ]; then rmmod trdma; else rmmod siw; ip link delete l1siw0; fi
	sleep 1
done
