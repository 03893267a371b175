#!/bin/bash
# Two-guest 64 B send rate under perf in both guests, per variant
# (variant.sh of ../ack-slack): perftest's figures, the TCP segments and
# virtio interrupts per message, folded stacks and a summary per host and
# variant in $TRDMA_LAB_OUT.
#   usage: tools/vm --hosts 2 --out DIR -- docs/perf/rate-h2/h2prof.sh SIWKO N VARIANT...
set -uo pipefail
ifname=${TRDMA_LAB_IF:?}
siwko=$1 n=$2
shift 2
# shellcheck disable=SC2034
build=build pass=0 fail=0
. tests/lab/lib.sh
# shellcheck source=docs/perf/ack-slack/variant.sh
. "$(dirname "$0")/../ack-slack/variant.sh"
me=$TRDMA_LAB_HOST
out=${TRDMA_LAB_OUT:?}
irqsum() { awk -v k="$1" '$0 ~ k { for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i } END { print s + 0 }' /proc/interrupts; }
variant_modules
for v in "$@"; do
	variant_next "$v"
	variant_server ib_send_bw -s 64 -n "$n"
	nstat -n
	vi0=$(irqsum 'virtio.*input') t0=$(awk '/^cpu /{print $2+$3, $4, $7+$8, $5}' /proc/stat)
	# perf first, with time to set itself up: beside a busy-polling
	# perftest on the guest's one CPU it takes tens of seconds to start.
	perf record -a -g -F 999 -o /tmp/p.data >"$out/perf-$nv.err" 2>&1 &
	ppid=$!
	sleep 15
	tools/lab/barrier -t 200 "$tag-up"
	if [ "$me" = 1 ]; then
		variant_client ib_send_bw -s 64 -n "$n"
	else
		wait $spid
	fi
	kill -INT $ppid
	wait $ppid
	t1=$(awk '/^cpu /{print $2+$3, $4, $7+$8, $5}' /proc/stat)
	tools/lab/barrier -t 200 "$tag-done"
	ns=$(nstat -z TcpOutSegs TcpInSegs TcpExtTCPPureAcks TcpExtTCPHPAcks TcpExtTCPHPHits | awk 'NR > 1 { printf "%s %.2f ", $1, $2 / '"$n"' }')
	fig=$(grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/c.log | tail -1 | awk '{print $3, $4, $5}')
	echo "$v: ${fig:--} | per msg: $ns vin $(awk -v a="$(irqsum 'virtio.*input')" -v b="$vi0" -v m="$n" 'BEGIN{printf "%.2f", (a-b)/m}') | ticks user/sys/irq/idle $t0 -> $t1"
	name="h$me-${v//[:=,]/_}"
	perf script -i /tmp/p.data 2>/dev/null | tools/lab/flamegraph fold >"$out/$name.folded"
	tools/lab/flamegraph top --per "$n" <"$out/$name.folded" >"$out/$name.txt"
	rm -f /tmp/p.data
	variant_down
done
