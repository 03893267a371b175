#!/bin/bash
# In a lab guest: ib_send_lat 8 B, trdma and siw alternately; a mark line in
# $TRDMA_LAB_OUT/marks before and after each (the host samples qemu's CPU).
cd "$(dirname "$0")/../../.." || exit 1
n=${N:-20000}
M=$TRDMA_LAB_OUT/marks
mark() { echo "$*" >> "$M"; sleep 0.3; }
lat() { # label opts... addr
	local label=$1; shift
	local addr=${!#}; local o=("${@:1:$#-1}")
	timeout 120 ib_send_lat "${o[@]}" -F -s 8 -n "$n" >/tmp/s.log 2>&1 &
	sleep 3
	mark "start $label"
	timeout 120 ib_send_lat "${o[@]}" -F -s 8 -n "$n" "$addr" >/tmp/c.log 2>&1
	mark "end $label $(awk '$1==8{print "typ", $5, "avg", $6}' /tmp/c.log)"
	wait
}
modprobe ib_uverbs; modprobe libcrc32c; modprobe crc32c_generic
modprobe dummy numdummies=0; ip link add bsiw0 type dummy; ip addr add 10.233.0.1/24 dev bsiw0; ip link set bsiw0 up
insmod build/siw/6.1.0-57-amd64/siw.ko && rdma link add siw0 type siw netdev bsiw0
modprobe trdma && rdma link add trdma0 type trdma netdev "$TRDMA_LAB_IF"
g=$(grep -l '^0000:0000:0000:0000:0000:ffff:' /sys/class/infiniband/trdma0/ports/1/gids/* | head -n1)
a=${TRDMA_LAB_ADDR%/*}
for r in $(seq ${R:-4}); do
	lat "r$r trdma" -d trdma0 -x "${g##*/}" "$a"
	lat "r$r siw" -d siw0 -R 10.233.0.1
done
mark "done"
