// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The accepting QP re-armed between its ACCEPT and the peer's key
// confirmation on an encrypted link (docs/security.md, "Attacks tried"),
// driven by tests/lab/run-tls.  Run in the connecting device's network
// namespace, with the link key (KEY_FILE, as written to tcp_md5_key): a
// TCP client of this process, from DEV_A's address, speaks for QP x of
// DEV_A (the connecting side, the smaller GID, kept in INIT) as the
// kernel would, with the key: TCP-MD5 from its SYN on, hello with the TLS
// flag and a nonce, the
// PSN proof, the key schedule of trdma_kdf.h over its own SHA-256 and
// HMAC, kTLS on its socket (TCP_ULP "tls", TLS_TX and TLS_RX), and the
// right key confirmation, read and checked the other way too, so nothing
// but the QP's state decides.
//   control: QP y0 of DEV_B waits for x; the client's connection binds
//            (the caller sees tls_connections move, no refusal) and stays.
//   psn:     y waits for x; ACCEPTed, y's confirmation read; y is reset
//            and set up again for x with another rq_psn; then the client's
//            confirmation: the connection must be closed by y's side, y
//            still in RTS.
//   peer:    y (as after psn) is ACCEPTed again with the new PSN proof,
//            then reset and set up for another peer x2 of DEV_A; the
//            client's confirmation: closed, y in RTS.
// Then x2 connects to y, its real new peer, and a SEND goes each way.  The
// caller checks the counters (connections_refused, refused_bad_psn moved,
// refused_tls_confirm not).  Exit status 0 when all of that held.
//   usage: trdma_tls_rearm DEV_A GIDX_A DEV_B GIDX_B KEY_FILE
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <linux/tls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include <rdma/trdma-wire.h>

#include "../../kernel/trdma_kdf.h"
#include "../unit/sha256.h"
#include "tls_client.h"

#ifndef SOL_TLS
#define SOL_TLS 282
#endif
#ifndef TCP_ULP
#define TCP_ULP 31
#endif

using namespace trdma_tls_lab;
using trdma_test::Sha256Hash;
using trdma_test::Sha256Hmac;

namespace {

// s reset and set up again (INIT, RTR, RTS) for peer with rq_psn rq.
bool Rearm(Side &s, const Side &peer, uint32_t rq, uint32_t sq)
{
	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_RESET;
	if (ibv_modify_qp(s.qp, &a, IBV_QP_STATE))
		return Fail("RESET");
	a = {};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
	if (ibv_modify_qp(s.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			  IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return Fail("INIT again");
	return Connect(s, peer, rq, sq);
}

bool SetKey(int fd, int dir, const trdma_kdf_dir &k)
{
	tls12_crypto_info_aes_gcm_128 ci = {};
	ci.info.version = TLS_1_3_VERSION;
	ci.info.cipher_type = TLS_CIPHER_AES_GCM_128;
	memcpy(ci.key, k.key, sizeof(ci.key));
	memcpy(ci.salt, k.salt, sizeof(ci.salt));
	memcpy(ci.iv, k.iv, sizeof(ci.iv));
	return !setsockopt(fd, SOL_TLS, dir, &ci, sizeof(ci));
}

// The client speaking for x (of a) to y (of b): a connection with its
// hello ACCEPTed, keys on, y's confirmation read and checked; ours kept
// for Confirm().
struct Client {
	int fd = -1;
	uint8_t fin_req[TRDMA_KDF_CONFIRM_LEN] = {};
};

bool Hello(Client &c, const Side &x, const Side &y, uint32_t proof,
	   uint32_t y_sq, const std::string &key, std::mt19937 &rnd)
{
	trdma_hello h = {}, r = {};
	h.magic = htonl(TRDMA_HELLO_MAGIC);
	h.version = TRDMA_WIRE_VERSION;
	h.type = TRDMA_HELLO_REQ;
	h.flags = htons(TRDMA_HELLO_TLS | TRDMA_HELLO_SQ_PSN);
	h.src_qpn = htonl(x.qp->qp_num);
	h.dst_qpn = htonl(y.qp->qp_num);
	h.start_msn = htonl(y_sq);
	h.path_mtu = IBV_MTU_1024;
	h.max_rd_atomic = 1;
	h.max_dest_rd_atomic = 1;
	h.sq_psn = htonl(proof);
	memcpy(h.src_gid, x.gid.raw, 16);
	memcpy(h.dst_gid, y.gid.raw, 16);
	uint8_t nreq[TRDMA_HELLO_NONCE_LEN], nacc[TRDMA_HELLO_NONCE_LEN];
	for (auto &b : nreq)
		b = rnd();
	unsigned char msg[sizeof(h) + sizeof(nreq)];
	memcpy(msg, &h, sizeof(h));
	memcpy(msg + sizeof(h), nreq, sizeof(nreq));

	c.fd = socket(AF_INET, SOCK_STREAM, 0);
	sockaddr_in src = {}, dst = {};
	src.sin_family = dst.sin_family = AF_INET;
	memcpy(&src.sin_addr, x.gid.raw + 12, 4);
	memcpy(&dst.sin_addr, y.gid.raw + 12, 4);
	dst.sin_port = htons(TRDMA_DEFAULT_PORT);
	if (c.fd < 0 || bind(c.fd, (sockaddr *)&src, sizeof(src)) ||
	    !SignMd5(c.fd, dst, key) ||
	    connect(c.fd, (sockaddr *)&dst, sizeof(dst)) ||
	    write(c.fd, msg, sizeof(msg)) != (ssize_t)sizeof(msg))
		return Fail("connect or send of the hello");
	if (!ReadAll(c.fd, &r, sizeof(r)))
		return Fail("no answer to the hello");
	if (r.type != TRDMA_HELLO_ACCEPT || !(ntohs(r.flags) & TRDMA_HELLO_TLS)) {
		fprintf(stderr, "tls_rearm: answer type %u, flags 0x%x, status %u\n",
			r.type, ntohs(r.flags), ntohl(r.status));
		return Fail("not ACCEPTed with TLS");
	}
	if (!ReadAll(c.fd, nacc, sizeof(nacc)))
		return Fail("no nonce");

	// The schedule, as the kernel's (trdma_tls.c) with its roles.
	uint8_t th[TRDMA_KDF_HASH_LEN];
	trdma_kdf_ends e = {};
	trdma_kdf_out o = {};
	memcpy(e.req_gid, h.src_gid, 16);
	e.req_qpn = ntohl(h.src_qpn);
	memcpy(e.acc_gid, h.dst_gid, 16);
	e.acc_qpn = ntohl(h.dst_qpn);
	if (trdma_kdf_transcript(Sha256Hash, nullptr, (const uint8_t *)&h, sizeof(h),
				 nreq, (const uint8_t *)&r, sizeof(r), nacc, th) ||
	    trdma_kdf_keys(Sha256Hmac, nullptr, (const uint8_t *)key.data(),
			   key.size(), nreq, nacc, &e, th, &o))
		return Fail("key schedule");
	static const char ulp[] = "tls";
	if (setsockopt(c.fd, SOL_TCP, TCP_ULP, ulp, sizeof(ulp) - 1) ||
	    !SetKey(c.fd, TLS_TX, o.to_acc) || !SetKey(c.fd, TLS_RX, o.to_req))
		return Fail("kTLS on the client's socket");
	uint8_t got[TRDMA_KDF_CONFIRM_LEN];
	if (!ReadAll(c.fd, got, sizeof(got)))
		return Fail("no key confirmation from y (or it failed authentication)");
	if (memcmp(got, o.fin_acc, sizeof(got)))
		return Fail("y's key confirmation is not the one computed");
	memcpy(c.fin_req, o.fin_req, sizeof(c.fin_req));
	return true;
}

bool Confirm(Client &c)
{
	return write(c.fd, c.fin_req, sizeof(c.fin_req)) ==
	       (ssize_t)sizeof(c.fin_req) || Fail("send of the confirmation");
}

// The stale connection must be closed by y's side, y still in RTS.
bool Refused(Client &c, Side &y, const char *what)
{
	bool closed = ClosedWithin(c.fd, 15000);

	close(c.fd);
	printf("%s: confirmed connection %s; y state %d (RTS %d)\n", what,
	       closed ? "closed by y's side" : "still open after 15 s",
	       State(y.qp), IBV_QPS_RTS);
	return closed && State(y.qp) == IBV_QPS_RTS;
}

}  // namespace

int main(int argc, char **argv)
{
	g_prog = "tls_rearm";
	if (argc != 6) {
		fprintf(stderr, "usage: %s DEV_A GIDX_A DEV_B GIDX_B KEY_FILE\n",
			argv[0]);
		return 2;
	}
	const std::string key = ReadKey(argv[5]);
	if (key.empty())
		return !Fail("no key in KEY_FILE");
	Side x, x2, y0, y;
	const int ga = atoi(argv[2]), gb = atoi(argv[4]);
	if (!Open(x, argv[1], ga) || !Open(x2, argv[1], ga) ||
	    !Open(y0, argv[3], gb) || !Open(y, argv[3], gb))
		return 1;
	if (memcmp(x.gid.raw, y.gid.raw, 16) >= 0)
		return !Fail("DEV_A's GID must be the smaller (it connects)");
	std::mt19937 rnd(std::random_device{}());
	uint32_t psn[8];
	for (auto &v : psn)
		v = rnd() & 0xffffff;

	// control: the client's schedule is the kernel's, and it binds.
	Client c0;
	if (!Connect(y0, x, psn[0], psn[1]) ||
	    !Hello(c0, x, y0, psn[0], psn[1], key, rnd) || !Confirm(c0))
		return 1;
	if (ClosedWithin(c0.fd, 3000))
		return !Fail("control: the confirmed connection was closed");
	printf("control: QP %u ACCEPTed, confirmations checked both ways, the connection stays\n",
	       y0.qp->qp_num);

	// psn: re-armed for the same peer with another rq_psn.
	Client c1;
	if (!Connect(y, x, psn[2], psn[3]) ||
	    !Hello(c1, x, y, psn[2], psn[3], key, rnd))
		return 1;
	printf("psn: QP %u ACCEPTed the hello of QP %u (proof %u); re-armed with rq_psn %u\n",
	       y.qp->qp_num, x.qp->qp_num, psn[2], psn[4]);
	if (!Rearm(y, x, psn[4], psn[5]) || !Confirm(c1) || !Refused(c1, y, "psn"))
		return !Fail("psn: the stale connection was not refused");

	// peer: ACCEPTed with the new proof, re-armed for another peer.
	Client c2;
	if (!Hello(c2, x, y, psn[4], psn[5], key, rnd))
		return 1;
	printf("peer: QP %u ACCEPTed the hello of QP %u (proof %u); re-armed for QP %u\n",
	       y.qp->qp_num, x.qp->qp_num, psn[4], x2.qp->qp_num);
	if (!Rearm(y, x2, psn[6], psn[7]) || !Confirm(c2) ||
	    !Refused(c2, y, "peer"))
		return !Fail("peer: the stale connection was not refused");

	// The real new peer.
	if (!Connect(x2, y, psn[7], psn[6]))
		return 1;
	if (!SendArrives(x2, y, 0x5a) || !SendArrives(y, x2, 0x3c))
		return 1;
	printf("real new peer QP %u: connected, a SEND each way arrived intact\n",
	       x2.qp->qp_num);
	close(c0.fd);
	return 0;
}
