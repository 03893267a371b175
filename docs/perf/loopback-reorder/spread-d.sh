#!/bin/bash
# Loopback reordering of trdma's segments in steady state: ib_write_bw
# 64 KiB for 10 s per run (duration mode), tx_spread=1 against 0, with
# TCP's counters over each run (the retransmissions, the reordering seen,
# DSACKs, the congestion window's undos).
# usage: tools/vm -- docs/perf/loopback-reorder/spread-d.sh [ROUNDS [RUNS [SPREADS]]]
#        (from the project root; default 3 rounds of 2 runs, "1 0")
# spread-d.log: 3 rounds, 2 runs, "1 0", before the undo counters were
# added; undo.log: 2 rounds, 3 runs, "1".
rounds=${1:-3} runs=${2:-2} spreads=${3:-1 0}
ifname=$TRDMA_LAB_IF dev=trdma0
# shellcheck disable=SC2034  # lib.sh's
build=build pass=0 fail=0
# shellcheck source=tests/lab/lib.sh
. tests/lab/lib.sh
modprobe trdma && rmmod trdma || exit 1
ctr="TcpOutSegs TcpRetransSegs TcpExtTCPOFOQueue TcpExtTCPSACKReorder
TcpExtTCPFastRetrans TcpExtTCPDSACKRecv TcpExtTCPDSACKOldSent
TcpExtTCPLossProbes TcpExtTCPTimeouts TcpExtTCPSpuriousRTOs
TcpExtTCPSlowStartRetrans TcpExtTCPFullUndo TcpExtTCPPartialUndo
TcpExtTCPDSACKUndo TcpExtTCPLossUndo"
# shellcheck disable=SC2086  # the counters' names
snap() { nstat -asz $ctr | awk '!/^#/ {print $1, $2}'; }
for r in $(seq "$rounds"); do
	for sp in $spreads; do
		modprobe trdma tx_spread="$sp" || exit 1
		rdma link add "$dev" type trdma netdev "$ifname" || exit 1
		for i in $(seq "$runs"); do
			snap >/tmp/a
			pair "$dev" "$dev" -x ib_write_bw -s 65536 -D 10 \
				>/dev/null 2>&1 || echo failed
			snap >/tmp/b
			d=$(join /tmp/a /tmp/b | awk '{sub(/^TcpExt|^Tcp/, "", $1);
				printf "%s=%d ", $1, $3 - $2}')
			echo "tx_spread=$sp run $r.$i: $(pair_figures) | $d"
		done
		rdma link delete "$dev"
		rmmod trdma
	done
done
