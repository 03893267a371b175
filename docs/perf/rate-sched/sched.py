#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Reads sched.sh's rR.txt (perf script of one client run) and prints,
per run: the share of each vCPU's time that perftest's server, its
client, kworkers, ksoftirqd and idle took; trdma's work items queued
(from vCPU -> onto vCPU) and run per vCPU; where net_dev_xmit was
recorded, the packets and the switches and worker runs per packet."""
import re
import sys
from collections import defaultdict

SW = re.compile(r'prev_comm=(.*) prev_pid=(\d+) .* ==> '
                r'next_comm=(.*) next_pid=(\d+) ')


def klass(comm, pid, pids):
    if comm == 'ib_send_bw':
        return 'server' if pid == pids[0] else 'client'
    for k in ('kworker', 'ksoftirqd', 'swapper'):
        if comm.startswith(k):
            return {'swapper': 'idle'}.get(k, k)
    return 'other'


def run(path):
    ev = []
    pids = set()
    for line in open(path):
        m = re.match(r'\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)', line)
        if not m:
            continue
        cpu, t, e, rest = int(m[1]), float(m[2]), m[3], m[4]
        ev.append((cpu, t, e, rest))
        s = SW.search(rest) if e == 'sched:sched_switch' else None
        for c, p in ((s[1], s[2]), (s[3], s[4])) if s else ():
            if c == 'ib_send_bw':
                pids.add(int(p))
    pids = sorted(pids)
    # The client's run: from its first switch-in to its last switch-out.
    cl = pids[-1]
    t0 = min(t for c, t, e, r in ev if f'next_pid={cl} ' in r)
    t1 = max(t for c, t, e, r in ev if f'prev_pid={cl} ' in r)
    busy = defaultdict(float)
    cur = {}
    last = {}
    queued = defaultdict(int)
    ran = defaultdict(int)
    for cpu, t, e, rest in ev:
        if t < t0 or t > t1:
            if e == 'sched:sched_switch':
                s = SW.search(rest)
                cur[cpu] = klass(s[3], int(s[4]), pids)
                last[cpu] = t
            continue
        if e == 'sched:sched_switch':
            s = SW.search(rest)
            if cpu in cur:
                busy[(cpu, cur[cpu])] += t - max(last[cpu], t0)
            cur[cpu] = klass(s[3], int(s[4]), pids)
            last[cpu] = t
        elif e == 'workqueue:workqueue_queue_work' and \
                'trdma_tx_work' in rest:
            tgt = int(re.search(r' cpu=(-?\d+)', rest)[1])
            queued[(cpu, tgt)] += 1
        elif e == 'workqueue:workqueue_execute_start' and \
                'trdma_tx_work' in rest:
            ran[cpu] += 1
    for cpu in cur:
        busy[(cpu, cur[cpu])] += t1 - max(last[cpu], t0)
    span = t1 - t0
    out = [f'{span:.2f}s']
    for cpu in sorted({c for c, _ in busy}):
        parts = [f'{k}={busy[(cpu, k)] / span * 100:.0f}'
                 for k in ('server', 'client', 'kworker', 'ksoftirqd',
                           'idle', 'other') if busy[(cpu, k)] > 0]
        out.append(f'cpu{cpu}: ' + ' '.join(parts))
    out.append('queued ' + ' '.join(f'{a}->{b}:{n}' for (a, b), n
                                    in sorted(queued.items())))
    out.append('ran ' + ' '.join(f'cpu{c}:{n}' for c, n in sorted(ran.items())))
    # Over the whole trace, where net_dev_xmit was recorded: packets, and
    # switches and worker runs per packet, migrations.
    pk = sum(1 for _, _, e, _ in ev if e == 'net:net_dev_xmit')
    if pk:
        sw = sum(1 for _, _, e, _ in ev if e == 'sched:sched_switch')
        runs = sum(1 for _, _, e, r in ev
                   if e == 'workqueue:workqueue_execute_start' and
                   'trdma_tx_work' in r)
        mig = sum(1 for _, _, e, _ in ev if e == 'sched:sched_migrate_task')
        out.append(f'packets {pk} switches/packet {sw / pk:.2f} '
                   f'worker-runs/packet {runs / pk:.2f} migrations {mig}')
    return ' | '.join(out)


for p in sys.argv[1:]:
    print(p, run(p))
