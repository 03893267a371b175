#!/bin/bash
# One-guest 8 B ping-pong per transport, untraced (set up as fgtrace.sh
# does): per message, TCP's segment counters (/proc/net/snmp and
# /proc/net/netstat: segments in and out, header-prediction hits, pure
# ACKs, delayed ACKs) and, for trdma, its hw counters (rdma statistic),
# over the client's whole run of N round trips (2N messages).
#   usage: tools/vm -- docs/perf/call-count/segcount.sh SIWKO N TRANSPORT...
# shellcheck disable=SC2034  # lib.sh's
set -uo pipefail
ifname=${TRDMA_LAB_IF:?}
siwko=$1 n=$2
shift 2
build=build pass=0 fail=0
. tests/lab/lib.sh
# shellcheck source=docs/perf/host-view/l1setup.sh
. docs/perf/host-view/l1setup.sh
l1_deps
# "NAME VALUE ..." of TCP's counters.
snap() {
	awk '/^Tcp: [0-9]/ {print "InSegs", $11, "OutSegs", $12}' /proc/net/snmp
	awk 'NR % 2 == 1 {split($0, h)}
	     NR % 2 == 0 && $1 == "TcpExt:" {
		for (i = 2; i <= NF; i++)
			if (h[i] ~ /^(DelayedACKs|TCPPureAcks|TCPHPAcks|TCPHPHits|TCPOrigDataSent)$/)
				print h[i], $i }' /proc/net/netstat
}
for tr in "$@"; do
	l1_up "$tr" || exit 1
	timeout 120 ib_send_lat -s 8 -n "$n" -F "${opts[@]}" >/tmp/s.log 2>&1 &
	l1_served "$tr"
	a=$(snap) ra=
	[ "$tr" = trdma ] && ra=$(rdma statistic show link trdma0/1 | tr ' ' '\n')
	timeout 120 ib_send_lat -s 8 -n "$n" -F "${opts[@]}" "$addr" >/tmp/c.log 2>&1 ||
		echo "FAILED: $(tail -3 /tmp/c.log | tr '\n' ' ')"
	wait
	b=$(snap) rb=
	[ "$tr" = trdma ] && rb=$(rdma statistic show link trdma0/1 | tr ' ' '\n')
	echo "== $tr, $n round trips: typical, average us: $(l1_fig /tmp/c.log)"
	for set in tcp trdma; do
		if [ $set = tcp ]; then x=$a y=$b; else x=$ra y=$rb; fi
		[ -n "$y" ] || continue
		# Pairs "NAME VALUE", one word a line or several: the names
		# that moved, per message.
		paste -d' ' <(echo "$x" | xargs -n1) <(echo "$y" | xargs -n1) |
			awk -v m=$((2 * n)) -v set=$set '
			NR % 2 == 1 {name = $1; next}
			$1 ~ /^[0-9]+$/ && $2 != $1 {
				line = line sprintf(" %s=%.3f", name, ($2 - $1) / m) }
			END { print "  " set " per message:" line }'
	done
	l1_down "$tr"
done
