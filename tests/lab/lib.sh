# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Shell helpers of the lab suites (tests/lab/run, tests/lab/run-clients,
# tests/lab/run-2host) and of tools/lab's scripts; sourced, not run.  The
# suite sets pass=0, fail=0, dev (the trdma device under test) and build
# (the build tree).

ok()  { echo "PASS: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
# check NAME CMD...: CMD must succeed.
check() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }
# Waits up to 10 s for CMD to succeed.
eventually() {
	local i
	for i in $(seq 100); do "$@" && return 0; sleep 0.1; done
	return 1
}
refuses()    { ! "$@" 2>/dev/null; }
# perftest_raced CLIENT_LOG SERVER_LOG: a perftest -R pair failed by
# perftest's own race alone.  Its client connects the data QP as soon as
# the out-of-band exchange is done, and may come before its server listens
# for it: ib_cm then rejects the REQ for want of a listener
# (RDMA_CM_EVENT_REJECTED, status 8), perftest 4.5+0.17's retry of that
# connection crashes in librdmacm (SIGSEGV), and the server, still waiting,
# reports no error of its own.  rxe does the same: with the server slowed
# (pinned beside a busy loop) 5 of 20 ib_send_lat -R runs over rxe ended
# so, 7 of 20 over trdma (2026-12-06).  Such a pair may run again.
perftest_raced() {
	grep -q 'RDMA_CM_EVENT_REJECTED; error: 8' "$1" &&
		! grep -qiE 'fail|couldn|unable|error' "$2"
}
# section TITLE: starts a part of the suite ("== TITLE"), ending the one
# before with its wall time ("-- took N s"), which tools/test's budget
# (docs/lab.md) is planned from; section_end ends the last one.
section() {
	section_end
	echo "== $1"
	section_start=$SECONDS
}
section_end() {
	[ -n "${section_start:-}" ] &&
		echo "-- took $((SECONDS - section_start)) s"
	section_start=
}

# gtests NAME ARGS...: runs the GoogleTest lab tests and counts each case.
gtests() {
	local out p f
	out=$("$build/tests/lab/trdma_lab_tests" "$@" 2>&1)
	echo "$out"
	p=$(echo "$out" | grep -c '^\[       OK \]')
	f=$(echo "$out" | grep -c '^\[  FAILED  \] .* ([0-9]* ms)$')
	pass=$((pass + p))
	fail=$((fail + f))
	if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then bad "gtest ran no test"; fi
}

# The IPv4-mapped RoCE v2 GID index of a device ($dev if none given).
v4gid() {
	local g
	for g in "/sys/class/infiniband/${1:-$dev}/ports/1/gids/"*; do
		case $(<"$g") in
		0000:0000:0000:0000:0000:ffff:*) echo "${g##*/}"; return 0 ;;
		esac
	done
	return 1
}
# pair SERVER_DEV CLIENT_DEV GIDOPT TOOL ARGS...: runs TOOL as server on one
# device and as client on the other (to 127.0.0.1); both must succeed.
# perftest under TCG often fails its own CPU clock calibration
# ("Correlation coefficient ... Can't produce a report") and exits; its -F
# makes it report anyway (a figure may then be off, the run still counts).
# A run that failed that way all the same is repeated, up to three tries.
pair() {
	local sdev=$1 cdev=$2 gopt=$3 try rc crc
	shift 3
	case $1 in ib_*) set -- "$@" -F ;; esac
	for try in 1 2 3; do
		timeout 120 "$@" -d "$sdev" "$gopt" "$(v4gid "$sdev")" \
			>/tmp/pair-server.log 2>&1 &
		tools/lab/wait-listen -t 30 18515
		timeout 120 "$@" -d "$cdev" "$gopt" "$(v4gid "$cdev")" \
			127.0.0.1 >/tmp/pair-client.log 2>&1
		crc=$?
		wait $!
		rc=$?
		grep -qE "Correlation coefficient|Can't produce a report" \
			/tmp/pair-*.log || break
	done
	grep -E "bytes in|iters in|^ *[0-9]+ +[0-9]+ " /tmp/pair-client.log | tail -3
	if [ "$crc" -ne 0 ] || [ "$rc" -ne 0 ]; then
		cat /tmp/pair-server.log /tmp/pair-client.log
		return 1
	fi
}

# xpair TAG GIDOPT TOOL ARGS...: pair across two lab guests (tools/vm
# --hosts 2; TRDMA_LAB_HOST, TRDMA_LAB_PEER): TOOL's server on host 2, its
# client on host 1 pointed at the peer, both over $dev, each host running
# this with the same arguments; both ends must succeed.  Both hosts pass
# both barriers (TAG-up, TAG-done) whatever fails, so that they stay in
# step for the next pair.  Each end is stopped after xpair_limit seconds
# (300 unless set).  The logs are pair's: /tmp/pair-server.log on host 2,
# /tmp/pair-client.log on host 1, the other one empty.  tools/lab/bench-guest
# has its own pair: it also runs the servers of other tools and measures
# CPU time between the barriers.
xpair() {
	local tag=$1 gopt=$2 limit=${xpair_limit:-300} rc=1 gid pid=
	shift 2
	case $1 in ib_*) set -- "$@" -F ;; esac
	gid=$(v4gid "$dev")
	if [ "$TRDMA_LAB_HOST" = 2 ]; then
		: >/tmp/pair-client.log
		if [ -n "$gid" ]; then
			timeout "$limit" "$@" -d "$dev" "$gopt" "$gid" \
				>/tmp/pair-server.log 2>&1 &
			pid=$!
			tools/lab/wait-listen -t 30 18515
		else
			echo "xpair: $dev has no IPv4 GID" >/tmp/pair-server.log
		fi
		if tools/lab/barrier -t "$limit" "$tag-up" && [ -n "$pid" ]; then
			wait "$pid"
			rc=$?
		elif [ -n "$pid" ]; then
			kill "$pid" 2>/dev/null
			wait "$pid"
		fi
	else
		: >/tmp/pair-server.log
		[ -n "$gid" ] || echo "xpair: $dev has no IPv4 GID" >/tmp/pair-client.log
		if tools/lab/barrier -t "$limit" "$tag-up" && [ -n "$gid" ]; then
			timeout "$limit" "$@" -d "$dev" "$gopt" "$gid" \
				"$TRDMA_LAB_PEER" >/tmp/pair-client.log 2>&1
			rc=$?
		fi
	fi
	tools/lab/barrier -t "$limit" "$tag-done" || rc=1
	[ "$rc" -eq 0 ] || cat /tmp/pair-server.log /tmp/pair-client.log
	return "$rc"
}

# The figures of the last pair's client: perftest's result line, columns
# 3-6 (bandwidth tests: peak MB/s, average MB/s, Mpps; latency tests: min,
# max, typical, average us).
pair_figures() {
	grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/pair-client.log | tail -1 |
		awk '{print $3, $4, $5, $6}'
}

# counter NAME [DEV]: the value `rdma statistic` shows for the device's port.
counter() {
	rdma statistic show link "${2:-$dev}/1" | tr ' ' '\n' |
		grep -A1 -x "$1" | tail -n1
}
positive() { local v; v=$(counter "$@"); [ -n "$v" ] && [ "$v" -gt 0 ]; }
# tcp_mib NAME: TCP's counter TcpNAME in this namespace (/proc/net/snmp).
tcp_mib() {
	awk -v k="$1" '/^Tcp:/ { if (!n) { for (i = 1; i <= NF; i++) f[$i] = i; n = 1 }
		else if (k in f) print $f[k]; else exit 1 }' /proc/net/snmp
}
# TCP's retransmitted segments in this namespace.
tcp_retrans() { tcp_mib RetransSegs; }

# use_provider [SO]: the trdma provider libibverbs loads from now on in
# this guest: SO (a libtrdma-rdmav34.so built elsewhere, for an A/B), or
# without SO the one the lab installed, kept aside at the first call.
use_provider() {
	local dir=/usr/lib/x86_64-linux-gnu/libibverbs kept=/tmp/lab-provider.so
	[ -e "$kept" ] || cp "$dir/libtrdma-rdmav34.so" "$kept" || return 1
	cp "${1:-$kept}" "$dir/libtrdma-rdmav34.so"
}
zero() { [ "$(counter "$@")" = 0 ]; }

