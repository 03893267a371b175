#!/bin/bash
# Two guests of one vCPU each: the kernel's TCP between two processes that
# poll their sockets (trdma_tcp_pingpong, 8 B, 20,000 round trips) with
# net.core.busy_read 0 (the default) and 50 (each recv() busy-polls the
# NIC's NAPI context once, the socket being non-blocking), ABBA, 3 rounds;
# each line the client's latency columns (us).
#   usage: tools/vm --hosts 2 -- docs/perf/busy-poll/tcp-busy-read.sh
set -uo pipefail
me=$TRDMA_LAB_HOST
pp=build/tools/trdma_tcp_pingpong
k=0
for r in 1 2 3; do
	for v in 0 50 50 0; do
		k=$((k + 1))
		sysctl -qw net.core.busy_read=$v
		port=$((7000 + k))
		if [ "$me" = 2 ]; then
			timeout 120 $pp -p $port -n 20000 >/tmp/s.log 2>&1 &
			spid=$!
			tools/lab/wait-listen -t 30 $port
			tools/lab/barrier -t 200 "b-$k"
			wait $spid
		else
			tools/lab/barrier -t 200 "b-$k"
			sleep 0.5
			timeout 120 $pp -p $port -n 20000 "$TRDMA_LAB_PEER" >/tmp/c.log 2>&1
			echo "R$r busy_read=$v: $(tail -1 /tmp/c.log)"
			grep -E 'BusyPoll|LowLat' /proc/net/netstat >/dev/null 2>&1
		fi
		tools/lab/barrier -t 200 "b-$k-done"
	done
done
