// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// What the lab's raw clients of keyed and encrypted links (tls_impostor.cc,
// tls_rearm.cc, tcp_forge.cc; driven by tests/lab/run-tls) share: RC QPs
// set up and connected (one per device for the TLS clients, Side), SENDs checked byte for byte, reading a
// socket with a deadline, and TCP-MD5 under the link key as the kernel
// signs a keyed device's connections (trdma_key.c).  Each program sets
// g_prog, the name its messages carry.
#ifndef TRDMA_LAB_TLS_CLIENT_H
#define TRDMA_LAB_TLS_CLIENT_H

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

namespace trdma_tls_lab {

inline const char *g_prog = "tls";

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

inline bool Fail(const char *what)
{
	fprintf(stderr, "%s: %s\n", g_prog, what);
	return false;
}

// The device named name, opened; nullptr if there is none.
inline ibv_context *OpenDevice(const char *name)
{
	int n = 0;
	ibv_device **list = ibv_get_device_list(&n);
	ibv_context *ctx = nullptr;

	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	return ctx;
}

// An RC QP on pd and cq, depth WRs each way of one SGE, moved to INIT
// (local write only); nullptr, said, if that fails.
inline ibv_qp *CreateRcQp(ibv_pd *pd, ibv_cq *cq, uint32_t depth)
{
	ibv_qp_init_attr ia = {};
	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = depth;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp) {
		Fail("ibv_create_qp");
		return nullptr;
	}
	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			  IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
		Fail("INIT");
		ibv_destroy_qp(qp);
		return nullptr;
	}
	return qp;
}

// qp (its source GID at sgid_index) to RTR and RTS towards QP dest_qpn at
// dgid: rq_psn rq, sq_psn sq, the given RNR timer.
inline bool ConnectRc(ibv_qp *qp, int sgid_index, uint32_t dest_qpn,
		      const ibv_gid &dgid, uint32_t rq, uint32_t sq,
		      uint8_t min_rnr_timer)
{
	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = rq;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = min_rnr_timer;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = dgid;
	a.ah_attr.grh.sgid_index = sgid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
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
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			  IBV_QP_MAX_QP_RD_ATOMIC))
		return Fail("RTS");
	return true;
}

inline bool Open(Side &s, const char *name, int gidx)
{
	s.ctx = OpenDevice(name);
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
	s.qp = CreateRcQp(s.pd, s.cq, 4);
	return s.qp != nullptr;
}

// s to RTR and RTS towards peer: rq_psn rq, sq_psn sq.
inline bool Connect(Side &s, const Side &peer, uint32_t rq, uint32_t sq)
{
	return ConnectRc(s.qp, s.gidx, peer.qp->qp_num, peer.gid, rq, sq, 12);
}

inline ibv_qp_state State(ibv_qp *qp)
{
	ibv_qp_attr a = {};
	ibv_qp_init_attr ia = {};

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return IBV_QPS_UNKNOWN;
	return a.qp_state;
}

inline bool Poll(ibv_cq *cq, ibv_wc_opcode want)
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
			fprintf(stderr, "%s: completion %s, opcode %d\n", g_prog,
				ibv_wc_status_str(wc.status), wc.opcode);
			return false;
		}
		return true;
	}
	return Fail("no completion in 60 s");
}

// A SEND of 64 bytes from a to b, checked byte for byte.
inline bool SendArrives(Side &a, Side &b, char fill)
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

inline bool ReadAll(int fd, void *p, size_t len)
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
inline bool ClosedWithin(int fd, int ms)
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

// The link key in file as tcp_md5_key's store takes it: one trailing
// newline dropped.
inline std::string ReadKey(const char *file)
{
	std::ifstream kf(file, std::ios::binary);
	std::string key((std::istreambuf_iterator<char>(kf)),
			std::istreambuf_iterator<char>());

	if (!key.empty() && key.back() == '\n')
		key.pop_back();
	return key;
}

// Signs fd's segments to dst with TCP-MD5 under key, as the kernel signs
// every connection of a keyed device (trdma_key.c), encrypted or not.
inline bool SignMd5(int fd, const sockaddr_in &dst, const std::string &key)
{
	struct tcp_md5sig m = {};
	bool ok;

	if (key.empty() || key.size() > sizeof(m.tcpm_key))
		return false;
	memcpy(&m.tcpm_addr, &dst, sizeof(dst));
	m.tcpm_keylen = key.size();
	memcpy(m.tcpm_key, key.data(), key.size());
	ok = !setsockopt(fd, IPPROTO_TCP, TCP_MD5SIG, &m, sizeof(m));
	memset(&m, 0, sizeof(m));
	return ok;
}

}  // namespace trdma_tls_lab

#endif
