#!/bin/bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Checks tools/wireshark/check-capture's exception for data segments
# without the trdma TCP option, on the small captures of one RC connection
# that `trdma_pcap_gen --check-capture` writes: such a segment passes only
# where it comes after its sender's FIN and repeats bytes that went tagged
# before that FIN (docs/wire.md, "The trdma TCP option").  Each capture
# check-capture must refuse has that one segment wrong and nothing else:
# the counts it prints must say so, so that no case fails for another
# reason.
#
#   tests/unit/check-wireshark-capture.sh TSHARK TRDMA_PCAP_GEN CHECK_CAPTURE WORKDIR
#
# TSHARK is the tshark check-capture is to run (a path, or a name looked up
# in PATH).  WORKDIR is emptied and keeps the captures.  tshark is
# required: without it the test fails.
set -euo pipefail

[ $# -eq 4 ] || {
	echo "usage: $0 TSHARK TRDMA_PCAP_GEN CHECK_CAPTURE WORKDIR" >&2
	exit 2
}
gen=$2 check=$3 work=$4
# shellcheck source=tests/unit/tshark-env.sh
. "$(dirname "$0")/tshark-env.sh"
# check-capture runs the tshark first in PATH: tshark_env puts this one there.
tshark_env "$1" "$work"
"$gen" --check-capture "$work"

failed=0
checked=0

# verdict CASE STATUS WITHOUT EXCUSED: check-capture on CASE.pcap exits with
# STATUS, counts WITHOUT data segments without the option, EXCUSED of them
# as retransmitted after their sender's FIN, and finds all else right:
# mid-segment packets, options that agree with their BTH, decoded headers,
# no errors.
verdict() {
	local rc=0 out want
	out=$("$check" "$work/$1.pcap" 2>&1) || rc=$?
	checked=$((checked + 1))
	want="^check-capture: [0-9]+ data segments, [0-9]+ with the option"
	want+=" \\($3 without, $4 of them retransmitted after their sender's FIN\\),"
	want+=" [1-9][0-9]* mid-segment; option vs BTH: [1-9][0-9]* agree,"
	want+=" 0 disagree; [1-9][0-9]* headers decoded, 0 errors ?$"
	if [ "$rc" -ne "$2" ] || ! [[ $out =~ $want ]]; then
		echo "FAIL: $1: exit status $rc, expected $2 with ($3 without," \
			"$4 excused) and nothing else wrong:"
		echo "$out"
		failed=1
	else
		echo "ok: $1: exit status $rc: $out"
	fi
}

# Every data segment tagged; the server's last one retransmitted untagged
# after its FIN: both pass.
verdict tagged 0 0 0
verdict late 0 1 1
# That retransmission without any FIN, after the client's FIN only, before
# the server's FIN: refused.
verdict no-fin 1 1 0
verdict peer-fin 1 1 0
verdict before-fin 1 1 0
# Its bytes never seen tagged: the original is not in the capture.
verdict lost-original 1 1 0
# Bytes never sent before the server's FIN: sent untagged for the first
# time after it, or sent tagged in the FIN segment and then again untagged.
verdict new-bytes 1 1 0
verdict fin-data 1 1 0
# An untagged segment in the middle of the connection, more after it.
verdict middle 1 1 0

# A verdict above for every capture the generator wrote.
n=$(find "$work" -name '*.pcap' | wc -l)
if [ "$n" -ne "$checked" ]; then
	echo "FAIL: $n captures written, $checked checked"
	failed=1
fi
if [ $failed -ne 0 ]; then
	echo "(captures in $work)"
	exit 1
fi
echo "PASS: check-capture's verdicts on $checked captures"
