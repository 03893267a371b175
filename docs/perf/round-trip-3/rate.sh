#!/bin/bash
# In a lab guest: trdma's 64 B ib_send_bw R times in one boot (N
# messages each), each run with the scheduler's and the softirqs' events
# over the whole guest and trdma's counters, per thousand messages: what
# differs between its fast and its slow runs.
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck source-path=SCRIPTDIR source=lib.sh
. docs/perf/round-trip-3/lib.sh
ev=(-e sched:sched_switch -e sched:sched_wakeup -e sched:sched_migrate_task
	-e irq:softirq_entry -e irq_vectors:local_timer_entry
	-e irq_vectors:call_function_single_entry)
cs=(sq_doorbells tx_deferred tx_from_rx tx_corked tx_segments rx_segments
	acks_sent acks_carried ack_timer_armed)
siw_up
modprobe trdma && trdma_up
echo "messages $n; per thousand messages: perf events, then trdma's counters"
for r in $(seq "${R:-6}"); do
	c0=$(trdma_snap "${cs[@]}")
	pair ib_send_bw 64 stat -a "${ev[@]}" -- "${TRDMA[@]}"
	printf 'r%s %s %s\n ' "$r" "$(figure 64)" "$(counts $((n / 1000)))"
	trdma_deltas $((n / 1000)) "$c0" "$(trdma_snap "${cs[@]}")" "${cs[@]}"
	echo
done
