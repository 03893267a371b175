#!/usr/bin/env python3
# virtio-queues.py SOCK: the virtio-net queues (0: receive, 1: transmit) of
# the guest whose QMP socket is SOCK (tools/vm's qmp.sock), as qemu sees
# them (x-query-virtio-queue-status), and its network back end.
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../tools/lab"))
from qmp import connect
cmd = connect(sys.argv[1])
devs = cmd("x-query-virtio")["return"]
print(devs)
for d in devs:
    if d.get("name") != "virtio-net": continue
    p = d["path"]
    st = cmd("x-query-virtio-status", path=p)
    print("status", json.dumps(st)[:600])
    for q in (0, 1):
        print("queue", q, json.dumps(cmd("x-query-virtio-queue-status", path=p, queue=q)))
print(cmd("human-monitor-command", **{"command-line": "info network"}))
