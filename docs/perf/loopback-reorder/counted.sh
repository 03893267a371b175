# Shared by spread-d.sh and tolerant.sh (sourced after tests/lab/lib.sh):
# counted_run LABEL: one 10 s ib_write_bw 64 KiB run over $dev, printed as
# "LABEL: perftest's figures | each of TCP's counters in $ctr grown by".
# shellcheck shell=bash
# shellcheck disable=SC2086,SC2154  # the counters' names; ctr, dev: the caller's
snap() { nstat -asz $ctr | awk '!/^#/ {print $1, $2}'; }
counted_run() {
	snap >/tmp/a
	pair "$dev" "$dev" -x ib_write_bw -s 65536 -D 10 >/dev/null 2>&1 ||
		echo failed
	snap >/tmp/b
	echo "$1: $(pair_figures) | $(join /tmp/a /tmp/b |
		awk '{sub(/^TcpExt|^Tcp/, "", $1); printf "%s=%d ", $1, $3 - $2}')"
}
