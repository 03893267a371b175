#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Reads prof.sh's pR.txt (perf script of one client run under perf
record -a -g) in the current directory, with output.log for the rates,
and prints the runs ordered by rate: samples in all and by task, then
the functions with the most samples of their own and with their
callees."""
import sys,re
from collections import Counter
def load(p):
    selfc=Counter(); incl=Counter(); comm=Counter(); n=0
    for blk in open(p).read().split('\n\n'):
        ls=[l for l in blk.strip().split('\n') if l.strip()]
        if not ls: continue
        hdr=ls[0].split(); c=hdr[0]
        frames=[l.split(None,1)[1] if len(l.split(None,1))>1 else '?' for l in ls[1:]]
        n+=1; comm[c if not c.startswith('kworker') else 'kworker']+=1
        if frames:
            selfc[frames[0]]+=1
            for f in set(frames): incl[f]+=1
    return n,selfc,incl,comm
runs={int(re.search(r'p(\d+)',p)[1]):load(p) for p in sys.argv[1:]}
rates={}
for l in open('output.log'):
    m=re.match(r'r(\d+) Mpps (\S+)',l)
    if m: rates[int(m[1])]=float(m[2])*1000
order=sorted(runs,key=lambda r:rates[r])
print('rate      ',' '.join(f"{rates[r]:6.0f}" for r in order))
print('samples   ',' '.join(f"{runs[r][0]:6d}" for r in order))
for c in ['ib_send_bw','kworker','swapper','ksoftirqd/0','ksoftirqd/1']:
    print(f"{c[:10]:10s}",' '.join(f"{runs[r][3][c]:6d}" for r in order))
tot=Counter()
for r in runs: tot.update(runs[r][1])
print('--- self')
for k,_ in tot.most_common(25):
    print(f"{k[:40]:40s}",' '.join(f"{runs[r][1][k]:5d}" for r in order))
tot=Counter()
for r in runs: tot.update(runs[r][2])
print('--- inclusive')
for k,_ in tot.most_common(45):
    print(f"{k[:40]:40s}",' '.join(f"{runs[r][2][k]:5d}" for r in order))
