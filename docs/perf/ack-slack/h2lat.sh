#!/bin/bash
# Two-guest ping-pong and 64 B rate, per variant, with the packets and
# interrupts each cost.  Variants: trdma[:PARAM=V,...][+autocork0] | siw (variant.sh).
#   usage: tools/vm --hosts 2 -- docs/perf/ack-slack/h2lat.sh ROUNDS SIWKO VARIANT...
set -uo pipefail
ifname=${TRDMA_LAB_IF:?}
rounds=$1 siwko=$2
shift 2
# shellcheck disable=SC2034
build=build pass=0
. tests/lab/lib.sh
# shellcheck source=docs/perf/ack-slack/variant.sh
. "$(dirname "$0")/variant.sh"
me=$TRDMA_LAB_HOST
tests=("ib_send_lat -s 8 -n 5000" "ib_send_bw -s 64 -n 20000")
msgs=(5000 20000)
irqsum() { awk -v k="$1" '$0 ~ k { for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i } END { print s + 0 }' /proc/interrupts; }
variant_modules
for r in $(seq "$rounds"); do
	nv=0
	for v in "$@"; do
		nv=$((nv + 1))
		variant_up "$v" "l-$r-$nv"
		for i in "${!tests[@]}"; do
			t=${tests[$i]} m=${msgs[$i]}
			tag="t-$r-$nv-$i"
			nstat -n
			vi0=$(irqsum 'virtio.*input') vo0=$(irqsum 'virtio.*output') l0=$(irqsum '^ *LOC:')
			# shellcheck disable=SC2086
			variant_server $t
			tools/lab/barrier -t 200 "$tag-up"
			if [ "$me" = 2 ]; then
				wait $spid
			else
				# shellcheck disable=SC2086
				variant_client $t
			fi
			tools/lab/barrier -t 200 "$tag-done"
			ns=$(nstat -z TcpOutSegs TcpInSegs TcpExtTCPAutoCorking TcpExtDelayedACKs TcpExtTCPPureAcks TcpExtTCPHPHits TcpRetransSegs | awk 'NR > 1 { printf "%s %.2f ", $1, $2 / '"$m"' }')
			fig=$(grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/c.log | tail -1 | awk '{print $3, $4, $5, $6}')
			echo "R$r $v ${t%% -n*}: ${fig:--} | per msg: $ns vin $(awk -v a="$(irqsum 'virtio.*input')" -v b="$vi0" -v m="$m" 'BEGIN{printf "%.2f", (a-b)/m}') vout $(awk -v a="$(irqsum 'virtio.*output')" -v b="$vo0" -v m="$m" 'BEGIN{printf "%.2f", (a-b)/m}') LOC $(awk -v a="$(irqsum '^ *LOC:')" -v b="$l0" -v m="$m" 'BEGIN{printf "%.2f", (a-b)/m}')"
		done
		variant_down
	done
done
