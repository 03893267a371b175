#!/bin/bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# tools/lab/host-span.awk, bench-guest's check of the host's CPU sample
# against the guest's own clock: a sample that spans the run (within 10%
# plus 0.2 s) gives the host's CPU seconds and wall time; one that does not,
# or that cannot be read, gives nothing on stdout and says so on stderr.
#
#   tests/unit/check-host-span.sh HOST-SPAN.AWK
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 HOST-SPAN.AWK" >&2
	exit 2
fi
prog=$1
failed=0
err=$(mktemp)
trap 'rm -f "$err"' EXIT

# span WANT_OUT WANT_ERR BEFORE AFTER GUEST0 GUEST1
span() {
	local out out_err want=$1 want_err=$2
	out=$(awk -v a="$3" -v b="$4" -v s="$5" -v e="$6" -f "$prog" 2>"$err")
	out_err=$(cat "$err")
	if [ "$out" != "$want" ] || [ "$out_err" != "$want_err" ]; then
		echo "FAIL: host '$3' -> '$4', guest $5 -> $6: stdout '$out'" \
			"(expected '$want'), stderr '$out_err'" \
			"(expected '$want_err')"
		failed=1
	else
		echo "ok: host '$3' -> '$4', guest $5 -> $6: '$out$out_err'"
	fi
}
left_out() {
	span '' "bench-guest: a host sample of $1 s for a $2 s run: left out" \
		"${@:3}"
}

# A 3.7 s run seen alike by both: 370 ticks at 100 per s, 3.7 s.
span '3.7 3.7' '' '1000 100 500.00' '1370 100 503.70' 100.00 103.70
# Another tick rate: 2.5 s of CPU in 2.5 s.
span '2.5 2.5' '' '0 250 10.5' '625 250 13.0' 7.0 9.5
# The lagged sample of 2026-12-07's run X: 2.64 s of host time for a 3.7 s
# run.
left_out 2.64 3.70 '5000 100 800.00' '5264 100 802.64' 40.00 43.70
# The bound, 10% plus 0.2 s, on either side: a 10 s run.
span '11.19 11.19' '' '0 100 0' '1119 100 11.19' 0 10
left_out 11.21 10.00 '0 100 0' '1121 100 11.21' 0 10
span '8.81 8.81' '' '0 100 0' '881 100 8.81' 0 10
left_out 8.79 10.00 '0 100 0' '879 100 8.79' 0 10
# A short run: the 0.2 s is most of the bound.
span '0.7 0.7' '' '0 100 0' '70 100 0.7' 0 0.5
left_out 0.80 0.50 '0 100 0' '80 100 0.8' 0 0.5
# Unreadable samples: no figures.
span '' 'bench-guest: a host sample unreadable: left out' \
	'0 100' '70 100 0.7' 0 0.7
span '' 'bench-guest: a host sample unreadable: left out' \
	'0 100 0' '70 0 0.7' 0 0.7

[ $failed -eq 0 ] || exit 1
echo "PASS: tools/lab/host-span.awk"
