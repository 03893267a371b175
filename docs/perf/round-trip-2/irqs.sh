#!/bin/bash
# In a lab guest: ib_send_lat 8 B over trdma and siw, interrupts and context
# switches per round trip (/proc/interrupts, /proc/stat), typical latency.
cd "$(dirname "$0")/../../.." || exit 1
n=${N:-20000}
if=$TRDMA_LAB_IF
snap() { awk '/^ *[A-Z0-9]+:/{s=0;for(i=2;i<=NF&&$i~/^[0-9]+$/;i++)s+=$i; n=$1; sub(":","",n); if(n~/^[0-9]+$/){n=n"-"$NF}; print n, s}' /proc/interrupts; awk '$1=="ctxt"{print "ctxt",$2}' /proc/stat; }
run() { # tr
	local tr=$1 addr opts
	case $tr in
	trdma) modprobe trdma && rdma link add trdma0 type trdma netdev "$if" || return
		g=$(grep -l '^0000:0000:0000:0000:0000:ffff:' /sys/class/infiniband/trdma0/ports/1/gids/* | head -n1)
		opts=(-d trdma0 -x "${g##*/}"); addr=$TRDMA_LAB_ADDR ;;
	siw) modprobe ib_uverbs; modprobe libcrc32c; modprobe crc32c_generic; insmod build/siw/6.1.0-57-amd64/siw.ko || return
		modprobe dummy numdummies=0; ip link add bsiw0 type dummy; ip addr add 10.233.0.1/24 dev bsiw0; ip link set bsiw0 up
		rdma link add siw0 type siw netdev bsiw0 || return
		opts=(-d siw0 -R); addr=10.233.0.1 ;;
	esac
	addr=${addr%/*}
	local t=${TEST:-ib_send_lat} s=${SIZE:-8}
	[ "$tr" = trdma ] && rdma statistic show link trdma0/1 | tr ' ' '\n' | paste - - | sort >/tmp/c0
	timeout 120 $t "${opts[@]}" -F -s $s -n "$n" >/tmp/s.log 2>&1 &
	sleep 3
	snap | sort >/tmp/a
	timeout 120 $t "${opts[@]}" -F -s $s -n "$n" "$addr" >/tmp/c.log 2>&1
	snap | sort >/tmp/b
	wait
	typ=$(awk -v s=$s '$1==s{print $4, $5, $6}' /tmp/c.log)
	echo "$tr $t $s: ${typ:-FAILED}"
	join /tmp/a /tmp/b | awk -v n="$n" '{d=$3-$2; if (d/n>=0.02) printf "   %-16s %8d  %.3f/rt\n",$1,d,d/n}'
	[ "$tr" = trdma ] && rdma statistic show link trdma0/1 | tr ' ' '\n' | paste - - | sort | join /tmp/c0 - | awk -v n="$n" '$3-$2>0 {printf "%s %.3f  ", $1, ($3-$2)/n}'; echo
	case $tr in
	trdma) rdma link delete trdma0; rmmod trdma ;;
	siw) rdma link delete siw0; rmmod siw; ip link del bsiw0 ;;
	esac
	sleep 1
}
for _ in $(seq "${R:-2}"); do for tr in ${TRS:-trdma siw}; do run "$tr"; done; done
