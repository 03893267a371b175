#!/bin/bash
# In a lab guest: trdma's 8 B ib_send_lat with module parameter P at VA
# and at VB alternately (the order swaps each round), siw after each pair,
# R rounds of N iterations; each client run counted with the timer
# interrupts, hrtimer starts and HPET reads of the whole guest, per round
# trip, and for trdma the ACK counters of the run.  (HPET reads: a kprobe
# on read_hpet; arming it once crashed the guest, ftrace patching the
# clocksource's read under a timer interrupt, so it is optional: HPET=1.)
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck source-path=SCRIPTDIR source=lib.sh
. docs/perf/round-trip-3/lib.sh
ev=(-e irq_vectors:local_timer_entry -e timer:hrtimer_start)
[ "${HPET:-0}" = 1 ] && ev+=(-e probe:read_hpet)
acks=(ack_timer_armed ack_timer_cancelled tx_from_timer acks_sent acks_carried)
run() { # label perftest-args... addr
	local label=$1; shift
	pair ib_send_lat 8 stat -a "${ev[@]}" -- "$@"
	echo "$label $(figure 8) $(counts "$n")"
}
trdma() { # label value
	local c0
	echo "$2" > "/sys/module/trdma/parameters/$P" || exit 1
	c0=$(trdma_snap "${acks[@]}")
	run "$1 $P=$2" "${TRDMA[@]}"
	trdma_deltas "$n" "$c0" "$(trdma_snap "${acks[@]}")" "${acks[@]}"
	echo
}
siw_up
[ "${HPET:-0}" = 1 ] && { perf probe -q -a read_hpet || exit 1; }
modprobe trdma && trdma_up
echo "iterations $n; per round trip: timer interrupts, hrtimer starts (HPET reads)"
echo "then, for trdma, per round trip: ${acks[*]}"
for r in $(seq "${R:-4}"); do
	if [ $((r % 2)) = 1 ]; then
		trdma "r$r" "$VA"; trdma "r$r" "$VB"
	else
		trdma "r$r" "$VB"; trdma "r$r" "$VA"
	fi
	run "r$r siw" "${SIW[@]}"
done
