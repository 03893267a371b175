#!/bin/bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# tools/lab/flamegraph (tools/bench --profile) on a hand-written `perf
# script` output: the stacks it folds, the components it sums, the SVG it
# draws.
#
#   tests/unit/check-flamegraph.sh FLAMEGRAPH WORKDIR
set -euo pipefail
fg=$1
work=$2
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

# Five samples: two of trdma's transmit under a system call, one idle, one
# in trdma's provider (user space, though its name starts with trdma_);
# a sample without frames counts for its command.
cat >perf.txt <<'PERF'
ib_send_bw  4242 [001] 100.000001:   2004008 cpu-clock:
	ffffffffc0a01234 trdma_tx_push+0x54 ([trdma])
	ffffffffc0a02000 trdma_post_send+0x10 ([trdma])
	ffffffff81e00000 entry_SYSCALL_64_after_hwframe+0x63 ([kernel.kallsyms])
	    7f0000001000 ibv_post_send+0x20 (/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14)

ib_send_bw  4242 [001] 100.002005:   2004008 cpu-clock:
	ffffffffc0a01234 trdma_tx_push+0x60 ([trdma])
	ffffffffc0a02000 trdma_post_send+0x10 ([trdma])
	ffffffff81e00000 entry_SYSCALL_64_after_hwframe+0x63 ([kernel.kallsyms])
	    7f0000001000 ibv_post_send+0x20 (/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14)

swapper     0 [000] 100.000001:   2004008 cpu-clock:
	ffffffff81a00000 default_idle+0x10 ([kernel.kallsyms])
	ffffffff81a00100 do_idle+0x20 ([kernel.kallsyms])

kworker/1:1  77 [001] 100.004009:   2004008 cpu-clock:

ib_send_bw  4242 [001] 100.006013:   2004008 cpu-clock:
	    7f0000002000 trdma_poll_cq+0x30 (/usr/lib/x86_64-linux-gnu/libibverbs/libtrdma-rdmav34.so)
PERF

"$fg" fold perf.txt >folded
want='ib_send_bw;ibv_post_send <libibverbs.so.1.14>;entry_SYSCALL_64_after_hwframe;trdma_post_send [trdma];trdma_tx_push [trdma] 2
ib_send_bw;trdma_poll_cq <libtrdma-rdmav34.so> 1
kworker/1:1 1
swapper;do_idle;default_idle 1'
[ "$(cat folded)" = "$want" ] || fail "folded stacks:
$(cat folded)
want:
$want"

"$fg" top --per 2 folded >top.txt
grep -Eq '^ +40\.00% +2 +1\.0000/unit +trdma$' top.txt ||
	fail "trdma's share: $(cat top.txt)"
grep -Eq '^ +20\.00% +1 +0\.5000/unit +idle$' top.txt ||
	fail "idle's share: $(cat top.txt)"
grep -Eq '^ +20\.00% +1 +0\.5000/unit +user$' top.txt ||
	fail "user space's share: $(cat top.txt)"
grep -q '^samples: 5 (2.500 per unit of work, 2 units)' top.txt ||
	fail "sample count: $(head -n 1 top.txt)"

"$fg" svg --title 'a <test>' folded >out.svg
grep -q '<title>trdma_tx_push \[trdma\] (2 samples, 40.00%)</title>' out.svg ||
	fail "no trdma frame in the SVG"
grep -q 'a &lt;test&gt;' out.svg || fail "title not escaped"
python3 -c 'import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' out.svg ||
	fail "the SVG is not well-formed XML"
echo "flamegraph: fold, top and svg as expected"
