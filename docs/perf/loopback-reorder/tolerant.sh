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
# shellcheck source=docs/perf/loopback-reorder/counted.sh
. docs/perf/loopback-reorder/counted.sh
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
			counted_run "$v run $r.$i"
		done
	done
done
sysctl -qw net.ipv4.tcp_reordering="$d0" net.ipv4.tcp_recovery="$r0"
