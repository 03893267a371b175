# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Part of tests/lab/run-2host (sourced; its check/across/host/peer/me):
# keyed links (TCP-MD5, kernel/trdma_key.c) across the two hosts.  A
# matching key connects, every segment on the link signed with it; a wrong
# key, or none on one side, connects nothing and the accepting host's TCP
# counts the segments it dropped; the right key afterwards connects again.
# Then the cost: the same transfers keyed and not.
# shellcheck shell=bash disable=SC2154
keyattr=/sys/class/infiniband/trdma0/tcp_md5_key
# linkkey KEY: this host's key for trdma0 ("" removes it).
linkkey() { printf '%s\n' "$1" >"$keyattr"; }
# md5drops: segments this host's TCP dropped for their MD5 signature.
md5drops() {
	nstat -asz TcpExtTCPMD5NotFound TcpExtTCPMD5Unexpected \
		TcpExtTCPMD5Failure | awk '/^TcpExt/ { s += $2 } END { print s + 0 }'
}
# The accepting side is the one with the larger GID (docs/wire.md): here
# the larger IPv4 address.
ipnum() { local IFS=.; set -- $1; echo $(((($1 * 256 + $2) * 256 + $3) * 256 + $4)); }
if [ "$(ipnum "$me")" -gt "$(ipnum "$peer")" ]; then accepting=1; else accepting=0; fi

# keyed_refused NAME: ibv_rc_pingpong across the hosts must not get through
# (its out-of-band exchange does, on another port; the trdma connection
# does not), and the accepting host's TCP drops signed or unsigned segments.
keyed_refused() {
	local name=$1 before rc
	before=$(md5drops)
	echo 3 >/sys/module/trdma/parameters/accept_timeout
	if [ "$host" = 2 ]; then
		timeout 25 ibv_rc_pingpong -g "$(v4gid)" -d trdma0 -n 5 \
			>/tmp/srv.log 2>&1 &
		tools/lab/wait-listen -t 30 18515
		tools/lab/barrier "$name"
		wait $!
		rc=$?
	else
		tools/lab/barrier "$name"
		timeout 20 ibv_rc_pingpong -g "$(v4gid)" -d trdma0 -n 5 "$peer" \
			>/tmp/cli.log 2>&1
		rc=$?
	fi
	echo 10 >/sys/module/trdma/parameters/accept_timeout
	tools/lab/barrier "$name-done"
	echo "$name: pingpong exit $rc, MD5 drops here +$(($(md5drops) - before))"
	[ "$rc" -ne 0 ] || return 1
	[ "$accepting" = 0 ] || [ "$(md5drops)" -gt "$before" ]
}

check "link key: tcp_md5 is 0 before a key is set" \
	test "$(cat /sys/class/infiniband/trdma0/tcp_md5)" = 0
check "link key set" linkkey "trdma-lab-link-key"
check "link key: tcp_md5 shows 1" \
	test "$(cat /sys/class/infiniband/trdma0/tcp_md5)" = 1
check "link key cannot be read back" eval '! cat "$keyattr" 2>/dev/null'
keyed_tagged_before=$(counter tcp_option_tagged)
if [ "$host" = 1 ]; then
	tcpdump -i "$TRDMA_LAB_IF" -U -w /tmp/keyed.pcap tcp port 4791 \
		2>/dev/null &
	td=$!
	sleep 1
fi
check "keyed link: ibv_rc_pingpong across hosts (checked data)" \
	across keyed -g ibv_rc_pingpong -n 100 -s 16384 -c
if [ "$host" = 1 ]; then
	sleep 1
	kill $td
	wait $td
	# Every segment on port 4791 carries an MD5 signature valid for the key.
	segs=$(tcpdump -r /tmp/keyed.pcap -n 2>/dev/null | wc -l)
	signed=$(tcpdump -r /tmp/keyed.pcap -nv -M trdma-lab-link-key 2>/dev/null |
		grep -c "md5 valid")
	echo "keyed capture: $segs segments, $signed validly signed"
	check "keyed link: every segment signed with the key" \
		test "$segs" -gt 20 -a "$signed" = "$segs"
fi
check "keyed link: no trdma TCP option on keyed connections" \
	test "$(counter tcp_option_tagged)" = "$keyed_tagged_before"

[ "$host" = 1 ] && linkkey "not-the-link-key"
check "wrong key: nothing connects, the accepting host drops it" \
	keyed_refused wrongkey
[ "$host" = 1 ] && linkkey ""
check "no key on one side: nothing connects, the accepting host drops it" \
	keyed_refused nokey1
if [ "$host" = 1 ]; then linkkey "trdma-lab-link-key"; else linkkey ""; fi
check "no key on the other side: nothing connects" keyed_refused nokey2
linkkey "trdma-lab-link-key"
check "the right key again: ibv_rc_pingpong across hosts (checked data)" \
	across keyed2 -g ibv_rc_pingpong -n 100 -s 16384 -c

# The cost of signing, for the record (a figure, not a test): 64 KiB RDMA
# writes for 5 s and 8 B send latency, keyed and not.
keyed_cost() {
	local tag=$1
	across "cost-bw-$tag" -x ib_write_bw -s 65536 -D 5 >/tmp/cost-bw.out 2>&1
	[ "$host" = 1 ] && echo "keyed cost ($tag): ib_write_bw 64 KiB: $(awk '/^ *65536 /{print $4 " MiB/s"}' /tmp/cost-bw.out)"
	across "cost-lat-$tag" -x ib_send_lat -s 8 -n 2000 >/tmp/cost-lat.out 2>&1
	[ "$host" = 1 ] && echo "keyed cost ($tag): ib_send_lat 8 B: $(awk '/^ *8 /{print "typical " $5 " us"}' /tmp/cost-lat.out)"
	return 0
}
keyed_cost keyed
linkkey ""
keyed_cost unkeyed
check "link key removed: tcp_md5 shows 0" \
	test "$(cat /sys/class/infiniband/trdma0/tcp_md5)" = 0
