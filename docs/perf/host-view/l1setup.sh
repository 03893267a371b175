# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154  # the caller's ifname and siwko; sets its dev, addr, opts
# Sourced by l1trace.sh and ../call-count's scripts: one transport at a
# time in one lab guest, set up as tools/bench sets it up: trdma on the
# lab's netdev ($ifname), siw ($siwko, tools/bench's build) on a dummy
# netdev and address of its own, so that rdma_cm cannot resolve to trdma0.
#   l1_deps: the modules both need, loaded
#   l1_up TRANSPORT: its device; sets dev, addr (the perftest server's
#     address) and opts (perftest's device and connection options)
#   l1_served TRANSPORT: waits for the perftest server just started
#   l1_fig LOG: perftest's typical and average latency in LOG, or "-"
#   l1_down TRANSPORT: its device and module gone
l1_deps() {
	modprobe ib_uverbs; modprobe libcrc32c; modprobe crc32c_generic
}
l1_up() {
	if [ "$1" = trdma ]; then
		modprobe trdma || return 1
		rdma link add trdma0 type trdma netdev "$ifname" || return 1
		dev=trdma0 addr=127.0.0.1
		opts=(-d trdma0 -x "$(v4gid trdma0)")
	else
		insmod "$siwko" || return 1
		modprobe dummy numdummies=0
		ip link add l1siw0 type dummy && ip addr add 10.233.0.1/24 dev l1siw0 &&
			ip link set l1siw0 up || return 1
		rdma link add siw0 type siw netdev l1siw0 || return 1
		dev=siw0 addr=10.233.0.1
		opts=(-d siw0 -R)
	fi
}
l1_served() {
	if [ "$1" = trdma ]; then tools/lab/wait-listen -t 30 18515; else sleep 10; fi
}
l1_fig() {
	local fig
	fig=$(grep -E '^ *[0-9]+ +[0-9]+ ' "$1" | tail -1 | awk '{print $5, $6}')
	echo "${fig:--}"
}
l1_down() {
	rdma link delete "$dev"
	if [ "$1" = trdma ]; then rmmod trdma; else rmmod siw; ip link delete l1siw0; fi
}
