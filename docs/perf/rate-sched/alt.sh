#!/bin/bash
# In a lab guest: trdma's 64 B ib_send_bw, R rounds in one boot of N
# messages, each round one run with each of two settings, alternating
# which goes first:
#   WHAT=aslr   address-space randomisation off and on
#               (kernel.randomize_va_space 0 and 2, the default): whether
#               the rate's spread follows where perftest's memory lands;
#   WHAT=depth  perftest's send queue of 128 (its default) and T (512):
#               whether it follows how long a signaled send's ACK takes
#               against the room the send queue leaves meanwhile.
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck source-path=SCRIPTDIR source=../round-trip-3/lib.sh
. docs/perf/round-trip-3/lib.sh
case ${WHAT:-} in
aslr)	vals=(0 2); label=aslr ;;
depth)	vals=(128 "${T:-512}"); label=t ;;
*)	echo "WHAT=aslr or WHAT=depth" >&2; exit 2 ;;
esac
modprobe trdma && trdma_up
echo "messages $n"
for r in $(seq "${R:-6}"); do
	order=("${vals[@]}")
	[ $((r % 2)) = 0 ] && order=("${vals[1]}" "${vals[0]}")
	for v in "${order[@]}"; do
		args=()
		if [ "$WHAT" = aslr ]; then
			sysctl -qw kernel.randomize_va_space="$v"
		else
			args=(-t "$v")
		fi
		pair ib_send_bw 64 stat -e task-clock -- "${args[@]}" "${TRDMA[@]}"
		printf 'r%s %s=%s %s\n' "$r" "$label" "$v" "$(figure 64)"
	done
done
