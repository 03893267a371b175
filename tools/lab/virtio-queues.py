#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""The virtio-net queues of a lab guest as its qemu sees them, for the
two-host link stall (docs/lab.md, "Two hosts"):

    tools/lab/virtio-queues.py build/vm/last/h1/qmp.sock [--bounce]

For each queue (0: receive, 1: transmit) it prints qemu's state
(x-query-virtio-queue-status) and the ring words the guest and qemu wrote
in guest memory: the available ring's flags, index and used_event, the
used ring's flags, index and avail_event.  Whether a stalled transmit
ring is qemu's or the guest's: the guest's available index ahead of
qemu's last-avail-idx means qemu has not taken buffers it was given; all
of them equal to used-idx means qemu took and completed everything and
the guest has not reaped it.  Without event_idx (tools/vm's link) the
two sides ask for notifications through the flags (the available ring's
NO_INTERRUPT, 0x1, the used ring's NO_NOTIFY, 0x1); used_event and
avail_event are then left stale.

--bounce then sets the link down and up again (set_link), as a guest's
"ip link set down/up" would, and prints the queues again 5 s later.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qmp import connect  # noqa: E402


def words(hmp, addr, count):
    """count 16-bit words of guest memory at guest-physical addr."""
    out = hmp("xp /%dhx %d" % (count, addr))
    return [int(w, 16) for w in out.split(":", 1)[1].split()]


def show(cmd, hmp):
    for dev in cmd("x-query-virtio")["return"]:
        if dev.get("name") != "virtio-net":
            continue
        path = dev["path"]
        for q in (0, 1):
            st = cmd("x-query-virtio-queue-status", path=path,
                     queue=q)["return"]
            print("queue %d (%s): qemu last-avail-idx %d shadow-avail-idx "
                  "%d used-idx %d inuse %d signalled-used %d" %
                  (q, "transmit" if q else "receive", st["last-avail-idx"],
                   st["shadow-avail-idx"], st["used-idx"], st["inuse"],
                   st["signalled-used"]), flush=True)
            num, avail, used = (st["vring-num"], st["vring-avail"],
                                st["vring-used"])
            try:
                a_flags, a_idx = words(hmp, avail, 2)
                used_event = words(hmp, avail + 4 + 2 * num, 1)[0]
                u_flags, u_idx = words(hmp, used, 2)
                avail_event = words(hmp, used + 4 + 8 * num, 1)[0]
            except (ValueError, IndexError, KeyError) as e:
                print("  ring words not read: %r" % e, flush=True)
                continue
            print("  in guest memory: avail idx %d flags %#x used_event %d; "
                  "used idx %d flags %#x avail_event %d" %
                  (a_idx, a_flags, used_event, u_idx, u_flags, avail_event),
                  flush=True)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: virtio-queues.py QMP_SOCKET [--bounce]")
    cmd = connect(sys.argv[1])

    def hmp(line):
        return cmd("human-monitor-command",
                   **{"command-line": line})["return"].strip()

    show(cmd, hmp)
    print(hmp("info network"))
    if "--bounce" in sys.argv[2:]:
        hmp("set_link lab off")
        time.sleep(1)
        hmp("set_link lab on")
        print("set_link lab off, then on")
        time.sleep(5)
        show(cmd, hmp)


if __name__ == "__main__":
    main()
