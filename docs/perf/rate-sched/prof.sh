#!/bin/bash
# In a lab guest: trdma's 64 B ib_send_bw R times in one boot (N
# messages each), each client run under `perf record -a -g -F 499`, the
# samples as text in $TRDMA_LAB_OUT/pR.txt: what a slow run does more of
# than a fast one.
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck source-path=SCRIPTDIR source=../round-trip-3/lib.sh
. docs/perf/round-trip-3/lib.sh
modprobe trdma && trdma_up
echo "messages $n"
for r in $(seq "${R:-6}"); do
	pair ib_send_bw 64 record -q -a -g -F 499 -o /tmp/p.data -- "${TRDMA[@]}"
	printf 'r%s %s\n' "$r" "$(figure 64)"
	perf script -i /tmp/p.data -F comm,pid,cpu,ip,sym >"$TRDMA_LAB_OUT/p$r.txt" \
		2>/dev/null
done
