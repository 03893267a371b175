#!/usr/bin/python3
"""Where a guest's busy samples went, from a folded-stack file of
tools/lab/flamegraph fold: by command, and perftest's own by how the kernel
was entered (system call, interrupt, timer) or not at all (user space).
  usage: breakdown.py FOLDED..."""
import collections
import sys

ENTRIES = {
    "__x64_sys_ioctl": "system call (ioctl)",
    "ib_uverbs_write": "system call (write)",
    "__x64_sys_write": "system call (write)",
    "asm_common_interrupt": "device interrupt",
    "asm_sysvec_apic_timer_interrupt": "timer interrupt",
    "asm_exc_page_fault": "page fault",
}

for path in sys.argv[1:]:
    comm = collections.Counter()
    entry = collections.Counter()
    busy = 0
    with open(path) as f:
        for line in f:
            stack, n = line.rsplit(" ", 1)
            n = int(n)
            frames = [fr.split(" ")[0] for fr in stack.split(";")]
            if frames[0] == "swapper":
                continue
            busy += n
            c = frames[0]
            if c.startswith("kworker/"):
                c = "kworker (all)"
            comm[c] += n
            if frames[0] == "ib_send_bw":
                k = "user space"
                for fr in frames[1:]:
                    if fr in ENTRIES:
                        k = ENTRIES[fr]
                        break
                entry[k] += n
    print(f"{path}: {busy} busy samples (idle left out)")
    for c, n in comm.most_common(6):
        print(f"  {100 * n / busy:5.1f}%  {c}")
    print("  ib_send_bw's, by how the kernel was entered:")
    for k, n in entry.most_common():
        print(f"  {100 * n / busy:5.1f}%    {k}")
