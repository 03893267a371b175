#!/bin/bash
# Stresses the two-guest lab link (stress-guest.sh in both guests) and, the
# moment a guest's console shows the virtio-net transmit watchdog, asks both
# qemus for their virtio-net queues over QMP (tools/lab/virtio-queues.py), twice, 3 s
# apart: whether qemu stopped taking the transmit ring (last-avail-idx
# behind shadow-avail-idx) or the guest stopped reaping it (used-idx caught
# up).  From the repository root, with a build:
#   OUTDIR=/tmp/stall K=10 KINDS="scale small wbidir bidir" docs/perf/link-stall/stress.sh
# Output: $OUTDIR/vm.log (both guests), $OUTDIR/qmp.log (on a stall).
cd "$(dirname "$0")/../../.." || exit 1
out=${OUTDIR:-/tmp/link-stall}
mkdir -p "$out"
tools/vm -q --hosts 2 --timeout "${TO:-1800}" -- "K=${K:-12} T=${T:-30} XL=${XL:-150} KINDS='${KINDS:-iperf trdma}' bash docs/perf/link-stall/stress-guest.sh" >"$out/vm.log" 2>&1 &
vp=$!
sleep 20
d=$(readlink -f build/vm/last)
echo "run dir $d"
while kill -0 "$vp" 2>/dev/null; do
	if grep -q "transmit queue" "$d"/h1/console.log "$d"/h2/console.log 2>/dev/null; then
		for pass in 1 2; do
			for h in 1 2; do
				echo "== h$h, pass $pass"
				timeout 20 tools/lab/virtio-queues.py "$d/h$h/qmp.sock"
			done
			sleep 3
		done >"$out/qmp.log" 2>&1
		echo "queried"; break
	fi
	sleep 1
done
wait "$vp"; echo "vm rc $?"
