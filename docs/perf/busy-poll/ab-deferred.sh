#!/bin/bash
# Two guests of one vCPU each, the module and provider of busy-poll.diff:
# perftest over trdma as landed (0) against busy polling with the NIC's
# interrupts held off meanwhile (3: TRDMA_BUSY_POLL=1, the module's
# busy_prefer=1, the netdev's napi_defer_hard_irqs=2 and gro_flush_timeout
# 200 us, as SO_PREFER_BUSY_POLL users set them), ABBA per round; adds the
# virtio-net receive interrupts taken on each host.
#   usage: tools/vm --hosts 2 -- docs/perf/busy-poll/ab-deferred.sh ROUNDS
set -uo pipefail
ifname=${TRDMA_LAB_IF:?}
rounds=$1
# shellcheck disable=SC2034
build=build pass=0 fail=0
. tests/lab/lib.sh
# shellcheck source=docs/perf/ack-slack/variant.sh
. "$(dirname "$0")/../ack-slack/variant.sh"
me=$TRDMA_LAB_HOST
variant_modules
tests=("ib_send_lat -s 8 -n 10000" "ib_send_bw -s 64 -n 50000")
k=0
bprx() { awk '/^TcpExt:/ {if (!h) {for (i=1;i<=NF;i++) n[i]=$i; h=1} else for (i=1;i<=NF;i++) if (n[i]=="BusyPollRxPackets") print $i}' /proc/net/netstat; }
irqs() { awk '/virtio.*input/ {s=0; for (i=2;i<=NF;i++) if ($i ~ /^[0-9]+$/) s+=$i; t+=s} END {print t+0}' /proc/interrupts; }
for r in $(seq "$rounds"); do
	for v in 0 3 3 0; do
		if [ "$v" = 3 ]; then
			variant_up trdma:busy_prefer=1
			echo 2 > /sys/class/net/"$ifname"/napi_defer_hard_irqs
			echo 200000 > /sys/class/net/"$ifname"/gro_flush_timeout
			e=(env TRDMA_BUSY_POLL=1)
		else
			variant_up trdma
			echo 0 > /sys/class/net/"$ifname"/napi_defer_hard_irqs
			echo 0 > /sys/class/net/"$ifname"/gro_flush_timeout
			e=(env TRDMA_BUSY_POLL=0)
		fi
		for t in "${tests[@]}"; do
			k=$((k + 1))
			b0=$(bprx) i0=$(irqs)
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
			b1=$(bprx) i1=$(irqs)
			echo "R$r $v ${t%% -n*}: ${fig:-} busypoll_rx=$((b1 - b0)) rx_irqs=$((i1 - i0))"
			tools/lab/barrier -t 200 "y-$k-done"
		done
		variant_down
	done
done
