#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""A lab guest's qemu, through its QMP socket (tools/vm: qmp.sock in the
run's output directory).  As a command, runs HMP commands one after
another and prints each answer:

    tools/lab/qmp.py build/vm/last/qmp.sock "info jit" "info sync-profile"

As a module, qmp.connect(SOCK) returns cmd(name, **arguments), which sends
one QMP command and returns its answer (the dict with "return" or
"error"; events in between are skipped).
"""
import json
import socket
import sys


def connect(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    f = s.makefile("rw")

    def cmd(name, **args):
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        f.write(json.dumps(msg) + "\n")
        f.flush()
        while True:
            r = json.loads(f.readline())
            if "return" in r or "error" in r:
                return r

    json.loads(f.readline())    # the greeting
    cmd("qmp_capabilities")
    return cmd


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cmd = connect(sys.argv[1])
    for line in sys.argv[2:]:
        r = cmd("human-monitor-command", **{"command-line": line})
        print(r.get("return", r))


if __name__ == "__main__":
    main()
