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
# A set-up that fails on host 2 fails these checks there (aerr says why),
# not the rest of run-2host: both hosts still run the transfers, so that
# their barriers meet.
aerr=
ainst=
aslack=$(cat /sys/module/trdma/parameters/ack_slack_us 2>/dev/null)
if [[ $aslack =~ ^[1-9][0-9]*$ ]]; then
	aslack=$((aslack * 1000))
else
	aerr="ack_slack_us is '$aslack': no slack to tell apart"
	aslack=0
fi
if [ "$host" = 2 ] && [ -z "$aerr" ]; then
	atr=/sys/kernel/tracing
	[ -d "$atr/events" ] || mount -t tracefs nodev "$atr"
	# Only the hold's timer: its function's address, as the event stores it.
	afn=$(awk '$3 == "trdma_tx_ack_timer" { print $1; exit }' /proc/kallsyms)
	if [ -z "$afn" ] || [ -z "${afn//0/}" ]; then
		aerr="no address for trdma_tx_ack_timer in /proc/kallsyms"
	elif ! mkdir -p "$atr/instances/trdma-ackslack"; then
		aerr="no tracefs instance"
	else
		ainst=$atr/instances/trdma-ackslack
		{ echo 4096 >"$ainst/buffer_size_kb" &&
		  echo "function == 0x$afn" \
			>"$ainst/events/timer/hrtimer_start/filter" &&
		  echo 1 >"$ainst/events/timer/hrtimer_start/enable"; } ||
			aerr="the hrtimer_start event could not be set up"
	fi
fi
# ack_arms: the hold timer's arms in the trace, one per line: "idle SLACK"
# or "busy SLACK" (the task's pid ends the field before the CPU's "[NNN]";
# the idle task's is 0; SLACK in ns).
ack_arms() {
	awk '/hrtimer_start:/ && /function=trdma_tx_ack_timer/ {
		t = $0; sub(/ +\[[0-9]+\] .*/, "", t); sub(/.*-/, "", t)
		e = $0; sub(/.* expires=/, "", e); sub(/ .*/, "", e)
		s = $0; sub(/.* softexpires=/, "", s); sub(/ .*/, "", s)
		print (t == 0 ? "idle" : "busy"), e - s
	}' "$ainst/trace"
}
# arms_ok KIND SLACK: at least 20 arms of KIND; every idle arm without
# slack, every other with SLACK; the trace lost nothing.
arms_ok() {
	local arms n wrong
	[ -z "$aerr" ] || { echo "$aerr"; return 1; }
	arms=$(ack_arms)
	n=$(awk -v k="$1" '$1 == k' <<<"$arms" | wc -l)
	wrong=$(awk -v s="$2" '$2 != ($1 == "idle" ? 0 : s)' <<<"$arms" | wc -l)
	echo "$n $1 arms; $wrong with the wrong slack (count, task, slack in ns:" \
		"$(sort <<<"$arms" | uniq -c | sort -rn | head -4 | tr -s ' \n' ' '))"
	grep -q '^overrun: [1-9]' "$ainst"/per_cpu/cpu*/stats &&
		{ echo "the trace lost events"; return 1; }
	[ "$n" -ge 20 ] && [ "$wrong" -eq 0 ]
}
# slack_run NAME KIND PERFTEST-ARGS...: host 2's trace emptied, a 64 B
# ib_send_bw across, then its arms checked there, at least 20 of KIND.
slack_run() {
	local name=$1 kind=$2
	shift 2
	[ -n "$ainst" ] && : >"$ainst/trace"
	across "$name" -x ib_send_bw -s 64 -n 20000 "$@" || return 1
	[ "$host" = 2 ] || return 0
	arms_ok "$kind" "$aslack"
}
if [ "$host" = 2 ]; then
	check "the hold's timer armed from the idle loop has no slack (ib_send_bw -e)" \
		slack_run ackidle idle -e
	check "the hold's timer armed on a busy CPU has $aslack ns of slack (ib_send_bw)" \
		slack_run ackbusy busy
else
	check "ib_send_bw -e across hosts (host 2 checks the hold's timer)" \
		slack_run ackidle idle -e
	check "ib_send_bw across hosts (host 2 checks the hold's timer)" \
		slack_run ackbusy busy
fi
if [ -n "$ainst" ]; then
	echo 0 >"$ainst/events/timer/hrtimer_start/enable"
	rmdir "$ainst"
fi
