// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma_pcap_gen: writes a capture of synthetic trdma connections for the
 * Wireshark dissector test (tools/wireshark/trdma.lua,
 * tests/unit/check-wireshark-dissector.sh), and what the dissector must
 * decode from it.
 *
 *   usage: trdma_pcap_gen OUTDIR
 *          trdma_pcap_gen --check-capture OUTDIR
 *
 * With --check-capture, instead: OUTDIR/NAME.pcap, one small capture of
 * one RC connection for each case of kLateCases below, for the test of
 * tools/wireshark/check-capture (tests/unit/check-wireshark-capture.sh).
 *
 * OUTDIR/trdma.pcap      Ethernet/IPv4/TCP and UDP, valid checksums,
 *                        real handshakes with non-zero ISNs, Linux-like
 *                        options.
 * OUTDIR/fields          the tshark -e list, one field a line.
 * OUTDIR/expected-PREFS  `tshark -T fields` output for that list (all
 *                        frames, tab-separated, ',' between occurrences)
 *                        with the dissector's port preferences PREFS:
 *                        "default" (TCP 4791, UDP 4792) or "other"
 *                        (trdma.tcp_port 18515, trdma.udp_port 18516).
 * OUTDIR/info-PREFS      frame number and Info column of every frame the
 *                        dissector decodes a trdma segment, hello, TLS
 *                        record or UD datagram in.
 * OUTDIR/filters         lines "FILTER<tab>FRAMES": the frames (comma
 *                        separated, maybe none) a display filter must match
 *                        with the default preferences.
 *
 * The connections:
 *  1. port 4791: hellos; SEND_ONLY; SEND_FIRST/MIDDLE/LAST over five TCP
 *     segments; WRITE_ONLY_IMM and READ_REQUEST in one TCP segment; ACK and
 *     READ_RESPONSE_FIRST whose header straddles two TCP segments,
 *     READ_RESPONSE_LAST; COMPARE_SWAP whose TCP option deliberately
 *     disagrees with its BTH, ATOMIC_ACK; SEND_ONLY_IMM answered by an RNR
 *     NAK, sent again and ACKed; FETCH_ADD, ATOMIC_ACK; requests carrying
 *     ACKs; UC SEND_ONLY and WRITE_ONLY_IMM; ATOMIC_WRITE, ACK; FIN
 *     handshake.
 *  2. port 4791: hellos, then a segment with an unknown opcode and a valid
 *     looking SEND_ONLY the dissector must not decode any more.
 *  3. port 4791: a hello REJECT.
 *  4. port 18515: hellos, SEND_ONLY, ACK: decoded only with the port
 *     preference set to 18515; its TCP options are decoded regardless.
 *  5. port 4791: an encrypted link: hellos with the TLS flag and nonces,
 *     then TLS records (key confirmations, data; one across two TCP
 *     segments, two in one), without the trdma TCP option.
 *
 * Then UD datagrams, one UDP datagram each (from and to the UD port): a
 * UD_SEND_ONLY, a UD_SEND_ONLY_IMM back, two QP1 MADs (the second with a
 * Q_Key that is not QP1's), malformed ones (shorter than a BTH, cut in the
 * ImmDt, an RC opcode, a length field that is not the payload's, flags
 * other than SE and reserved bits, a nonzero offset), and one to UDP port
 * 18516, decoded only with the UDP port preference set to it.
 *
 * Every data segment after the hellos carries the trdma TCP option (kind
 * 254, ExID 0x7464) naming the trdma segment its first payload byte
 * belongs to.  The wire structures come from include/uapi/rdma/trdma-wire.h.
 * (trdma's own sender ends every trdma segment at a packet boundary; the
 * capture does not, because TCP does not promise it: a sender without the
 * option, GRO/TSO on the capturing host or a middlebox cuts the stream
 * anywhere, and the dissector must cope.)
 */
#include <rdma/trdma-wire.h>

#include <endian.h>

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Bytes = std::vector<uint8_t>;

static_assert(sizeof(trdma_hello) == 64, "trdma_hello");
static_assert(sizeof(trdma_bth) == 20, "trdma_bth");
static_assert(sizeof(trdma_reth) == 16, "trdma_reth");
static_assert(sizeof(trdma_aeth) == 8, "trdma_aeth");
static_assert(sizeof(trdma_atomic_eth) == 32, "trdma_atomic_eth");
static_assert(sizeof(trdma_atomic_ack_eth) == 8, "trdma_atomic_ack_eth");
static_assert(sizeof(trdma_immdt) == 4, "trdma_immdt");
static_assert(sizeof(trdma_tcp_opt) == TRDMA_TCPOPT_LEN, "trdma_tcp_opt");

static_assert(sizeof(trdma_deth) == 8, "trdma_deth");

constexpr uint16_t kOtherPort = 18515;	// connection 4's server port
constexpr uint16_t kOtherUdPort = 18516; // the last datagram's UDP port

std::string fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char *f, ...)
{
	char buf[256];
	va_list ap;

	va_start(ap, f);
	vsnprintf(buf, sizeof(buf), f, ap);
	va_end(ap);
	return buf;
}

/* Field values as `tshark -T fields` prints them. */
std::string dec(uint64_t v) { return fmt("%" PRIu64, v); }
std::string hex8(uint8_t v) { return fmt("0x%02x", v); }
std::string hex16(uint16_t v) { return fmt("0x%04x", v); }
std::string hex32(uint32_t v) { return fmt("0x%08x", v); }
std::string hex64(uint64_t v) { return fmt("0x%016" PRIx64, v); }
std::string boolean(bool v) { return v ? "1" : "0"; }

std::string hexbytes(const Bytes &b)
{
	std::string s;

	for (uint8_t c : b)
		s += fmt("%02x", c);
	return s;
}

template <typename T> void append(Bytes &b, const T &s)
{
	const auto *p = reinterpret_cast<const uint8_t *>(&s);

	b.insert(b.end(), p, p + sizeof(s));
}

void put8(Bytes &b, uint8_t v) { b.push_back(v); }
void put16(Bytes &b, uint16_t v)
{
	b.push_back(v >> 8);
	b.push_back(v);
}
void put32(Bytes &b, uint32_t v)
{
	put16(b, v >> 16);
	put16(b, v);
}

/* The Internet checksum of b, starting from the partial sum sum. */
uint16_t csum(const Bytes &b, uint32_t sum = 0)
{
	for (size_t i = 0; i < b.size(); i += 2)
		sum += b[i] << 8 | (i + 1 < b.size() ? b[i + 1] : 0);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return ~sum & 0xffff;
}

/* The IPv4 pseudo header of protocol proto, followed by l4 (for csum). */
Bytes pseudo_header(uint32_t src, uint32_t dst, uint8_t proto, const Bytes &l4)
{
	Bytes b;

	put32(b, src);
	put32(b, dst);
	put16(b, proto);
	put16(b, l4.size());
	b.insert(b.end(), l4.begin(), l4.end());
	return b;
}

/* An Ethernet frame with an IPv4 header (DF, TTL 64) and l4 after it. */
Bytes ipv4_frame(const uint8_t src_mac[6], const uint8_t dst_mac[6],
		 uint32_t src, uint32_t dst, uint8_t proto, uint16_t id,
		 const Bytes &l4)
{
	Bytes ip, eth;

	put8(ip, 0x45);
	put8(ip, 0);
	put16(ip, 20 + l4.size());
	put16(ip, id);
	put16(ip, 0x4000);		/* DF */
	put8(ip, 64);
	put8(ip, proto);
	put16(ip, 0);
	put32(ip, src);
	put32(ip, dst);
	uint16_t ic = csum(ip);
	ip[10] = ic >> 8;
	ip[11] = ic;

	eth.insert(eth.end(), dst_mac, dst_mac + 6);
	eth.insert(eth.end(), src_mac, src_mac + 6);
	put16(eth, 0x0800);
	eth.insert(eth.end(), ip.begin(), ip.end());
	eth.insert(eth.end(), l4.begin(), l4.end());
	while (eth.size() < 60)
		eth.push_back(0);	/* Ethernet padding */
	return eth;
}

/* Classic pcap, microsecond time stamps, Ethernet. */
class PcapWriter {
public:
	explicit PcapWriter(const std::string &path)
		: out_(path, std::ios::binary)
	{
		if (!out_)
			throw std::runtime_error("cannot create " + path);
		le32(0xa1b2c3d4);
		le16(2);
		le16(4);
		le32(0);	/* thiszone */
		le32(0);	/* sigfigs */
		le32(262144);	/* snaplen */
		le32(1);	/* LINKTYPE_ETHERNET */
	}

	void packet(uint64_t usec, const Bytes &frame)
	{
		le32(usec / 1000000);
		le32(usec % 1000000);
		le32(frame.size());
		le32(frame.size());
		out_.write(reinterpret_cast<const char *>(frame.data()),
			   frame.size());
	}

	~PcapWriter() noexcept(false)
	{
		out_.close();
		if (!out_)
			throw std::runtime_error("cannot write the pcap");
	}

private:
	void le16(uint16_t v)
	{
		uint8_t b[2] = {uint8_t(v), uint8_t(v >> 8)};

		out_.write(reinterpret_cast<char *>(b), 2);
	}
	void le32(uint32_t v)
	{
		le16(v);
		le16(v >> 16);
	}

	std::ofstream out_;
};

/*
 * One trdma PDU (hello or segment) and what the dissector shows for it:
 * field values by field name, and its Info column text.
 */
struct Pdu {
	uint16_t server_port = 0;	/* the connection's; a datagram's port */
	bool udp = false;		/* a UD datagram */
	uint32_t start = 0;		/* relative seq of its first byte */
	Bytes bytes;
	bool hello = false;
	bool record = false;		/* a TLS record of an encrypted link */
	uint8_t opcode = 0;
	uint32_t qpn = 0, msn = 0;
	bool stopped = false;		/* not decoded: a malformed one before */
	bool malformed = false;		/* has an expert of group MALFORMED */
	std::vector<std::string> experts;	/* the expert infos' names */
	std::map<std::string, std::string> fields;
	std::string info;
};

/* The trdma TCP option of one TCP segment, as sent and as decoded. */
struct TcpOpt {
	uint8_t opcode;
	uint32_t qpn, msn, offset;
	uint32_t seg_offset;		/* relative seq - offset */
	int agrees = -1;		/* -1: the BTH is not in this packet */
};

struct Frame {
	uint16_t server_port = 0;
	std::vector<std::shared_ptr<Pdu>> completed;	/* last byte here */
	bool has_opt = false;
	TcpOpt opt{};
};

/* The output: every frame in order, and the pcap. */
struct Capture {
	explicit Capture(const std::string &path) : pcap(path) {}

	PcapWriter pcap;
	std::vector<Frame> frames;	/* frames[i] is frame i + 1 */
	uint64_t usec = 1700000000ull * 1000000;
};

/* One TCP endpoint of a connection and the byte stream it sends. */
struct Side {
	uint8_t mac[6];
	uint32_t ip;
	uint16_t port;
	uint32_t isn;
	uint32_t ts;		/* the last TCP timestamp value sent */
	uint16_t ip_id;
	uint32_t qpn;		/* the QP's */
	Bytes stream;		/* everything queued, from relative seq 1 */
	uint32_t sent = 0;	/* bytes of stream sent */
	bool fin = false;
	std::vector<std::shared_ptr<Pdu>> pdus;
};

/* tcp_flags */
enum : uint8_t { FIN = 0x01, SYN = 0x02, PSH = 0x08, ACK = 0x10 };

/*
 * How Conn::send() sends: TAMPER_MSN puts a wrong MSN into the first TCP
 * segment's option; UNTAGGED leaves the option off; UNCAPTURED sends
 * without a trace in the capture; WITH_FIN sets FIN on the last segment.
 */
constexpr unsigned TAMPER_MSN = 1, UNTAGGED = 2, UNCAPTURED = 4, WITH_FIN = 8;

class Conn {
public:
	Capture &cap;
	Side c, s;	/* client (connects) and server (accepts) */

	Conn(Capture &capture, uint16_t cport, uint16_t sport, uint32_t cisn,
	     uint32_t sisn, uint32_t cqpn, uint32_t sqpn)
		: cap(capture),
		  c{{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}, 0x0a000001, cport,
		    cisn, 1000000, 0x1000, cqpn, {}, 0, false, {}},
		  s{{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}, 0x0a000002, sport,
		    sisn, 5000000, 0x8000, sqpn, {}, 0, false, {}}
	{
	}

	/* SYN, SYN-ACK, ACK with Linux's SYN options. */
	void handshake()
	{
		Bytes o;

		syn_options(o, 0);
		emit(c, SYN, o, {}, nullptr);
		o.clear();
		syn_options(o, c.ts);
		emit(s, SYN | ACK, o, {}, nullptr);
		ack(c);
	}

	/*
	 * The handshake, the client's hello REQ (start_msn, sq_psn), the
	 * server's ACCEPT (accept_msn), and the client's ACK of it.
	 */
	void connect(uint32_t start_msn, uint32_t sq_psn, uint32_t accept_msn)
	{
		handshake();
		hello(c, TRDMA_HELLO_REQ, start_msn, 0, sq_psn);
		send(c, {64});
		hello(s, TRDMA_HELLO_ACCEPT, accept_msn, 0);
		send(s, {64});
		ack(c);
	}

	/* A pure ACK from side a. */
	void ack(Side &a) { emit(a, ACK, ts_options(a), {}, nullptr); }

	/* A FIN from side a. */
	void fin(Side &a) { emit(a, FIN | ACK, ts_options(a), {}, nullptr); }

	/* FIN from the client, FIN-ACK, ACK. */
	void close()
	{
		fin(c);
		fin(s);
		ack(c);
	}

	/* Queues a hello from side a; sq_psn >= 0: a REQ's proof of it. */
	void hello(Side &a, uint8_t type, uint32_t start_msn, uint32_t status,
		   int64_t sq_psn = -1, const Bytes *nonce = nullptr)
	{
		Side &b = peer(a);
		trdma_hello h{};
		auto p = std::make_shared<Pdu>();

		h.magic = htobe32(TRDMA_HELLO_MAGIC);
		h.version = TRDMA_WIRE_VERSION;
		h.type = type;
		h.src_qpn = htobe32(a.qpn);
		h.dst_qpn = htobe32(b.qpn);
		h.start_msn = htobe32(start_msn);
		h.path_mtu = 3;			/* IB_MTU_1024 */
		h.max_rd_atomic = 8;
		h.max_dest_rd_atomic = 16;
		h.status = htobe32(status);
		if (sq_psn >= 0) {
			h.flags = htobe16(TRDMA_HELLO_SQ_PSN);
			h.sq_psn = htobe32((uint32_t)sq_psn);
		}
		if (nonce)
			h.flags |= htobe16(TRDMA_HELLO_TLS);
		gid(h.src_gid, a.ip);
		gid(h.dst_gid, b.ip);
		append(p->bytes, h);
		if (nonce)
			p->bytes.insert(p->bytes.end(), nonce->begin(),
					nonce->end());

		static const char *const types[] = {"", "REQ", "ACCEPT",
						    "REJECT"};
		auto &f = p->fields;
		p->hello = true;
		f["trdma.hello.magic"] = hex32(TRDMA_HELLO_MAGIC);
		f["trdma.hello.version"] = dec(TRDMA_WIRE_VERSION);
		f["trdma.hello.type"] = dec(type);
		f["trdma.hello.src_qpn"] = dec(a.qpn);
		f["trdma.hello.dst_qpn"] = dec(b.qpn);
		f["trdma.hello.start_msn"] = dec(start_msn);
		f["trdma.hello.path_mtu"] = dec(3);
		f["trdma.hello.max_rd_atomic"] = dec(8);
		f["trdma.hello.max_dest_rd_atomic"] = dec(16);
		f["trdma.hello.status"] = dec(status);
		f["trdma.hello.flags"] = hex16((sq_psn >= 0 ? TRDMA_HELLO_SQ_PSN : 0) |
					       (nonce ? TRDMA_HELLO_TLS : 0));
		f["trdma.hello.flags.sq_psn"] = boolean(sq_psn >= 0);
		f["trdma.hello.flags.uc"] = boolean(false);
		f["trdma.hello.flags.tls"] = boolean(nonce != nullptr);
		if (nonce)
			f["trdma.hello.nonce"] = hexbytes(*nonce);
		f["trdma.hello.sq_psn"] = dec(sq_psn >= 0 ? (uint32_t)sq_psn : 0);
		f["trdma.hello.src_gid"] = gid_str(a.ip);
		f["trdma.hello.dst_gid"] = gid_str(b.ip);
		p->info = fmt("HELLO %s src_qpn=%u dst_qpn=%u start_msn=%u",
			      types[type], a.qpn, b.qpn, start_msn);
		if (sq_psn >= 0)
			p->info += fmt(" sq_psn=%u", (uint32_t)sq_psn);
		if (nonce)
			p->info += " tls";
		if (type == TRDMA_HELLO_REJECT)
			p->info += fmt(" status=%u", status);
		queue(a, p);
	}

	/*
	 * Queues a TLS 1.3 application-data record of len bytes after its
	 * header (ciphertext: bytes that mean nothing, here a counter from
	 * seed) from side a: an encrypted link's stream after the hellos.
	 */
	void record(Side &a, uint16_t len, uint8_t seed)
	{
		auto p = std::make_shared<Pdu>();

		p->record = true;
		p->bytes = {0x17, 0x03, 0x03, uint8_t(len >> 8), uint8_t(len)};
		for (uint16_t i = 0; i < len; i++)
			p->bytes.push_back(uint8_t(seed + 7 * i));
		p->fields["trdma.tls_record.length"] = dec(len);
		p->info = fmt("TLS record, %u bytes (encrypted)", len);
		queue(a, p);
	}

	/*
	 * Queues a segment from side a to its peer's QP; ext is the
	 * extension headers (RETH/AtomicETH, AETH, AtomicAckETH, ImmDt, in
	 * that order), their expected field values already in p->fields.
	 */
	std::shared_ptr<Pdu> segment(Side &a, uint8_t op, uint8_t flags,
				     uint32_t msn, uint32_t offset,
				     const Bytes &ext, const Bytes &payload,
				     std::shared_ptr<Pdu> p = nullptr)
	{
		trdma_bth bth{};

		if (!p)
			p = std::make_shared<Pdu>();
		bth.opcode = op;
		bth.flags = flags;
		bth.dest_qpn = htobe32(peer(a).qpn);
		bth.msn = htobe32(msn);
		bth.offset = htobe32(offset);
		bth.length = htobe32(payload.size());
		append(p->bytes, bth);
		p->bytes.insert(p->bytes.end(), ext.begin(), ext.end());
		p->bytes.insert(p->bytes.end(), payload.begin(), payload.end());
		p->opcode = op;
		p->qpn = peer(a).qpn;
		p->msn = msn;

		auto &f = p->fields;
		f["trdma.bth.opcode"] = hex8(op);
		f["trdma.bth.flags"] = hex8(flags);
		f["trdma.bth.se"] = boolean(flags & TRDMA_BTH_SE);
		f["trdma.bth.ackreq"] = boolean(flags & TRDMA_BTH_ACKREQ);
		f["trdma.bth.aeth"] = boolean(flags & TRDMA_BTH_AETH);
		f["trdma.bth.dest_qpn"] = dec(p->qpn);
		f["trdma.bth.msn"] = dec(msn);
		f["trdma.bth.offset"] = dec(offset);
		f["trdma.bth.length"] = dec(payload.size());
		if (!payload.empty())
			f["trdma.payload"] = hexbytes(payload);
		p->info = fmt("%s qpn=%u msn=%u len=%zu", opname(op), p->qpn,
			      msn, payload.size()) + p->info;
		queue(a, p);
		return p;
	}

	/*
	 * Sends the next bytes of a's stream as TCP segments of the given
	 * sizes, as how says (TAMPER_MSN, UNTAGGED, UNCAPTURED, WITH_FIN).
	 */
	void send(Side &a, std::initializer_list<uint32_t> sizes,
		  unsigned how = 0)
	{
		size_t n = 0;

		for (uint32_t size : sizes) {
			uint32_t rel = a.sent + 1;
			Bytes payload(a.stream.begin() + a.sent,
				      a.stream.begin() + a.sent + size);
			auto first = pdu_at(a, rel);
			Frame fr;
			Bytes o = ts_options(a);

			/* Encrypted links carry no trdma TCP option. */
			if (!first->hello && !first->record &&
			    !(how & UNTAGGED)) {
				trdma_tcp_opt opt{};

				fr.has_opt = true;
				fr.opt.opcode = first->opcode;
				fr.opt.qpn = first->qpn;
				fr.opt.msn = first->msn +
					     ((how & TAMPER_MSN) && !n ? 1000 : 0);
				fr.opt.offset = first->start;
				fr.opt.seg_offset = rel - first->start;
				if (fr.opt.seg_offset == 0 && size >= 12)
					fr.opt.agrees = fr.opt.msn ==
							first->msn;
				opt.kind = TRDMA_TCPOPT_KIND;
				opt.len = TRDMA_TCPOPT_LEN;
				opt.exid = htobe16(TRDMA_TCPOPT_EXID);
				opt.op_qpn = htobe32(uint32_t(fr.opt.opcode)
						     << 24 | fr.opt.qpn);
				opt.msn = htobe32(fr.opt.msn);
				opt.offset = htobe32(fr.opt.offset);
				append(o, opt);
			}
			for (auto &p : a.pdus) {
				uint32_t end = p->start + p->bytes.size();

				if (end > rel && end <= rel + size)
					fr.completed.push_back(p);
			}
			a.sent += size;
			uint8_t flags = ++n < sizes.size() ? ACK
				      : PSH | ACK | (how & WITH_FIN ? FIN : 0);
			if (!(how & UNCAPTURED))
				emit(a, flags, o, payload, &fr);
		}
	}

	/*
	 * Sends size bytes of a's stream from relative seq rel again, without
	 * the trdma TCP option, as TCP retransmits them once the QP let go.
	 */
	void resend(Side &a, uint32_t rel, uint32_t size)
	{
		Bytes payload(a.stream.begin() + rel - 1,
			      a.stream.begin() + rel - 1 + size);

		emit(a, PSH | ACK, ts_options(a), payload, nullptr, rel);
	}

	Side &peer(Side &a) { return &a == &c ? s : c; }

private:
	void queue(Side &a, std::shared_ptr<Pdu> p)
	{
		p->server_port = s.port;
		p->start = a.stream.size() + 1;
		a.stream.insert(a.stream.end(), p->bytes.begin(),
				p->bytes.end());
		a.pdus.push_back(p);
	}

	std::shared_ptr<Pdu> pdu_at(Side &a, uint32_t rel)
	{
		for (auto &p : a.pdus)
			if (rel >= p->start && rel < p->start + p->bytes.size())
				return p;
		throw std::logic_error("no PDU at that offset");
	}

	/* An IPv4-mapped GID. */
	static void gid(uint8_t g[16], uint32_t ip)
	{
		memset(g, 0, 16);
		g[10] = g[11] = 0xff;
		g[12] = ip >> 24;
		g[13] = ip >> 16;
		g[14] = ip >> 8;
		g[15] = ip;
	}
	static std::string gid_str(uint32_t ip)
	{
		return fmt("::ffff:%u.%u.%u.%u", ip >> 24, (ip >> 16) & 0xff,
			   (ip >> 8) & 0xff, ip & 0xff);
	}

	/* MSS 1460, SACK permitted, timestamps, NOP, window scale 7. */
	void syn_options(Bytes &o, uint32_t tsecr)
	{
		Side &a = tsecr ? s : c;

		put8(o, 2), put8(o, 4), put16(o, 1460);
		put8(o, 4), put8(o, 2);
		put8(o, 8), put8(o, 10), put32(o, a.ts + 1), put32(o, tsecr);
		put8(o, 1);
		put8(o, 3), put8(o, 3), put8(o, 7);
	}

	/* NOP, NOP, timestamps: what Linux puts on every segment. */
	Bytes ts_options(Side &a)
	{
		Bytes o;

		put8(o, 1), put8(o, 1);
		put8(o, 8), put8(o, 10), put32(o, a.ts + 1), put32(o, peer(a).ts);
		return o;
	}

	/*
	 * One Ethernet/IPv4/TCP frame from a; fr: what it carries; rel: the
	 * relative seq of its first byte, 0: after the bytes sent before.
	 */
	void emit(Side &a, uint8_t flags, const Bytes &opts,
		  const Bytes &payload, Frame *fr, uint32_t rel = 0)
	{
		Side &b = peer(a);
		bool syn = flags & SYN;
		/* a.fin: a's FIN went out before, and took a sequence number */
		uint32_t seq = rel ? a.isn + rel
				   : a.isn + (syn ? 0 : 1 + a.sent - payload.size()) +
					     (a.fin ? 1 : 0);
		uint32_t ackn = b.isn + 1 + b.sent + (b.fin ? 1 : 0);
		Bytes tcp;

		if (opts.size() % 4)
			throw std::logic_error("TCP options not padded");
		put16(tcp, a.port);
		put16(tcp, b.port);
		put32(tcp, seq);
		put32(tcp, (flags & ACK) ? ackn : 0);
		put8(tcp, (20 + opts.size()) / 4 << 4);
		put8(tcp, flags);
		put16(tcp, syn ? 64240 : 502);	/* scaled by 2^7 after SYN */
		put16(tcp, 0);			/* checksum */
		put16(tcp, 0);			/* urgent pointer */
		tcp.insert(tcp.end(), opts.begin(), opts.end());
		tcp.insert(tcp.end(), payload.begin(), payload.end());

		uint16_t tc = csum(pseudo_header(a.ip, b.ip, 6, tcp));
		tcp[16] = tc >> 8;
		tcp[17] = tc;

		cap.usec += 40;
		a.ts += 1;
		cap.pcap.packet(cap.usec, ipv4_frame(a.mac, b.mac, a.ip, b.ip, 6,
						     a.ip_id++, tcp));
		Frame f = fr ? *fr : Frame{};
		f.server_port = s.port;
		cap.frames.push_back(f);
		if (flags & FIN)
			a.fin = true;
	}

public:
	static const char *opname(uint8_t op)
	{
		static const char *const names[] = {
			"SEND_FIRST", "SEND_MIDDLE", "SEND_LAST",
			"SEND_LAST_IMM", "SEND_ONLY", "SEND_ONLY_IMM",
			"WRITE_FIRST", "WRITE_MIDDLE", "WRITE_LAST",
			"WRITE_LAST_IMM", "WRITE_ONLY", "WRITE_ONLY_IMM",
			"READ_REQUEST", "READ_RESPONSE_FIRST",
			"READ_RESPONSE_MIDDLE", "READ_RESPONSE_LAST",
			"READ_RESPONSE_ONLY", "ACK", "ATOMIC_ACK",
			"COMPARE_SWAP", "FETCH_ADD", "UNKNOWN",
			"SEND_LAST_INV", "SEND_ONLY_INV", "UNKNOWN", "UNKNOWN",
			"UNKNOWN", "UNKNOWN", "UNKNOWN", "ATOMIC_WRITE"};
		static const char *const uc[] = {
			"UC_SEND_FIRST", "UC_SEND_MIDDLE", "UC_SEND_LAST",
			"UC_SEND_LAST_IMM", "UC_SEND_ONLY", "UC_SEND_ONLY_IMM",
			"UC_WRITE_FIRST", "UC_WRITE_MIDDLE", "UC_WRITE_LAST",
			"UC_WRITE_LAST_IMM", "UC_WRITE_ONLY",
			"UC_WRITE_ONLY_IMM"};

		if (op >= TRDMA_OP_UC_SEND_FIRST &&
		    op <= TRDMA_OP_UC_WRITE_ONLY_IMM)
			return uc[op - TRDMA_OP_UC];
		return op < sizeof(names) / sizeof(names[0]) ? names[op]
							     : "UNKNOWN";
	}
};

/* A recognisable payload: every message's bytes differ. */
Bytes pattern(uint32_t msn, uint32_t offset, uint32_t len)
{
	Bytes b(len);

	for (uint32_t i = 0; i < len; i++)
		b[i] = uint8_t(msn * 37 + (offset + i) * 7 + ((offset + i) >> 8));
	return b;
}

/* Extension headers, with what the dissector shows for them. */
void reth(Bytes &b, Pdu &p, uint64_t va, uint32_t rkey, uint32_t dma_len)
{
	trdma_reth r{};

	r.va = htobe64(va);
	r.rkey = htobe32(rkey);
	r.dma_len = htobe32(dma_len);
	append(b, r);
	p.fields["trdma.reth.va"] = hex64(va);
	p.fields["trdma.reth.rkey"] = hex32(rkey);
	p.fields["trdma.reth.dma_len"] = dec(dma_len);
	p.info += fmt(" va=0x%016" PRIx64 " rkey=0x%08x", va, rkey);
}

void aeth(Bytes &b, Pdu &p, uint8_t syndrome, uint32_t msn)
{
	trdma_aeth a{};

	a.syndrome = syndrome;
	a.msn = htobe32(msn);
	append(b, a);
	p.fields["trdma.aeth.syndrome"] = hex8(syndrome);
	p.fields["trdma.aeth.msn"] = dec(msn);
	if ((syndrome & 0xe0) == TRDMA_AETH_RNR_NAK)
		p.fields["trdma.aeth.rnr_timer"] = dec(syndrome & 0x1f);
	if (syndrome == TRDMA_AETH_ACK)
		p.info += fmt(" aeth=ACK/%u", msn);
	else if ((syndrome & 0xe0) == TRDMA_AETH_RNR_NAK)
		p.info += fmt(" aeth=RNR_NAK/%u timer=%u", msn, syndrome & 0x1f);
	else if (syndrome == TRDMA_AETH_NAK_INV_REQ)
		p.info += fmt(" aeth=NAK_INV_REQ/%u", msn);
	else if (syndrome == TRDMA_AETH_NAK_REM_ACCESS)
		p.info += fmt(" aeth=NAK_REM_ACCESS/%u", msn);
	else if (syndrome == TRDMA_AETH_NAK_REM_OP)
		p.info += fmt(" aeth=NAK_REM_OP/%u", msn);
	else
		p.info += fmt(" aeth=0x%02x/%u", syndrome, msn);
}

/* Queues a plain ACK of message msn from side a. */
std::shared_ptr<Pdu> ack_segment(Conn &k, Side &a, uint32_t msn)
{
	Bytes e;
	auto p = std::make_shared<Pdu>();

	aeth(e, *p, TRDMA_AETH_ACK, msn);
	return k.segment(a, TRDMA_OP_ACK, 0, msn, 0, e, {}, p);
}

void atomic_eth(Bytes &b, Pdu &p, uint64_t va, uint32_t rkey,
		uint64_t swap_add, uint64_t compare)
{
	trdma_atomic_eth a{};

	a.va = htobe64(va);
	a.rkey = htobe32(rkey);
	a.swap_add = htobe64(swap_add);
	a.compare = htobe64(compare);
	append(b, a);
	p.fields["trdma.atomic.va"] = hex64(va);
	p.fields["trdma.atomic.rkey"] = hex32(rkey);
	p.fields["trdma.atomic.swap_add"] = hex64(swap_add);
	p.fields["trdma.atomic.compare"] = hex64(compare);
	p.info += fmt(" va=0x%016" PRIx64 " rkey=0x%08x", va, rkey);
}

void atomic_ack_eth(Bytes &b, Pdu &p, uint64_t orig)
{
	trdma_atomic_ack_eth a{};

	a.orig = htobe64(orig);
	append(b, a);
	p.fields["trdma.atomicack.orig"] = hex64(orig);
}

void immdt(Bytes &b, Pdu &p, uint32_t data)
{
	trdma_immdt i{};

	i.data = htobe32(data);
	append(b, i);
	p.fields["trdma.immdt"] = hex32(data);
	p.info += fmt(" imm=0x%08x", data);
}

/* Connection 1: every kind of segment, reassembly, option cases. */
void conn_main(Capture &cap)
{
	Conn k(cap, 40001, TRDMA_DEFAULT_PORT, 0x1a2b3c4d, 0xfedc0123, 17,
	       18);
	Side &c = k.c, &s = k.s;
	const uint8_t SE = TRDMA_BTH_SE, AR = TRDMA_BTH_ACKREQ;

	k.connect(100, 500, 500);

	/* SEND_ONLY in one TCP segment. */
	k.segment(c, TRDMA_OP_SEND_ONLY, SE | AR, 100, 0, {},
		  pattern(100, 0, 1000));
	k.send(c, {1020});

	/* SEND_FIRST/MIDDLE/LAST (1420 + 1420 + 620 bytes) in five TCP
	 * segments: FIRST ends in the 2nd, MIDDLE in the 4th. */
	k.segment(c, TRDMA_OP_SEND_FIRST, 0, 101, 0, {}, pattern(101, 0, 1400));
	k.segment(c, TRDMA_OP_SEND_MIDDLE, 0, 101, 1400, {},
		  pattern(101, 1400, 1400));
	k.segment(c, TRDMA_OP_SEND_LAST, AR, 101, 2800, {},
		  pattern(101, 2800, 600));
	k.send(c, {1000, 420, 1200, 220, 620});
	k.ack(s);

	ack_segment(k, s, 101);
	k.send(s, {28});

	/* WRITE_ONLY_IMM and READ_REQUEST in one TCP segment. */
	{
		Bytes e;
		auto p = std::make_shared<Pdu>();

		reth(e, *p, 0x00007f1234560000ull, 0x1234abcd, 512);
		immdt(e, *p, 0xdeadbeef);
		k.segment(c, TRDMA_OP_WRITE_ONLY_IMM, AR, 102, 0, e,
			  pattern(102, 0, 512), p);
	}
	{
		Bytes e;
		auto p = std::make_shared<Pdu>();

		reth(e, *p, 0x00007f0000001000ull, 0x0badf00d, 2000);
		k.segment(c, TRDMA_OP_READ_REQUEST, 0, 103, 0, e, {}, p);
	}
	k.send(c, {552 + 36});

	/* ACK, then READ_RESPONSE_FIRST whose header straddles two TCP
	 * segments (12 of its 28 header bytes in the first), then
	 * READ_RESPONSE_LAST. */
	ack_segment(k, s, 102);
	{
		Bytes e;
		auto p = std::make_shared<Pdu>();

		aeth(e, *p, TRDMA_AETH_ACK, 103);
		k.segment(s, TRDMA_OP_READ_RESPONSE_FIRST, 0, 103, 0, e,
			  pattern(103, 0, 1200), p);
	}
	{
		Bytes e;
		auto p = std::make_shared<Pdu>();

		aeth(e, *p, TRDMA_AETH_ACK, 103);
		k.segment(s, TRDMA_OP_READ_RESPONSE_LAST, 0, 103, 1200, e,
			  pattern(103, 1200, 800), p);
	}
	k.send(s, {28 + 12, 16 + 1200, 28 + 800});
	k.ack(c);

	/* COMPARE_SWAP whose option names a wrong MSN; ATOMIC_ACK. */
	{
		Bytes e;
		auto p = std::make_shared<Pdu>();

		atomic_eth(e, *p, 0x00007f0000002000ull, 0x0badf00d,
			   0x1111222233334444ull, 0x5555666677778888ull);
		k.segment(c, TRDMA_OP_COMPARE_SWAP, 0, 104, 0, e, {}, p);
		k.send(c, {52}, TAMPER_MSN);
	}
	{
		Bytes e;
		auto p = std::make_shared<Pdu>();

		aeth(e, *p, TRDMA_AETH_ACK, 104);
		atomic_ack_eth(e, *p, 0x5555666677778888ull);
		k.segment(s, TRDMA_OP_ATOMIC_ACK, 0, 104, 0, e, {}, p);
		k.send(s, {36});
	}

	/* SEND_ONLY_IMM refused with an RNR NAK (timer 14), sent again. */
	for (int i = 0; i < 2; i++) {
		Bytes e, ea;
		auto p = std::make_shared<Pdu>(), pa = std::make_shared<Pdu>();

		immdt(e, *p, 0x01020304);
		k.segment(c, TRDMA_OP_SEND_ONLY_IMM, SE, 105, 0, e,
			  pattern(105, 0, 64), p);
		k.send(c, {88});
		aeth(ea, *pa, i ? TRDMA_AETH_ACK : TRDMA_AETH_RNR_NAK | 14,
		     i ? 105 : 104);
		k.segment(s, TRDMA_OP_ACK, 0, i ? 105 : 104, 0, ea, {}, pa);
		k.send(s, {28});
	}

	/* FETCH_ADD, ATOMIC_ACK. */
	{
		Bytes e;
		auto p = std::make_shared<Pdu>();

		atomic_eth(e, *p, 0x00007f0000002008ull, 0x0badf00d, 5, 0);
		k.segment(c, TRDMA_OP_FETCH_ADD, AR, 106, 0, e, {}, p);
		k.send(c, {52});
	}
	{
		Bytes e;
		auto p = std::make_shared<Pdu>();

		aeth(e, *p, TRDMA_AETH_ACK, 106);
		atomic_ack_eth(e, *p, 42);
		k.segment(s, TRDMA_OP_ATOMIC_ACK, 0, 106, 0, e, {}, p);
		k.send(s, {36});
	}

	/* Requests carrying ACKs both ways (TRDMA_BTH_AETH): a WRITE_ONLY,
	 * a SEND_ONLY back with the ACK of the WRITE (RETH, then AETH), a
	 * SEND_ONLY with the ACK of that. */
	{
		Bytes e;
		auto p = std::make_shared<Pdu>();

		reth(e, *p, 0x00007f0000003000ull, 0x0badf00d, 16);
		k.segment(c, TRDMA_OP_WRITE_ONLY, AR, 107, 0, e,
			  pattern(107, 0, 16), p);
		k.send(c, {20 + 16 + 16});
	}
	{
		Bytes e;
		auto p = std::make_shared<Pdu>();

		aeth(e, *p, TRDMA_AETH_ACK, 107);
		k.segment(s, TRDMA_OP_SEND_ONLY, AR | TRDMA_BTH_AETH, 500, 0, e,
			  pattern(500, 0, 32), p);
		k.send(s, {20 + 8 + 32});
	}
	{
		Bytes e;
		auto p = std::make_shared<Pdu>();

		reth(e, *p, 0x00007f0000003010ull, 0x0badf00d, 8);
		aeth(e, *p, TRDMA_AETH_ACK, 500);
		k.segment(c, TRDMA_OP_WRITE_ONLY, AR | TRDMA_BTH_AETH, 108, 0,
			  e, pattern(108, 0, 8), p);
		k.send(c, {20 + 16 + 8 + 8});
	}
	/* UC opcodes: the headers of their RC counterparts (the dissector
	 * keeps no state, the connection's type does not matter to it). */
	k.segment(c, TRDMA_OP_UC_SEND_ONLY, SE, 109, 0, {},
		  pattern(109, 0, 24));
	k.send(c, {20 + 24});
	{
		Bytes e;
		auto p = std::make_shared<Pdu>();

		reth(e, *p, 0x00007f0000004000ull, 0x0badf00d, 12);
		immdt(e, *p, 0x0c0ffee0);
		k.segment(c, TRDMA_OP_UC_WRITE_ONLY_IMM, 0, 110, 0, e,
			  pattern(110, 0, 12), p);
		k.send(c, {20 + 16 + 4 + 12});
	}
	/* ATOMIC_WRITE: RETH (dma_len 8), 8 payload bytes; ACK. */
	{
		Bytes e;
		auto p = std::make_shared<Pdu>();

		reth(e, *p, 0x00007f0000005008ull, 0x0badf00d, 8);
		k.segment(c, TRDMA_OP_ATOMIC_WRITE, AR, 111, 0, e,
			  pattern(111, 0, 8), p);
		k.send(c, {20 + 16 + 8});
	}
	ack_segment(k, s, 111);
	k.send(s, {28});
	k.close();
}

/*
 * Connection 2: an unknown opcode.  The dissector flags it and decodes
 * nothing more of that direction: not the SEND_ONLY that follows.
 */
void conn_malformed(Capture &cap)
{
	Conn k(cap, 40002, TRDMA_DEFAULT_PORT, 0x00000001, 0x7fffffff, 33,
	       34);
	Side &c = k.c;

	k.handshake();
	k.hello(c, TRDMA_HELLO_REQ, 1, 0);
	k.send(c, {64});
	k.hello(k.s, TRDMA_HELLO_ACCEPT, 1, 0);
	k.send(k.s, {64});

	auto bad = k.segment(c, 0x1f, 0, 1, 0, {}, pattern(1, 0, 8));
	bad->malformed = true;
	bad->experts = {"trdma.unknown_opcode"};
	bad->fields.erase("trdma.payload");
	bad->info = "Unknown opcode 0x1f";
	k.send(c, {28});

	auto later = k.segment(c, TRDMA_OP_SEND_ONLY, 0, 2, 0, {},
			       pattern(2, 0, 16));
	later->fields.clear();		/* not decoded any more */
	later->info.clear();
	later->stopped = true;
	later->experts = {"trdma.stopped"};
	k.send(c, {36});
	k.ack(k.s);
}

/* Connection 3: a hello REJECT (ECONNREFUSED). */
void conn_reject(Capture &cap)
{
	Conn k(cap, 40003, TRDMA_DEFAULT_PORT, 0x55555555, 0xaaaaaaaa, 40, 41);

	k.handshake();
	k.hello(k.c, TRDMA_HELLO_REQ, 7, 0);
	k.send(k.c, {64});
	k.hello(k.s, TRDMA_HELLO_REJECT, 0, 111);
	k.send(k.s, {64});
	k.close();
}

/*
 * Connection 5: an encrypted link: hellos with the TLS flag and a nonce
 * each, then each side's key confirmation (one record of 32 bytes, the
 * content type and the tag: 49), then data records, one of them across two
 * TCP segments and two in one; no trdma TCP option.
 */
void conn_tls(Capture &cap)
{
	Conn k(cap, 40005, TRDMA_DEFAULT_PORT, 0x31415926, 0x27182818, 50, 51);
	Bytes nreq, nacc;

	for (int i = 0; i < TRDMA_HELLO_NONCE_LEN; i++) {
		nreq.push_back(0xa0 + i);
		nacc.push_back(0x30 + 3 * i);
	}
	k.handshake();
	k.hello(k.c, TRDMA_HELLO_REQ, 900, 0, 800, &nreq);
	k.send(k.c, {64 + 32});
	k.hello(k.s, TRDMA_HELLO_ACCEPT, 800, 0, -1, &nacc);
	k.record(k.s, 49, 1);
	k.send(k.s, {64 + 32 + 5 + 49});
	k.record(k.c, 49, 2);
	k.record(k.c, 1200, 3);
	k.send(k.c, {5 + 49, 700, 505});
	k.record(k.s, 17 + 28, 4);
	k.record(k.s, 17 + 36, 5);
	k.send(k.s, {5 + 45 + 5 + 53});
	k.close();
}

/*
 * --check-capture: captures of one RC connection each, for
 * tools/wireshark/check-capture (tests/unit/check-wireshark-capture.sh):
 * hellos, a SEND_ONLY over two TCP segments, the server's ACK of it, a
 * second SEND_ONLY; then the case's steps, one letter each, the ACK in
 * them the server's ACK of that second SEND (its last segment, like the
 * held ACK of docs/wire.md, "The trdma TCP option"):
 *   T  the ACK, tagged              U  the ACK, without the option
 *   L  the ACK, tagged, but missing from the capture
 *   D  the ACK, tagged, in the server's FIN
 *   R  the ACK's bytes again, without the option (a retransmission)
 *   F  the server's FIN             f  the client's FIN
 *   S  a third SEND_ONLY, from the client, tagged
 */
const struct {
	const char *name, *steps;
} kLateCases[] = {
	{"tagged", "TFf"},
	{"late", "TFRf"},
	{"no-fin", "TR"},
	{"peer-fin", "TfR"},
	{"before-fin", "TRFf"},
	{"lost-original", "LFRf"},
	{"new-bytes", "FUf"},
	{"fin-data", "DRf"},
	{"middle", "USFf"},
};

void conn_late(const std::string &path, const char *steps)
{
	Capture cap(path);
	Conn k(cap, 40006, TRDMA_DEFAULT_PORT, 0x600df00d, 0x5eed1e55, 60, 61);
	Side &c = k.c, &s = k.s;
	uint32_t last = 0;	/* relative seq of the last ACK */

	k.connect(100, 500, 500);
	k.segment(c, TRDMA_OP_SEND_ONLY, TRDMA_BTH_ACKREQ, 100, 0, {},
		  pattern(100, 0, 2000));
	k.send(c, {1020, 1000});
	ack_segment(k, s, 100);
	k.send(s, {28});
	k.segment(c, TRDMA_OP_SEND_ONLY, TRDMA_BTH_ACKREQ, 101, 0, {},
		  pattern(101, 0, 100));
	k.send(c, {120});
	for (const char *p = steps; *p; p++) {
		switch (*p) {
		case 'T':
		case 'U':
		case 'L':
		case 'D':
			last = ack_segment(k, s, 101)->start;
			k.send(s, {28}, *p == 'U' ? UNTAGGED
					: *p == 'L' ? UNCAPTURED
					: *p == 'D' ? WITH_FIN : 0);
			break;
		case 'R':
			k.resend(s, last, 28);
			break;
		case 'F':
			k.fin(s);
			break;
		case 'f':
			k.fin(c);
			break;
		case 'S':
			k.segment(c, TRDMA_OP_SEND_ONLY, 0, 102, 0, {},
				  pattern(102, 0, 64));
			k.send(c, {84});
			break;
		default:
			throw std::logic_error("no such step");
		}
	}
}

/* Connection 4: another port. */
void conn_other_port(Capture &cap)
{
	Conn k(cap, 40004, kOtherPort, 0x0badcafe, 0x12345678, 0xabcdef,
	       0x123456);

	k.handshake();
	k.hello(k.c, TRDMA_HELLO_REQ, 0, 0);
	k.send(k.c, {64});
	k.hello(k.s, TRDMA_HELLO_ACCEPT, 0, 0);
	k.send(k.s, {64});
	k.segment(k.c, TRDMA_OP_SEND_ONLY, 0, 0, 0, {}, pattern(0, 0, 200));
	k.send(k.c, {220});
	ack_segment(k, k.s, 0);
	k.send(k.s, {28});
}

/*
 * One UD datagram as sent: its BTH, DETH, ImmDt (UD_SEND_ONLY_IMM) and
 * payload, with fields a well-formed one does not have set as given.
 */
struct Ud {
	uint8_t opcode = TRDMA_OP_UD_SEND_ONLY;
	uint8_t flags = 0;
	uint16_t reserved = 0;		/* the BTH's */
	uint32_t dest_qpn = 0;		/* the 32 bits sent */
	uint32_t msn = 0;
	uint32_t offset = 0;
	int64_t length = -1;		/* the BTH's; -1: the payload's */
	uint32_t qkey = 0;
	uint32_t src_qpn = 0;		/* the 32 bits sent */
	uint32_t imm = 0;
	Bytes payload;
	size_t cut = SIZE_MAX;		/* send the first cut bytes only */
	bool forward = true;		/* 10.0.0.1 to 10.0.0.2, or back */
	uint16_t port = TRDMA_DEFAULT_UD_PORT;	/* both UDP ports */
};

/*
 * Sends u, one Ethernet/IPv4/UDP frame, and says what the dissector shows
 * for it, as docs/wire.md "UD datagrams" has the rules.
 */
void datagram(Capture &cap, const Ud &u)
{
	static const uint8_t mac1[6] = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
	static const uint8_t mac2[6] = {0x02, 0x00, 0x00, 0x00, 0x00, 0x02};
	static uint16_t ip_id = 0x2000;
	const bool imm = u.opcode == TRDMA_OP_UD_SEND_ONLY_IMM;
	const bool ud = imm || u.opcode == TRDMA_OP_UD_SEND_ONLY;
	auto p = std::make_shared<Pdu>();
	trdma_bth bth{};
	trdma_deth deth{};
	Bytes b;

	bth.opcode = u.opcode;
	bth.flags = u.flags;
	bth.reserved = htobe16(u.reserved);
	bth.dest_qpn = htobe32(u.dest_qpn);
	bth.msn = htobe32(u.msn);
	bth.offset = htobe32(u.offset);
	uint32_t length = u.length < 0 ? u.payload.size() : u.length;
	bth.length = htobe32(length);
	deth.qkey = htobe32(u.qkey);
	deth.src_qpn = htobe32(u.src_qpn);
	append(b, bth);
	append(b, deth);
	if (imm) {
		trdma_immdt i{};

		i.data = htobe32(u.imm);
		append(b, i);
	}
	const size_t hlen = b.size();
	b.insert(b.end(), u.payload.begin(), u.payload.end());
	if (u.cut < b.size())
		b.resize(u.cut);

	/* What the dissector shows. */
	auto &f = p->fields;
	auto &x = p->experts;
	const uint32_t qpn = u.dest_qpn & 0xffffff;
	const uint32_t src_qpn = u.src_qpn & 0xffffff;

	p->udp = true;
	p->server_port = u.port;
	p->bytes = b;
	if (b.size() < sizeof(bth)) {
		x.push_back("trdma.ud.short");
		p->info = fmt("Short UD datagram (%zu bytes)", b.size());
	} else {
		f["trdma.bth.opcode"] = hex8(u.opcode);
		f["trdma.bth.flags"] = hex8(u.flags);
		f["trdma.bth.se"] = boolean(u.flags & TRDMA_BTH_SE);
		f["trdma.bth.ackreq"] = boolean(u.flags & TRDMA_BTH_ACKREQ);
		f["trdma.bth.aeth"] = boolean(u.flags & TRDMA_BTH_AETH);
		f["trdma.bth.dest_qpn"] = dec(qpn);
		f["trdma.bth.msn"] = dec(u.msn);
		f["trdma.bth.offset"] = dec(u.offset);
		f["trdma.bth.length"] = dec(length);
		p->info = fmt("%s qpn=%u msn=%u len=%u",
			      !ud  ? Conn::opname(u.opcode)
			      : imm ? "UD_SEND_ONLY_IMM"
				    : "UD_SEND_ONLY",
			      qpn, u.msn, length);
		if (u.reserved || u.dest_qpn >> 24)
			x.push_back("trdma.reserved_not_zero");
	}
	if (b.size() < sizeof(bth)) {
		/* nothing more */
	} else if (!ud) {
		x.push_back("trdma.ud.bad_opcode");
		p->info = fmt("Bad UD opcode 0x%02x", u.opcode);
	} else {
		if (u.flags & ~TRDMA_BTH_SE)
			x.push_back("trdma.ud.bad_flags");
		if (u.offset)
			x.push_back("trdma.ud.bad_offset");
		if (b.size() < hlen) {
			x.push_back("trdma.ud.short");
			p->info += fmt(" [short datagram: %zu bytes]", b.size());
		} else {
			size_t n = b.size() - hlen;

			f["trdma.deth.qkey"] = hex32(u.qkey);
			f["trdma.deth.src_qpn"] = dec(src_qpn);
			p->info += fmt(" src_qpn=%u qkey=0x%08x", src_qpn, u.qkey);
			if (u.src_qpn >> 24)
				x.push_back("trdma.reserved_not_zero");
			if (qpn == 1 && u.qkey != 0x80010000)
				x.push_back("trdma.ud.gsi_qkey");
			if (imm) {
				f["trdma.immdt"] = hex32(u.imm);
				p->info += fmt(" imm=0x%08x", u.imm);
			}
			f["trdma.ud.payload_len"] = dec(n);
			if (length != n)
				x.push_back("trdma.ud.bad_length");
			if (n)
				f["trdma.payload"] = hexbytes(
					Bytes(b.begin() + hlen, b.end()));
		}
	}
	for (const auto &e : x)
		if (e != "trdma.ud.gsi_qkey")
			p->malformed = true;

	/* The frame: both UDP ports the UD port, as trdma sends. */
	const uint32_t ip1 = 0x0a000001, ip2 = 0x0a000002;
	const uint32_t src = u.forward ? ip1 : ip2, dst = u.forward ? ip2 : ip1;
	Bytes udp;

	put16(udp, u.port);
	put16(udp, u.port);
	put16(udp, 8 + b.size());
	put16(udp, 0);
	udp.insert(udp.end(), b.begin(), b.end());
	uint16_t uc = csum(pseudo_header(src, dst, 17, udp));
	if (!uc)
		uc = 0xffff;
	udp[6] = uc >> 8;
	udp[7] = uc;

	cap.usec += 40;
	cap.pcap.packet(cap.usec,
			ipv4_frame(u.forward ? mac1 : mac2, u.forward ? mac2 : mac1,
				   src, dst, 17, ip_id++, udp));
	Frame fr;
	fr.server_port = u.port;
	fr.completed.push_back(p);
	cap.frames.push_back(fr);
}

/* The start of a MAD: the common header of a CM REQ (IBA 16.7.1, 12.6). */
Bytes mad(uint64_t tid)
{
	Bytes b = pattern(uint32_t(tid), 0, 256);

	b[0] = 1;			/* BaseVersion */
	b[1] = 0x07;			/* MgmtClass: CM */
	b[2] = 2;			/* ClassVersion */
	b[3] = 0x03;			/* Method: Send */
	b[4] = b[5] = b[6] = b[7] = 0;	/* Status, ClassSpecific */
	for (int i = 0; i < 8; i++)
		b[8 + i] = uint8_t(tid >> (56 - 8 * i));
	b[16] = 0x00, b[17] = 0x10;	/* AttributeID: ConnectRequest */
	b[18] = b[19] = 0;
	b[20] = b[21] = b[22] = b[23] = 0;	/* AttributeModifier */
	return b;
}

/* The UD datagrams, after the connections. */
void datagrams(Capture &cap)
{
	Ud u;

	/* UD_SEND_ONLY with SE, and a UD_SEND_ONLY_IMM back. */
	u.flags = TRDMA_BTH_SE;
	u.dest_qpn = 0x123;
	u.src_qpn = 0x45;
	u.qkey = 0x11111111;
	u.payload = pattern(0, 0, 200);
	datagram(cap, u);

	u = Ud{};
	u.opcode = TRDMA_OP_UD_SEND_ONLY_IMM;
	u.forward = false;
	u.dest_qpn = 0x45;
	u.src_qpn = 0x123;
	u.qkey = 0x11111111;
	u.msn = 7;
	u.imm = 0xcafef00d;
	u.payload = pattern(7, 0, 64);
	datagram(cap, u);

	/* QP1 to QP1: a CM REQ; then one with a Q_Key that is not QP1's. */
	u = Ud{};
	u.dest_qpn = 1;
	u.src_qpn = 1;
	u.qkey = 0x80010000;
	u.msn = 1;
	u.payload = mad(0x0000000100000001ull);
	datagram(cap, u);
	u.qkey = 0x00001234;
	u.msn = 2;
	u.payload = mad(0x0000000100000002ull);
	datagram(cap, u);

	/* Malformed: shorter than a BTH; cut in the ImmDt; an RC opcode;
	 * a length field that is not the payload's; flags ACKREQ and
	 * reserved bits in the BTH and DETH; a nonzero offset. */
	u = Ud{};
	u.dest_qpn = 0x123;
	u.src_qpn = 0x45;
	u.qkey = 0x11111111;
	u.payload = pattern(3, 0, 32);
	u.cut = 10;
	datagram(cap, u);

	u.opcode = TRDMA_OP_UD_SEND_ONLY_IMM;
	u.cut = 30;
	datagram(cap, u);

	u.opcode = TRDMA_OP_SEND_ONLY;
	u.cut = SIZE_MAX;
	datagram(cap, u);

	u.opcode = TRDMA_OP_UD_SEND_ONLY;
	u.length = 100;
	datagram(cap, u);

	u.length = -1;
	u.flags = TRDMA_BTH_SE | TRDMA_BTH_ACKREQ;
	u.reserved = 0x0001;
	u.dest_qpn = 0x01000123;
	u.src_qpn = 0x02000045;
	datagram(cap, u);

	u.flags = 0;
	u.reserved = 0;
	u.dest_qpn = 0x123;
	u.src_qpn = 0x45;
	u.offset = 8;
	datagram(cap, u);

	/* Another UDP port, no payload. */
	u = Ud{};
	u.port = kOtherUdPort;
	u.dest_qpn = 0x123;
	u.src_qpn = 0x45;
	u.qkey = 0x11111111;
	u.msn = 9;
	datagram(cap, u);
}

const char *const kFields[] = {
	"frame.number",
	"trdma.hello.magic",
	"trdma.hello.version",
	"trdma.hello.type",
	"trdma.hello.src_qpn",
	"trdma.hello.dst_qpn",
	"trdma.hello.start_msn",
	"trdma.hello.path_mtu",
	"trdma.hello.max_rd_atomic",
	"trdma.hello.max_dest_rd_atomic",
	"trdma.hello.status",
	"trdma.hello.flags.tls",
	"trdma.hello.nonce",
	"trdma.tls_record.length",
	"trdma.hello.src_gid",
	"trdma.hello.dst_gid",
	"trdma.bth.opcode",
	"trdma.bth.flags",
	"trdma.bth.se",
	"trdma.bth.ackreq",
	"trdma.bth.aeth",
	"trdma.bth.dest_qpn",
	"trdma.bth.msn",
	"trdma.bth.offset",
	"trdma.bth.length",
	"trdma.reth.va",
	"trdma.reth.rkey",
	"trdma.reth.dma_len",
	"trdma.aeth.syndrome",
	"trdma.aeth.rnr_timer",
	"trdma.aeth.msn",
	"trdma.atomic.va",
	"trdma.atomic.rkey",
	"trdma.atomic.swap_add",
	"trdma.atomic.compare",
	"trdma.atomicack.orig",
	"trdma.deth.qkey",
	"trdma.deth.src_qpn",
	"trdma.immdt",
	"trdma.ud.payload_len",
	"trdma.payload",
	"trdma.opt.opcode",
	"trdma.opt.qpn",
	"trdma.opt.msn",
	"trdma.opt.offset",
	"trdma.opt.seg_offset",
	"trdma.opt.agrees",
};

/* Is p decoded with the port preferences set to tcp_port and udp_port? */
bool decoded(const Pdu &p, uint16_t tcp_port, uint16_t udp_port)
{
	if (p.udp)
		return p.server_port == udp_port;
	return p.server_port == tcp_port && !p.stopped;
}

bool decoded_by_default(const Pdu &p)
{
	return decoded(p, TRDMA_DEFAULT_PORT, TRDMA_DEFAULT_UD_PORT);
}

void write_expected(const Capture &cap, const std::string &dir,
		    const std::string &name, uint16_t tcp_port,
		    uint16_t udp_port)
{
	std::ofstream out(dir + "/expected-" + name);
	std::ofstream info(dir + "/info-" + name);

	for (size_t i = 0; i < cap.frames.size(); i++) {
		const Frame &f = cap.frames[i];
		std::map<std::string, std::string> v;
		std::string line = std::to_string(i + 1), text;

		for (const auto &p : f.completed) {
			if (!decoded(*p, tcp_port, udp_port))
				continue;
			for (const auto &[name, value] : p->fields) {
				std::string &s = v[name];
				s += (s.empty() ? "" : ",") + value;
			}
			text += (text.empty() ? "" : ", ") + p->info;
		}
		if (f.has_opt) {
			v["trdma.opt.opcode"] = hex8(f.opt.opcode);
			v["trdma.opt.qpn"] = dec(f.opt.qpn);
			v["trdma.opt.msn"] = dec(f.opt.msn);
			v["trdma.opt.offset"] = dec(f.opt.offset);
			v["trdma.opt.seg_offset"] = dec(f.opt.seg_offset);
			if (f.opt.agrees >= 0)
				v["trdma.opt.agrees"] = boolean(f.opt.agrees);
		}
		for (size_t j = 1; j < sizeof(kFields) / sizeof(kFields[0]);
		     j++)
			line += "\t" + v[kFields[j]];
		out << line << "\n";
		if (!text.empty())
			info << i + 1 << "\t" << text << "\n";
	}
	if (!out || !info)
		throw std::runtime_error("cannot write expected-" + name);
}

/* The frames a filter must match, comma separated. */
template <typename Pred>
std::string frames_where(const Capture &cap, Pred pred)
{
	std::string s;

	for (size_t i = 0; i < cap.frames.size(); i++)
		if (pred(cap.frames[i]))
			s += (s.empty() ? "" : ",") + std::to_string(i + 1);
	return s;
}

void write_filters(const Capture &cap, const std::string &dir)
{
	std::ofstream out(dir + "/filters");
	auto has = [](const Frame &f, auto pred) {
		for (const auto &p : f.completed)
			if (pred(*p))
				return true;
		return false;
	};

	/* On the default ports: what the filters see. */
	auto at_default_port = [](const Pdu &p) {
		return p.server_port == (p.udp ? TRDMA_DEFAULT_UD_PORT
					       : TRDMA_DEFAULT_PORT);
	};

	/*
	 * Nothing is wrong with the script, or with the generated IP, TCP
	 * and UDP (checksum status 1 is "Good"; the driver turns checking
	 * on).
	 */
	out << "_ws.lua.error\t\n";
	out << "ip.checksum.status != 1\t\n";
	out << "tcp.checksum.status != 1\t\n";
	out << "udp.checksum.status != 1\t\n";
	out << "tcp.analysis.flags && !tcp.analysis.window_update\t\n";
	/* Wireshark marks frames with MALFORMED group experts malformed. */
	out << "_ws.malformed\t"
	    << frames_where(cap, [&](const Frame &f) {
		       return has(f, [&](const Pdu &p) {
			       return p.malformed && at_default_port(p);
		       });
	       })
	    << "\n";
	/* The UD datagrams. */
	out << "trdma.ud\t"
	    << frames_where(cap, [&](const Frame &f) {
		       return has(f, [](const Pdu &p) {
			       return decoded_by_default(p) && p.udp;
		       });
	       })
	    << "\n";
	/* Experts: these, and every one a PDU has. */
	std::set<std::string> experts = {
		"trdma.unknown_opcode", "trdma.stopped",
		"trdma.reserved_not_zero", "trdma.ud.short",
		"trdma.ud.bad_opcode", "trdma.ud.bad_flags",
		"trdma.ud.bad_offset", "trdma.ud.bad_length",
		"trdma.ud.gsi_qkey"};
	for (const auto &f : cap.frames)
		for (const auto &p : f.completed)
			experts.insert(p->experts.begin(), p->experts.end());
	for (const auto &e : experts)
		out << e << "\t"
		    << frames_where(cap, [&](const Frame &f) {
			       return has(f, [&](const Pdu &p) {
				       return at_default_port(p) &&
					      std::count(p.experts.begin(),
							 p.experts.end(), e);
			       });
		       })
		    << "\n";
	out << "trdma.opt.mismatch\t"
	    << frames_where(cap, [](const Frame &f) {
		       return f.has_opt && f.opt.agrees == 0;
	       })
	    << "\n";
	out << "trdma.aeth.rnr_timer == 14\t"
	    << frames_where(cap, [&](const Frame &f) {
		       return has(f, [](const Pdu &p) {
			       return p.fields.count("trdma.aeth.rnr_timer") &&
				      p.server_port == TRDMA_DEFAULT_PORT;
		       });
	       })
	    << "\n";
	if (!out)
		throw std::runtime_error("cannot write filters");
}

} // namespace

int main(int argc, char **argv)
{
	const bool late = argc == 3 && !strcmp(argv[1], "--check-capture");

	if (argc != 2 && !late) {
		fprintf(stderr, "usage: %s [--check-capture] OUTDIR\n", argv[0]);
		return 2;
	}
	try {
		std::string dir = argv[argc - 1];

		if (late) {
			for (const auto &l : kLateCases)
				conn_late(dir + "/" + l.name + ".pcap", l.steps);
			return 0;
		}
		auto cap = std::make_unique<Capture>(dir + "/trdma.pcap");

		conn_main(*cap);
		conn_malformed(*cap);
		conn_reject(*cap);
		conn_other_port(*cap);
		conn_tls(*cap);
		datagrams(*cap);

		std::ofstream fields(dir + "/fields");
		for (const char *f : kFields)
			fields << f << "\n";
		if (!fields)
			throw std::runtime_error("cannot write fields");
		write_expected(*cap, dir, "default", TRDMA_DEFAULT_PORT,
			       TRDMA_DEFAULT_UD_PORT);
		write_expected(*cap, dir, "other", kOtherPort, kOtherUdPort);
		write_filters(*cap, dir);
	} catch (const std::exception &e) {
		fprintf(stderr, "trdma_pcap_gen: %s\n", e.what());
		return 1;
	}
	return 0;
}
