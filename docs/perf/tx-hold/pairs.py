#!/usr/bin/env python3
# Per-test figures of a module-ab log whose rounds run tx_hold_sock=1 and 0
# in adjacent pairs (ab.sh), and the ratio of each pair: bandwidth in MB/s,
# latency typical us (lower is better).
import collections
import re
import sys
# ABBA rounds of module-ab: per test, the runs of each variant in order.
runs = collections.defaultdict(list)  # test -> [(round, variant, fig, kernel_s)]
for line in open(sys.argv[1]):
    m = re.match(r'round (\d+) (\S+) (.*?): (.*?) \| (.*)', line)
    if not m: continue
    r, v, t, figs, rest = m.groups()
    f = figs.split()
    v = v.split(':')[-1] if ':' in v else v
    fig = float(f[2]) if '_lat' in t else float(f[1])
    runs[t].append((int(r), v, fig, float(re.search(r'kernel_s (\S+)', rest).group(1))))
for t, rs in runs.items():
    print(t)
    vs = sorted({v for _, v, _, _ in rs})
    for v in vs:
        print('  %-16s' % v, ' '.join('%7.2f' % x[2] for x in rs if x[1] == v), '| kernel_s', ' '.join('%5.2f' % x[3] for x in rs if x[1] == v))
    # adjacent pairs in run order: (1st,2nd), (3rd,4th) of each round
    rat = []
    for r in sorted({x[0] for x in rs}):
        rr = [x for x in rs if x[0] == r]
        for i in range(0, len(rr) - 1, 2):
            a, b = rr[i], rr[i + 1]
            on = a if a[1].endswith('=1') else b
            off = b if on is a else a
            if 0 < on[2] < float('inf') and 0 < off[2] < float('inf'):
                rat.append(on[2] / off[2])  # perftest's 'inf': left out
    s = sorted(rat)
    print('  hold=1 / hold=0 per adjacent pair:', ' '.join('%.2f' % x for x in rat), ' median %.2f' % (s[len(s)//2] if len(s) % 2 else (s[len(s)//2-1]+s[len(s)//2])/2), ' (n=%d)' % len(s))
