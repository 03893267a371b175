#!/bin/bash
# In a lab guest: trdma's 64 B ib_send_bw, R rounds in one boot of N
# messages, each round one run with address-space randomisation off
# (kernel.randomize_va_space=0) and one with it on (2, the default),
# alternating which goes first: whether the spread of the rate follows
# where perftest's memory lands in the virtual address space.
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck source-path=SCRIPTDIR source=../round-trip-3/lib.sh
. docs/perf/round-trip-3/lib.sh
modprobe trdma && trdma_up
echo "messages $n"
for r in $(seq "${R:-6}"); do
	order="0 2"; [ $((r % 2)) = 0 ] && order="2 0"
	for a in $order; do
		sysctl -qw kernel.randomize_va_space="$a"
		pair ib_send_bw 64 stat -e task-clock -- "${TRDMA[@]}"
		printf 'r%s aslr=%s %s\n' "$r" "$a" "$(figure 64)"
	done
done
