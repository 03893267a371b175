import os, time, multiprocessing as mp
def ping(v, flag, cpu, n, out):
    os.sched_setaffinity(0, {cpu ^ int(os.environ.get("SWAP", "0"))})
    worst = 0
    for i in range(n):
        if cpu == 0:
            while flag.value != 0: pass
            v.value = time.monotonic_ns(); flag.value = 1
        else:
            while flag.value != 1: pass
            d = time.monotonic_ns() - v.value
            worst = min(worst, d); flag.value = 0
    out.put((cpu, worst))
if __name__ == '__main__':
    v = mp.Value('q', 0, lock=False); f = mp.Value('i', 0, lock=False); q = mp.Queue()
    ps = [mp.Process(target=ping, args=(v, f, c, 20000, q)) for c in (0, 1)]
    [p.start() for p in ps]; [p.join() for p in ps]
    print("clocksource", open('/sys/devices/system/clocksource/clocksource0/current_clocksource').read().strip(),
          "most negative CPU1-CPU0 step (ns):", [q.get() for _ in ps])
