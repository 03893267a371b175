#!/usr/bin/env python3
# Median time of each event's first occurrence after the input irq, per clean ping-pong cycle
import sys, re, statistics as st
def label(line, kind, rest):
    if kind == 'irq_handler_entry':
        return 'irqin' if 'input' in rest else ('irqout' if 'output' in rest else None)
    if kind == 'netif_receive_skb': return 'rx'
    if kind == 'net_dev_start_xmit': return 'tx'
    if kind in ('sys_enter', 'sys_exit'):
        return kind if 'ib_send_lat' in line else None
    if kind in ('softirq_entry', 'softirq_exit'): return kind
    return kind
def parse(path):
    ev = []
    for line in open(path):
        if line.startswith('#'): continue
        m = re.search(r'\s(\d+\.\d+): (\w+): (.*)', line)
        if not m: continue
        l = label(line, m.group(2), m.group(3))
        if l: ev.append((float(m.group(1)) * 1e6, l))
    return ev
for p in sys.argv[1:]:
    ev = parse(p)
    irqs = [i for i, e in enumerate(ev) if e[1] == 'irqin']
    firsts = {}; periods = []
    for a, b in zip(irqs, irqs[1:]):
        cyc = ev[a:b]
        kinds = [k for _, k in cyc]
        if kinds.count('rx') != 1 or kinds.count('tx') != 1 or kinds.count('sys_enter') != 1: continue
        t0 = cyc[0][0]
        periods.append(ev[b][0] - t0)
        seen = set()
        for t, k in cyc[1:]:
            if k in seen: continue
            seen.add(k); firsts.setdefault(k, []).append(t - t0)
    print('%s: %d clean cycles, period %.0f us' % (p, len(periods), st.median(periods)))
    for k, v in sorted(firsts.items(), key=lambda kv: st.median(kv[1])):
        print('   %-20s %6.0f  (in %d%%)' % (k, st.median(v), 100 * len(v) // len(periods)))
