#!/bin/bash
cd /work/main || exit 1
K=build/kernel/trdma.ko
A=$K:rx_offload_kb=0
B=$K:rx_offload_kb=16,tx_notsent_lowat=65536
C=$K:rx_offload_kb=16
tools/lab/module-ab -r 2 -t "ib_write_bw -s 65536 -D 8;ib_write_bw -s 16384 -D 8;ib_send_bw -s 64 -D 8;ib_send_lat -s 8 -n 20000" $A $B $C $C $B $A
dmesg | grep -E "Oops|BUG|WARNING|lockdep|KASAN" && echo DMESG-BAD
echo done
