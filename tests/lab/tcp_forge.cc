// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// A forged TCP reset or FIN from the path (docs/security.md, "Attacks
// tried"), driven by tests/lab/run-tls.  Run in the connecting device's
// network namespace (A), on its end IFACE of the link to B.  Two QP pairs
// are made between DEV_A and DEV_B (x1-y1, x2-y2, x on DEV_A, the
// connecting side: the smaller GID) and a SEND goes each way on each.
// Then y1 (the target, on DEV_B) is given outstanding work: 4 RECVs, and 2
// SENDs that x1 has no RECV for (x1 answers RNR, min_rnr_timer 491 ms, y1
// retries without end), so the link is quiet between retries.  An
// AF_PACKET socket on IFACE learns the pair's connection (4-tuple) from a
// SEND of x1's and follows its sequence numbers; when A has been quiet for
// 150 ms it sends, as from A, a segment with the exact next sequence
// number (and A's latest ACK and timestamp option, no MD5 option): a RST
// (rst) or a FIN (fin) with no data.
//   die:  the forged segment must kill the connection: y1 in ERR, each of
//         its 6 outstanding WQEs completes once, not successfully, and
//         nothing more; tried up to 20 times (each with the sequence
//         numbers as they are then) until y1 is in ERR.
//   live: 3 forged segments are sent (each at the then next sequence
//         number) and the connection must not notice: x1 then posts its
//         RECVs and SENDs, every WQE of the pair completes successfully,
//         and 40 SENDs of 4 KiB each way arrive byte for byte.  The caller
//         checks that the kernel counted the dropped segments (nstat).
// Either way, pair 2 then SENDs each way (byte for byte).  Exit status 0
// when all of that held.
//   usage: trdma_tcp_forge DEV_A GIDX_A DEV_B GIDX_B IFACE rst|fin die|live
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tls_client.h"

namespace {

using Clock = std::chrono::steady_clock;

using trdma_tls_lab::Fail;
using trdma_tls_lab::State;

struct Dev {
	ibv_context *ctx = nullptr;
	ibv_pd *pd = nullptr;
	ibv_gid gid = {};
	int gidx = 0;
};

constexpr int kMsg = 4096;
constexpr int kSlots = 16;

struct Qp {
	Dev *dev = nullptr;
	ibv_cq *cq = nullptr;
	ibv_qp *qp = nullptr;
	ibv_mr *mr = nullptr;
	std::vector<char> buf = std::vector<char>(kMsg * kSlots);
};

bool Open(Dev &d, const char *name, int gidx)
{
	d.ctx = trdma_tls_lab::OpenDevice(name);
	if (!d.ctx)
		return Fail("no such device");
	d.gidx = gidx;
	if (ibv_query_gid(d.ctx, 1, gidx, &d.gid))
		return Fail("ibv_query_gid");
	d.pd = ibv_alloc_pd(d.ctx);
	return d.pd || Fail("ibv_alloc_pd");
}

bool Make(Qp &q, Dev &d)
{
	q.dev = &d;
	q.cq = ibv_create_cq(d.ctx, 256, nullptr, nullptr, 0);
	q.mr = q.cq ? ibv_reg_mr(d.pd, q.buf.data(), q.buf.size(),
				 IBV_ACCESS_LOCAL_WRITE) : nullptr;
	if (!q.mr)
		return Fail("cq or mr");
	q.qp = trdma_tls_lab::CreateRcQp(d.pd, q.cq, 64);
	return q.qp != nullptr;
}

// q to RTR and RTS towards peer: rq_psn rq, sq_psn sq; 491.52 ms between
// RNR retries, so that they stay quiet.
bool Connect(Qp &q, const Qp &peer, uint32_t rq, uint32_t sq)
{
	return trdma_tls_lab::ConnectRc(q.qp, q.dev->gidx, peer.qp->qp_num,
					peer.dev->gid, rq, sq, 31);
}

// wr_id: 1000 + slot for RECVs, 2000 + slot for SENDs.
bool PostRecv(Qp &q, int slot)
{
	ibv_sge s = { (uintptr_t)&q.buf[slot * kMsg], kMsg, q.mr->lkey };
	ibv_recv_wr w = {}, *bad;
	w.wr_id = 1000 + slot;
	w.sg_list = &s;
	w.num_sge = 1;
	return !ibv_post_recv(q.qp, &w, &bad) || Fail("ibv_post_recv");
}

bool PostSend(Qp &q, int slot)
{
	ibv_sge s = { (uintptr_t)&q.buf[slot * kMsg], kMsg, q.mr->lkey };
	ibv_send_wr w = {}, *bad;
	w.wr_id = 2000 + slot;
	w.opcode = IBV_WR_SEND;
	w.sg_list = &s;
	w.num_sge = 1;
	w.send_flags = IBV_SEND_SIGNALED;
	return !ibv_post_send(q.qp, &w, &bad) || Fail("ibv_post_send");
}

// n completions of q's CQ into out, within secs.
bool PollN(Qp &q, int n, std::vector<ibv_wc> &out, int secs)
{
	auto until = Clock::now() + std::chrono::seconds(secs);

	while ((int)out.size() < n && Clock::now() < until) {
		ibv_wc wc;
		int r = ibv_poll_cq(q.cq, 1, &wc);
		if (r < 0)
			return Fail("ibv_poll_cq");
		if (r == 0)
			usleep(1000);
		else
			out.push_back(wc);
	}
	return (int)out.size() == n;
}

void Fill(Qp &q, int slot, unsigned seed)
{
	for (int i = 0; i < kMsg; i++)
		q.buf[slot * kMsg + i] = (char)(seed * 131 + i * 7 + (i >> 8));
}

bool Holds(const Qp &q, int slot, unsigned seed)
{
	for (int i = 0; i < kMsg; i++)
		if (q.buf[slot * kMsg + i] != (char)(seed * 131 + i * 7 + (i >> 8)))
			return false;
	return true;
}

// n SENDs from a to b (slots 8..15 of each, round robin), every
// completion successful and every byte right.
bool Stream(Qp &a, Qp &b, int n, unsigned seed)
{
	for (int i = 0; i < n; i++) {
		int slot = 8 + i % 8;
		std::vector<ibv_wc> wa, wb;

		Fill(a, slot, seed + i);
		memset(&b.buf[slot * kMsg], 0, kMsg);
		if (!PostRecv(b, slot) || !PostSend(a, slot))
			return false;
		if (!PollN(b, 1, wb, 60) || !PollN(a, 1, wa, 60))
			return Fail("a SEND of the stream did not complete");
		if (wa[0].status != IBV_WC_SUCCESS ||
		    wb[0].status != IBV_WC_SUCCESS) {
			fprintf(stderr, "tcp_forge: stream SEND %d: %s / %s\n",
				i, ibv_wc_status_str(wa[0].status),
				ibv_wc_status_str(wb[0].status));
			return false;
		}
		if (wb[0].byte_len != (uint32_t)kMsg || !Holds(b, slot, seed + i))
			return Fail("a SEND's data differ");
	}
	return true;
}

// The sniffer and the forger.
struct Flow {
	uint32_t a_ip = 0, b_ip = 0;	/* network order */
	uint16_t a_port = 0, b_port = 0;
	uint8_t a_mac[6] = {}, b_mac[6] = {};
	uint32_t a_next = 0, a_ack = 0;	/* host order */
	uint16_t a_win = 0;
	uint8_t ts[12] = {};		/* A's latest timestamp option, NOP NOP first */
	bool has_ts = false;
	bool known = false;
	Clock::time_point a_last;
	uint32_t b_ack_seen = 0;	/* B's latest ACK to A */
	uint64_t a_segs = 0;
};

struct Pkt {
	const ether_header *eth;
	const iphdr *ip;
	const tcphdr *tcp;
	uint32_t len;			/* TCP payload */
};

bool Parse(const uint8_t *p, ssize_t n, Pkt &k)
{
	if (n < (ssize_t)(sizeof(ether_header) + sizeof(iphdr)))
		return false;
	k.eth = (const ether_header *)p;
	if (ntohs(k.eth->ether_type) != ETHERTYPE_IP)
		return false;
	k.ip = (const iphdr *)(p + sizeof(ether_header));
	if (k.ip->protocol != IPPROTO_TCP || k.ip->ihl < 5)
		return false;
	size_t off = sizeof(ether_header) + k.ip->ihl * 4;
	if (n < (ssize_t)(off + sizeof(tcphdr)))
		return false;
	k.tcp = (const tcphdr *)(p + off);
	uint32_t tot = ntohs(k.ip->tot_len), hl = k.ip->ihl * 4 + k.tcp->doff * 4;
	k.len = tot > hl ? tot - hl : 0;
	return true;
}

// Drops what the packet socket holds so far.
void Drain(int fd)
{
	uint8_t p[64];
	pollfd pf = { fd, POLLIN, 0 };

	while (poll(&pf, 1, 0) == 1 && recv(fd, p, sizeof(p), MSG_TRUNC) >= 0)
		;
}

// The packets of IFACE for ms milliseconds, or until A has been quiet on
// the flow for quiet_ms (0: no such stop).  Without a known flow, the
// first A-to-B segment with 1 KiB of data or more and port 4791 at one
// end sets it (the other pair's ACKs are smaller).
void Sniff(int fd, Flow &f, uint32_t a_ip, int ms, int quiet_ms)
{
	auto until = Clock::now() + std::chrono::milliseconds(ms);
	uint8_t p[256];

	while (Clock::now() < until) {
		if (quiet_ms && f.known && Clock::now() - f.a_last >
		    std::chrono::milliseconds(quiet_ms))
			return;
		pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, 10) != 1)
			continue;
		ssize_t n = recv(fd, p, sizeof(p), MSG_TRUNC);
		Pkt k;
		if (n <= 0 || !Parse(p, std::min<ssize_t>(n, sizeof(p)), k))
			continue;
		bool from_a = k.ip->saddr == a_ip;
		uint16_t sp = ntohs(k.tcp->source), dp = ntohs(k.tcp->dest);
		if (!f.known) {
			if (!from_a || k.len < 1024 || (sp != 4791 && dp != 4791))
				continue;
			f.a_ip = k.ip->saddr;
			f.b_ip = k.ip->daddr;
			f.a_port = sp;
			f.b_port = dp;
			memcpy(f.a_mac, k.eth->ether_shost, 6);
			memcpy(f.b_mac, k.eth->ether_dhost, 6);
			f.known = true;
		}
		if (from_a && k.ip->daddr == f.b_ip && sp == f.a_port &&
		    dp == f.b_port) {
			uint32_t next = ntohl(k.tcp->seq) + k.len + k.tcp->fin;
			if (!f.a_segs || (int32_t)(next - f.a_next) > 0)
				f.a_next = next;
			f.a_ack = ntohl(k.tcp->ack_seq);
			f.a_win = ntohs(k.tcp->window);
			f.a_last = Clock::now();
			f.a_segs++;
			/* The timestamp option, wherever it is. */
			const uint8_t *o = (const uint8_t *)(k.tcp + 1);
			size_t ol = k.tcp->doff * 4 - sizeof(tcphdr);
			size_t have = std::min<size_t>(sizeof(p), n) -
				      ((const uint8_t *)o - p);
			ol = std::min(ol, have);
			for (size_t i = 0; i < ol;) {
				if (o[i] == 0)
					break;
				if (o[i] == 1) {
					i++;
					continue;
				}
				if (i + 1 >= ol || o[i + 1] < 2 || i + o[i + 1] > ol)
					break;
				if (o[i] == 8 && o[i + 1] == 10) {
					f.ts[0] = f.ts[1] = 1;
					memcpy(f.ts + 2, o + i, 10);
					f.has_ts = true;
				}
				i += o[i + 1];
			}
		} else if (!from_a && k.ip->saddr == f.b_ip && sp == f.b_port &&
			   dp == f.a_port) {
			f.b_ack_seen = ntohl(k.tcp->ack_seq);
		}
	}
}

uint16_t Csum(const uint8_t *p, size_t n, uint32_t sum)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		sum += (uint32_t)p[i] << 8 | p[i + 1];
	if (n & 1)
		sum += (uint32_t)p[n - 1] << 8;
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

// One segment as from A to B at A's next sequence number: RST or FIN.
bool Forge(int fd, int ifindex, const Flow &f, bool fin, std::mt19937 &rnd)
{
	uint8_t p[sizeof(ether_header) + sizeof(iphdr) + sizeof(tcphdr) + 12] = {};
	auto *eth = (ether_header *)p;
	auto *ip = (iphdr *)(eth + 1);
	auto *tcp = (tcphdr *)(ip + 1);
	size_t optlen = f.has_ts ? 12 : 0;
	size_t tcplen = sizeof(tcphdr) + optlen;

	memcpy(eth->ether_shost, f.a_mac, 6);
	memcpy(eth->ether_dhost, f.b_mac, 6);
	eth->ether_type = htons(ETHERTYPE_IP);
	ip->version = 4;
	ip->ihl = 5;
	ip->tot_len = htons(sizeof(iphdr) + tcplen);
	ip->id = htons(rnd() & 0xffff);
	ip->frag_off = htons(IP_DF);
	ip->ttl = 64;
	ip->protocol = IPPROTO_TCP;
	ip->saddr = f.a_ip;
	ip->daddr = f.b_ip;
	ip->check = htons(Csum((uint8_t *)ip, sizeof(iphdr), 0));
	tcp->source = htons(f.a_port);
	tcp->dest = htons(f.b_port);
	tcp->seq = htonl(f.a_next);
	tcp->ack_seq = htonl(f.a_ack);
	tcp->doff = tcplen / 4;
	tcp->ack = 1;
	tcp->rst = !fin;
	tcp->fin = fin;
	tcp->window = htons(f.a_win);
	if (optlen)
		memcpy(tcp + 1, f.ts, optlen);
	uint8_t pseudo[12];
	memcpy(pseudo, &ip->saddr, 4);
	memcpy(pseudo + 4, &ip->daddr, 4);
	pseudo[8] = 0;
	pseudo[9] = IPPROTO_TCP;
	pseudo[10] = tcplen >> 8;
	pseudo[11] = tcplen & 0xff;
	uint32_t sum = 0;
	for (int i = 0; i < 12; i += 2)
		sum += (uint32_t)pseudo[i] << 8 | pseudo[i + 1];
	tcp->check = htons(Csum((uint8_t *)tcp, tcplen, sum));

	sockaddr_ll to = {};
	to.sll_family = AF_PACKET;
	to.sll_ifindex = ifindex;
	to.sll_halen = 6;
	memcpy(to.sll_addr, f.b_mac, 6);
	size_t n = sizeof(ether_header) + sizeof(iphdr) + tcplen;
	return sendto(fd, p, n, 0, (sockaddr *)&to, sizeof(to)) == (ssize_t)n ||
	       Fail("sendto (packet socket)");
}

}  // namespace

int main(int argc, char **argv)
{
	trdma_tls_lab::g_prog = "tcp_forge";
	if (argc != 8 || (strcmp(argv[6], "rst") && strcmp(argv[6], "fin")) ||
	    (strcmp(argv[7], "die") && strcmp(argv[7], "live"))) {
		fprintf(stderr, "usage: %s DEV_A GIDX_A DEV_B GIDX_B IFACE rst|fin die|live\n",
			argv[0]);
		return 2;
	}
	const bool fin = !strcmp(argv[6], "fin"), die = !strcmp(argv[7], "die");
	Dev da, db;
	if (!Open(da, argv[1], atoi(argv[2])) || !Open(db, argv[3], atoi(argv[4])))
		return 1;
	if (memcmp(da.gid.raw, db.gid.raw, 16) >= 0)
		return !Fail("DEV_A's GID must be the smaller (it connects)");
	uint32_t a_ip;
	memcpy(&a_ip, da.gid.raw + 12, 4);
	int ifindex = if_nametoindex(argv[5]);
	int pfd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
	sockaddr_ll ll = {};
	ll.sll_family = AF_PACKET;
	ll.sll_protocol = htons(ETH_P_ALL);
	ll.sll_ifindex = ifindex;
	if (!ifindex || pfd < 0 || bind(pfd, (sockaddr *)&ll, sizeof(ll)))
		return !Fail("packet socket on IFACE");

	std::mt19937 rnd(std::random_device{}());
	Qp x1, y1, x2, y2;
	if (!Make(x1, da) || !Make(y1, db) || !Make(x2, da) || !Make(y2, db))
		return 1;
	uint32_t p[8];
	for (auto &v : p)
		v = rnd() & 0xffffff;
	if (!Connect(y1, x1, p[0], p[1]) || !Connect(x1, y1, p[1], p[0]) ||
	    !Connect(y2, x2, p[2], p[3]) || !Connect(x2, y2, p[3], p[2]))
		return 1;
	if (!Stream(x2, y2, 1, 1) || !Stream(y2, x2, 1, 2) ||
	    !Stream(y1, x1, 1, 3))
		return 1;
	// Pair 1's connection: the one that carries x1's next SEND (4 KiB),
	// the only data A sends from here on.
	Flow f;
	usleep(500000);
	for (int i = 0; i < 20 && !f.known; i++) {
		Drain(pfd);
		if (!Stream(x1, y1, 1, 4 + i))
			return 1;
		Sniff(pfd, f, a_ip, 300, 0);
	}
	if (!f.known)
		return !Fail("no segment of pair 1's connection seen");
	char a[INET_ADDRSTRLEN], b[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &f.a_ip, a, sizeof(a));
	inet_ntop(AF_INET, &f.b_ip, b, sizeof(b));
	printf("pair 1 (QP %u -> QP %u): connection %s:%u -> %s:%u, timestamps %s\n",
	       x1.qp->qp_num, y1.qp->qp_num, a, f.a_port, b, f.b_port,
	       f.has_ts ? "on" : "off");

	// y1's outstanding work: 4 RECVs, 2 SENDs x1 answers RNR to.
	for (int s = 0; s < 4; s++)
		if (!PostRecv(y1, s))
			return 1;
	for (int s = 4; s < 6; s++) {
		Fill(y1, s, 100 + s);
		if (!PostSend(y1, s))
			return 1;
	}
	Sniff(pfd, f, a_ip, 1500, 0);	/* RNR round trips under way */

	int sent = 0, hit = 0;
	for (int t = 0; t < (die ? 20 : 3); t++) {
		Sniff(pfd, f, a_ip, 5000, 150);
		uint32_t seq = f.a_next;
		if (!Forge(pfd, ifindex, f, fin, rnd))
			return 1;
		sent++;
		printf("forged %s %d: seq %u ack %u (A's segments seen %llu)\n",
		       fin ? "FIN" : "RST", sent, seq, f.a_ack,
		       (unsigned long long)f.a_segs);
		Sniff(pfd, f, a_ip, 400, 0);
		if (fin && f.b_ack_seen == seq + 1)
			printf("B acknowledged the forged FIN (ACK %u)\n", seq + 1);
		if (!die)
			continue;
		if ((fin && f.b_ack_seen == seq + 1) ||
		    State(y1.qp) == IBV_QPS_ERR) {
			hit = sent;
			break;
		}
	}
	printf("forged segments sent: %d\n", sent);

	if (die) {
		if (!hit)
			return !Fail("no forged segment hit the window: y1 still up");
		std::vector<ibv_wc> wc;
		if (!PollN(y1, 6, wc, 90)) {
			fprintf(stderr, "tcp_forge: %zu of 6 outstanding WQEs completed, y1 state %d\n",
				wc.size(), State(y1.qp));
			return 1;
		}
		bool seen[6] = {};
		for (auto &w : wc) {
			int i = w.wr_id >= 2000 ? (int)w.wr_id - 2000 : (int)w.wr_id - 1000;
			printf("y1 completion: wr_id %llu %s\n",
			       (unsigned long long)w.wr_id, ibv_wc_status_str(w.status));
			if (i < 0 || i > 5 || seen[i] || w.status == IBV_WC_SUCCESS)
				return !Fail("a WQE completed twice, successfully or unknown");
			seen[i] = true;
		}
		std::vector<ibv_wc> more;
		if (PollN(y1, 1, more, 2))
			return !Fail("a completion more than the WQEs posted");
		printf("y1: state %d (ERR %d), 6 WQEs completed once each, in error; x1: state %d\n",
		       State(y1.qp), IBV_QPS_ERR, State(x1.qp));
		if (State(y1.qp) != IBV_QPS_ERR)
			return !Fail("y1 not in ERR");
	} else {
		if (State(y1.qp) != IBV_QPS_RTS || State(x1.qp) != IBV_QPS_RTS)
			return !Fail("pair 1 left RTS");
		std::vector<ibv_wc> wx, wy;
		for (int s = 4; s < 6; s++)
			if (!PostRecv(x1, s))
				return 1;
		for (int s = 0; s < 4; s++) {
			Fill(x1, s, 200 + s);
			if (!PostSend(x1, s))
				return 1;
		}
		if (!PollN(y1, 6, wy, 60) || !PollN(x1, 6, wx, 60))
			return !Fail("pair 1's outstanding WQEs did not complete");
		for (auto *v : { &wx, &wy })
			for (auto &w : *v)
				if (w.status != IBV_WC_SUCCESS)
					return !Fail("a WQE of pair 1 failed");
		for (int s = 0; s < 4; s++)
			if (!Holds(y1, s, 200 + s))
				return !Fail("y1 received other bytes");
		for (int s = 4; s < 6; s++)
			if (!Holds(x1, s, 100 + s))
				return !Fail("x1 received other bytes");
		if (!Stream(x1, y1, 40, 300) || !Stream(y1, x1, 40, 400))
			return 1;
		printf("pair 1: outstanding WQEs completed successfully, 40 + 40 SENDs of 4 KiB intact\n");
	}
	if (!Stream(x2, y2, 5, 500) || !Stream(y2, x2, 5, 600))
		return !Fail("pair 2 does not work after the attack");
	printf("pair 2: 5 + 5 SENDs intact after the attack\n");
	return 0;
}
