#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Reads sched.sh's rR.txt and prints per run how long each trdma worker
queued from one vCPU onto the other waited until the switch to a
high-priority kworker there, grouped by what that switch preempted
(srv/cl: a perftest process): how many, median, mean, and their sum."""
import re,sys
from collections import defaultdict
SW = re.compile(r'prev_comm=(.*) prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) ==> next_comm=(.*) next_pid=(\d+) ')
for p in sys.argv[1:]:
    ev=[]
    for l in open(p):
        m=re.match(r'\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)',l)
        if m: ev.append((int(m[1]),float(m[2]),m[3],m[4]))
    pend={}  # target cpu -> queue time
    stats=defaultdict(list)
    running={}
    for cpu,t,e,r in ev:
        if e=='workqueue:workqueue_queue_work' and 'trdma_tx_work' in r:
            tgt=int(re.search(r' cpu=(-?\d+)',r)[1])
            if tgt!=cpu and tgt not in pend: pend[tgt]=(t,running.get(tgt,'?'))
        elif e=='sched:sched_switch':
            s=SW.search(r)
            running[cpu]=s[4]
            if cpu in pend and s[4].startswith('kworker') and s[4].endswith('H'):
                t0,was=pend.pop(cpu)
                prev=s[1]
                prev = 'srv/cl' if prev=='ib_send_bw' else prev.split('/')[0]
                stats[prev].append((t-t0)*1e6)
        elif e=='workqueue:workqueue_execute_start' and 'trdma_tx_work' in r:
            pend.pop(cpu,None)
    out=[]
    for k,v in sorted(stats.items(), key=lambda x:-len(x[1])):
        v.sort(); n=len(v)
        out.append(f"{k}: n={n} p50={v[n//2]:.0f} mean={sum(v)/n:.0f} sum={sum(v)/1e3:.0f}ms")
    print(p.split('/')[-1], ' | '.join(out))
