#!/bin/bash
# In a lab guest: two provider builds alternately (OLD, NEW .so), R rounds of
# ib_send_lat 8 B (-n N) and ib_send_bw 64 B (-n M) over trdma0; typical and
# average latency, message rate, kernel CPU (/proc/stat) per round trip.
cd "$(dirname "$0")/../../.." || exit 1
dev=trdma0 build=build pass=0 fail=0
. tests/lab/lib.sh
pd=/usr/lib/x86_64-linux-gnu/libibverbs
n=${N:-20000} m=${M:-100000}
kern() { awk '$1=="cpu"{print $4+$7+$8}' /proc/stat; }
modprobe trdma && rdma link add trdma0 type trdma netdev "$TRDMA_LAB_IF" || exit 1
one() {
	cp "$2" "$pd/libtrdma-rdmav34.so" || return
	k0=$(kern)
	pair trdma0 trdma0 -x ib_send_lat -s 8 -n "$n" >/dev/null 2>&1 || { echo "$1 lat FAILED"; tail -3 /tmp/pair-client.log; }
	k1=$(kern)
	lat=$(awk '$1==8{print $5, $6}' /tmp/pair-client.log)
	pair trdma0 trdma0 -x ib_send_bw -s 64 -n "$m" >/dev/null 2>&1 || { echo "$1 bw FAILED"; tail -3 /tmp/pair-client.log; }
	k2=$(kern)
	rate=$(awk '$1==64{print $5}' /tmp/pair-client.log)
	echo "$1 lat typ/avg $lat us  kern-ticks/1k-rt $(( (k1-k0)*1000/n ))  rate ${rate} Mpps kern-ticks/100k-msg $(( (k2-k1)*100000/m ))"
}
for r in $(seq "${R:-4}"); do
	one "r$r old" "${OLD:?}"
	one "r$r new" "${NEW:?}"
done
rdma statistic show link trdma0/1 | tr ' ' '\n' | paste - - | grep doorbell
