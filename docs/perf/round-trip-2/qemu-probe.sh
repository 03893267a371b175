#!/bin/bash
# On the host: var2.sh in a lab guest (ib_send_lat 8 B, trdma and siw
# alternately), and at each run's marks a look into its qemu through the
# guest's QMP socket (tools/lab/qmp.py):
#   qemu-probe.sh jit   qemu's "info jit" (translation cache) at each mark
#   qemu-probe.sh qsp   qemu's sync profiler (big-lock and mutex waits),
#                       reset at each run's start, printed at its end
cd "$(dirname "$0")/../../.." || exit 1
mode=${1:?jit or qsp}
out=$PWD/build/probe-$$; rm -rf "$out"; mkdir -p "$out"
qmp() { python3 tools/lab/qmp.py "$out/qmp.sock" "$@"; }
tools/vm -q --out "$out" --timeout 900 -- "R=${R:-2} bash docs/perf/round-trip-2/var2.sh" >"$out/vm.log" 2>&1 &
vp=$!
n=0
while kill -0 $vp 2>/dev/null; do
	if [ -f "$out/marks" ] && [ -S "$out/qmp.sock" ]; then
		m=$(wc -l <"$out/marks")
		if [ "$m" -gt "$n" ]; then
			l=$(sed -n "${m}p" "$out/marks")
			case $mode:$l in
			jit:*) echo "$l | $(qmp "info jit" | grep -E 'TB count|TB flush count|TB invalidate count' | tr -s ' \r\n' ' ')" ;;
			qsp:start*) qmp "sync-profile on" "sync-profile reset" >/dev/null; echo "$l" ;;
			qsp:end*) echo "$l"; qmp "info sync-profile -n 8" "sync-profile off" | head -14 ;;
			esac
			n=$m
		fi
	fi
	sleep 0.1
done
wait $vp
echo "vm rc $?"
