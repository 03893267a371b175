#!/bin/bash
# Two guests of one vCPU each, the module and provider of busy-poll.diff:
# perftest over trdma with TRDMA_BUSY_POLL=0 (the landed provider: an empty
# poll yields the CPU) and 1 (an empty poll makes the kernel busy-poll the
# NAPI context that last completed into that CQ, then yields), ABBA, then
# siw, per round; 8 B ib_send_lat and 64 B ib_send_bw, perftest's figures
# on host 1 and TcpExtBusyPollRxPackets on each host.  (The first run had
# `for v in 0 1 2 2 1 0 siw`, 2: the busy poll without the yield.)
#   usage: tools/vm --hosts 2 -- docs/perf/busy-poll/ab-busy.sh ROUNDS SIWKO
set -uo pipefail
ifname=${TRDMA_LAB_IF:?}
rounds=$1 siwko=$2
# shellcheck disable=SC2034
build=build pass=0 fail=0
. tests/lab/lib.sh
# shellcheck source=docs/perf/ack-slack/variant.sh
. "$(dirname "$0")/../ack-slack/variant.sh"
me=$TRDMA_LAB_HOST
variant_modules
tests=("ib_send_lat -s 8 -n 10000" "ib_send_bw -s 64 -n 50000")
k=0
for r in $(seq "$rounds"); do
	for v in 0 1 1 0 siw; do
		if [ "$v" = siw ]; then variant_up siw; else variant_up trdma; fi
		e=(env "TRDMA_BUSY_POLL=$v")
		for t in "${tests[@]}"; do
			k=$((k + 1))
			b0=$(awk '/^TcpExt:/ {if (!h) {for (i=1;i<=NF;i++) n[i]=$i; h=1} else for (i=1;i<=NF;i++) if (n[i]=="BusyPollRxPackets") print $i}' /proc/net/netstat)
			# shellcheck disable=SC2086  # the test's words
			variant_server "${e[@]}" $t
			tools/lab/barrier -t 200 "y-$k"
			if [ "$me" = 2 ]; then
				wait "$spid"
			else
				# shellcheck disable=SC2086
				variant_client "${e[@]}" $t
				fig=$(grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/c.log | tail -1 | awk '{print $3, $4, $5, $6}')
			fi
			b1=$(awk '/^TcpExt:/ {if (!h) {for (i=1;i<=NF;i++) n[i]=$i; h=1} else for (i=1;i<=NF;i++) if (n[i]=="BusyPollRxPackets") print $i}' /proc/net/netstat)
			echo "R$r $v ${t%% -n*}: ${fig:-} busypoll_rx=$((b1 - b0))"
			tools/lab/barrier -t 200 "y-$k-done"
		done
		variant_down
	done
done
