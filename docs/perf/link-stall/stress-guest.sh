#!/bin/bash
# In both lab guests (stress.sh starts them): K rounds of the traffic kinds
# in KINDS, host 1 against host 2, T seconds each, until a guest's
# virtio-net transmit watchdog fires ("transmit queue ... timed out").
# Kinds: iperf (iperf3 host 1 -> 2), bidir (iperf3 --bidir), trdma
# (ib_write_bw 64 KiB), wbidir (ib_write_bw 64 KiB -b), small (ib_send_bw
# 64 B -b), scale (5,000 RC QPs each way, tools/lab/qp_scale.cc).
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck disable=SC2034  # lib.sh's
dev=trdma0 build=build pass=0 fail=0
# shellcheck source=tests/lab/lib.sh
. tests/lab/lib.sh
modprobe trdma && rdma link add trdma0 type trdma netdev "$TRDMA_LAB_IF" || exit 1
K=${K:-12}
stalled() { dmesg | grep -q "transmit queue"; }
for i in $(seq "$K"); do
	for kind in ${KINDS:-iperf trdma}; do
		t0=$SECONDS
		if [ "$kind" = scale ]; then
			role=(--connect "$TRDMA_LAB_PEER:7300"); [ "$TRDMA_LAB_HOST" = 2 ] && role=(--serve 7300)
			tools/lab/barrier -t 120 "sc$i" || { echo "barrier failed"; sleep 30; exit 4; }
			timeout 600 build/tools/trdma_qp_scale -d trdma0 -n 5000 -t 2 --settle 10 "${role[@]}" >/tmp/sc.log 2>&1
			echo "iter $i scale rc=$? ($((SECONDS - t0)) s) $(tail -1 /tmp/sc.log)"
			tools/lab/barrier -t 300 "sc$i-done" || { echo "barrier failed"; stalled || { sleep 30; exit 4; }; }
		elif [ "$kind" = iperf ] || [ "$kind" = bidir ]; then
			IPOPT=; [ "$kind" = bidir ] && IPOPT=--bidir
			# shellcheck disable=SC2086  # empty or one word
			if [ "$TRDMA_LAB_HOST" = 2 ]; then
				timeout 120 iperf3 -s -1 >/tmp/ip.log 2>&1 & p=$!
				tools/lab/wait-listen -t 30 5201
				tools/lab/barrier -t 120 "ip$i-up"; wait $p
			else
				tools/lab/barrier -t 120 "ip$i-up"
				timeout 100 iperf3 -c "$TRDMA_LAB_PEER" -t "${T:-30}" $IPOPT >/tmp/ip.log 2>&1
				echo "iter $i iperf rc=$? $(grep -E 'sender|receiver' /tmp/ip.log | tr -s ' ' | cut -d' ' -f5-8 | tr '\n' ' ')"
			fi
			tools/lab/barrier -t 120 "ip$i-done" || { echo "barrier failed host $TRDMA_LAB_HOST iter $i"; sleep 30; exit 4; }
		else
			case $kind in
			small) set -- ib_send_bw -s 64 -b ;;
			wbidir) set -- ib_write_bw -s 65536 -b ;;
			*) set -- ib_write_bw -s 65536 ;;
			esac
			xpair_limit=${XL:-150} xpair "$kind$i" -x "$@" -D "${T:-30}" >/tmp/xp.log 2>&1
			rc=$?
			echo "iter $i $kind rc=$rc $(pair_figures) ($((SECONDS - t0)) s)"
			if [ $rc != 0 ]; then
				echo "pair failed host $TRDMA_LAB_HOST iter $i"
				tail -30 /tmp/xp.log
				rdma statistic show link trdma0/1 | tr ' ' '\n' | paste - - | grep -v "	0$" | tr '\n' ' '; echo
				ethtool -S "$TRDMA_LAB_IF" | grep -v ": 0$"; grep -i virtio /proc/interrupts
				stalled || { sleep 30; exit 4; }
			fi
		fi
		if stalled; then
			echo "STALL host $TRDMA_LAB_HOST after iter $i $kind"
			dmesg | grep -m3 "transmit queue\|TX timeout"
			for k in 1 2; do
				echo "-- ethtool/interrupts $k"; ethtool -S "$TRDMA_LAB_IF" | grep -v ": 0$"
				grep -i virtio /proc/interrupts; tc -s qdisc show dev "$TRDMA_LAB_IF" | head -4
				sleep 3
			done
			touch "$TRDMA_LAB_OUT/stalled"
			sleep 60   # leave the watcher time to query QMP
			exit 3
		fi
	done
done
echo "no stall in $K iterations"
