#!/bin/bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Checks the Wireshark dissector tools/wireshark/trdma.lua with tshark: it
# loads without Lua errors and registers its fields, and it decodes the
# capture trdma_pcap_gen writes exactly as the generator says it must (every
# field of every frame, the Info column, the experts; with the default
# ports, with the TCP and UDP port preferences changed, in one pass and in
# two).
#
#   tests/unit/check-wireshark-dissector.sh TSHARK TRDMA_PCAP_GEN LUA WORKDIR
#
# TSHARK is the tshark to run (a path, or a name looked up in PATH).
# WORKDIR is emptied and keeps the capture, the expected and the actual
# output for a look after a failure.  tshark is required: without it the
# test fails.
set -euo pipefail

if [ $# -ne 4 ]; then
	echo "usage: $0 TSHARK TRDMA_PCAP_GEN LUA WORKDIR" >&2
	exit 2
fi
tshark=$1
gen=$2
lua=$3
work=$4

# shellcheck source=tests/unit/tshark-env.sh
. "$(dirname "$0")/tshark-env.sh"
tshark_env "$tshark" "$work"
"$gen" "$work"

failed=0
fail() {
	echo "FAIL: $*"
	failed=1
}

# ts NAME ARG...: tshark ARG... with the dissector loaded, output in
# $work/NAME.out.  Anything on stderr but the warning tshark gives root is
# a failure (Lua errors are reported there).
ts() {
	local name=$1
	shift
	local rc=0

	"$tshark" "$@" -X lua_script:"$lua" >"$work/$name.out" \
		2>"$work/$name.err" || rc=$?
	if [ $rc -ne 0 ]; then
		fail "$name: tshark $*: exit status $rc"
		cat "$work/$name.err"
		return 0
	fi
	if grep -v -E '^Running as user "[^"]*" and group "[^"]*"\. This could be dangerous\.$' \
		"$work/$name.err" >"$work/$name.err.other"; then
		fail "$name: tshark $*: unexpected messages:"
		cat "$work/$name.err.other"
	fi
}

# same NAME EXPECTED: $work/NAME.out must be $work/EXPECTED.
same() {
	if ! diff -u "$work/$2" "$work/$1.out" >"$work/$1.diff"; then
		fail "$1: differs from $2 (- expected, + tshark):"
		head -n 60 "$work/$1.diff"
	fi
}

# The script loads, and registers the fields and protocols.
ts registration -G fields
for f in $(tail -n +2 "$work/fields") trdma trdma.opt; do
	grep -q -P "^[FP]\t[^\t]*\t\Q$f\E(\t|$)" "$work/registration.out" ||
		fail "registration: field $f not registered"
done

# Every field of every frame.
mapfile -t fields <"$work/fields"
e=()
for f in "${fields[@]}"; do e+=(-e "$f"); done
# The other ports: trdma.tcp_port 18515, trdma.udp_port 18516.
other=(-o trdma.tcp_port:18515 -o trdma.udp_port:18516)
ts fields-default -r "$work/trdma.pcap" -T fields "${e[@]}"
same fields-default expected-default
ts fields-default-2pass -2 -r "$work/trdma.pcap" -T fields "${e[@]}"
same fields-default-2pass expected-default
# TCP showing the option's bytes after kind and length as data, no ExID.
ts fields-default-no-exid -o tcp.dissect_experimental_options_rfc6994:FALSE \
	-r "$work/trdma.pcap" -T fields "${e[@]}"
same fields-default-no-exid expected-default
ts fields-other "${other[@]}" -r "$work/trdma.pcap" -T fields "${e[@]}"
same fields-other expected-other

# The Info column of every frame with a hello, segment, TLS record or UD
# datagram.
info=(-Y "trdma.hello || trdma.bth || trdma.tls_record || trdma.ud"
	-T fields -e frame.number -e _ws.col.Info)
ts info-default -r "$work/trdma.pcap" "${info[@]}"
same info-default info-default
ts info-other "${other[@]}" -r "$work/trdma.pcap" "${info[@]}"
same info-other info-other

# The frames display filters match: experts, and sanity of the capture.
while IFS=$'\t' read -r filter want; do
	ts filter -o ip.check_checksum:TRUE -o tcp.check_checksum:TRUE \
		-o udp.check_checksum:TRUE -r "$work/trdma.pcap" -Y "$filter" \
		-T fields -e frame.number
	got=$(paste -s -d, "$work/filter.out")
	[ "$got" = "$want" ] ||
		fail "filter '$filter': frames '$got', expected '$want'"
done <"$work/filters"

if [ $failed -ne 0 ]; then
	echo "(capture, expected and actual output in $work)"
	exit 1
fi
echo "PASS: $(grep -c . "$work/expected-default") frames decoded as expected"
