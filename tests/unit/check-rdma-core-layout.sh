#!/bin/bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Proves provider/trdma-verbs-private.h lays out every struct it shares with
# libibverbs exactly like a given rdma-core release does.
#
#   tests/unit/check-rdma-core-layout.sh RDMA_CORE_SRC [RDMA_CORE_BUILD]
#
# RDMA_CORE_SRC is an rdma-core source tree (e.g. from
# `git -C rdma-core.git archive v44.0 | tar -x -C v44.0`).  Without
# RDMA_CORE_BUILD it is configured in a temporary directory (needs cmake,
# a C compiler and rdma-core's build dependencies such as libnl-3-dev and
# libnl-route-3-dev).  private_abi_probe.c is compiled twice, once against
# trdma's header and once against rdma-core's own libibverbs/driver.h and
# kern-abi.h, and every measured size, alignment and offset is compared.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
src=$(cd "${1:?usage: $0 RDMA_CORE_SRC [RDMA_CORE_BUILD]}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ $# -ge 2 ]; then
	build=$(cd "$2" && pwd)
else
	build=$work/build
	cmake -S "$src" -B "$build" -DNO_PYVERBS=1 -DNO_MAN_PAGES=1 \
		-DENABLE_STATIC=0 >"$work/cmake.log" 2>&1 ||
		{ cat "$work/cmake.log"; exit 1; }
fi
# The generated kernel-abi headers kern-abi.h needs.
cmake --build "$build" --target kern-abi >"$work/kern-abi.log" 2>&1 ||
	{ cat "$work/kern-abi.log"; exit 1; }

cc=${CC:-cc}
"$cc" -std=gnu11 -Wall -Wextra -Werror \
	-I"$here" -I"$top/provider" -I"$top/include/uapi" \
	"$here/private_abi_probe.c" "$here/private_abi_dump.c" -o "$work/ours"
"$cc" -std=gnu11 -DTRDMA_PROBE_UPSTREAM \
	-I"$here" -I"$build/include" -I"$src" \
	"$here/private_abi_probe.c" "$here/private_abi_dump.c" -o "$work/upstream"

"$work/ours" | sort >"$work/ours.txt"
"$work/upstream" | sort >"$work/upstream.txt"

# Every fact measured for rdma-core must be measured identically for trdma
# (trdma's list has a few more, about its own structs).
comm -23 "$work/upstream.txt" "$work/ours.txt" >"$work/mismatch.txt"
if [ ! -s "$work/mismatch.txt" ]; then
	echo "OK: all $(wc -l <"$work/upstream.txt") layout facts of $(basename "$src") match provider/trdma-verbs-private.h"
	exit 0
fi
echo "MISMATCH between rdma-core $(basename "$src") and trdma:"
while read -r line; do
	key=${line% = *}
	echo "  rdma-core: $line"
	echo "  trdma:     $(grep -F "$key = " "$work/ours.txt" || echo "$key: missing")"
done <"$work/mismatch.txt"
exit 1
