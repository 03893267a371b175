#!/bin/bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# tools/bench --figures: names other than bw, rate and lat, and lists of
# none, are refused with the message that says so and exit status 2; lists
# of them pass every argument check.  tools/bench checks its arguments
# before it builds or starts anything, and refuses a --kver with no
# installed kernel right after those checks: every run here names one, so
# a list that passes ends there.  The script runs as a copy in a tree of
# its own, with no tools/vm to start and nothing to build, should it ever
# get further.
#
#   tests/unit/check-bench-figures.sh BENCH WORKDIR
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 BENCH WORKDIR" >&2
	exit 2
fi
work=$2
rm -rf "$work"
mkdir -p "$work/tools"
cp "$1" "$work/tools/bench"

failed=0
kver=trdma-test-no-such-kernel

# bench MESSAGE ARG...: tools/bench ARG... exits with status 2, printing
# MESSAGE alone, and leaves nothing behind.
bench() {
	local rc=0 out want=$1
	shift
	out=$("$work/tools/bench" --no-deps --kver "$kver" \
		--build "$work/build" --out "$work/out" "$@" 2>&1) || rc=$?
	if [ "$rc" -ne 2 ] || [ "$out" != "$want" ] ||
		[ -e "$work/build" ] || [ -e "$work/out" ]; then
		echo "FAIL: tools/bench $*: exit status $rc, expected 2 and '$want':"
		echo "$out"
		failed=1
	else
		echo "ok: tools/bench $*: $out"
	fi
}
refused() { bench "bench: --figures takes bw, rate and lat" --figures "$1"; }
accepted() { bench "bench: --kver: no installed kernel with headers '$kver'" "$@"; }

for list in foo "bw foo" "bw,lat" BW latency "" " " $'\t' $' \n ' $'bw\nfoo'; do
	refused "$list"
done
# --figures without its value: said so, not a shell error.
bench "bench: --figures takes a value" --figures
accepted
for list in bw rate lat "bw rate lat" "lat bw" "  rate   lat " $'rate\tlat'; do
	accepted --figures "$list"
done

[ $failed -eq 0 ] || exit 1
echo "PASS: tools/bench --figures"
