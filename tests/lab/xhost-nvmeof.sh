# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Part of tests/lab/run-2host (sourced; its check/host/peer/me): NVMe over
# Fabrics across the two hosts.  Host 2 is the target (nvmet-rdma, a brd
# ramdisk namespace on its lab address), host 1 the host (nvme-rdma through
# trdma0 and rdma_cm): 16 MiB of a pattern both hosts can make (a seeded
# generator) written through host 1's block device and read back, then
# found on host 2's ramdisk; after the disconnect both devices are back to
# their objects (ib_core's shared CQ pool aside).
# shellcheck shell=bash disable=SC2154
nqn=nqn.2026-12.org.trdma:lab-2host
ip=$me
. tests/lab/nvmet.sh
xn_mib=16
python3 -c 'import random, sys
sys.stdout.buffer.write(random.Random(20261202).randbytes(int(sys.argv[1]) << 20))' \
	"$xn_mib" >/tmp/xn-pattern
xn_res() { rdma resource show trdma0 | sed 's/ cq [0-9]* / /'; }
xn_base=$(xn_res)
xn_target() {
	modprobe brd rd_nr=1 rd_size=$((xn_mib * 2 * 1024)) &&
	modprobe nvmet && modprobe nvmet-rdma && target_up
}
xn_host() {
	local i
	modprobe nvme-rdma &&
	timeout 120 nvme connect -t rdma -a "$peer" -s 4420 -n "$nqn" || return 1
	for i in $(seq 100); do
		find_blk && [ -b "$blk" ] && break
		sleep 0.1
	done
	echo "block device: $blk"
	[ -b "$blk" ] &&
	dd if=/tmp/xn-pattern of="$blk" bs=1M oflag=direct status=none &&
	dd if="$blk" bs=1M count="$xn_mib" iflag=direct status=none |
		cmp - /tmp/xn-pattern &&
	timeout 120 nvme disconnect -n "$nqn"
}
if [ "$host" = 2 ]; then
	check "NVMe-oF target on $me:4420 (nvmet-rdma)" xn_target
	tools/lab/barrier nvmeof-up
	tools/lab/barrier -t 300 nvmeof-done
	check "NVMe-oF across hosts: the target's ramdisk holds the pattern" \
		cmp -n $((xn_mib << 20)) /tmp/xn-pattern /dev/ram0
	target_down
else
	tools/lab/barrier nvmeof-up
	check "NVMe-oF across hosts: connect, ${xn_mib} MiB written and read back byte for byte, disconnect" \
		xn_host
	tools/lab/barrier -t 300 nvmeof-done
fi
check "NVMe-oF across hosts: objects back to baseline" \
	eventually eval '[ "$(xn_res)" = "$xn_base" ]'
