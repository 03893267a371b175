#!/bin/bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# In a lab guest (tools/vm -- docs/perf/tx-spread/spread0-core.sh, from
# the project root): tests/lab/run --short-matrix with every load of trdma
# given tx_spread=0 (modprobe.d), sampling the parameter every second
# meanwhile.
echo "options trdma tx_spread=0" >/etc/modprobe.d/trdma-spread0.conf
(while :; do
	cat /sys/module/trdma/parameters/tx_spread 2>/dev/null
	sleep 1
done) >/tmp/seen &
s=$!
tests/lab/run --short-matrix build
rc=$?
kill $s
echo "tx_spread seen while trdma was loaded: $(sort /tmp/seen | uniq -c | tr '\n' ' ')"
exit $rc
