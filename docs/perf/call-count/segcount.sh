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
modprobe ib_uverbs; modprobe libcrc32c; modprobe crc32c_generic
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
	if [ "$tr" = trdma ]; then
		modprobe trdma || exit 1
		rdma link add trdma0 type trdma netdev "$ifname" || exit 1
		dev=trdma0 addr=127.0.0.1
		opts=(-d trdma0 -x "$(v4gid trdma0)")
	else
		insmod "$siwko" || exit 1
		modprobe dummy numdummies=0
		ip link add l1siw0 type dummy && ip addr add 10.233.0.1/24 dev l1siw0 &&
			ip link set l1siw0 up || exit 1
		rdma link add siw0 type siw netdev l1siw0 || exit 1
		dev=siw0 addr=10.233.0.1
		opts=(-d siw0 -R)
	fi
	timeout 120 ib_send_lat -s 8 -n "$n" -F "${opts[@]}" >/tmp/s.log 2>&1 &
	if [ "$tr" = trdma ]; then tools/lab/wait-listen -t 30 18515; else sleep 8; fi
	a=$(snap) ra=
	[ "$tr" = trdma ] && ra=$(rdma statistic show link trdma0/1 | tr ' ' '\n')
	timeout 120 ib_send_lat -s 8 -n "$n" -F "${opts[@]}" "$addr" >/tmp/c.log 2>&1 ||
		echo "FAILED: $(tail -3 /tmp/c.log | tr '\n' ' ')"
	wait
	b=$(snap) rb=
	[ "$tr" = trdma ] && rb=$(rdma statistic show link trdma0/1 | tr ' ' '\n')
	fig=$(grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/c.log | tail -1 | awk '{print $5, $6}')
	echo "== $tr, $n round trips: typical, average us: ${fig:--}"
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
	rdma link delete "$dev"
	if [ "$tr" = trdma ]; then rmmod trdma; else rmmod siw; ip link delete l1siw0; fi
done
