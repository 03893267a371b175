#!/bin/bash
# In a lab guest: what an 8 B ib_send_lat round trip makes the guest do
# that traps to qemu or wakes something: interrupts and IPIs by vector,
# timer starts and cancels, MSR accesses (the TSC deadline, x2APIC), HPET
# reads (the lab guest's clocksource; a kprobe on read_hpet, which has
# crashed the guest once, see ab-param.sh: HPET=0 leaves it out),
# context switches, wake-ups and softirqs, counted over the whole guest
# during the client's run, per round trip; trdma and siw alternately for
# R rounds of N iterations.
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck source-path=SCRIPTDIR source=lib.sh
. docs/perf/round-trip-3/lib.sh
evs=(irq_vectors:local_timer_entry irq_vectors:reschedule_entry
	irq_vectors:call_function_single_entry irq_vectors:call_function_entry
	timer:hrtimer_start timer:hrtimer_cancel timer:timer_start
	msr:write_msr msr:read_msr sched:sched_switch
	sched:sched_wakeup irq:softirq_raise irq:softirq_entry
	raw_syscalls:sys_enter net:net_dev_xmit tcp:tcp_probe)
[ "${HPET:-1}" = 1 ] && evs+=(probe:read_hpet)
ev=(); for e in "${evs[@]}"; do ev+=(-e "$e"); done
run() { # label perftest-args... addr
	local label=$1; shift
	pair ib_send_lat 8 stat -a "${ev[@]}" -- "$@"
	echo "== $label $(figure 8)"
	awk -v n="$n" '$2 ~ /:/ { gsub(",", "", $1);
		printf "  %-42s %8.3f per round trip\n", $2, $1 / n }' /tmp/perf.err
}
siw_up
[ "${HPET:-1}" = 1 ] && { perf probe -q -a read_hpet || exit 1; }
modprobe trdma && trdma_up
echo "iterations $n"
for r in $(seq "${R:-2}"); do
	run "r$r trdma" "${TRDMA[@]}"
	run "r$r siw" "${SIW[@]}"
done
