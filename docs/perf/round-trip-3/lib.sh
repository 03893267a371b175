# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# shellcheck shell=bash
# Sourced by this directory's scripts, in a lab guest, from the project
# root.  N: iterations per run (default 20000).
n=${N:-20000}

# pair TEST SIZE PERF-ARGS... -- PERFTEST-ARGS... ADDR: perftest's server
# of TEST with SIZE-byte messages, then its client under `perf
# PERF-ARGS...`; the client's output in /tmp/c.log, perf's in
# /tmp/perf.err.
pair() {
	local t=$1 s=$2; shift 2
	local p=()
	while [ "$1" != -- ]; do p+=("$1"); shift; done; shift
	local addr=${!#}; local o=("${@:1:$#-1}")
	timeout 120 "$t" "${o[@]}" -F -s "$s" -n "$n" >/tmp/s.log 2>&1 &
	sleep 3
	perf "${p[@]}" -- timeout 120 "$t" "${o[@]}" -F -s "$s" -n "$n" \
		"$addr" >/tmp/c.log 2>/tmp/perf.err
	wait
}

# The client's figure: "typ T avg A" (us) for 8 B, else "Mpps M".
figure() {
	awk -v s="$1" '$1 == s { if (s == 8) print "typ", $5, "avg", $6;
		else print "Mpps", $5 }' /tmp/c.log
}

# perf stat's counts in /tmp/perf.err, " event count" each; with an
# argument, per that many (round trips).
counts() {
	awk -v n="${1:-1}" '$2 ~ /:/ { gsub(",", "", $1); sub(/.*:/, "", $2);
		printf " %s %s", $2, (n == 1 ? $1 : sprintf("%.2f", $1 / n)) }' \
		/tmp/perf.err
}

# siw0 on a dummy netdev and address of its own (10.233.0.1), as
# tools/bench sets it up; the modules trdma and siw need.
siw_up() {
	modprobe -a ib_uverbs ib_core rdma_ucm libcrc32c crc32c_generic
	modprobe dummy numdummies=0; ip link add bsiw0 type dummy
	ip addr add 10.233.0.1/24 dev bsiw0; ip link set bsiw0 up
	insmod build/siw/6.1.0-57-amd64/siw.ko &&
		rdma link add siw0 type siw netdev bsiw0
}
# shellcheck disable=SC2034 # for the scripts that source this
SIW=(-d siw0 -R 10.233.0.1)

# trdma_snap NAME...: those counters of trdma0, on one line.
trdma_snap() {
	local s c
	s=$(rdma statistic show link trdma0/1 | tr ' ' '\n')
	for c; do
		printf '%s ' "$(echo "$s" | grep -A1 -x "$c" | tail -n1)"
	done
}

# trdma_deltas PER BEFORE AFTER NAME...: " NAME growth" for each counter
# of two trdma_snap lines of the same NAMEs, the growth per PER.
trdma_deltas() {
	local per=$1 b a i=0 c
	read -ra b <<< "$2"; read -ra a <<< "$3"; shift 3
	for c; do
		printf ' %s %.2f' "$c" "$(((a[i] - b[i]) * 100 / per))e-2"
		i=$((i + 1))
	done
}

# trdma0 on the lab's netdev (the module loaded already); TRDMA: the
# perftest arguments that reach it (its IPv4-mapped GID).
trdma_up() {
	rdma link add trdma0 type trdma netdev "$TRDMA_LAB_IF" || exit 1
	local g
	g=$(grep -l '^0000:0000:0000:0000:0000:ffff:' \
		/sys/class/infiniband/trdma0/ports/1/gids/* | head -n1)
	# shellcheck disable=SC2034 # for the scripts that source this
	TRDMA=(-d trdma0 -x "${g##*/}" "${TRDMA_LAB_ADDR%/*}")
}
