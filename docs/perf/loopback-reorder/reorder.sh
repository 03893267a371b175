#!/bin/bash
# Loopback reordering of trdma's segments: tx_spread=0 against 1, three
# ib_write_bw 64 KiB runs each, two rounds, TCP's counters before and after.
# usage: tools/vm -- docs/perf/loopback-reorder/reorder.sh   (from the project root)
ifname=$TRDMA_LAB_IF dev=trdma0 build=build pass=0 fail=0
. tests/lab/lib.sh
modprobe trdma; rmmod trdma
for r in 1 2; do
for sp in 1 0; do
	modprobe trdma tx_spread=$sp || exit 1
	rdma link add trdma0 type trdma netdev "$ifname" || exit 1
	for i in 1 2 3; do
		a=$(nstat -asz TcpRetransSegs TcpExtTCPOFOQueue TcpExtTCPSACKReorder | awk '!/^#/ {printf "%s ", $2}')
		pair "$dev" "$dev" -x ib_write_bw -s 65536 -n 5000 >/dev/null 2>&1 || echo failed
		b=$(nstat -asz TcpRetransSegs TcpExtTCPOFOQueue TcpExtTCPSACKReorder | awk '!/^#/ {printf "%s ", $2}')
		echo "tx_spread=$sp run $r.$i: $(pair_figures) | retrans/ofo/sackreorder before $a after $b"
	done
	rdma link delete trdma0; rmmod trdma
done
done
