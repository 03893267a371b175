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
cnt() {
	local s c
	s=$(rdma statistic show link trdma0/1 | tr ' ' '\n')
	for c in "${cs[@]}"; do
		printf '%s ' "$(echo "$s" | grep -A1 -x "$c" | tail -n1)"
	done
}
siw_up
modprobe trdma && trdma_up
echo "messages $n; per thousand messages: perf events, then trdma's counters"
for r in $(seq "${R:-6}"); do
	read -ra c0 <<< "$(cnt)"
	pair ib_send_bw 64 stat -a "${ev[@]}" -- "${TRDMA[@]}"
	read -ra c1 <<< "$(cnt)"
	printf 'r%s %s %s\n ' "$r" "$(figure 64)" "$(counts $((n / 1000)))"
	for i in "${!cs[@]}"; do
		printf ' %s %s' "${cs[i]}" "$(((c1[i] - c0[i]) * 1000 / n))"
	done
	echo
done
