#!/bin/bash
# Two-guest 8 B ping-pong per variant, marked for the host's view: host 1
# writes m-NV.start and m-NV.end in its output directory around each
# client run, which hostmon.sh (on the host) watches; each guest records
# its own counters over the run.
#   usage: tools/vm --hosts 2 --out DIR -- docs/perf/host-view/h2host.sh SIWKO N VARIANT...
# shellcheck disable=SC2034,SC2154  # variant.sh sets and reads them
set -uo pipefail
ifname=${TRDMA_LAB_IF:?}
siwko=$1 n=$2
shift 2
# shellcheck disable=SC2034
build=build pass=0 fail=0
. tests/lab/lib.sh
# shellcheck source=docs/perf/ack-slack/variant.sh
. docs/perf/ack-slack/variant.sh
me=$TRDMA_LAB_HOST
out=${TRDMA_LAB_OUT:?}
gstat() { # ctxt, interrupts, IP packets out, IP packets in
	awk '/^ctxt/ {c=$2} /^intr/ {i=$2} END {printf "%s %s", c, i}' /proc/stat
	awk '/^Ip:/ && $2 ~ /^[0-9]/ {printf " %s %s\n", $11, $4}' /proc/net/snmp
}
variant_modules
for v in "$@"; do
	variant_next "$v"
	variant_server ib_send_lat -s 8 -n "$n"
	tools/lab/barrier -t 200 "$tag-up"
	read -r c0 i0 o0 r0 < <(gstat)
	s0=$(date +%s.%N)
	if [ "$me" = 2 ]; then
		wait $spid
	else
		: >"$out/m-$nv.start"
		variant_client ib_send_lat -s 8 -n "$n"
		: >"$out/m-$nv.end"
	fi
	s1=$(date +%s.%N)
	read -r c1 i1 o1 r1 < <(gstat)
	tools/lab/barrier -t 200 "$tag-done"
	fig=$(grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/c.log | tail -1 | awk '{print $5, $6}')
	awk -v v="$v" -v h="$me" -v n="$n" -v t="$(echo "$s1 - $s0" | bc)" \
		-v c=$((c1 - c0)) -v i=$((i1 - i0)) -v o=$((o1 - o0)) -v r=$((r1 - r0)) \
		'BEGIN {printf "h%s %s: %.1f s; per round trip: ctxt %.2f irqs %.2f IP out %.2f in %.2f\n", h, v, t, c/n, i/n, o/n, r/n}'
	[ "$me" = 2 ] || echo "$v (#$nv): typical, average us: ${fig:--}"
	variant_down
done
