#!/bin/bash
# In a lab guest: ib_send_lat 8 B over trdma0 (and siw), with and without a
# concurrent `perf record -a -F 499` (or another interrupt source), alternately.
cd "$(dirname "$0")/../../.." || exit 1
dev=trdma0 build=build pass=0 fail=0
. tests/lab/lib.sh
n=${N:-20000}
modprobe trdma && rdma link add trdma0 type trdma netdev "$TRDMA_LAB_IF" || exit 1
one() {
	local pp=
	if [ "$1" = perf ]; then
		perf record -q -a -g -F ${F:-499} -o /tmp/p.data -- sleep 600 >/dev/null 2>&1 & pp=$!; sleep 1
	fi
	l0=$(awk '$1=="LOC:"{s=0;for(i=2;i<=NF&&$i~/^[0-9]+$/;i++)s+=$i;print s}' /proc/interrupts)
	pair trdma0 trdma0 -x ib_send_lat -s 8 -n "$n" >/dev/null 2>&1 || echo FAILED
	l1=$(awk '$1=="LOC:"{s=0;for(i=2;i<=NF&&$i~/^[0-9]+$/;i++)s+=$i;print s}' /proc/interrupts)
	[ -n "$pp" ] && { kill -INT $pp; wait $pp; }
	echo "$1: $(awk '$1==8{print "typ", $5, "avg", $6}' /tmp/pair-client.log) LOC/rt $(awk -v a=$l0 -v b=$l1 -v n=$n 'BEGIN{printf "%.3f",(b-a)/n}')"
}
for _ in $(seq "${R:-3}"); do one plain; one perf; done
