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
# shellcheck source=docs/perf/host-view/l1setup.sh
. docs/perf/host-view/l1setup.sh
T=/sys/kernel/tracing
[ -e $T/trace ] || mount -t tracefs nodev $T
echo local >$T/trace_clock
echo 65536 >$T/buffer_size_kb
l1_deps
for tr in "$@"; do
	l1_up "$tr" || exit 1
	if [ "$tr" = trdma ]; then
		fns="trdma_rx_data_ready ib_uverbs_ioctl"
	else
		fns="siw_qp_llp_data_ready ib_uverbs_write"
	fi
	for fn in $fns; do
		echo function_graph >$T/current_tracer
		echo "$fn" >$T/set_graph_function
		echo 0 >$T/max_graph_depth
		echo 0 >$T/tracing_on
		echo >$T/trace
		timeout 120 ib_send_lat -s 8 -n "$n" -F "${opts[@]}" >/tmp/s.log 2>&1 &
		l1_served "$tr"
		( sleep 3; echo 1 >$T/tracing_on; sleep 0.3; echo 0 >$T/tracing_on ) &
		timeout 120 ib_send_lat -s 8 -n "$n" -F "${opts[@]}" "$addr" \
			>/tmp/c.log 2>&1 || echo "FAILED: $(tail -3 /tmp/c.log | tr '\n' ' ')"
		wait
		cp $T/trace "$out/fg-$tr-$fn.txt"
		echo "$tr, graph of $fn: typical, average us: $(l1_fig /tmp/c.log)"
		echo nop >$T/current_tracer
	done
	l1_down "$tr"
done
