#!/bin/bash
# The host's view of a two-guest run of h2host.sh: for each m-NV.start
# that host 1 writes under OUT, waits SKIP seconds, then samples every
# thread of both qemu processes and the host's CPUs over WIN seconds:
# run time, time waiting on a run queue and time slices (schedstat),
# voluntary and forced context switches; the host's context switches
# and idle time.  One line per thread in OUT/host-NV.txt.
#   usage: hostmon.sh OUT [SKIP [WIN]] &   (before tools/vm --out OUT)
set -uo pipefail
out=$1 skip=${2:-3} win=${3:-8}
snap() {
	local p t
	for p in $(pgrep -f 'name trdma-lab[12]'); do
		for t in /proc/"$p"/task/*; do
			printf '%s %s %s %s %s\n' "$(sed 's/.*trdma-lab\([12]\).*/h\1/' /proc/"$p"/cmdline 2>/dev/null | tr -d '\0')" \
				"${t##*/}" "$(tr ' ' '_' <"$t"/comm)" "$(cat "$t"/schedstat)" \
				"$(awk '/^voluntary/ {v=$2} /^nonvoluntary/ {n=$2} END {print v, n}' "$t"/status)"
		done
	done
	awk '/^ctxt/ {print "host ctxt", $2} /^cpu / {print "host idle", $5}' /proc/stat
}
declare -A done_=()
while :; do
	for f in "$out"/*/m-*.start "$out"/m-*.start; do
		[ -e "$f" ] || continue
		nv=${f##*/m-}
		nv=${nv%.start}
		[ -z "${done_[$nv]:-}" ] || continue
		done_[$nv]=1
		sleep "$skip"
		snap >/tmp/hostmon.0
		t0=$(date +%s.%N)
		sleep "$win"
		snap >/tmp/hostmon.1
		t1=$(date +%s.%N)
		awk -v w="$(echo "$t1 - $t0" | bc)" '
			NR == FNR { if ($1 == "host") h0[$2] = $3; else { r0[$2] = $4; q0[$2] = $5; s0[$2] = $6; v0[$2] = $7; n0[$2] = $8 }; next }
			$1 == "host" { h1[$2] = $3; next }
			($2 in r0) { printf "%s %s %-16s run %.3f wait %.3f (s/s) slices %d vol %d forced %d per s\n",
				$1, $2, $3, ($4 - r0[$2]) / 1e9 / w, ($5 - q0[$2]) / 1e9 / w,
				($6 - s0[$2]) / w, ($7 - v0[$2]) / w, ($8 - n0[$2]) / w }
			END { printf "host ctxt %d per s, idle %.2f CPUs, window %.2f s\n",
				(h1["ctxt"] - h0["ctxt"]) / w, (h1["idle"] - h0["idle"]) / 100 / w, w }
		' /tmp/hostmon.0 /tmp/hostmon.1 >"$out/host-$nv.txt"
	done
	[ -e "$out/hostmon.stop" ] && break
	sleep 0.5
done
