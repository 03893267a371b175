#!/bin/bash
# In a lab guest (tools/vm -- docs/perf/round-trip-3/contention.sh): the
# lock contention of an 8 B ib_send_lat round trip, trdma and siw
# alternately (R rounds of N iterations): kprobes on the spin-lock slow
# path and on lock_sock()'s wait for the socket's owner, counted over the
# whole guest during the client's run; then the slow path recorded with
# call chains in one more run of each, folded by caller.  (Not perf's
# lock:contention_begin: a guest's spin locks take virt_spin_lock(),
# which that tracepoint does not see.)  EV: another event to record
# (probe:read_hpet: the lab guest's clock reads; see ab-param.sh on it).
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck source-path=SCRIPTDIR source=lib.sh
. docs/perf/round-trip-3/lib.sh
out=${TRDMA_LAB_OUT:-/tmp}
ev=${EV:-probe:native_queued_spin_lock_slowpath}
run() { # label perf-args -- perftest-args... addr
	local label=$1; shift
	pair ib_send_lat 8 "$@"
	echo "$label $(figure 8) $(counts)"
}
siw_up
probes=(-a native_queued_spin_lock_slowpath -a __lock_sock)
[ "$ev" = probe:read_hpet ] && probes+=(-a read_hpet)
perf probe -q "${probes[@]}" || exit 1
modprobe trdma && trdma_up
echo "iterations $n; per run: typical and average us, then entries into each probe"
for r in $(seq "${R:-3}"); do
	run "r$r trdma" stat -a -e "$ev" -e probe:__lock_sock -- "${TRDMA[@]}"
	run "r$r siw" stat -a -e "$ev" -e probe:__lock_sock -- "${SIW[@]}"
done
for t in trdma siw; do
	[ $t = trdma ] && o=("${TRDMA[@]}") || o=("${SIW[@]}")
	run "rec $t" record -a -g -e "$ev" -o /tmp/$t.data -- "${o[@]}"
	perf script -i /tmp/$t.data 2>/dev/null > /tmp/$t.script
	# Each sample's stack, innermost first: the first three frames past
	# the lock's own slow path (or the clock's read), counted.
	awk '/^[^ \t]/ { if (s != "") c[s]++; s = ""; k = 0; next }
	     NF >= 2 { f = $2; sub(/\+0x.*/, "", f)
		if (f ~ /spin_lock|slowpath|contention|_raw_|lock_acquire|hpet|ktime_get|clocksource/) next
		if (k++ < 3) s = s (s == "" ? "" : " < ") f }
	     END { if (s != "") c[s]++; for (x in c) print c[x], x }' \
		/tmp/$t.script | sort -rn | head -n 15 > "$out/callers-$t.txt"
	echo "== $t: where $ev fired (count, callers innermost first)"
	cat "$out/callers-$t.txt"
done
