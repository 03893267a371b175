#!/bin/bash
# Two-guest 8 B ping-pong per variant with ftrace in both guests over a
# window of the run: the lab NIC's interrupts, received and transmitted
# packets and the system calls other than sched_yield, timestamped with
# the guest's TSC-based local clock.  Raw traces to OUT/trace-hH-NV.txt.
#   usage: tools/vm --hosts 2 --out DIR -- docs/perf/host-view/h2trace.sh
#          [KPROBES=0] [PROBES_trdma=LIST] [PROBES_siw=LIST] SIWKO N VARIANT...
# The kprobes (each a few us in a TCG guest; KPROBES=0: none) name the
# same steps of both transports; PROBES_trdma and PROBES_siw add
# functions, "[r:]MODULE:FUNCTION" (r: where it returns).  VARIANT as in
# ../ack-slack/variant.sh.
# shellcheck disable=SC2034,SC2154  # variant.sh sets and reads them
set -uo pipefail
ifname=${TRDMA_LAB_IF:?}
KPROBES=1
while [[ $1 == PROBES_trdma=* || $1 == PROBES_siw=* || $1 == KPROBES=* ]]; do
	declare "$1"
	shift
done
siwko=$1 n=$2
shift 2
# shellcheck disable=SC2034
build=build pass=0 fail=0
. tests/lab/lib.sh
# shellcheck source=docs/perf/ack-slack/variant.sh
. docs/perf/ack-slack/variant.sh
me=$TRDMA_LAB_HOST
out=${TRDMA_LAB_OUT:?}
# shellcheck source=docs/perf/host-view/steps.sh
. docs/perf/host-view/steps.sh
steps_init 8192
variant_modules
for v in "$@"; do
	variant_next "$v"
	variant_server ib_send_lat -s 8 -n "$n"
	tools/lab/barrier -t 200 "$tag-up"
	echo 0 >$T/tracing_on
	echo >$T/trace
	echo "name == \"$ifname\"" >$T/events/net/netif_receive_skb/filter
	echo "name == \"$ifname\"" >$T/events/net/net_dev_start_xmit/filter
	echo 1 >$T/events/net/netif_receive_skb/enable
	echo 1 >$T/events/net/net_dev_start_xmit/enable
	echo 1 >$T/events/irq/irq_handler_entry/enable
	steps_syscalls
	echo 'vec == 3' >$T/events/irq/softirq_entry/filter
	echo 'vec == 3' >$T/events/irq/softirq_exit/filter
	echo 1 >$T/events/irq/softirq_entry/enable
	echo 1 >$T/events/irq/softirq_exit/enable
	if [ "$KPROBES" != 0 ]; then
		eval "extra=\${PROBES_$tr:-}"
		steps_kprobes "$tr" tcp_v4_rcv tcp_rcv_established upcall cqe \
			upcall_ret hrtimer_start uverbs uverbs_post_send post \
			tcp_sendmsg_locked ip_queue_xmit dev_queue_xmit
	fi
	( sleep 6; echo 1 >$T/tracing_on; sleep 2; echo 0 >$T/tracing_on ) &
	if [ "$me" = 2 ]; then
		wait $spid
	else
		variant_client ib_send_lat -s 8 -n "$n"
	fi
	wait
	steps_save "$out/trace-h$me-$nv.txt"
	tools/lab/barrier -t 200 "$tag-done"
	fig=$(grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/c.log | tail -1 | awk '{print $5, $6}')
	[ "$me" = 2 ] || echo "$v (#$nv): typical, average us: ${fig:--}"
	variant_down
done
