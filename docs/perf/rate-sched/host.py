#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Cuts a host profile of qemu (perf record -k CLOCK_REALTIME -F 499 -p
QEMU -o DIR/host.data, beside marks.sh) into marks.sh's runs (the files
DIR/sR and DIR/eR, whose times the host set) and prints per run: the
rate, the samples per second of the vCPU threads, the share of samples
in translated code, the emulator, libraries and the host's kernel, and the
emulator's samples per second by the nearest exported symbol below each
(qemu is stripped: a static function counts under the export before it).
DIR/vm.out: the guest's output."""
import bisect
import os
import re
import subprocess
import sys
from collections import Counter

d = sys.argv[1]
qemu = '/usr/bin/qemu-system-x86_64'
txt = subprocess.run(['perf', 'script', '-i', f'{d}/host.data',
                      '--show-mmap-events', '-F', 'tid,time,ip,dso'],
                     capture_output=True, text=True).stdout
mm = re.search(r'\[(0x[0-9a-f]+)\(0x[0-9a-f]+\) @ (0x[0-9a-f]+) .*r-xp '
               + qemu, txt)
base, pgoff = int(mm[1], 16), int(mm[2], 16)
seg = None
for f in (ln.split() for ln in subprocess.run(
        ['readelf', '-lW', qemu], capture_output=True,
        text=True).stdout.splitlines()):
    if f and f[0] == 'LOAD' and 'E' in f:
        seg = (int(f[1], 16), int(f[2], 16))
syms = sorted((int(f[0], 16), f[2]) for f in (ln.split() for ln in
              subprocess.run(['nm', '-D', '--defined-only', qemu],
                             capture_output=True, text=True)
              .stdout.splitlines()) if len(f) == 3 and f[1] in 'Tt')
addrs = [a for a, _ in syms]


def name(ip):
    va = ip - base + pgoff - seg[0] + seg[1]
    i = bisect.bisect_right(addrs, va) - 1
    return syms[i][1] if i >= 0 else '?'


rows = []
for ln in txt.splitlines():
    m = re.match(r'\s*(\d+)\s+([\d.]+):\s+([0-9a-f]+)\s+\((.*)\)', ln)
    if m:
        dso = m[4]
        kind = ('host kernel' if 'kernel' in dso else 'translated code'
                if 'perf-' in dso else 'qemu' if dso == qemu else 'libraries')
        rows.append((float(m[2]), kind, name(int(m[3], 16))
                     if kind == 'qemu' else None))
out = open(f'{d}/vm.out').read()
runs = {}
for r in range(1, 100):
    if not os.path.exists(f'{d}/s{r}'):
        break
    s, e = os.stat(f'{d}/s{r}').st_mtime, os.stat(f'{d}/e{r}').st_mtime
    w = [x for x in rows if s <= x[0] <= e]
    rate = float(re.search(rf'^r{r} Mpps (\S+)', out, re.M)[1]) * 1000
    runs[r] = (rate, e - s, Counter(x[1] for x in w),
               Counter(x[2] for x in w if x[2]), len(w))
for r, (rate, t, kinds, _, n) in runs.items():
    print(f'r{r} {rate:.0f} thousand/s {t:.2f} s, {n / t:.0f} samples/s:',
          ', '.join(f'{k} {v / n * 100:.0f}%' for k, v in kinds.most_common()))
tot = Counter()
for x in runs.values():
    tot.update(x[3])
print('qemu samples per second, runs by rate:')
order = sorted(runs, key=lambda r: runs[r][0])
print(f"{'':28s}", ' '.join(f'{runs[r][0]:5.0f}k' for r in order))
for k, _ in tot.most_common(15):
    print(f'{k[:28]:28s}', ' '.join(f'{runs[r][3][k] / runs[r][1]:6.0f}'
                                    for r in order))
