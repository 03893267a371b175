#!/usr/bin/env python3
"""Counts the calls in ftrace function_graph output (fgtrace.sh).

  fgcount.py GRAPH TOP [GRAPH2 TOP2] [--min X]

For each graph: how many times TOP was entered at the top of the graph,
and per entry the median and mean number of functions called below it (any
depth, the tracer's own irq entries included).  With a second graph: every
function whose calls per entry differ by X (default 0.3) or more, the
first graph's against the second's.  Each CPU's lines are followed on
their own: the graphs of two CPUs interleave.
"""
import collections
import re
import sys

LINE = re.compile(r'\s*(\d+)\)\s+[!+#*@$ ]?\s*([\d.]+)?\s*(?:us)?\s*\|(\s*)(.*)$')


def parse(path, top):
    """The entries of top: a Counter of the functions below each."""
    done, cur = [], {}
    with open(path) as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            cpu, indent, body = m.group(1), len(m.group(3)), m.group(4).rstrip()
            if indent == 2 and body.startswith(top):
                if body.endswith('{'):
                    cur[cpu] = collections.Counter()
                else:
                    cur[cpu] = None
                continue
            calls = cur.get(cpu)
            if calls is None:
                continue
            if indent == 2 and body == '}':
                done.append(calls)
                cur[cpu] = None
            elif body.endswith('{') or body.endswith(';'):
                calls[body.split('(')[0].strip()] += 1
    return done


def summary(path, top, entries):
    n = sorted(sum(c.values()) for c in entries)
    print(f'{path}: {len(n)} entries of {top}, functions called below '
          f'each: median {n[len(n) // 2]}, mean {sum(n) / len(n):.1f}')


def per_entry(entries):
    total = collections.Counter()
    for c in entries:
        total.update(c)
    return {k: v / len(entries) for k, v in total.items()}


def main():
    args = sys.argv[1:]
    least = 0.3
    if '--min' in args:
        i = args.index('--min')
        least = float(args[i + 1])
        del args[i:i + 2]
    if len(args) not in (2, 4):
        sys.exit(__doc__)
    a = parse(args[0], args[1])
    summary(args[0], args[1], a)
    if len(args) == 2:
        for k, v in sorted(per_entry(a).items(), key=lambda kv: -kv[1]):
            if v >= least:
                print(f'  {v:7.2f} {k}')
        return
    b = parse(args[2], args[3])
    summary(args[2], args[3], b)
    pa, pb = per_entry(a), per_entry(b)
    rows = sorted(((pa.get(k, 0) - pb.get(k, 0), k) for k in set(pa) | set(pb)),
                  reverse=True)
    print(f'{"diff":>7} {"first":>7} {"second":>7}  function (calls per entry)')
    for d, k in rows:
        if abs(d) >= least:
            print(f'{d:7.2f} {pa.get(k, 0):7.2f} {pb.get(k, 0):7.2f}  {k}')


if __name__ == '__main__':
    main()
