#!/bin/bash
# In a lab guest (tools/vm -- docs/perf/tx-hold/ab.sh): the DataPathTest
# suite, then tx_hold_sock=1 against 0 with the same module, ABBA in each
# of R rounds (default 3), by tools/lab/module-ab.  pairs.py LOG prints
# the per-pair ratios.
cd "$(dirname "$0")/../../.." || exit 1
rdma link add trdma0 type trdma netdev "$TRDMA_LAB_IF" || exit 1
build/tests/lab/trdma_lab_tests \
	--gtest_filter='DataPathTest.*:-DataPathTest.TwoGib*:DataPathTest.Blackholed*' \
	2>&1 | grep -v "^\[ RUN\|^\[       OK" | tail -15
rdma link delete trdma0
rmmod trdma
k=build/kernel/trdma.ko
tools/lab/module-ab -r "${R:-3}" \
	-t "ib_write_bw -s 16384 -D 8;ib_write_bw -s 65536 -D 8;ib_send_bw -s 64 -D 8;ib_send_lat -s 8 -n 20000" \
	$k:tx_hold_sock=1 $k:tx_hold_sock=0 $k:tx_hold_sock=0 $k:tx_hold_sock=1
