#!/bin/bash
# Two-guest 8 B ping-pong under perf in both guests, per variant (as
# h2lat.sh): folded stacks and a summary per host and variant in
# $TRDMA_LAB_OUT.
#   usage: tools/vm --hosts 2 --out DIR -- docs/perf/ack-slack/h2prof.sh SIWKO N VARIANT...
set -uo pipefail
ifname=${TRDMA_LAB_IF:?}
siwko=$1 n=$2
shift 2
# shellcheck disable=SC2034
build=build pass=0 fail=0
. tests/lab/lib.sh
# shellcheck source=docs/perf/ack-slack/variant.sh
. "$(dirname "$0")/variant.sh"
me=$TRDMA_LAB_HOST
out=${TRDMA_LAB_OUT:?}
variant_modules
for v in "$@"; do
	variant_next "$v"
	variant_server ib_send_lat -s 8 -n "$n"
	perf record -q -a -g -F 999 -o /tmp/p.data >/dev/null 2>&1 &
	ppid=$!
	sleep 2
	tools/lab/barrier -t 200 "$tag-up"
	if [ "$me" = 2 ]; then
		wait $spid
	else
		variant_client ib_send_lat -s 8 -n "$n"
	fi
	kill -INT $ppid
	wait $ppid
	tools/lab/barrier -t 200 "$tag-done"
	fig=$(grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/c.log | tail -1 | awk '{print $3, $4, $5, $6}')
	echo "$v: ${fig:--}"
	name="h$me-${v//[:=,]/_}"
	perf script -i /tmp/p.data 2>/dev/null | tools/lab/flamegraph fold >"$out/$name.folded"
	tools/lab/flamegraph top --per "$n" <"$out/$name.folded" >"$out/$name.txt"
	rm -f /tmp/p.data
	variant_down
done
