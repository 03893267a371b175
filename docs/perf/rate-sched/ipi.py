#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Reads sched.sh's rR.txt recorded with IPI=1 and splits the wait of
each trdma worker queued from one vCPU onto the other: from the queueing
to the first IPI that reaches the target vCPU (a wake-up's
call-function-single or a reschedule), and from that IPI to the switch to
the high-priority kworker there.  Per run: how many, their median and
mean (us), and how much of the run the waits added up to."""
import re
import sys

SW = re.compile(r'next_comm=(\S+) next_pid')


def stats(v):
    v = sorted(v)
    n = len(v)
    if not n:
        return 'n=0'
    return (f'n={n} p50={v[n // 2]:.0f} p90={v[n * 9 // 10]:.0f} '
            f'mean={sum(v) / n:.0f} sum={sum(v) / 1e3:.0f}ms')


def run(path):
    pend = {}               # target cpu -> [queued at, IPI at]
    to_ipi, to_run, no_ipi = [], [], []
    for line in open(path):
        m = re.match(r'\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)', line)
        if not m:
            continue
        cpu, t, e, rest = int(m[1]), float(m[2]), m[3], m[4]
        if e == 'workqueue:workqueue_queue_work' and 'trdma_tx_work' in rest:
            tgt = int(re.search(r' cpu=(-?\d+)', rest)[1])
            if tgt != cpu and tgt not in pend:
                pend[tgt] = [t, None]
        elif e.startswith('irq_vectors:') and cpu in pend and \
                pend[cpu][1] is None:
            pend[cpu][1] = t
        elif e == 'sched:sched_switch' and cpu in pend:
            s = SW.search(rest)
            if s[1].startswith('kworker') and s[1].endswith('H'):
                q, i = pend.pop(cpu)
                if i is None:
                    no_ipi.append((t - q) * 1e6)
                else:
                    to_ipi.append((i - q) * 1e6)
                    to_run.append((t - i) * 1e6)
        elif e == 'workqueue:workqueue_execute_start' and \
                'trdma_tx_work' in rest:
            pend.pop(cpu, None)
    return (f'queue->IPI {stats(to_ipi)} | IPI->run {stats(to_run)} | '
            f'no IPI {stats(no_ipi)}')


for p in sys.argv[1:]:
    print(p.rsplit('/', 1)[-1], run(p))
