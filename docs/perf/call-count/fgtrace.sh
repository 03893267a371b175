#!/bin/bash
# One-guest 8 B ping-pong per transport (trdma on the lab's netdev, siw on
# a dummy netdev and address of its own, as tools/bench sets them up) under
# ftrace's function_graph tracer, every function to any depth, for 0.3 s of
# the run: once from the transport's receive upcall, once from the system
# call that rings its doorbell (trdma's provider: the ioctl that wraps
# the post_send command; siw's: write()).  Raw graphs to
# OUT/fg-TRANSPORT-FUNCTION.txt; count them with fgcount.py.
#   usage: tools/vm --out DIR -- docs/perf/call-count/fgtrace.sh SIWKO N \
#          TRANSPORT...
# The tracer makes every call cost about a microsecond more: the graphs
# count calls, they do not time them.
# shellcheck disable=SC2034  # lib.sh's
set -uo pipefail
ifname=${TRDMA_LAB_IF:?}
out=${TRDMA_LAB_OUT:?}
siwko=$1 n=$2
shift 2
build=build pass=0 fail=0
. tests/lab/lib.sh
T=/sys/kernel/tracing
[ -e $T/trace ] || mount -t tracefs nodev $T
echo local >$T/trace_clock
echo 65536 >$T/buffer_size_kb
modprobe ib_uverbs; modprobe libcrc32c; modprobe crc32c_generic
for tr in "$@"; do
	if [ "$tr" = trdma ]; then
		modprobe trdma || exit 1
		rdma link add trdma0 type trdma netdev "$ifname" || exit 1
		dev=trdma0 addr=127.0.0.1
		opts=(-d trdma0 -x "$(v4gid trdma0)")
		fns="trdma_rx_data_ready ib_uverbs_ioctl"
	else
		insmod "$siwko" || exit 1
		modprobe dummy numdummies=0
		ip link add l1siw0 type dummy && ip addr add 10.233.0.1/24 dev l1siw0 &&
			ip link set l1siw0 up || exit 1
		rdma link add siw0 type siw netdev l1siw0 || exit 1
		dev=siw0 addr=10.233.0.1
		opts=(-d siw0 -R)
		fns="siw_qp_llp_data_ready ib_uverbs_write"
	fi
	for fn in $fns; do
		echo function_graph >$T/current_tracer
		echo "$fn" >$T/set_graph_function
		echo 0 >$T/max_graph_depth
		echo 0 >$T/tracing_on
		echo >$T/trace
		timeout 120 ib_send_lat -s 8 -n "$n" -F "${opts[@]}" >/tmp/s.log 2>&1 &
		if [ "$tr" = trdma ]; then tools/lab/wait-listen -t 30 18515; else sleep 8; fi
		( sleep 3; echo 1 >$T/tracing_on; sleep 0.3; echo 0 >$T/tracing_on ) &
		timeout 120 ib_send_lat -s 8 -n "$n" -F "${opts[@]}" "$addr" \
			>/tmp/c.log 2>&1 || echo "FAILED: $(tail -3 /tmp/c.log | tr '\n' ' ')"
		wait
		cp $T/trace "$out/fg-$tr-$fn.txt"
		fig=$(grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/c.log | tail -1 | awk '{print $5, $6}')
		echo "$tr, graph of $fn: typical, average us: ${fig:--}"
		echo nop >$T/current_tracer
	done
	rdma link delete "$dev"
	if [ "$tr" = trdma ]; then rmmod trdma; else rmmod siw; ip link delete l1siw0; fi
done
