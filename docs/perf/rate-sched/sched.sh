#!/bin/bash
# In a lab guest: trdma's 64 B ib_send_bw R times in one boot (N
# messages each), each client run under `perf record -a` of the
# scheduler's switches and migrations and the workqueue's executions, as
# text in $TRDMA_LAB_OUT/rR.txt (sched.py reads them): where perftest's
# two processes and trdma's worker ran in the fast runs and the slow.
# IPI=1 also records the wake-ups and the IPIs that carry them.
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck source-path=SCRIPTDIR source=../round-trip-3/lib.sh
. docs/perf/round-trip-3/lib.sh
ev=(-e sched:sched_switch -e sched:sched_migrate_task
	-e workqueue:workqueue_execute_start -e workqueue:workqueue_queue_work
	-e net:net_dev_xmit)
[ -n "$IPI" ] && ev+=(-e sched:sched_waking
	-e irq_vectors:call_function_single_entry
	-e irq_vectors:reschedule_entry)
modprobe trdma && trdma_up
echo "messages $n"
for r in $(seq "${R:-6}"); do
	pair ib_send_bw 64 record -q -a -o /tmp/p.data "${ev[@]}" -- "${TRDMA[@]}"
	printf 'r%s %s\n' "$r" "$(figure 64)"
	perf script -i /tmp/p.data -F cpu,time,event,trace \
		>"$TRDMA_LAB_OUT/r$r.txt" 2>/dev/null
done
