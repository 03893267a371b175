#!/bin/bash
# In a lab guest: two trdma modules (KO_A, KO_B: paths of .ko files, loaded
# with the module parameters in ARGS_A and ARGS_B: the same file twice
# compares parameters read at load) and siw, 8 B ib_send_lat alternately
# for R rounds (the modules' order swaps each round), each client run
# counted with kprobes on the spin-lock slow path and on lock_sock()'s
# wait (see contention.sh).  Runs of N iterations; a line per run:
# typical and average us, then the counts.  T=ib_send_bw: 64 B
# ib_send_bw instead (message rate, Mpps).
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck source-path=SCRIPTDIR source=lib.sh
. docs/perf/round-trip-3/lib.sh
t=${T:-ib_send_lat} s=8
[ "$t" = ib_send_bw ] && s=64
run() { # label perftest-args... addr
	local label=$1; shift
	pair "$t" $s stat -a -e probe:native_queued_spin_lock_slowpath \
		-e probe:__lock_sock -- "$@"
	echo "$label $(figure $s) $(counts)"
}
trdma() { # label ko args
	# shellcheck disable=SC2086 # parameters, one per word
	insmod "$2" $3 || exit 1
	trdma_up
	run "$1" "${TRDMA[@]}"
	rdma link delete trdma0; rmmod trdma
}
siw_up
# shellcheck disable=SC2046 # a list of module names
modprobe -a $(modinfo -F depends "$KO_A" | tr , ' ')
perf probe -q -a native_queued_spin_lock_slowpath -a __lock_sock || exit 1
echo "A $KO_A ${ARGS_A:-}; B $KO_B ${ARGS_B:-}; iterations $n"
for r in $(seq "${R:-4}"); do
	if [ $((r % 2)) = 1 ]; then
		trdma "r$r A" "$KO_A" "${ARGS_A:-}"
		trdma "r$r B" "$KO_B" "${ARGS_B:-}"
	else
		trdma "r$r B" "$KO_B" "${ARGS_B:-}"
		trdma "r$r A" "$KO_A" "${ARGS_A:-}"
	fi
	run "r$r siw" "${SIW[@]}"
done
