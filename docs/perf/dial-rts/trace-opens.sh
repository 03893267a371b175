#!/bin/bash
# Which TCP connections each 64 KiB run opens, and when (sock:inet_sock_set_state).
# usage: tools/vm -- docs/perf/dial-rts/trace-opens.sh [RUNS]   (from the project root)
ifname=$TRDMA_LAB_IF dev=trdma0 build=build pass=0 fail=0
. tests/lab/lib.sh
n=${1:-8}
rdma link add trdma0 type trdma netdev "$ifname" || exit 1
T=/sys/kernel/tracing
[ -d $T/events ] || mount -t tracefs nodev $T
echo 'newstate == 2 || newstate == 1 || newstate == 7' > $T/events/sock/inet_sock_set_state/filter
echo 1 > $T/events/sock/inet_sock_set_state/enable
echo 16384 > $T/buffer_size_kb
for i in $(seq "$n"); do
	a=$(awk '/^Tcp:/ && n++ {print $6}' /proc/net/snmp)
	echo > $T/trace
	pair "$dev" "$dev" -x ib_write_bw -s 65536 -n 5000 >/dev/null 2>&1 || echo "run $i failed"
	b=$(awk '/^Tcp:/ && n++ {print $6}' /proc/net/snmp)
	echo "run $i: $(pair_figures) active opens +$((b - a))"
	grep -v '^#' $T/trace | sed -E 's/^ *//; s/ +/ /g' | awk '{ $3=""; print }' | sed -E 's/family=AF_INET protocol=IPPROTO_TCP //; s/saddr=[^ ]+ daddr=[^ ]+ //; s/saddrv6=[^ ]+ daddrv6=[^ ]+//'
	dmesg | tail -n 3 | grep -i trdma
done
