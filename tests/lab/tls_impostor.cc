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

namespace {

struct Side {
	ibv_context *ctx = nullptr;
	ibv_pd *pd = nullptr;
	ibv_cq *cq = nullptr;
	ibv_mr *mr = nullptr;
	ibv_qp *qp = nullptr;
	ibv_gid gid = {};
	int gidx = 0;
	char buf[4096] = {};
};

bool Fail(const char *what)
{
	fprintf(stderr, "tls_impostor: %s\n", what);
	return false;
}

bool Open(Side &s, const char *name, int gidx)
{
	int n = 0;
	ibv_device **list = ibv_get_device_list(&n);

	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			s.ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!s.ctx)
		return Fail("no such device");
	s.gidx = gidx;
	if (ibv_query_gid(s.ctx, 1, gidx, &s.gid))
		return Fail("ibv_query_gid");
	s.pd = ibv_alloc_pd(s.ctx);
	s.cq = s.pd ? ibv_create_cq(s.ctx, 16, nullptr, nullptr, 0) : nullptr;
	s.mr = s.cq ? ibv_reg_mr(s.pd, s.buf, sizeof(s.buf),
				 IBV_ACCESS_LOCAL_WRITE) : nullptr;
	if (!s.mr)
		return Fail("pd, cq or mr");
	ibv_qp_init_attr ia = {};
	ia.send_cq = ia.recv_cq = s.cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	s.qp = ibv_create_qp(s.pd, &ia);
	if (!s.qp)
		return Fail("ibv_create_qp");
	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
	if (ibv_modify_qp(s.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			  IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return Fail("INIT");
	return true;
}

// s to RTR and RTS towards peer: rq_psn rq, sq_psn sq.
bool Connect(Side &s, const Side &peer, uint32_t rq, uint32_t sq)
{
	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer.qp->qp_num;
	a.rq_psn = rq;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer.gid;
	a.ah_attr.grh.sgid_index = s.gidx;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(s.qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return Fail("RTR");
	a = {};
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 18;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = sq;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(s.qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			  IBV_QP_MAX_QP_RD_ATOMIC))
		return Fail("RTS");
	return true;
}

ibv_qp_state State(ibv_qp *qp)
{
	ibv_qp_attr a = {};
	ibv_qp_init_attr ia = {};

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return IBV_QPS_UNKNOWN;
	return a.qp_state;
}

bool Poll(ibv_cq *cq, ibv_wc_opcode want)
{
	auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
	ibv_wc wc;

	while (std::chrono::steady_clock::now() < until) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			return Fail("ibv_poll_cq");
		if (n == 0) {
			usleep(1000);
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS || wc.opcode != want) {
			fprintf(stderr, "tls_impostor: completion %s, opcode %d\n",
				ibv_wc_status_str(wc.status), wc.opcode);
			return false;
		}
		return true;
	}
	return Fail("no completion in 60 s");
}

// A SEND of 64 bytes from a to b, checked byte for byte.
bool SendArrives(Side &a, Side &b, char fill)
{
	ibv_sge rs = { (uintptr_t)b.buf, 64, b.mr->lkey };
	ibv_recv_wr rwr = {}, *rbad;
	rwr.sg_list = &rs;
	rwr.num_sge = 1;
	memset(b.buf, 0, 64);
	memset(a.buf, fill, 64);
	if (ibv_post_recv(b.qp, &rwr, &rbad))
		return Fail("ibv_post_recv");
	ibv_sge ss = { (uintptr_t)a.buf, 64, a.mr->lkey };
	ibv_send_wr swr = {}, *sbad;
	swr.opcode = IBV_WR_SEND;
	swr.sg_list = &ss;
	swr.num_sge = 1;
	swr.send_flags = IBV_SEND_SIGNALED;
	if (ibv_post_send(a.qp, &swr, &sbad))
		return Fail("ibv_post_send");
	if (!Poll(b.cq, IBV_WC_RECV) || !Poll(a.cq, IBV_WC_SEND))
		return false;
	for (int i = 0; i < 64; i++)
		if (b.buf[i] != fill)
			return Fail("the SEND's data differ");
	return true;
}

bool ReadAll(int fd, void *p, size_t len)
{
	size_t got = 0;

	while (got < len) {
		pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, 10000) != 1)
			return false;
		ssize_t n = read(fd, (char *)p + got, len - got);
		if (n <= 0)
			return false;
		got += n;
	}
	return true;
}

// Whether the peer closes fd (FIN or reset) within ms, reading what comes.
bool ClosedWithin(int fd, int ms)
{
	auto until = std::chrono::steady_clock::now() +
		     std::chrono::milliseconds(ms);
	char b[512];

	while (std::chrono::steady_clock::now() < until) {
		pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, 100) != 1)
			continue;
		if (read(fd, b, sizeof(b)) <= 0)
			return true;
	}
	return false;
}

// Signs fd's segments to dst with TCP-MD5 under the key in file (a
// trailing newline dropped, as tcp_md5_key's store does).
bool SignMd5(int fd, const sockaddr_in &dst, const char *file)
{
	std::ifstream kf(file, std::ios::binary);
	std::string key((std::istreambuf_iterator<char>(kf)),
			std::istreambuf_iterator<char>());
	struct tcp_md5sig m = {};
	bool ok;

	if (!key.empty() && key.back() == '\n')
		key.pop_back();
	if (key.empty() || key.size() > sizeof(m.tcpm_key))
		return false;
	memcpy(&m.tcpm_addr, &dst, sizeof(dst));
	m.tcpm_keylen = key.size();
	memcpy(m.tcpm_key, key.data(), key.size());
	ok = !setsockopt(fd, IPPROTO_TCP, TCP_MD5SIG, &m, sizeof(m));
	memset(&m, 0, sizeof(m));
	return ok;
}

}  // namespace

int main(int argc, char **argv)
{
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
	    (argc == 6 && !SignMd5(fd, dst, argv[5])) ||
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
