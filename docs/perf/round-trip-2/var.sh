#!/bin/bash
# In a lab guest: ib_send_lat 8 B variants: trdma (default, ack_delay_us=0,
# processes pinned to CPUs 1/0), siw (default, pinned).  LOC per round trip.
cd "$(dirname "$0")/../../.." || exit 1
n=${N:-20000}
pk() { ip -s -j link show dev lo | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["packets"])'; }
loc() { awk '$1=="LOC:"{s=0;for(i=2;i<=NF&&$i~/^[0-9]+$/;i++)s+=$i;print s}' /proc/interrupts; }
lat() { # label pin(0/1) opts... addr
	local label=$1 pin=$2 s=() c=()
	shift 2
	[ "$pin" = 1 ] && { s=(taskset -c 1); c=(taskset -c 0); }
	local addr=${!#}; local o=("${@:1:$#-1}")
	timeout 120 "${s[@]}" ib_send_lat "${o[@]}" -F -s 8 -n "$n" >/tmp/s.log 2>&1 &
	sleep 3
	l0=$(loc); p0=$(pk); nstat -n
	timeout 120 "${c[@]}" ib_send_lat "${o[@]}" -F -s 8 -n "$n" "$addr" >/tmp/c.log 2>&1
	l1=$(loc); p1=$(pk); nstat > /tmp/nstat.txt; wait
	echo "$label: $(awk '$1==8{print "typ", $5, "avg", $6}' /tmp/c.log) LOC/rt $(awk -v a=$l0 -v b=$l1 -v n=$n 'BEGIN{printf "%.3f",(b-a)/n}') pkts/rt $(awk -v a=$p0 -v b=$p1 -v n=$n 'BEGIN{printf "%.3f",(b-a)/n}')"
	awk -v n=$n '$2/n >= 0.02 {printf "    %s %.3f/rt\n", $1, $2/n}' /tmp/nstat.txt
}
modprobe ib_uverbs; modprobe libcrc32c; modprobe crc32c_generic
modprobe dummy numdummies=0; ip link add bsiw0 type dummy; ip addr add 10.233.0.1/24 dev bsiw0; ip link set bsiw0 up
for r in $(seq ${R:-2}); do
	modprobe trdma && rdma link add trdma0 type trdma netdev "$TRDMA_LAB_IF"
	g=$(grep -l '^0000:0000:0000:0000:0000:ffff:' /sys/class/infiniband/trdma0/ports/1/gids/* | head -n1)
	a=${TRDMA_LAB_ADDR%/*}
	lat "r$r trdma" 0 -d trdma0 -x "${g##*/}" "$a"
	rdma link delete trdma0; rmmod trdma
	insmod build/siw/6.1.0-57-amd64/siw.ko && rdma link add siw0 type siw netdev bsiw0
	lat "r$r siw" 0 -d siw0 -R 10.233.0.1
	rdma link delete siw0; rmmod siw
done
