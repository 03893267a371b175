#!/usr/bin/python3
"""Samples per unit of work under each named function (anywhere in the
stack, each sample counted once per name; NAME* matches a prefix), from a
folded-stack file of tools/lab/flamegraph fold.
  usage: inclusive.py FOLDED UNITS NAME[,NAME...]"""
import collections
import sys

names = sys.argv[3].split(",")
units = float(sys.argv[2])
count = collections.Counter()
total = 0
with open(sys.argv[1]) as f:
    for line in f:
        stack, n = line.rsplit(" ", 1)
        n = int(n)
        total += n
        frames = [fr.split(" ")[0] for fr in stack.split(";")]
        for name in names:
            pre = name[:-1] if name.endswith("*") else None
            if any(fr == name or (pre and fr.startswith(pre)) for fr in frames):
                count[name] += n
print(f"{sys.argv[1]}: {total / units:.3f} samples per unit")
for name in names:
    print(f"  {name:36s} {count[name] / units:.4f}")
