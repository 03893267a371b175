import re, sys
# Summarizes perftest -H output (/tmp/pair-client.log): median, average, percentiles, how much time the slow round trips hold.
l = sys.argv[1]
v = [float(m.group(1)) for m in (re.match(r'^\s*\d+,\s*([\d.eE+-]+)\s*$', x) for x in open('/tmp/pair-client.log')) if m]
if not v:
    print(l + ': no histogram'); print(''.join(open('/tmp/pair-client.log').readlines()[-40:])); sys.exit()
v.sort(); n = len(v); s = sum(v)
def p(q): return v[min(n - 1, int(n * q))]
def over(t): return sum(1 for x in v if x > t), 100 * sum(x for x in v if x > t) / s
o1, t1 = over(100); o2, t2 = over(500); o3, t3 = over(1000); o4, t4 = over(4000)
print(f"{l}: n {n} median {p(.5):.1f} avg {s/n:.1f} p90 {p(.9):.1f} p99 {p(.99):.1f} p99.9 {p(.999):.1f} max {v[-1]:.1f} | "
      f">100us {o1} ({t1:.0f}% of time) >500us {o2} ({t2:.0f}%) >1ms {o3} ({t3:.0f}%) >4ms {o4} ({t4:.0f}%)")
