# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Part of tests/lab/run-2host (sourced; its check/across/host): the ACK
# hold's timer and its slack (kernel/trdma_tx.c, trdma_tx_ack_arm()).  On a
# busy CPU the timer is armed with ack_slack_us of slack; armed from the
# idle loop (the receive softirq of an interrupt that woke an idle CPU) it
# has none, since an idle CPU with its tick stopped would wake only at the
# end of the slack and the ACK would go a tick late.  Host 2 receives 64 B
# SENDs, most of them unsignaled, whose ACKs it holds for up to
# ack_coalesce_us (docs/wire.md): once with its perftest sleeping on
# completion events (-e; the interrupts find its CPU idle), once
# busy-polling (they find perftest running).  The timer:hrtimer_start
# tracepoint shows each arm's task and its slack (expires less softexpires).
# shellcheck shell=bash disable=SC2154
if [ "$host" = 2 ]; then
	atr=/sys/kernel/tracing
	[ -d "$atr/events" ] || mount -t tracefs nodev "$atr"
	ainst=$atr/instances/trdma-ackslack
	mkdir -p "$ainst" || exit 1
	echo 4096 >"$ainst/buffer_size_kb"
	# Only the hold's timer: its function's address, as the event stores it.
	afn=$(awk '$3 == "trdma_tx_ack_timer" { print $1; exit }' /proc/kallsyms)
	echo "function == 0x${afn:-0}" \
		>"$ainst/events/timer/hrtimer_start/filter" || exit 1
	echo 1 >"$ainst/events/timer/hrtimer_start/enable"
fi
# ack_arms: the hold timer's arms in the trace, one per line: "idle SLACK"
# or "busy SLACK" (the idle task's pid is 0; SLACK in ns).
ack_arms() {
	awk '/hrtimer_start:/ && /function=trdma_tx_ack_timer/ {
		task = $1; sub(/.*-/, "", task)
		e = $0; sub(/.* expires=/, "", e); sub(/ .*/, "", e)
		s = $0; sub(/.* softexpires=/, "", s); sub(/ .*/, "", s)
		print (task == 0 ? "idle" : "busy"), e - s
	}' "$ainst/trace"
}
# arms_ok KIND SLACK: at least 20 arms of KIND; every idle arm without
# slack, every other with SLACK; the trace lost nothing.
arms_ok() {
	local n wrong
	n=$(ack_arms | awk -v k="$1" '$1 == k' | wc -l)
	wrong=$(ack_arms | awk -v s="$2" '$2 != ($1 == "idle" ? 0 : s)' | wc -l)
	echo "$n $1 arms; $wrong with the wrong slack (count, task, slack in ns:" \
		"$(ack_arms | sort | uniq -c | sort -rn | head -4 | tr -s ' \n' ' '))"
	grep -q '^overrun: [1-9]' "$ainst"/per_cpu/cpu*/stats &&
		{ echo "the trace lost events"; return 1; }
	[ "$n" -ge 20 ] && [ "$wrong" = 0 ]
}
# slack_run NAME KIND PERFTEST-ARGS...: host 2's trace emptied, a 64 B
# ib_send_bw across, then its arms checked there, at least 20 of KIND.
slack_run() {
	local name=$1 kind=$2
	shift 2
	[ "$host" = 2 ] && : >"$ainst/trace"
	across "$name" -x ib_send_bw -s 64 -n 20000 "$@" || return 1
	[ "$host" = 2 ] || return 0
	arms_ok "$kind" "$aslack"
}
aslack=$(($(cat /sys/module/trdma/parameters/ack_slack_us) * 1000))
check "the hold's timer armed from the idle loop has no slack (ib_send_bw -e)" \
	slack_run ackidle idle -e
check "the hold's timer armed on a busy CPU has $aslack ns of slack (ib_send_bw)" \
	slack_run ackbusy busy
if [ "$host" = 2 ]; then
	echo 0 >"$ainst/events/timer/hrtimer_start/enable"
	rmdir "$ainst"
fi
