# shellcheck shell=bash disable=SC2034,SC2154  # the caller's variables
# Sourced by h2lat.sh and h2prof.sh.  variant_up V: sets up the transport
# of variant V (trdma[:PARAM=V,...][+autocork0] or siw; $ifname, $siwko)
# and sets tr, dev and opts (how perftest reaches it); variant_down: the
# reverse.
variant_up() {
	local v=$1 params='' ac=1
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
}
variant_down() {
	rdma link delete "$dev"
	if [ "$tr" = trdma ]; then rmmod trdma; else rmmod siw; fi
	sleep 1
}
