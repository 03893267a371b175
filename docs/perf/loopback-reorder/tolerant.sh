#!/bin/bash
# What the spurious retransmissions of loopback reordering cost: ib_write_bw
# 64 KiB for 10 s per run with tx_spread=1 (the default), TCP's defaults
# against a TCP that waits for 127 segments of reordering before it
# retransmits (net.ipv4.tcp_reordering=127, tcp_recovery=0: no RACK),
# alternating in one boot; TCP's counters over each run.
# usage: tools/vm -- docs/perf/loopback-reorder/tolerant.sh   (from the project root)
ifname=$TRDMA_LAB_IF dev=trdma0
# shellcheck disable=SC2034  # lib.sh's
build=build pass=0 fail=0
# shellcheck source=tests/lab/lib.sh
. tests/lab/lib.sh
ctr="TcpOutSegs TcpRetransSegs TcpExtTCPSACKReorder TcpExtTCPFastRetrans
TcpExtTCPDSACKRecv TcpExtTCPFullUndo TcpExtTCPPartialUndo
TcpExtTCPLossProbes TcpExtTCPTimeouts"
# shellcheck disable=SC2086  # the counters' names
snap() { nstat -asz $ctr | awk '!/^#/ {print $1, $2}'; }
d0=$(sysctl -n net.ipv4.tcp_reordering) r0=$(sysctl -n net.ipv4.tcp_recovery)
echo "defaults: tcp_reordering=$d0 tcp_recovery=$r0" \
	"tcp_max_reordering=$(sysctl -n net.ipv4.tcp_max_reordering)"
modprobe trdma || exit 1
rdma link add "$dev" type trdma netdev "$ifname" || exit 1
for r in 1 2 3; do
	for v in default tolerant; do
		if [ "$v" = default ]; then
			sysctl -qw net.ipv4.tcp_reordering="$d0" \
				net.ipv4.tcp_recovery="$r0"
		else
			sysctl -qw net.ipv4.tcp_reordering=127 \
				net.ipv4.tcp_recovery=0
		fi
		for i in 1 2; do
			snap >/tmp/a
			pair "$dev" "$dev" -x ib_write_bw -s 65536 -D 10 \
				>/dev/null 2>&1 || echo failed
			snap >/tmp/b
			d=$(join /tmp/a /tmp/b | awk '{sub(/^TcpExt|^Tcp/, "", $1);
				printf "%s=%d ", $1, $3 - $2}')
			echo "$v run $r.$i: $(pair_figures) | $d"
		done
	done
done
sysctl -qw net.ipv4.tcp_reordering="$d0" net.ipv4.tcp_recovery="$r0"
