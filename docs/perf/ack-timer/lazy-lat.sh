#!/bin/bash
# ib_send_lat -H over trdma0, two module builds alternately (OLD, NEW): the
# latency distribution of every round trip, and with TP=1 which hrtimers
# started and expired (tracepoints, perf record).  In a lab guest:
#   tools/vm -- 'OLD=a/trdma.ko NEW=b/trdma.ko R=4 bash docs/perf/ack-timer/lazy-lat.sh'
# (modules where the guest sees them: not under /tmp).
cd "$(dirname "$0")/../../.." || exit 1
dev=trdma0 build=build pass=0 fail=0
. tests/lab/lib.sh
n=${N:-20000}
one() { # label ko
	if ! insmod "$2" || ! rdma link add trdma0 type trdma netdev "$TRDMA_LAB_IF"; then echo "$1: load failed"; return; fi
	l0=$(awk '$1=="LOC:"{s=0;for(i=2;i<=NF&&$i~/^[0-9]+$/;i++)s+=$i;print s}' /proc/interrupts)
	if [ -n "$TP" ]; then
		perf record -q -o /tmp/tp.data -a -e timer:hrtimer_expire_entry -e timer:hrtimer_start -e timer:hrtimer_cancel >/dev/null 2>&1 &
		pp=$!; sleep 1
	fi
	pair trdma0 trdma0 -x ib_send_lat -s 8 -n "$n" -H >/dev/null 2>&1 || { echo "$1: FAILED"; tail -3 /tmp/pair-client.log; }
	[ -n "$TP" ] && { kill -INT "$pp"; wait "$pp"; }
	python3 docs/perf/round-trip/summ-lat.py "$1"
	echo "   $(rdma statistic show link trdma0/1 2>/dev/null | grep -o 'ack_timer_[a-z]* [0-9]*' | tr '\n' ' ')"
	echo "   LOC +$(( $(awk '$1=="LOC:"{s=0;for(i=2;i<=NF&&$i~/^[0-9]+$/;i++)s+=$i;print s}' /proc/interrupts) - l0 ))"
	if [ -n "$TP" ]; then
		perf script -i /tmp/tp.data -F event,trace 2>/dev/null | python3 -c '
import sys, re, collections
c = collections.Counter(); fn = {}
for l in sys.stdin:
    ev = l.split(":")[1].split()[0] if ":" in l else "?"
    m = re.search(r"function=(\S+)", l); t = re.search(r"hrtimer=(\S+)", l)
    if m and t: fn[t.group(1)] = m.group(1)
    f = m.group(1) if m else fn.get(t.group(1) if t else "", "?")
    c[(ev, f)] += 1
for (ev, f), k in c.most_common(14): print("     %-22s %-40s %d" % (ev, f, k))'
	fi
	rdma link delete trdma0; rmmod trdma
}
modprobe trdma && rmmod trdma || exit 1
for r in $(seq "${R:-3}"); do
	one "r$r old" "${OLD:?}"
	one "r$r new" "${NEW:?}"
done
