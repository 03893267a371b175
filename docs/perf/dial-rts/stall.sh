#!/bin/bash
# 64 KiB ib_write_bw runs over trdma0 in one guest; per run the figures and
# the TCP counters that moved, to find what the slow runs share.
# usage: tools/vm -- docs/perf/dial-rts/stall.sh [RUNS]   (from the project root)
ifname=$TRDMA_LAB_IF dev=trdma0 build=build pass=0 fail=0
. tests/lab/lib.sh
n=${1:-12}
rdma link add trdma0 type trdma netdev "$ifname" || exit 1
snap() { { nstat -asz; rdma statistic show link trdma0/1 | tr ' ' '\n' | paste - - | sed -n '2,$p'; } | awk 'NF>=2 && $1 !~ /^#/ {print $1, $2}' | sort; }
for i in $(seq "$n"); do
	snap > /tmp/a
	t0=$(date +%s.%N)
	pair "$dev" "$dev" -x ib_write_bw -s 65536 -n 5000 >/dev/null 2>&1 || echo "run $i failed"
	t1=$(date +%s.%N)
	snap > /tmp/b
	echo "run $i: $(pair_figures) wall $(echo "$t1 - $t0" | bc) | $(join /tmp/a /tmp/b | awk '$3 != $2 { printf "%s+%d\n", $1, $3 - $2 }' | grep -E '^(TcpActiveOpens|TcpPassiveOpens|TcpAttemptFails|TcpEstabResets|TcpOutRsts|TcpExtTW|TcpExtListen|TcpRetransSegs|TcpExtTCPTimeouts|TcpExtTCPLossProbes|TcpExtTCPOFOQueue|conn|refused|rnr|rx_fault|malformed|qp_fatal|remote_errors)' | tr '\n' ' ')"
done
dmesg | grep -i trdma | tail -20
