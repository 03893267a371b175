# shellcheck shell=bash disable=SC2034,SC2154  # the caller's variables
# Sourced by the two-guest experiment scripts under docs/perf (h2lat.sh,
# h2prof.sh here, ../rate-h2, ../poll-yield, ../h2-yield, ../host-view).
# variant_up V: sets up the transport of variant V
# (trdma[:PARAM=V,...][+autocork0][+noyield][+prov=DIR] or siw, see
# variant_user; $ifname, $siwko) and sets tr, dev and opts (how perftest
# reaches it), then waits for the other host at barrier B where given
# ("variant_up V B"); variant_down: the reverse.
variant_up() {
	local v=$1 params='' ac=1
	variant_user "$v"
	tr=${v%%[:+]*}
	case $v in *:*) params=${v#*:}; params=${params%%+*} ;; esac
	case $v in *+autocork0) ac=0 ;; esac
	sysctl -qw net.ipv4.tcp_autocorking=$ac
	if [ "$tr" = trdma ]; then
		# shellcheck disable=SC2086  # PARAM=VALUE words
		modprobe trdma ${params//,/ } || exit 1
		rdma link add trdma0 type trdma netdev "$ifname" || exit 1
		dev=trdma0
		opts=(-d trdma0 -x "$(v4gid trdma0)")
	else
		insmod "$siwko" || exit 1
		rdma link add siw0 type siw netdev "$ifname" || exit 1
		dev=siw0
		opts=(-d siw0 -R)
	fi
	[ $# -lt 2 ] || tools/lab/barrier -t 120 "$2" || exit 1
}
# variant_user V: what V asks of user space: +noyield (the provider's
# TRDMA_POLL_YIELD=0) and +prov=DIR (DIR/libtrdma-rdmav34.so, a host path,
# as the provider; the installed one otherwise: lib.sh's use_provider).
variant_user() {
	local prov=
	case $1 in *+noyield*) export TRDMA_POLL_YIELD=0 ;; *) unset TRDMA_POLL_YIELD ;; esac
	case $1 in *+prov=*) prov=${1#*+prov=}; prov=${prov%%+*}/libtrdma-rdmav34.so ;; esac
	use_provider ${prov:+"$prov"} || exit 1
}
# variant_next V: the run's next variant, V, set up as variant_up does,
# waiting for the other host at barrier "l-NV"; nv counts the variants so
# far and tag ("p-NV") names the barriers of its transfer.
nv=0
variant_next() {
	nv=$((nv + 1))
	variant_up "$1" "l-$nv"
	tag="p-$nv"
}
variant_down() {
	rdma link delete "$dev"
	if [ "$tr" = trdma ]; then rmmod trdma; else rmmod siw; fi
	sleep 1
}

# variant_modules: the modules every variant needs loaded, trdma not (its
# variants load it with their parameters).
variant_modules() {
	modprobe trdma && rmmod trdma
	modprobe ib_uverbs; modprobe libcrc32c; modprobe crc32c_generic
}
# variant_server CMD...: empties /tmp/c.log; on host 2 starts perftest's
# server CMD over the variant (its opts) in the background, its pid in
# spid, and returns once it listens (siw's, reached through rdma_cm, gets
# 10 s).  variant_client CMD...: host 1 runs CMD's client against host 2,
# its output in /tmp/c.log.
variant_server() {
	: >/tmp/c.log
	[ "$TRDMA_LAB_HOST" = 2 ] || return 0
	timeout 300 "$@" "${opts[@]}" -F >/tmp/s.log 2>&1 &
	spid=$!
	if [ "$tr" = trdma ]; then tools/lab/wait-listen -t 30 18515; else sleep 10; fi
}
variant_client() {
	timeout 300 "$@" "${opts[@]}" -F "$TRDMA_LAB_PEER" >/tmp/c.log 2>&1 ||
		echo "FAILED: $(tail -3 /tmp/c.log | tr '\n' ' ')"
}
