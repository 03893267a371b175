# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# nvmet (NVMe-oF target) and nvme host helpers of the lab's NVMe-oF tests
# and tools/bench-nvmeof; sourced.  The caller sets nqn (the subsystem),
# ip (the target's address); namespace 1 is /dev/ram0 (brd).
# shellcheck shell=bash
cfg=/sys/kernel/config/nvmet

# port_up N TRTYPE SERVICE: port N of the target, on ip, exporting nqn.
port_up() {
	mkdir "$cfg/ports/$1" &&
	echo "$2" >"$cfg/ports/$1/addr_trtype" &&
	echo ipv4 >"$cfg/ports/$1/addr_adrfam" &&
	echo "$ip" >"$cfg/ports/$1/addr_traddr" &&
	echo "$3" >"$cfg/ports/$1/addr_trsvcid" &&
	ln -s "$cfg/subsystems/$nqn" "$cfg/ports/$1/subsystems/$nqn"
}
port_down() {
	rm -f "$cfg/ports/$1/subsystems/$nqn"
	rmdir "$cfg/ports/$1" 2>/dev/null
}
# The subsystem, namespace 1 on /dev/ram0, and an RDMA port 1 on 4420.
target_up() {
	mkdir "$cfg/subsystems/$nqn" &&
	echo 1 >"$cfg/subsystems/$nqn/attr_allow_any_host" &&
	mkdir "$cfg/subsystems/$nqn/namespaces/1" &&
	echo /dev/ram0 >"$cfg/subsystems/$nqn/namespaces/1/device_path" &&
	echo 1 >"$cfg/subsystems/$nqn/namespaces/1/enable" &&
	port_up 1 rdma 4420
}
target_down() {
	local p
	for p in "$cfg"/ports/*; do
		[ -e "$p" ] && port_down "${p##*/}"
	done
	echo 0 >"$cfg/subsystems/$nqn/namespaces/1/enable" 2>/dev/null
	rmdir "$cfg/subsystems/$nqn/namespaces/1" 2>/dev/null
	rmdir "$cfg/subsystems/$nqn" 2>/dev/null
	true
}
# Sets blk to the namespace's block device on the host: the multipath
# head (nvme0n1), not its hidden path (nvme0c0n1).
blk=
find_blk() {
	local b
	blk=
	ctrl_state >/dev/null || return 1
	for b in /sys/block/nvme[0-9]*n1; do
		case ${b##*/} in *c*) continue ;; esac
		[ -e "$b" ] || continue
		blk=/dev/${b##*/}
		return 0
	done
	return 1
}
# The state of the host's controller of nqn (live, connecting, ...).
ctrl_state() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$nqn" ] || continue
		cat "$c/state"
		return 0
	done
	return 1
}
