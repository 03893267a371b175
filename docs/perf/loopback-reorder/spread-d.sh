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
# shellcheck source=docs/perf/loopback-reorder/counted.sh
. docs/perf/loopback-reorder/counted.sh
for r in $(seq "$rounds"); do
	for sp in $spreads; do
		modprobe trdma tx_spread="$sp" || exit 1
		rdma link add "$dev" type trdma netdev "$ifname" || exit 1
		for i in $(seq "$runs"); do
			counted_run "tx_spread=$sp run $r.$i"
		done
		rdma link delete "$dev"
		rmmod trdma
	done
done
