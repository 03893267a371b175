#!/bin/bash
# Two guests of one vCPU each: perftest over trdma with the provider's
# default (an empty poll yields the CPU where one CPU is online) against
# TRDMA_POLL_YIELD=0 (it never does), ABBA per round, then siw once per
# round; 64 B send rate and 8 B latency, perftest's figures on host 1.
#   usage: tools/vm --hosts 2 -- docs/perf/poll-yield/h2ab.sh ROUNDS SIWKO
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
tests=("ib_send_bw -s 64 -n 50000" "ib_send_lat -s 8 -n 10000")
k=0
for r in $(seq "$rounds"); do
	for v in default off off default siw; do
		if [ "$v" = siw ]; then variant_up siw; else variant_up trdma; fi
		if [ "$v" = off ]; then e=(env TRDMA_POLL_YIELD=0); else e=(env); fi
		for t in "${tests[@]}"; do
			k=$((k + 1))
			# shellcheck disable=SC2086
			variant_server "${e[@]}" $t
			tools/lab/barrier -t 200 "y-$k"
			if [ "$me" = 2 ]; then
				wait $spid
			else
				# shellcheck disable=SC2086
				variant_client "${e[@]}" $t
				fig=$(grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/c.log | tail -1 | awk '{print $3, $4, $5, $6}')
				echo "R$r $v ${t%% -n*}: $fig"
			fi
			tools/lab/barrier -t 200 "y-$k-done"
		done
		variant_down
	done
done
