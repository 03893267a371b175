# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Shell helpers of the single-guest lab suites (tests/lab/run,
# tests/lab/run-clients); sourced, not run.  The suite sets pass=0, fail=0,
# dev (the trdma device under test) and build (the build tree).

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

# The IPv4-mapped RoCE v2 GID index of a device.
v4gid() {
	local g
	for g in "/sys/class/infiniband/$1/ports/1/gids/"*; do
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
zero() { [ "$(counter "$@")" = 0 ]; }

