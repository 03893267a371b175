#!/bin/bash
# Two-guest 64 B rate per variant, with TCP (nstat) and trdma counters per message on each host.
#   tools/vm --hosts 2 -- docs/perf/h2-yield/rate-ctr.sh SIWKO N ROUNDS VARIANT...
# (variants as ../ack-slack/variant.sh takes them)
set -uo pipefail
ifname=${TRDMA_LAB_IF:?}
siwko=$1 n=$2 rounds=$3
shift 3
# shellcheck disable=SC2034
build=build pass=0 fail=0
. tests/lab/lib.sh
# shellcheck source=docs/perf/ack-slack/variant.sh
. "$(dirname "$0")/../ack-slack/variant.sh"
me=$TRDMA_LAB_HOST
variant_modules
ctrs() { [ "$tr" = trdma ] && rdma statistic show link trdma0/1 | tr ' ' '\n' | awk 'NR>4 && NF' | paste - - ; }
for r in $(seq "$rounds"); do
for v in "$@"; do
	variant_next "$v"
	variant_server ib_send_bw -s 64 -n "$n"
	nstat -n
	ctrs >/tmp/c0
	t0=$(awk '/^cpu /{print $2+$3, $4, $7+$8, $5}' /proc/stat)
	tools/lab/barrier -t 200 "$tag-up"
	if [ "$me" = 1 ]; then
		variant_client ib_send_bw -s 64 -n "$n"
	else
		wait $spid
	fi
	t1=$(awk '/^cpu /{print $2+$3, $4, $7+$8, $5}' /proc/stat)
	ctrs >/tmp/c1
	tools/lab/barrier -t 200 "$tag-done"
	ns=$(nstat | awk 'NR > 1 && $2 > 0 { printf "%s %.3f ", $1, $2 / '"$n"' }')
	fig=$(grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/c.log | tail -1 | awk '{print $3, $4, $5}')
	tc=$(join /tmp/c0 /tmp/c1 2>/dev/null | awk -v m="$n" '$3 != $2 { printf "%s %.3f ", $1, ($3 - $2) / m }')
	echo "R$r $v: ${fig:--} | ticks u/s/irq/idle $t0 -> $t1"
	echo "R$r $v nstat: $ns"
	echo "R$r $v trdma: $tc"
	variant_down
done
done
