#!/bin/bash
# Scheduler events on the sender (host 1) during a two-guest 64 B
# ib_send_bw of N messages: perf records switches, wake-ups, ioctl and
# sched_yield entries and interrupts; the trace goes to
# $TRDMA_LAB_OUT/sched.txt.gz (perf script's text), the doorbell counters
# and perftest's figures to the console.
#   usage: tools/vm --hosts 2 --out DIR -- docs/perf/tx-batch/schedtrace.sh N
set -uo pipefail
# shellcheck disable=SC2034  # lib.sh's and variant.sh's
ifname=${TRDMA_LAB_IF:?} siwko='' build=build pass=0 fail=0
n=$1
. tests/lab/lib.sh
# shellcheck source=docs/perf/ack-slack/variant.sh
. docs/perf/ack-slack/variant.sh
me=$TRDMA_LAB_HOST
out=${TRDMA_LAB_OUT:?}
variant_modules
variant_next trdma
variant_server ib_send_bw -s 64 -n "$n"
if [ "$me" = 1 ]; then
	# Started well before the client: beside a busy-polling perftest on
	# the guest's one CPU, perf takes seconds to set itself up.
	perf record -a -e sched:sched_switch -e sched:sched_wakeup \
		-e syscalls:sys_enter_ioctl -e syscalls:sys_enter_sched_yield \
		-e irq:irq_handler_entry -o /tmp/p.data >"$out/perf.err" 2>&1 &
	ppid=$!
	sleep 15
fi
# shellcheck disable=SC2154  # tag and spid: variant.sh's
tools/lab/barrier -t 200 "$tag-up"
if [ "$me" = 1 ]; then
	c0=$(counter sq_doorbells) d0=$(counter tx_deferred)
	variant_client ib_send_bw -s 64 -n "$n"
	echo "doorbells +$(($(counter sq_doorbells) - c0))" \
		"deferred +$(($(counter tx_deferred) - d0))"
	tail -3 /tmp/c.log
	kill -INT $ppid
	wait $ppid
	perf script -i /tmp/p.data -F comm,pid,cpu,time,event,trace 2>/dev/null |
		gzip >"$out/sched.txt.gz"
else
	# shellcheck disable=SC2154
	wait "$spid"
fi
tools/lab/barrier -t 200 "$tag-done"
variant_down
