#!/bin/bash
# One-guest 8 B ping-pong per transport (trdma on the lab's netdev, siw on
# a dummy netdev and address of its own, as tools/bench sets them up) with
# ftrace over a window of the run: perftest's system calls (other than
# sched_yield) and kprobes at the same steps of both transports, on every
# CPU, timestamped with the guest's TSC-based local clock.  Raw traces to
# OUT/l1-NV-TRANSPORT.txt.
#   usage: tools/vm --out DIR -- docs/perf/host-view/l1trace.sh
#          [PROBES=LIST] SIWKO N TRANSPORT...
# PROBES: more kprobes, "[r:]MODULE:FUNCTION" (steps.sh), set for every
# transport whose module has them.
# shellcheck disable=SC2034  # lib.sh's
set -uo pipefail
ifname=${TRDMA_LAB_IF:?}
PROBES=
case $1 in PROBES=*) PROBES=${1#PROBES=}; shift ;; esac
siwko=$1 n=$2
shift 2
build=build pass=0 fail=0
. tests/lab/lib.sh
# shellcheck source=docs/perf/host-view/l1setup.sh
. docs/perf/host-view/l1setup.sh
out=${TRDMA_LAB_OUT:?}
# shellcheck source=docs/perf/host-view/steps.sh
. docs/perf/host-view/steps.sh
steps_init 16384
modprobe trdma && rmmod trdma
l1_deps
nv=0
for tr in "$@"; do
	nv=$((nv + 1))
	l1_up "$tr" || exit 1
	echo 0 >$T/tracing_on
	echo >$T/trace
	steps_syscalls
	extra=
	for pr in $PROBES; do
		case ${pr#r:} in "$tr":*) extra+=" $pr" ;; esac
	done
	steps_kprobes "$tr" post tcp_sendmsg_locked ip_queue_xmit dev_queue_xmit \
		tcp_v4_rcv tcp_rcv_established upcall cqe upcall_ret hrtimer_start \
		spin_slow
	timeout 300 ib_send_lat -s 8 -n "$n" -F "${opts[@]}" >/tmp/s.log 2>&1 &
	spid=$!
	l1_served "$tr"
	( sleep 4; echo 1 >$T/tracing_on; sleep 1; echo 0 >$T/tracing_on ) &
	timeout 300 ib_send_lat -s 8 -n "$n" -F "${opts[@]}" "$addr" >/tmp/c.log 2>&1 ||
		echo "FAILED: $(tail -3 /tmp/c.log | tr '\n' ' ')"
	wait
	steps_save "$out/l1-$nv-$tr.txt"
	echo "$tr (#$nv): typical, average us: $(l1_fig /tmp/c.log)"
	l1_down "$tr"
	sleep 1
done
