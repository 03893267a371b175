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

#ifndef SOL_TLS
#define SOL_TLS 282
#endif
#ifndef TCP_ULP
#define TCP_ULP 31
#endif

namespace {

struct Sha256 {
	uint32_t h[8];
	uint8_t buf[64];
	uint64_t total = 0;
	size_t n = 0;

	static uint32_t Rotr(uint32_t x, int r) { return (x >> r) | (x << (32 - r)); }

	Sha256()
	{
		static const uint32_t init[8] = {
			0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
			0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
		memcpy(h, init, sizeof(h));
	}

	void Block(const uint8_t *p)
	{
		static const uint32_t k[64] = {
			0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b,
			0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
			0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7,
			0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
			0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152,
			0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
			0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
			0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
			0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
			0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
			0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
			0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
			0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
		uint32_t w[64], a[8];

		for (int i = 0; i < 16; i++)
			w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
			       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
		for (int i = 16; i < 64; i++) {
			uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
			uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
			w[i] = w[i - 16] + s0 + w[i - 7] + s1;
		}
		memcpy(a, h, sizeof(a));
		for (int i = 0; i < 64; i++) {
			uint32_t S1 = Rotr(a[4], 6) ^ Rotr(a[4], 11) ^ Rotr(a[4], 25);
			uint32_t ch = (a[4] & a[5]) ^ (~a[4] & a[6]);
			uint32_t t1 = a[7] + S1 + ch + k[i] + w[i];
			uint32_t S0 = Rotr(a[0], 2) ^ Rotr(a[0], 13) ^ Rotr(a[0], 22);
			uint32_t maj = (a[0] & a[1]) ^ (a[0] & a[2]) ^ (a[1] & a[2]);
			uint32_t t2 = S0 + maj;
			memmove(a + 1, a, 7 * sizeof(a[0]));
			a[4] += t1;
			a[0] = t1 + t2;
		}
		for (int i = 0; i < 8; i++)
			h[i] += a[i];
	}

	void Update(const uint8_t *p, size_t len)
	{
		total += len;
		while (len) {
			size_t c = std::min(len, sizeof(buf) - n);
			memcpy(buf + n, p, c);
			n += c;
			p += c;
			len -= c;
			if (n == sizeof(buf)) {
				Block(buf);
				n = 0;
			}
		}
	}

	void Final(uint8_t *out)
	{
		uint64_t bits = total * 8;
		uint8_t pad = 0x80, zero = 0, len[8];

		Update(&pad, 1);
		while (n != 56)
			Update(&zero, 1);
		for (int i = 0; i < 8; i++)
			len[i] = bits >> (56 - 8 * i);
		Update(len, 8);
		for (int i = 0; i < 8; i++)
			for (int j = 0; j < 4; j++)
				out[4 * i + j] = h[i] >> (24 - 8 * j);
	}
};

int Hmac(void *, const uint8_t *key, size_t keylen, const uint8_t *const *data,
	 const size_t *len, int n, uint8_t *out)
{
	uint8_t k[64] = {}, ipad[64], opad[64], inner[32];

	if (keylen > 64) {
		Sha256 s;
		s.Update(key, keylen);
		s.Final(k);
	} else {
		memcpy(k, key, keylen);
	}
	for (int i = 0; i < 64; i++) {
		ipad[i] = k[i] ^ 0x36;
		opad[i] = k[i] ^ 0x5c;
	}
	Sha256 in;
	in.Update(ipad, 64);
	for (int i = 0; i < n; i++)
		in.Update(data[i], len[i]);
	in.Final(inner);
	Sha256 o;
	o.Update(opad, 64);
	o.Update(inner, 32);
	o.Final(out);
	return 0;
}

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
	fprintf(stderr, "tls_rearm: %s\n", what);
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
			fprintf(stderr, "tls_rearm: completion %s, opcode %d\n",
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

int Hash(void *, const uint8_t *const *data, const size_t *len, int n,
	 uint8_t *out)
{
	Sha256 s;

	for (int i = 0; i < n; i++)
		s.Update(data[i], len[i]);
	s.Final(out);
	return 0;
}

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

// Signs fd's segments to dst with TCP-MD5 under key, as the kernel signs
// every connection of a keyed device (trdma_key.c), encrypted or not.
bool SignMd5(int fd, const sockaddr_in &dst, const std::string &key)
{
	struct tcp_md5sig m = {};

	if (key.size() > sizeof(m.tcpm_key))
		return false;
	memcpy(&m.tcpm_addr, &dst, sizeof(dst));
	m.tcpm_keylen = key.size();
	memcpy(m.tcpm_key, key.data(), key.size());
	return !setsockopt(fd, IPPROTO_TCP, TCP_MD5SIG, &m, sizeof(m));
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
	if (trdma_kdf_transcript(Hash, nullptr, (const uint8_t *)&h, sizeof(h),
				 nreq, (const uint8_t *)&r, sizeof(r), nacc, th) ||
	    trdma_kdf_keys(Hmac, nullptr, (const uint8_t *)key.data(),
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
	if (argc != 6) {
		fprintf(stderr, "usage: %s DEV_A GIDX_A DEV_B GIDX_B KEY_FILE\n",
			argv[0]);
		return 2;
	}
	std::ifstream kf(argv[5], std::ios::binary);
	std::string key((std::istreambuf_iterator<char>(kf)),
			std::istreambuf_iterator<char>());
	if (!key.empty() && key.back() == '\n')
		key.pop_back();	/* as tcp_md5_key's store does */
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
