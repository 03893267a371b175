#!/usr/bin/env python3
# Summarise module-ab output: per variant and test, the figure lists and medians; pairwise ABBA comparisons.
import sys, re, statistics as st
from collections import defaultdict
runs = defaultdict(list)   # (variant, test) -> [fig]
order = []
for line in open(sys.argv[1]):
    line = re.sub(r'^\[h\d\] ', '', line)
    m = re.match(r'round (\d+) (\S+) (ib_\w+)[^:]*: ([\d. ]+)\|', line)
    if not m: continue
    v, t, figs = m.group(2), m.group(3), m.group(4).split()
    if t == 'ib_send_lat': f = float(figs[2])       # typical us
    elif t == 'ib_send_bw': f = float(figs[2]) * 1000   # thousand msg/s
    else: f = float(figs[1])                    # average MB/s
    runs[(v, t)].append(f); order.append((v, t, f))
for t in ('ib_send_lat', 'ib_send_bw', 'ib_write_bw'):
    for (v, tt), fs in runs.items():
        if tt != t: continue
        print('%-12s %-60s n=%d median %.2f  [%s]' % (t, v[-60:], len(fs), st.median(fs), ' '.join('%.1f' % x for x in fs)))
