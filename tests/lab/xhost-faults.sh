# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Part of tests/lab/run-2host (sourced; its check/host/peer, lib.sh's
# eventually): faults across the two hosts.
# shellcheck shell=bash disable=SC2154
# Faults across hosts (tests/lab/xhost_fault.cc): one RC QP per host carrying
# every opcode both ways, every byte and completion checked.  Host 2 serves
# the program's control socket, host 1 connects.
xf=${TRDMA_LAB_BUILD:-build}/tests/lab/trdma_xhost_fault
xrole() { if [ "$host" = 2 ]; then echo serve; else echo connect; fi; }
no_objects() {
	rdma resource show trdma0 |
		grep -q "pd 1 cq 1 qp 1 cm_id 0 mr 0 ctx 0 srq 0"
}
# xkill V: the program on host V is SIGKILLed mid-transfer; the other side's
# QP must fail with QP_FATAL and flush everything it had outstanding
# (checked by the survivor), and the killed side's objects must be freed.
xkill() {
	local v=$1 pid rc
	tools/lab/barrier "xkill$v"
	if [ "$host" = "$v" ]; then
		rm -f /tmp/xf.ready
		XF_READY=/tmp/xf.ready "$xf" "$(xrole)" "$peer" victim \
			>/tmp/xf-victim.log 2>&1 &
		pid=$!
		for _ in $(seq 600); do
			[ -s /tmp/xf.ready ] && break
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if [ ! -s /tmp/xf.ready ]; then
			kill -9 "$pid" 2>/dev/null
			wait "$pid"
			cat /tmp/xf-victim.log
			return 1
		fi
		sleep 1
		echo "objects before the kill: $(rdma resource show trdma0)"
		kill -9 "$pid"
		wait "$pid"
		rc=$?
		cat /tmp/xf-victim.log
		[ "$rc" = 137 ] || { echo "victim ended with $rc, not SIGKILL"; return 1; }
		if ! eventually no_objects; then
			rdma resource show trdma0
			return 1
		fi
		echo "objects after the kill: $(rdma resource show trdma0)"
	else
		timeout 150 "$xf" "$(xrole)" "$peer" survivor
		rc=$?
		[ "$rc" = 0 ] && eventually no_objects
	fi
}
check "process SIGKILLed mid-transfer on host 1" xkill 1
check "process SIGKILLed mid-transfer on host 2" xkill 2
# xrun NAME SECS: both hosts run traffic for SECS and drain it.
xrun() {
	tools/lab/barrier "$1"
	timeout $(($2 + 120)) "$xf" "$(xrole)" "$peer" run "$2"
}
netem="loss 2% reorder 10% duplicate 1% delay 10ms"
check "every opcode across hosts, byte-exact (no netem)" xrun xclean 15
modprobe sch_netem
check "netem on $TRDMA_LAB_IF: $netem" \
	tc qdisc add dev "$TRDMA_LAB_IF" root netem $netem # split on purpose
tools/lab/barrier netem-on
r0=$(tcp_retrans)
check "every opcode across hosts, byte-exact, under netem" xrun xnetem 30
echo "TCP RetransSegs on host $host under netem: +$(($(tcp_retrans) - r0))"
ss -tin '( sport = :4791 or dport = :4791 )' | grep -o 'retrans:[0-9/]*' | head -3
tc -s qdisc show dev "$TRDMA_LAB_IF" | grep -A2 netem
tc qdisc del dev "$TRDMA_LAB_IF" root
tools/lab/barrier netem-off

