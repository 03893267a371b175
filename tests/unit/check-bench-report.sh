#!/bin/bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# tools/lab/bench-report on a made-up two-host run with the 64 B rate only
# (tools/bench --hosts 2 --figures rate): the steady-state tables list the
# transports that have only that figure, and the host cores of a two-host
# run add each guest's CPU time by its own run's wall time.
#
#   tests/unit/check-bench-report.sh BENCH_REPORT WORKDIR
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 BENCH_REPORT WORKDIR" >&2
	exit 2
fi
work=$2
rm -rf "$work"
mkdir -p "$work"
failed=0

# row ROUND TRANSPORT LENGTH METRIC VALUE
row() { echo "$1,$2,ib_send_bw_$3,64,$4,$5"; }
{
	echo "repeat,transport,test,size,metric,value"
	for r in 1 2; do
		for t in trdma siw; do
			if [ "$t" = trdma ]; then rate=0.020; else rate=0.010; fi
			for len in steady short; do
				row $r $t $len rate_Mpps $rate
				row $r $t $len msgs 100000
				row $r $t $len cpu_kernel_s 3.0
				row $r $t $len cpu_busy_s 4.0
				row $r $t $len host_cpu_s 4.0
				row $r $t $len host_wall_s 5.0
				row $r $t $len srv_cpu_kernel_s 2.0
				row $r $t $len srv_cpu_busy_s 6.0
				row $r $t $len srv_host_cpu_s 6.0
				row $r $t $len srv_host_wall_s 10.0
			done
		done
	done
} >"$work/raw.csv"

"$1" "$work" >"$work/out.md"

# expect TEXT WHAT: table.md has the line TEXT.
expect() {
	if grep -qxF -- "$1" "$work/table.md"; then
		echo "ok: $2"
	else
		echo "FAIL: $2: no line '$1' in:"
		cat "$work/table.md"
		failed=1
	fi
}
expect "| trdma | - | - | - | 20.0 (20.0-20.0, n=2) | 50.0 (50.0-50.0, n=2) | - | - |" \
	"steady state lists a transport with only the 64 B rate"
expect "| siw | - | - | - | 10.0 (10.0-10.0, n=2) | 50.0 (50.0-50.0, n=2) | - | - |" \
	"and its peer"
# Host cores: 4.0 / 5.0 + 6.0 / 10.0 = 1.40; busy vCPUs 4.0 / 5.0 + 6.0 / 10.0.
expect "| trdma | - | - | 1.40 (1.40-1.40, n=2) | 1.40 (1.40-1.40, n=2) | - | - |" \
	"host cores: each guest's CPU by its own run's wall time"
expect "| trdma | ib_send_bw 64 B thousand/s | 20.0 | 20.0 | 1.00x |" \
	"long runs beside their tenth"

[ $failed -eq 0 ] || exit 1
echo "PASS: tools/lab/bench-report"
