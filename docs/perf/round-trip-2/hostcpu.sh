#!/bin/bash
# On the host: runs var2.sh in a lab guest and prints, for each mark, qemu's
# CPU seconds (all threads) and the wall seconds since the previous mark.
cd "$(dirname "$0")/../../.." || exit 1
out=$PWD/build/hc-$$; rm -rf "$out"; mkdir -p "$out"

tools/vm -q --out $out --timeout 900 -- "R=${R:-4} bash docs/perf/round-trip-2/var2.sh" >$out/vm.log 2>&1 &
vp=$!
n=0; lastc=; lastw=
while kill -0 $vp 2>/dev/null; do
	qp=$(pgrep -f "trdma-lab1" | head -1)
	if [ -f $out/marks ] && [ -n "$qp" ]; then
		m=$(wc -l < $out/marks)
		if [ "$m" -gt "$n" ]; then
			c=$(awk '{print $14+$15}' /proc/$qp/stat); w=$(date +%s.%N)
			tail -n +$((n+1)) $out/marks | while read -r l; do
				if [ -n "$lastc" ]; then
					awk -v c=$c -v lc=$lastc -v w=$w -v lw=$lastw -v l="$l" 'BEGIN{dc=(c-lc)/100; dw=w-lw; printf "%-40s wall %.2fs qemu cpu %.2fs (%.2f cores)\n", l, dw, dc, dc/dw}'
				else echo "$l"; fi
			done
			lastc=$c; lastw=$w; n=$m
		fi
	fi
	sleep 0.05
done
wait $vp; echo "vm rc $?"
