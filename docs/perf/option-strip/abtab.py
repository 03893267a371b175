#!/usr/bin/env python3
"""Tabulates a tools/lab/module-ab log: per test and variant, the runs'
figure (8 B latency: typical us; 64 B rate: thousand/s; 64 KiB: average
MB/s) and the median, with the median guest kernel CPU (s).  A two-guest
log: host 1's lines (the figures), or with --host 2 host 2's (kernel CPU
only; its figures are "-").
   usage: abtab.py [--host N] LOG"""
import re
import statistics as st
import sys

args = sys.argv[1:]
host = None
if args[:1] == ['--host']:
    host, args = args[1], args[2:]
rows = {}
for line in open(args[0]):
    m = re.match(r'\[h(\d)\] (.*)', line)
    if m:
        if m.group(1) != (host or '1'):
            continue
        line = m.group(2)
    m = re.match(r'round (\d+) \S*?:(\S+) (ib_\w+) [^:]*: ([^|]*)\|.*kernel_s ([\d.]+)', line)
    if not m:
        continue
    r, v, t, f, k = m.groups()
    f = f.split()
    if f == ['-']:
        x = float('nan')
    elif t == 'ib_send_lat':
        x = float(f[2])
    elif t == 'ib_send_bw':
        x = float(f[2]) * 1000
    else:
        x = float(f[1])
    rows.setdefault(t, {}).setdefault(v, []).append((int(r), x, float(k)))
for t, vs in rows.items():
    print(t)
    for v, runs in vs.items():
        xs = [x for _, x, _ in runs]
        ks = [k for *_, k in runs]
        print(f"  {v:24s} " + " ".join(f"{x:7.2f}" for x in xs) +
              f" | median {st.median(xs):.2f} | kernel_s median {st.median(ks):.2f}")
