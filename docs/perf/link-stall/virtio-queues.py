#!/usr/bin/env python3
# virtio-queues.py SOCK: the virtio-net queues (0: receive, 1: transmit) of
# the guest whose QMP socket is SOCK (tools/vm's qmp.sock), as qemu sees
# them (x-query-virtio-queue-status), and its network back end.
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile('rw')
def cmd(c, **a):
    f.write(json.dumps({"execute": c, "arguments": a} if a else {"execute": c}) + "\n"); f.flush()
    while True:
        r = json.loads(f.readline())
        if "return" in r or "error" in r: return r
json.loads(f.readline()); cmd("qmp_capabilities")
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
