#!/bin/bash
# In a lab guest: trdma's 64 B ib_send_bw R times in one boot (N
# messages each); after each run, every trdma0 counter that moved, as
# its growth over the run: what a slow run's QPs did that a fast one's
# did not.
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck source-path=SCRIPTDIR source=../round-trip-3/lib.sh
. docs/perf/round-trip-3/lib.sh
modprobe trdma && trdma_up
snap() { rdma statistic show link trdma0/1 | tr ' ' '\n' | tail -n +3 |
	paste - - | sort; }
echo "messages $n"
for r in $(seq "${R:-6}"); do
	snap >/tmp/c0
	pair ib_send_bw 64 stat -e task-clock -- "${TRDMA[@]}"
	snap >/tmp/c1
	printf 'r%s %s' "$r" "$(figure 64)"
	join /tmp/c0 /tmp/c1 | awk '$3 != $2 { printf " %s %d", $1, $3 - $2 }'
	echo
done
