#!/bin/bash
# In a lab guest: trdma's 64 B ib_send_bw R times in one boot (N
# messages each), each client run between two files created in
# $TRDMA_LAB_OUT (sR before, eR after), whose times the host's 9p server
# sets: the host can cut a profile of qemu into the runs.
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck source-path=SCRIPTDIR source=../round-trip-3/lib.sh
. docs/perf/round-trip-3/lib.sh
modprobe trdma && trdma_up
echo "messages $n"
for r in $(seq "${R:-6}"); do
	timeout 120 ib_send_bw "${TRDMA[@]:0:4}" -F -s 64 -n "$n" \
		>/tmp/s.log 2>&1 &
	sleep 3
	: >"$TRDMA_LAB_OUT/s$r"
	timeout 120 ib_send_bw "${TRDMA[@]}" -F -s 64 -n "$n" >/tmp/c.log 2>&1
	: >"$TRDMA_LAB_OUT/e$r"
	wait
	printf 'r%s %s\n' "$r" "$(figure 64)"
done
