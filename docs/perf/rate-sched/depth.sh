#!/bin/bash
# In a lab guest: trdma's 64 B ib_send_bw, R rounds in one boot of N
# messages, each round one run with perftest's default send queue (128)
# and one with T (default 512) outstanding, alternating which goes
# first: whether the rate's spread follows how long a signaled send's
# ACK takes against the room the send queue leaves meanwhile.
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck source-path=SCRIPTDIR source=../round-trip-3/lib.sh
. docs/perf/round-trip-3/lib.sh
modprobe trdma && trdma_up
echo "messages $n"
for r in $(seq "${R:-6}"); do
	order="128 ${T:-512}"; [ $((r % 2)) = 0 ] && order="${T:-512} 128"
	for t in $order; do
		pair ib_send_bw 64 stat -e task-clock -- -t "$t" "${TRDMA[@]}"
		printf 'r%s t=%s %s\n' "$r" "$t" "$(figure 64)"
	done
done
