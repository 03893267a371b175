#!/usr/bin/env python3
# One-guest ping-pong steps from an l1trace.sh trace: each hop starts at a
# perftest post (a system call of one ib_send_lat process) and ends at the
# other process's next post.  Prints, per trace, the median time after the
# hop's start at which each event first came in the poster's own context
# (its CPU and pid: the loopback's receive softirq runs there, in the
# poster's system call), "peer posts" for the end of the hop, and how often
# each event came per hop anywhere.
#   usage: l1steps.py TRACE...
import re
import statistics as st
import sys

LINE = re.compile(r'^\s*(\S+)-(\d+)\s+\[(\d+)\]\s+\S+\s+(\d+\.\d+): (\w+): (.*)')


def parse(path):
    ev = []
    for line in open(path):
        m = LINE.match(line)
        if not m:
            continue
        comm, pid, cpu, t, kind, rest = m.groups()
        if kind == 'sys_enter' and comm != 'ib_send_lat':
            continue
        if kind == 'sys_exit' and comm != 'ib_send_lat':
            continue
        ev.append((float(t) * 1e6, int(pid), int(cpu), kind))
    return ev


def hops(ev):
    starts = [i for i, e in enumerate(ev) if e[3] == 'sys_enter']
    for a, b in zip(starts, starts[1:]):
        if ev[a][1] == ev[b][1]:
            continue        # not a hop: the same process posted again
        yield ev[a], ev[a + 1:b], ev[b]


for p in sys.argv[1:]:
    first, count, lens = {}, {}, []
    for s, mid, e in hops(parse(p)):
        t0, pid, cpu, _ = s
        lens.append(e[0] - t0)
        seen = set()
        for t, pd, c, k in mid:
            count[k] = count.get(k, 0) + 1
            if pd != pid or c != cpu or k in seen:
                continue
            seen.add(k)
            first.setdefault(k, []).append(t - t0)
    n = len(lens)
    print('%s: %d hops, median %.1f us (one way, post to the peer\'s post)' %
          (p, n, st.median(lens)))
    for k, v in sorted(first.items(), key=lambda kv: st.median(kv[1])):
        print('   %-22s %6.1f  (in %3d%% of hops; %.2f per hop anywhere)' %
              (k, st.median(v), 100 * len(v) // n, count[k] / n))
    print('   %-22s %6.1f' % ('peer posts', st.median(lens)))
