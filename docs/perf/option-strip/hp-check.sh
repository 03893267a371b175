#!/bin/bash
# Header prediction with and without the receive hook: TcpExtTCPHPHits
# against tcp_option_tagged over a 1,000-round-trip ping-pong,
# tcp_option_strip=0, then 1.
# With strip.diff applied and built into build/.
# usage: tools/vm -- docs/perf/option-strip/hp-check.sh   (from the project root)
ifname=$TRDMA_LAB_IF dev=trdma0 build=build pass=0 fail=0
. tests/lab/lib.sh
modprobe trdma; rmmod trdma
for v in 0 1; do
insmod build/kernel/trdma.ko tcp_option_strip=$v || exit 1
rdma link add trdma0 type trdma netdev "$ifname" || exit 1
h0=$(tcp_ext TCPHPHits) t0=$(counter tcp_option_tagged)
pair "$dev" "$dev" -x ib_send_lat -s 8 -n 1000 || echo pair failed
h=$(($(tcp_ext TCPHPHits) - h0)) t=$(($(counter tcp_option_tagged) - t0))
echo "strip=$v TcpExtTCPHPHits +$h, tcp_option_tagged +$t"
[ "$t" -ge 1000 ] && [ $((h * 4)) -ge $((t * 3)) ] && echo "strip=$v: check passes" || echo "strip=$v: check FAILS"
rdma link delete trdma0; rmmod trdma
done
