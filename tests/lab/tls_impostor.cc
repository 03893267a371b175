// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// An impostor on an encrypted link (docs/security.md, "Key confirmation"),
// driven by tests/lab/run-tls.  Run in the connecting device's network
// namespace: a QP x on DEV_A (the connecting side: the smaller GID) and a
// QP y on DEV_B (the accepting side) are made; y goes to RTS waiting for
// x, x stays in INIT.  A TCP client of this process, from DEV_A's address,
// then does what x would: a well-formed hello with the TLS flag, a nonce,
// the right QPNs and the PSN proof, so it gets y's ACCEPT; but its key
// confirmation is a record no key of the link authenticates.  A keyed
// device signs even encrypted links with TCP-MD5 (trdma_key.c), so an
// impostor without the key never gets past TCP (its SYN is dropped); to
// reach key confirmation, the second line of defence, this one signs with
// the TCP-MD5 key of MD5_KEY_FILE (as written to tcp_md5_key): what an
// attacker who learnt the TCP-MD5 signature key alone could do.  Expected: y's side closes the connection, y is still in
// RTS (not in error, not connected), and the real peer x, brought to RTS
// afterwards, connects and SENDs both ways.  The caller checks the
// counters (refused_tls_confirm).  Exit status 0 when all of that held.
//   usage: trdma_tls_impostor DEV_A GID_INDEX_A DEV_B GID_INDEX_B [MD5_KEY_FILE]
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include <rdma/trdma-wire.h>

#include "tls_client.h"

using namespace trdma_tls_lab;

int main(int argc, char **argv)
{
	g_prog = "tls_impostor";
	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: %s DEV_A GID_INDEX_A DEV_B GID_INDEX_B [MD5_KEY_FILE]\n",
			argv[0]);
		return 2;
	}
	Side a, b;
	if (!Open(a, argv[1], atoi(argv[2])) || !Open(b, argv[3], atoi(argv[4])))
		return 1;
	if (memcmp(a.gid.raw, b.gid.raw, 16) >= 0)
		return !Fail("DEV_A's GID must be the smaller (it connects)");
	std::mt19937 rnd(std::random_device{}());
	const uint32_t x_sq = rnd() & 0xffffff, y_sq = rnd() & 0xffffff;

	// y waits in RTS for x; x stays in INIT, so nothing dials yet.
	if (!Connect(b, a, x_sq, y_sq))
		return 1;
	printf("y (QP %u on %s) in RTS, waiting for x (QP %u on %s)\n",
	       b.qp->qp_num, argv[3], a.qp->qp_num, argv[1]);

	// The impostor: x's hello, from x's address, with the PSN proof.
	trdma_hello h = {}, r = {};
	h.magic = htonl(TRDMA_HELLO_MAGIC);
	h.version = TRDMA_WIRE_VERSION;
	h.type = TRDMA_HELLO_REQ;
	h.flags = htons(TRDMA_HELLO_TLS | TRDMA_HELLO_SQ_PSN);
	h.src_qpn = htonl(a.qp->qp_num);
	h.dst_qpn = htonl(b.qp->qp_num);
	h.start_msn = htonl(y_sq);
	h.path_mtu = IBV_MTU_1024;
	h.max_rd_atomic = 1;
	h.max_dest_rd_atomic = 1;
	h.sq_psn = htonl(x_sq);
	memcpy(h.src_gid, a.gid.raw, 16);
	memcpy(h.dst_gid, b.gid.raw, 16);
	unsigned char msg[sizeof(h) + TRDMA_HELLO_NONCE_LEN];
	memcpy(msg, &h, sizeof(h));
	for (size_t i = sizeof(h); i < sizeof(msg); i++)
		msg[i] = rnd();

	int fd = socket(AF_INET, SOCK_STREAM, 0);
	sockaddr_in src = {}, dst = {};
	src.sin_family = dst.sin_family = AF_INET;
	memcpy(&src.sin_addr, a.gid.raw + 12, 4);
	memcpy(&dst.sin_addr, b.gid.raw + 12, 4);
	dst.sin_port = htons(TRDMA_DEFAULT_PORT);
	if (fd < 0 || bind(fd, (sockaddr *)&src, sizeof(src)) ||
	    (argc == 6 && !SignMd5(fd, dst, ReadKey(argv[5]))) ||
	    connect(fd, (sockaddr *)&dst, sizeof(dst)) ||
	    write(fd, msg, sizeof(msg)) != (ssize_t)sizeof(msg))
		return !Fail("impostor: connect or send");
	if (!ReadAll(fd, &r, sizeof(r)))
		return !Fail("impostor: no answer to its hello");
	printf("impostor: answer type %u, flags 0x%x, status %u\n", r.type,
	       ntohs(r.flags), ntohl(r.status));
	if (r.type != TRDMA_HELLO_ACCEPT ||
	    !(ntohs(r.flags) & TRDMA_HELLO_TLS))
		return !Fail("impostor: not ACCEPTed with TLS: the test cannot tell confirmation from the earlier checks");
	unsigned char nonce[TRDMA_HELLO_NONCE_LEN];
	if (!ReadAll(fd, nonce, sizeof(nonce)))
		return !Fail("impostor: no nonce");

	// Its "confirmation": a TLS 1.3 record of the right size (32 bytes,
	// the content type, the tag) that no key of the link authenticates.
	unsigned char rec[5 + 32 + 1 + 16] = { 0x17, 0x03, 0x03, 0x00, 49 };
	for (size_t i = 5; i < sizeof(rec); i++)
		rec[i] = rnd();
	if (write(fd, rec, sizeof(rec)) != (ssize_t)sizeof(rec))
		return !Fail("impostor: send of its record");
	bool closed = ClosedWithin(fd, 15000);
	close(fd);
	printf("impostor: connection %s\n", closed ? "closed by y's side" :
	       "still open after 15 s");
	if (!closed)
		return 1;
	ibv_qp_state ys = State(b.qp);
	printf("y after the impostor: state %d (RTS %d)\n", ys, IBV_QPS_RTS);
	if (ys != IBV_QPS_RTS)
		return !Fail("y left RTS");

	// The real peer.
	if (!Connect(a, b, y_sq, x_sq))
		return 1;
	if (!SendArrives(a, b, 0x5a) || !SendArrives(b, a, 0x3c))
		return 1;
	printf("real peer: connected, a SEND each way arrived intact\n");
	return 0;
}
