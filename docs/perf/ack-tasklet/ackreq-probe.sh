#!/bin/bash
# The kprobe behind write-stream-ackreq.log: how many trdma_tx_ack_soon()
# calls find the ACK requested, per ib_write_bw option set.  From the
# project root: tools/vm -- bash docs/perf/ack-tasklet/ackreq-probe.sh
# (reads ack_req/ack_pending through the module's debug info).
dev=trdma0 build=build pass=0 fail=0
. tests/lab/lib.sh
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
modprobe trdma && rdma link add trdma0 type trdma netdev $TRDMA_LAB_IF
ko=$PWD/build/kernel/trdma.ko
perf probe -q -m $ko -a 'soon=trdma_tx_ack_soon qp->ack_req:u8 qp->ack_pending:u8 qp->ack_turn_ns sk' 2>&1 | tail -3
T=/sys/kernel/tracing
cat $T/kprobe_events
grep trdma_tx_ack_soon /proc/kallsyms
echo 1 > $T/events/probe/soon/enable
echo 100000 > $T/buffer_size_kb
perf probe -q -m $ko -a "hdr=trdma_seg_hdr op:u8 flags:u8" 2>&1 | tail -2; echo 1 > $T/events/probe/hdr/enable
for opt in "-Q 100" "-t 512" "-Q 32"; do
 echo > $T/trace
 a0=$(counter acks_sent)
 pair trdma0 trdma0 -x ib_write_bw -s 65536 -n 2000 $opt 2>&1 | tail -1
 echo "opt [$opt] acks +$(( $(counter acks_sent) - a0 ))"
 cat $T/kprobe_profile
 cat $T/trace > /tmp/p.txt
 echo "soon events: $(grep -c 'soon:' /tmp/p.txt); by ack_req/pending:"; grep 'soon:' /tmp/p.txt | grep -o 'ack_req=[0-9]* ack_pending=[0-9]*' | sort | uniq -c
 grep 'soon:' /tmp/p.txt | awk '{print $NF}' | sort | uniq -c | sort -rn | head -3
 echo "hdr flags:"; grep "hdr:" /tmp/p.txt | grep -o "op=[0-9x]* flags=[0-9x]*" | sort | uniq -c | sort -rn | head -6
done
