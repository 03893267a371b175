// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The module's shared pure code, built for user space: the segment header
// parser (kernel/trdma_wire.c) and the work request slot checks
// (kernel/trdma_slot.c), on known-good and known-bad inputs, and the seed
// corpora of the fuzz targets (tests/fuzz/corpus) held to their names.

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" {
#include "model.h"
#include "trdma_slot.h"
#include "trdma_wire.h"
}

#include <gtest/gtest.h>

namespace {

#define SAME(a, b)                                                             \
	static_assert(static_cast<long>(a) == static_cast<long>(b), #a " == " #b)

// kcompat.h's ib_wc_status values are the kernel's, which are libibverbs'.
SAME(IB_WC_SUCCESS, IBV_WC_SUCCESS);
SAME(IB_WC_LOC_LEN_ERR, IBV_WC_LOC_LEN_ERR);
SAME(IB_WC_LOC_QP_OP_ERR, IBV_WC_LOC_QP_OP_ERR);
SAME(IB_WC_LOC_PROT_ERR, IBV_WC_LOC_PROT_ERR);
SAME(IB_WC_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR);

using Bytes = std::vector<std::uint8_t>;

// A header of op with typical fields, its wire bytes built by the model.
trdma_wire_hdr Hdr(std::uint8_t op, std::uint32_t off = 0,
		   std::uint32_t len = 0)
{
	trdma_wire_hdr h;

	std::memset(&h, 0, sizeof(h));
	h.opcode = op;
	h.dest_qpn = 0x123456;
	h.msn = 77;
	h.offset = off;
	h.length = len;
	std::uint32_t ext = trdma_wire_ext(op);
	if (ext & (TRDMA_EXT_RETH | TRDMA_EXT_ATOMIC)) {
		h.va = 0x1122334455667788ull;
		h.rkey = 0xabcd;
	}
	if (ext & TRDMA_EXT_RETH)
		h.dma_len = len + 100;
	// ATOMIC_WRITE: always 8 bytes, announced and carried.
	if (op == TRDMA_OP_ATOMIC_WRITE)
		h.length = h.dma_len = 8;
	if (ext & TRDMA_EXT_ATOMIC) {
		h.swap_add = 3;
		h.compare = 4;
	}
	if (ext & TRDMA_EXT_AETH)
		h.aeth_msn = 76;
	if (ext & TRDMA_EXT_ATOMIC_ACK)
		h.orig = 0xfedcba9876543210ull;
	if (ext & TRDMA_EXT_IMM)
		h.imm = htobe32(0x01020304);
	if (ext & TRDMA_EXT_IETH)
		h.inv_rkey = 0x00abcd17;
	return h;
}

Bytes Build(const trdma_wire_hdr &h)
{
	Bytes b(TRDMA_MAX_HDR);

	b.resize(trdma_model_build(&h, b.data()));
	return b;
}

trdma_wire_err Parse(const Bytes &b, trdma_wire_hdr *h = nullptr)
{
	trdma_wire_hdr tmp;

	return trdma_wire_parse(b.data(), b.size(), h ? h : &tmp);
}

constexpr std::uint8_t kLastOp = TRDMA_OP_FETCH_ADD;

// SEND_WITH_INV's last segments, past the gap at 0x15 (RoCE's values).
bool IsInvOp(unsigned op)
{
	return op == TRDMA_OP_SEND_LAST_INV || op == TRDMA_OP_SEND_ONLY_INV;
}

// Every opcode of a segment: 0 to kLastOp and the three above.
std::vector<unsigned> KnownOps()
{
	std::vector<unsigned> ops;

	for (unsigned op = 0; op <= kLastOp; op++)
		ops.push_back(op);
	ops.push_back(TRDMA_OP_SEND_LAST_INV);
	ops.push_back(TRDMA_OP_SEND_ONLY_INV);
	ops.push_back(TRDMA_OP_ATOMIC_WRITE);
	return ops;
}

TEST(WireHeader, LengthByOpcodeIsTheTableOfWireMd)
{
	// docs/wire.md: BTH 20, RETH 16, AETH 8, AtomicETH 32,
	// AtomicAckETH 8, ImmDt 4, IETH 4.
	const std::uint32_t want[kLastOp + 1] = {
		20, 20, 20, 24, 20, 24,		// SEND F M L L+I O O+I
		36, 20, 20, 24, 36, 40,		// WRITE F M L L+I O O+I
		36,				// READ request
		28, 20, 28, 28,			// READ response F M L O
		28, 36,				// ACK, ATOMIC ACK
		52, 52,				// COMPARE SWAP, FETCH ADD
	};

	for (unsigned op = 0; op <= 0xff; op++) {
		bool uc = op >= TRDMA_OP_UC_SEND_FIRST &&
			  op <= TRDMA_OP_UC_WRITE_ONLY_IMM;
		std::uint32_t w = op <= kLastOp ? want[op] :
				  IsInvOp(op) ? 24 :
				  op == TRDMA_OP_ATOMIC_WRITE ? 36 :	// RETH
				  uc ? want[op - TRDMA_OP_UC] : 0;

		EXPECT_EQ(trdma_hdr_len(op, 0), w) << "opcode " << op;
		EXPECT_LE(trdma_hdr_len(op, 0), TRDMA_MAX_HDR);
		// An RC request may carry an AETH (8 more bytes); nothing
		// else, no UC request either (UC has no acknowledgments).
		bool req = op <= TRDMA_OP_READ_REQUEST ||
			   op == TRDMA_OP_COMPARE_SWAP ||
			   op == TRDMA_OP_FETCH_ADD || IsInvOp(op) ||
			   op == TRDMA_OP_ATOMIC_WRITE;
		EXPECT_EQ(trdma_hdr_len(op, TRDMA_BTH_AETH), req ? w + 8 : 0)
			<< "opcode " << op;
		EXPECT_LE(trdma_hdr_len(op, TRDMA_BTH_AETH), TRDMA_MAX_HDR);
	}
}

// UC: the RC SEND and WRITE opcodes plus 0x20 (RoCE's UC opcodes), parsed
// to the RC opcode with uc set; they never ask for an ACK nor carry one.
TEST(WireHeader, UcOpcodesAreRcSendsAndWrites)
{
	for (unsigned op = TRDMA_OP_SEND_FIRST; op <= TRDMA_OP_WRITE_ONLY_IMM;
	     op++) {
		bool pay = trdma_wire_has_payload(op);
		bool start = trdma_wire_starts_msg(op);
		trdma_wire_hdr h = Hdr(op, start ? 0 : 4096, pay ? 100 : 0), d;

		h.uc = true;
		h.flags = TRDMA_BTH_SE;
		h.ext = trdma_wire_ext(op);
		h.hdr_len = trdma_hdr_len(op, h.flags);
		Bytes b = Build(h);

		ASSERT_EQ(b.size(), h.hdr_len) << "opcode " << op;
		EXPECT_EQ(b[0], op | TRDMA_OP_UC);
		ASSERT_EQ(Parse(b, &d), TRDMA_WIRE_OK) << "opcode " << op;
		EXPECT_TRUE(d.uc);
		EXPECT_EQ(d.opcode, op);
		EXPECT_TRUE(trdma_model_hdr_equal(&h, &d)) << "opcode " << op;
		b[1] |= TRDMA_BTH_ACKREQ;
		EXPECT_EQ(Parse(b), TRDMA_WIRE_RESERVED) << "opcode " << op;
		b[1] = TRDMA_BTH_AETH;
		EXPECT_EQ(Parse(b), TRDMA_WIRE_AETH) << "opcode " << op;
	}
	// No UC READ, atomic, ACK or SEND with invalidate.
	for (unsigned op = TRDMA_OP_UC_WRITE_ONLY_IMM + 1; op < 0x40; op++)
		EXPECT_EQ(trdma_hdr_len(op, 0), 0u) << "opcode " << op;
	// An RC opcode parses with uc clear.
	trdma_wire_hdr d;
	ASSERT_EQ(Parse(Build(Hdr(TRDMA_OP_SEND_ONLY, 0, 8)), &d),
		  TRDMA_WIRE_OK);
	EXPECT_FALSE(d.uc);
}

TEST(WireHeader, RequestCarriesAnAck)
{
	// SEND ONLY with an ACK riding along: BTH, AETH, by hand.
	const Bytes b = {
		0x04, 0x60, 0x00, 0x00,  0x00, 0x00, 0x00, 0x21,
		0x00, 0x00, 0x00, 0x05,  0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x08,
		0x00, 0x00, 0x00, 0x00,  0x00, 0x00, 0x01, 0x07,
	};
	trdma_wire_hdr h;

	ASSERT_EQ(Parse(b, &h), TRDMA_WIRE_OK);
	EXPECT_EQ(h.opcode, TRDMA_OP_SEND_ONLY);
	EXPECT_EQ(h.flags, TRDMA_BTH_ACKREQ | TRDMA_BTH_AETH);
	EXPECT_EQ(h.ext, TRDMA_EXT_AETH);
	EXPECT_EQ(h.hdr_len, 28u);
	EXPECT_EQ(h.length, 8u);
	EXPECT_EQ(h.syndrome, TRDMA_AETH_ACK);
	EXPECT_EQ(h.aeth_msn, 0x107u);

	// FETCH ADD: AtomicETH first, then the AETH.
	trdma_wire_hdr f = Hdr(TRDMA_OP_FETCH_ADD), d;
	f.flags = TRDMA_BTH_AETH;
	f.ext = TRDMA_EXT_ATOMIC | TRDMA_EXT_AETH;
	f.hdr_len = 60;
	f.aeth_msn = 0x99;
	Bytes fb = Build(f);
	ASSERT_EQ(fb.size(), 60u);
	EXPECT_EQ(fb[59], 0x99);
	ASSERT_EQ(Parse(fb, &d), TRDMA_WIRE_OK);
	EXPECT_TRUE(trdma_model_hdr_equal(&f, &d));

	// Only a plain ACK rides along; a NAK goes in an ACK segment.
	Bytes nak = b;
	nak[20] = TRDMA_AETH_NAK_REM_ACCESS;
	EXPECT_EQ(Parse(nak), TRDMA_WIRE_AETH);
	// The flag on what is not a request: refused, whatever follows.
	for (unsigned op : {TRDMA_OP_READ_RESPONSE_ONLY, TRDMA_OP_ACK,
			    TRDMA_OP_ATOMIC_ACK}) {
		Bytes r = Build(Hdr(op));
		r[1] = TRDMA_BTH_AETH;
		r.resize(TRDMA_MAX_HDR, 0);
		EXPECT_EQ(Parse(r), TRDMA_WIRE_AETH) << "opcode " << op;
	}
	// Every byte short of the carried AETH is short.
	for (size_t n = 20; n < b.size(); n++)
		EXPECT_EQ(Parse(Bytes(b.begin(), b.begin() + n)),
			  TRDMA_WIRE_SHORT) << n;
}

TEST(WireHeader, DecodesKnownBytes)
{
	// WRITE ONLY with immediate: BTH, RETH, ImmDt, written out by hand.
	const Bytes b = {
		0x0b, 0xc0, 0x00, 0x00,  0x00, 0x12, 0x34, 0x56,
		0x00, 0x00, 0x01, 0x02,  0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x10, 0x00,
		0x00, 0x00, 0x7f, 0x00,  0x12, 0x34, 0x50, 0x00,
		0x00, 0x00, 0x1a, 0x2b,  0x00, 0x00, 0x10, 0x00,
		0xca, 0xfe, 0xf0, 0x0d,
	};
	trdma_wire_hdr h;

	ASSERT_EQ(Parse(b, &h), TRDMA_WIRE_OK);
	EXPECT_EQ(h.opcode, TRDMA_OP_WRITE_ONLY_IMM);
	EXPECT_EQ(h.flags, TRDMA_BTH_SE | TRDMA_BTH_ACKREQ);
	EXPECT_EQ(h.ext, TRDMA_EXT_RETH | TRDMA_EXT_IMM);
	EXPECT_EQ(h.hdr_len, 40u);
	EXPECT_EQ(h.dest_qpn, 0x123456u);
	EXPECT_EQ(h.msn, 0x102u);
	EXPECT_EQ(h.offset, 0u);
	EXPECT_EQ(h.length, 4096u);
	EXPECT_EQ(h.va, 0x7f0012345000ull);
	EXPECT_EQ(h.rkey, 0x1a2bu);
	EXPECT_EQ(h.dma_len, 4096u);
	// Immediate data stays in network order, as a CQE carries it.
	const std::uint8_t imm[4] = {0xca, 0xfe, 0xf0, 0x0d};
	EXPECT_EQ(std::memcmp(&h.imm, imm, 4), 0);
	EXPECT_EQ(h.syndrome, 0);
	EXPECT_EQ(h.aeth_msn, 0u);
	EXPECT_EQ(h.orig, 0u);

	// ATOMIC ACKNOWLEDGE: AETH and AtomicAckETH.
	const Bytes a = {
		0x12, 0x00, 0x00, 0x00,  0x00, 0x00, 0x00, 0x10,
		0x00, 0x00, 0x00, 0x09,  0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00,  0x00, 0x00, 0x00, 0x09,
		0x01, 0x02, 0x03, 0x04,  0x05, 0x06, 0x07, 0x08,
	};
	ASSERT_EQ(Parse(a, &h), TRDMA_WIRE_OK);
	EXPECT_EQ(h.opcode, TRDMA_OP_ATOMIC_ACK);
	EXPECT_EQ(h.hdr_len, 36u);
	EXPECT_EQ(h.syndrome, TRDMA_AETH_ACK);
	EXPECT_EQ(h.aeth_msn, 9u);
	EXPECT_EQ(h.orig, 0x0102030405060708ull);

	// COMPARE SWAP: AtomicETH.
	const Bytes c = {
		0x13, 0x40, 0x00, 0x00,  0x00, 0x00, 0x00, 0x10,
		0x00, 0x00, 0x00, 0x0a,  0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00,  0x00, 0x00, 0x10, 0x08,
		0x00, 0x00, 0x00, 0x05,  0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00,  0x00, 0x00, 0x00, 0x02,
		0x00, 0x00, 0x00, 0x00,  0x00, 0x00, 0x00, 0x01,
	};
	ASSERT_EQ(Parse(c, &h), TRDMA_WIRE_OK);
	EXPECT_EQ(h.va, 0x1008u);
	EXPECT_EQ(h.rkey, 5u);
	EXPECT_EQ(h.swap_add, 2u);
	EXPECT_EQ(h.compare, 1u);
}

TEST(WireHeader, EveryOpcodeRoundTrips)
{
	for (unsigned op : KnownOps()) {
		bool pay = trdma_wire_has_payload(op);
		bool start = trdma_wire_starts_msg(op);
		trdma_wire_hdr h = Hdr(op, start ? 0 : 65536, pay ? 100 : 0), d;
		h.flags = TRDMA_BTH_SE | TRDMA_BTH_ACKREQ;
		h.ext = trdma_wire_ext(op);
		h.hdr_len = trdma_hdr_len(op, h.flags);
		Bytes b = Build(h);

		ASSERT_EQ(b.size(), trdma_hdr_len(op, h.flags)) << "opcode " << op;
		ASSERT_EQ(Parse(b, &d), TRDMA_WIRE_OK) << "opcode " << op;
		EXPECT_TRUE(trdma_model_hdr_equal(&h, &d)) << "opcode " << op;
		// Bytes after the header (payload) are not the header's.
		b.resize(b.size() + 64, 0xff);
		ASSERT_EQ(Parse(b, &d), TRDMA_WIRE_OK) << "opcode " << op;
		EXPECT_TRUE(trdma_model_hdr_equal(&h, &d)) << "opcode " << op;
	}
}

TEST(WireHeader, PayloadAndStartByOpcode)
{
	for (unsigned op : KnownOps()) {
		bool pay = op <= TRDMA_OP_WRITE_ONLY_IMM ||
			   (op >= TRDMA_OP_READ_RESPONSE_FIRST &&
			    op <= TRDMA_OP_READ_RESPONSE_ONLY) || IsInvOp(op) ||
			   op == TRDMA_OP_ATOMIC_WRITE;
		bool cont = op == TRDMA_OP_SEND_MIDDLE ||
			    op == TRDMA_OP_SEND_LAST ||
			    op == TRDMA_OP_SEND_LAST_IMM ||
			    op == TRDMA_OP_SEND_LAST_INV ||
			    op == TRDMA_OP_WRITE_MIDDLE ||
			    op == TRDMA_OP_WRITE_LAST ||
			    op == TRDMA_OP_WRITE_LAST_IMM ||
			    op == TRDMA_OP_READ_RESPONSE_MIDDLE ||
			    op == TRDMA_OP_READ_RESPONSE_LAST;

		EXPECT_EQ(trdma_wire_has_payload(op), pay) << "opcode " << op;
		EXPECT_EQ(trdma_wire_starts_msg(op), !cont) << "opcode " << op;
	}
}

TEST(WireHeader, UnknownOpcodes)
{
	for (unsigned op = kLastOp + 1; op <= 0xff; op++) {
		Bytes b(TRDMA_MAX_HDR, 0);

		if (IsInvOp(op) || op == TRDMA_OP_ATOMIC_WRITE ||
		    (op >= TRDMA_OP_UC_SEND_FIRST &&
		     op <= TRDMA_OP_UC_WRITE_ONLY_IMM))
			continue;

		b[0] = op;
		EXPECT_EQ(Parse(b), TRDMA_WIRE_OPCODE) << "opcode " << op;
		EXPECT_EQ(trdma_wire_ext(op), 0u) << "opcode " << op;
	}
}

TEST(WireHeader, ShortBuffers)
{
	for (unsigned op : KnownOps()) {
		Bytes b = Build(Hdr(op));

		for (std::size_t n = 0; n < b.size(); n++) {
			Bytes p(b.begin(), b.begin() + n);

			EXPECT_EQ(Parse(p), TRDMA_WIRE_SHORT)
				<< "opcode " << op << ", " << n << " bytes";
		}
	}
	// Too short even for the BTH: no opcode verdict yet.
	EXPECT_EQ(Parse(Bytes(19, 0xff)), TRDMA_WIRE_SHORT);
}

TEST(WireHeader, ReservedFieldsAndFlags)
{
	const trdma_wire_hdr h = Hdr(TRDMA_OP_SEND_ONLY, 0, 8);

	for (unsigned bit = 0; bit < 8; bit++) {
		Bytes b = Build(h);

		b[1] = 1u << bit;
		bool ok = b[1] == TRDMA_BTH_SE || b[1] == TRDMA_BTH_ACKREQ;
		// The AETH flag makes the header 8 bytes longer: too short.
		EXPECT_EQ(Parse(b), ok ? TRDMA_WIRE_OK :
				    b[1] == TRDMA_BTH_AETH ? TRDMA_WIRE_SHORT :
							     TRDMA_WIRE_RESERVED)
			<< "flag " << bit;
	}
	for (int at : {2, 3}) {
		Bytes b = Build(h);

		b[at] = 0x01;
		EXPECT_EQ(Parse(b), TRDMA_WIRE_RESERVED) << "byte " << at;
	}
	// AETH reserved bytes.
	for (int at : {21, 22, 23}) {
		Bytes b = Build(Hdr(TRDMA_OP_ACK));

		b[at] = 0x80;
		EXPECT_EQ(Parse(b), TRDMA_WIRE_RESERVED) << "byte " << at;
		b = Build(Hdr(TRDMA_OP_READ_RESPONSE_ONLY, 0, 8));
		b[at] = 0x80;
		EXPECT_EQ(Parse(b), TRDMA_WIRE_RESERVED) << "byte " << at;
	}
	// AtomicETH reserved word.
	for (int at : {32, 33, 34, 35}) {
		Bytes b = Build(Hdr(TRDMA_OP_FETCH_ADD));

		b[at] = 0x01;
		EXPECT_EQ(Parse(b), TRDMA_WIRE_RESERVED) << "byte " << at;
	}
	// Any AETH syndrome is the receive path's to judge.
	for (unsigned s = 0; s <= 0xff; s++) {
		trdma_wire_hdr a = Hdr(TRDMA_OP_ACK), d;

		a.syndrome = s;
		ASSERT_EQ(Parse(Build(a), &d), TRDMA_WIRE_OK);
		EXPECT_EQ(d.syndrome, s);
	}
}

TEST(WireHeader, DestinationQpnIs24Bits)
{
	trdma_wire_hdr h = Hdr(TRDMA_OP_SEND_ONLY);

	h.dest_qpn = 0xffffff;
	EXPECT_EQ(Parse(Build(h)), TRDMA_WIRE_OK);
	Bytes b = Build(h);
	b[4] = 0x01;
	EXPECT_EQ(Parse(b), TRDMA_WIRE_QPN);
}

TEST(WireHeader, SegmentLength)
{
	trdma_wire_hdr h = Hdr(TRDMA_OP_SEND_MIDDLE, 65536, TRDMA_MAX_SEG);

	EXPECT_EQ(Parse(Build(h)), TRDMA_WIRE_OK);
	h.length = TRDMA_MAX_SEG + 1;
	EXPECT_EQ(Parse(Build(h)), TRDMA_WIRE_LENGTH);
	h.length = 0xffffffff;
	EXPECT_EQ(Parse(Build(h)), TRDMA_WIRE_LENGTH);
	// A WRITE's first segment lies inside what its RETH announces.
	for (std::uint8_t op : {TRDMA_OP_WRITE_FIRST, TRDMA_OP_WRITE_ONLY,
				TRDMA_OP_WRITE_ONLY_IMM}) {
		h = Hdr(op, 0, 4096);
		h.dma_len = 4096;
		EXPECT_EQ(Parse(Build(h)), TRDMA_WIRE_OK) << int(op);
		h.dma_len = 4095;
		EXPECT_EQ(Parse(Build(h)), TRDMA_WIRE_LENGTH) << int(op);
		h.length = 0;
		h.dma_len = 0;
		EXPECT_EQ(Parse(Build(h)), TRDMA_WIRE_OK) << int(op);
	}
}

// ATOMIC_WRITE: RETH (va, rkey, dma_len 8), then exactly 8 payload bytes.
TEST(WireHeader, AtomicWriteIsEightBytes)
{
	const Bytes b = {
		0x1d, 0x40, 0x00, 0x00,  0x00, 0x00, 0x00, 0x21,
		0x00, 0x00, 0x00, 0x05,  0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x08,
		0x00, 0x00, 0x7f, 0x00,  0x12, 0x34, 0x50, 0x08,
		0x00, 0x00, 0x1a, 0x2b,  0x00, 0x00, 0x00, 0x08,
	};
	trdma_wire_hdr h;

	ASSERT_EQ(Parse(b, &h), TRDMA_WIRE_OK);
	EXPECT_EQ(h.opcode, TRDMA_OP_ATOMIC_WRITE);
	EXPECT_FALSE(h.uc);
	EXPECT_EQ(h.ext, TRDMA_EXT_RETH);
	EXPECT_EQ(h.hdr_len, 36u);
	EXPECT_EQ(h.length, 8u);
	EXPECT_EQ(h.va, 0x7f0012345008ull);
	EXPECT_EQ(h.rkey, 0x1a2bu);
	EXPECT_EQ(h.dma_len, 8u);
	EXPECT_TRUE(trdma_wire_has_payload(TRDMA_OP_ATOMIC_WRITE));
	EXPECT_TRUE(trdma_wire_starts_msg(TRDMA_OP_ATOMIC_WRITE));
	// Alignment is the responder's to judge (a NAK, not malformed).
	Bytes m = b;
	m[27] = 0x0c;
	EXPECT_EQ(Parse(m), TRDMA_WIRE_OK);

	// Any other length, announced or carried: malformed.
	for (std::uint32_t len : {0u, 1u, 4u, 7u, 9u, 16u, 4096u}) {
		trdma_wire_hdr a = Hdr(TRDMA_OP_ATOMIC_WRITE);

		a.length = len;
		EXPECT_EQ(Parse(Build(a)), TRDMA_WIRE_LENGTH) << len;
		a.length = 8;
		a.dma_len = len;
		EXPECT_EQ(Parse(Build(a)), TRDMA_WIRE_LENGTH) << len;
		a.length = len;
		EXPECT_EQ(Parse(Build(a)), TRDMA_WIRE_LENGTH) << len;
	}
	// No UC ATOMIC_WRITE.
	Bytes u = b;
	u[0] = TRDMA_OP_UC | TRDMA_OP_ATOMIC_WRITE;
	EXPECT_EQ(Parse(u), TRDMA_WIRE_OPCODE);
	// An ACK may ride along, after the RETH.
	trdma_wire_hdr c = Hdr(TRDMA_OP_ATOMIC_WRITE), d;
	c.flags = TRDMA_BTH_ACKREQ | TRDMA_BTH_AETH;
	c.ext = TRDMA_EXT_RETH | TRDMA_EXT_AETH;
	c.hdr_len = 44;
	c.aeth_msn = 0x42;
	Bytes cb = Build(c);
	ASSERT_EQ(cb.size(), 44u);
	EXPECT_EQ(cb[43], 0x42);
	ASSERT_EQ(Parse(cb, &d), TRDMA_WIRE_OK);
	EXPECT_TRUE(trdma_model_hdr_equal(&c, &d));
}

TEST(WireHeader, PayloadOnlyWhereTheOpcodeCarriesOne)
{
	for (std::uint8_t op : {TRDMA_OP_READ_REQUEST, TRDMA_OP_ACK,
				TRDMA_OP_ATOMIC_ACK, TRDMA_OP_COMPARE_SWAP,
				TRDMA_OP_FETCH_ADD}) {
		trdma_wire_hdr h = Hdr(op, 0, 0);

		EXPECT_EQ(Parse(Build(h)), TRDMA_WIRE_OK) << int(op);
		h.length = 1;
		h.dma_len = 1;
		EXPECT_EQ(Parse(Build(h)), TRDMA_WIRE_PAYLOAD) << int(op);
	}
}

TEST(WireHeader, FirstSegmentsStartAtOffsetZero)
{
	for (unsigned op : KnownOps()) {
		bool pay = trdma_wire_has_payload(op);
		trdma_wire_hdr h = Hdr(op, 65536, pay ? 16 : 0);

		EXPECT_EQ(Parse(Build(h)), trdma_wire_starts_msg(op) ?
			  TRDMA_WIRE_OFFSET : TRDMA_WIRE_OK) << "opcode " << op;
	}
}

// --- Work request slots ---------------------------------------------------

// A slot of the given size, its bytes a pattern (stale slot contents).
struct Slot {
	explicit Slot(std::uint32_t size) : bytes(size, 0xa5)
	{
		std::memset(bytes.data(), 0, sizeof(trdma_sqe));
	}
	trdma_sqe *sqe() { return reinterpret_cast<trdma_sqe *>(bytes.data()); }
	std::vector<std::uint8_t> bytes;
};

// A default QP's send queue: 128-byte slots, 4 SGEs, 80 inline bytes.
trdma_slot_limits Lim(std::uint32_t slot = 128, std::uint32_t sge = 4,
		      std::uint32_t inl = 80)
{
	return trdma_slot_limits{slot, sge, inl};
}

ib_wc_status Check(Slot &s, const trdma_slot_limits &lim,
		   std::uint32_t *len = nullptr)
{
	std::uint32_t tmp = 0xdeadbeef, mlen = 0;
	ib_wc_status st = trdma_slot_sqe_check(s.sqe(), &lim, &tmp);

	// The reference model agrees on every verdict made here.
	EXPECT_EQ(st, trdma_model_sqe_verdict(s.bytes.data(), &lim, &mlen));
	if (st == IB_WC_SUCCESS)
		EXPECT_EQ(tmp, mlen);
	else
		EXPECT_EQ(tmp, 0xdeadbeef) << "len written on refusal";
	if (len)
		*len = tmp;
	return st;
}

void Sges(Slot &s, std::uint8_t n, std::uint32_t len)
{
	s.sqe()->num_sge = n;
	for (std::uint8_t i = 0; i < n; i++) {
		s.sqe()->sge[i].addr = 0x10000 * (i + 1);
		s.sqe()->sge[i].length = len;
		s.sqe()->sge[i].lkey = 0x100 + i;
	}
}

TEST(SendSlot, ValidOpcodes)
{
	for (std::uint8_t op : {IB_UVERBS_WR_RDMA_WRITE,
				IB_UVERBS_WR_RDMA_WRITE_WITH_IMM,
				IB_UVERBS_WR_SEND, IB_UVERBS_WR_SEND_WITH_IMM,
				IB_UVERBS_WR_RDMA_READ}) {
		Slot s(128);
		std::uint32_t len;

		s.sqe()->opcode = op;
		s.sqe()->flags = TRDMA_WQE_FLAGS_ALL & ~TRDMA_WQE_INLINE;
		Sges(s, 4, 1000);
		EXPECT_EQ(Check(s, Lim(), &len), IB_WC_SUCCESS) << int(op);
		EXPECT_EQ(len, 4000u);
		Sges(s, 0, 0);
		EXPECT_EQ(Check(s, Lim(), &len), IB_WC_SUCCESS) << int(op);
		EXPECT_EQ(len, 0u);
	}
	for (std::uint8_t op : {IB_UVERBS_WR_ATOMIC_CMP_AND_SWP,
				IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD}) {
		Slot s(64);
		std::uint32_t len;

		s.sqe()->opcode = op;
		Sges(s, 1, 8);
		EXPECT_EQ(Check(s, Lim(64, 1, 16), &len), IB_WC_SUCCESS);
		EXPECT_EQ(len, 8u);
	}
}

TEST(SendSlot, RefusedOpcodesAndFlags)
{
	for (unsigned op = IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD + 1; op <= 0xff;
	     op++) {
		Slot s(128);

		if (op == IB_UVERBS_WR_LOCAL_INV ||
		    op == IB_UVERBS_WR_SEND_WITH_INV || op == TRDMA_SQE_REG_MR)
			continue;
		s.sqe()->opcode = op;
		Sges(s, 1, 8);
		EXPECT_EQ(Check(s, Lim()), IB_WC_LOC_QP_OP_ERR) << op;
	}
	for (unsigned bit = 4; bit < 8; bit++) {
		Slot s(128);

		s.sqe()->opcode = IB_UVERBS_WR_SEND;
		s.sqe()->flags = 1u << bit;
		EXPECT_EQ(Check(s, Lim()), IB_WC_LOC_QP_OP_ERR) << bit;
	}
}

// SEND_WITH_INV is a SEND (the rkey in imm_data); LOCAL_INV and the
// kernel's REG_MR carry no payload at all.
TEST(SendSlot, InvalidationAndRegistration)
{
	Slot s(128);
	std::uint32_t len = 99;

	s.sqe()->opcode = IB_UVERBS_WR_SEND_WITH_INV;
	Sges(s, 2, 100);
	EXPECT_EQ(Check(s, Lim(), &len), IB_WC_SUCCESS);
	EXPECT_EQ(len, 200u);
	for (std::uint8_t op : {std::uint8_t(IB_UVERBS_WR_LOCAL_INV),
				std::uint8_t(TRDMA_SQE_REG_MR)}) {
		Slot l(128);

		l.sqe()->opcode = op;
		Sges(l, 0, 0);
		len = 99;
		EXPECT_EQ(Check(l, Lim(), &len), IB_WC_SUCCESS) << int(op);
		EXPECT_EQ(len, 0u) << int(op);
		Sges(l, 1, 8);
		EXPECT_EQ(Check(l, Lim()), IB_WC_LOC_QP_OP_ERR) << int(op);
		Sges(l, 0, 0);
		l.sqe()->flags = TRDMA_WQE_INLINE;
		EXPECT_EQ(Check(l, Lim()), IB_WC_LOC_QP_OP_ERR) << int(op);
	}
}

// ATOMIC_WRITE: its 8 bytes are in the WQE; no SGE, no inline data.
TEST(SendSlot, AtomicWrite)
{
	Slot s(64);
	std::uint32_t len = 99;

	s.sqe()->opcode = TRDMA_WR_ATOMIC_WRITE;
	s.sqe()->flags = TRDMA_WQE_SIGNALED | TRDMA_WQE_FENCE;
	s.sqe()->compare_add = 0x0123456789abcdefull;
	EXPECT_EQ(Check(s, Lim(64, 1, 16), &len), IB_WC_SUCCESS);
	EXPECT_EQ(len, 8u);
	EXPECT_EQ(trdma_sqe_data(s.sqe()),
		  reinterpret_cast<const std::uint8_t *>(&s.sqe()->compare_add));
	Sges(s, 1, 8);
	EXPECT_EQ(Check(s, Lim(64, 1, 16)), IB_WC_LOC_QP_OP_ERR);
	Sges(s, 0, 0);
	s.sqe()->flags = TRDMA_WQE_INLINE;
	s.sqe()->inline_len = 8;
	EXPECT_EQ(Check(s, Lim(64, 1, 16)), IB_WC_LOC_QP_OP_ERR);
	// Other WQEs: inline data, or none (SGEs).
	s.sqe()->opcode = IB_UVERBS_WR_SEND;
	EXPECT_EQ(trdma_sqe_data(s.sqe()),
		  reinterpret_cast<const std::uint8_t *>(s.sqe()->sge));
	s.sqe()->flags = 0;
	EXPECT_EQ(trdma_sqe_data(s.sqe()), nullptr);
}

TEST(SendSlot, Atomics)
{
	for (std::uint8_t op : {IB_UVERBS_WR_ATOMIC_CMP_AND_SWP,
				IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD}) {
		Slot s(128);

		s.sqe()->opcode = op;
		Sges(s, 2, 8);
		EXPECT_EQ(Check(s, Lim()), IB_WC_LOC_QP_OP_ERR);
		Sges(s, 0, 0);
		EXPECT_EQ(Check(s, Lim()), IB_WC_LOC_QP_OP_ERR);
		Sges(s, 1, 4);
		EXPECT_EQ(Check(s, Lim()), IB_WC_LOC_QP_OP_ERR);
		Sges(s, 1, 8);
		s.sqe()->flags = TRDMA_WQE_INLINE;
		EXPECT_EQ(Check(s, Lim()), IB_WC_LOC_QP_OP_ERR);
		s.sqe()->flags = 0;
		EXPECT_EQ(Check(s, Lim()), IB_WC_SUCCESS);
		// The sink must lie in the slot, whatever the limits say.
		Slot tiny(48);
		tiny.sqe()->opcode = op;
		tiny.sqe()->num_sge = 1;
		EXPECT_EQ(Check(tiny, Lim(48, 4, 0)), IB_WC_LOC_QP_OP_ERR);
	}
}

TEST(SendSlot, Inline)
{
	Slot s(128);
	std::uint32_t len;

	s.sqe()->opcode = IB_UVERBS_WR_SEND;
	s.sqe()->flags = TRDMA_WQE_INLINE;
	s.sqe()->num_sge = 200;		// ignored with inline data
	s.sqe()->inline_len = 80;
	EXPECT_EQ(Check(s, Lim(), &len), IB_WC_SUCCESS);
	EXPECT_EQ(len, 80u);
	s.sqe()->inline_len = 81;
	EXPECT_EQ(Check(s, Lim()), IB_WC_LOC_LEN_ERR);
	// max_inline larger than the slot: the slot bounds it.
	EXPECT_EQ(Check(s, Lim(128, 4, 4096)), IB_WC_LOC_LEN_ERR);
	s.sqe()->inline_len = 0xffffffff;
	EXPECT_EQ(Check(s, Lim(128, 4, 4096)), IB_WC_LOC_LEN_ERR);
	s.sqe()->inline_len = 0;
	EXPECT_EQ(Check(s, Lim(128, 4, 0), &len), IB_WC_SUCCESS);
	EXPECT_EQ(len, 0u);
	s.sqe()->opcode = IB_UVERBS_WR_RDMA_READ;
	EXPECT_EQ(Check(s, Lim()), IB_WC_LOC_QP_OP_ERR);
}

TEST(SendSlot, SgeCount)
{
	Slot s(128);

	s.sqe()->opcode = IB_UVERBS_WR_RDMA_WRITE;
	Sges(s, 5, 8);
	EXPECT_EQ(Check(s, Lim()), IB_WC_LOC_QP_OP_ERR);	// over max_sge
	EXPECT_EQ(Check(s, Lim(128, 5, 80)), IB_WC_SUCCESS);	// 128 bytes
	Slot big(1024);
	big.sqe()->opcode = IB_UVERBS_WR_RDMA_WRITE;
	Sges(big, 61, 8);
	EXPECT_EQ(Check(big, Lim(1024, 255, 0)), IB_WC_SUCCESS);
	big.sqe()->num_sge = 62;
	// More than the slot holds, whatever max_sge says.
	EXPECT_EQ(Check(big, Lim(1024, 255, 0)), IB_WC_LOC_QP_OP_ERR);
	big.sqe()->num_sge = 255;
	EXPECT_EQ(Check(big, Lim(1024, 255, 0)), IB_WC_LOC_QP_OP_ERR);
}

TEST(SendSlot, TotalLength)
{
	Slot s(128);
	std::uint32_t len;

	s.sqe()->opcode = IB_UVERBS_WR_SEND;
	Sges(s, 2, 1u << 30);
	EXPECT_EQ(Check(s, Lim(), &len), IB_WC_SUCCESS);
	EXPECT_EQ(len, TRDMA_MAX_MSG_SZ);
	s.sqe()->sge[1].length++;
	EXPECT_EQ(Check(s, Lim()), IB_WC_LOC_LEN_ERR);
	// Four times 4 GiB - 1 wraps a 32-bit sum: it must not.
	Sges(s, 4, 0xffffffff);
	EXPECT_EQ(Check(s, Lim()), IB_WC_LOC_LEN_ERR);
	Slot big(8192);
	big.sqe()->opcode = IB_UVERBS_WR_RDMA_READ;
	Sges(big, 255, 0x01010102);	// 255 * that wraps to 254
	EXPECT_EQ(Check(big, Lim(8192, 255, 0)), IB_WC_LOC_LEN_ERR);
}

TEST(SendSlot, SlotSmallerThanAWqe)
{
	for (std::uint32_t size : {0u, 1u, 47u}) {
		Slot s(48);	// room to read, but the limits say less

		s.sqe()->opcode = IB_UVERBS_WR_SEND;
		EXPECT_EQ(Check(s, Lim(size, 4, 0)), IB_WC_LOC_QP_OP_ERR);
	}
	Slot s(48);
	s.sqe()->opcode = IB_UVERBS_WR_SEND;
	EXPECT_EQ(Check(s, Lim(48, 4, 0)), IB_WC_SUCCESS);	// no SGE
}

TEST(RecvSlot, SgeCountIsCutDown)
{
	// 64-byte slots hold 3 SGEs.
	const trdma_slot_limits lim = {64, 2, 0};

	EXPECT_EQ(trdma_slot_rqe_num_sge(0, &lim), 0u);
	EXPECT_EQ(trdma_slot_rqe_num_sge(2, &lim), 2u);
	EXPECT_EQ(trdma_slot_rqe_num_sge(3, &lim), 2u);
	EXPECT_EQ(trdma_slot_rqe_num_sge(255, &lim), 2u);
	const trdma_slot_limits wide = {64, 255, 0};
	EXPECT_EQ(trdma_slot_rqe_num_sge(255, &wide), 3u);
	const trdma_slot_limits huge = {8192, 255, 0};
	EXPECT_EQ(trdma_slot_rqe_num_sge(255, &huge), TRDMA_MAX_SGE);
	const trdma_slot_limits small = {16, 255, 0};
	EXPECT_EQ(trdma_slot_rqe_num_sge(255, &small), 0u);
	for (unsigned n = 0; n <= 0xff; n++)
		for (std::uint32_t size : {0u, 16u, 31u, 32u, 64u, 4096u})
			for (std::uint32_t max : {0u, 1u, 16u, 32u, 255u}) {
				const trdma_slot_limits l = {size, max, 0};

				EXPECT_EQ(trdma_slot_rqe_num_sge(n, &l),
					  trdma_model_rqe_num_sge(n, &l));
			}
}

// --- The fuzz targets' seeds ----------------------------------------------

Bytes ReadFile(const std::filesystem::path &p)
{
	std::ifstream f(p, std::ios::binary);

	return Bytes(std::istreambuf_iterator<char>(f), {});
}

bool Starts(const std::string &s, const char *prefix)
{
	return s.rfind(prefix, 0) == 0;
}

TEST(FuzzSeeds, WireSeedsAreWhatTheirNamesSay)
{
	int ok = 0, bad = 0;

	for (const auto &e : std::filesystem::directory_iterator(
		     TRDMA_FUZZ_CORPUS "/wire")) {
		const std::string name = e.path().filename();
		Bytes b = ReadFile(e.path());
		trdma_wire_hdr h;
		trdma_wire_err err = Parse(b, &h);

		EXPECT_EQ(err, trdma_model_hdr_verdict(b.data(), b.size()))
			<< name;
		if (Starts(name, "ok-")) {
			EXPECT_EQ(err, TRDMA_WIRE_OK) << name;
			ok++;
		} else if (Starts(name, "bad-")) {
			EXPECT_NE(err, TRDMA_WIRE_OK) << name;
			bad++;
		} else if (Starts(name, "stream-")) {
			std::size_t pos = 0;

			while (pos < b.size()) {
				Bytes rest(b.begin() + pos, b.end());

				ASSERT_EQ(Parse(rest, &h), TRDMA_WIRE_OK)
					<< name << " at " << pos;
				pos += h.hdr_len + h.length;
			}
			EXPECT_EQ(pos, b.size()) << name;
		}
	}
	EXPECT_GE(ok, int(KnownOps().size()));
	EXPECT_GE(bad, 10);
}

TEST(FuzzSeeds, SlotSeedsAreWhatTheirNamesSay)
{
	int ok = 0, bad = 0;

	for (const auto &e : std::filesystem::directory_iterator(
		     TRDMA_FUZZ_CORPUS "/slot")) {
		const std::string name = e.path().filename();
		Bytes b = ReadFile(e.path());
		trdma_slot_limits lim;

		if (b.size() < TRDMA_MODEL_SLOT_PREFIX)
			continue;
		trdma_model_slot_limits(b.data(), &lim);
		// As the fuzz target reads it: zero-padded, cut at the slot.
		Slot s(std::max<std::uint32_t>(lim.slot_size, sizeof(trdma_sqe)));
		std::memset(s.bytes.data(), 0, s.bytes.size());
		std::memcpy(s.bytes.data(), b.data() + TRDMA_MODEL_SLOT_PREFIX,
			    std::min<std::size_t>(b.size() -
						  TRDMA_MODEL_SLOT_PREFIX,
						  lim.slot_size));
		ib_wc_status st = Check(s, lim);
		if (Starts(name, "ok-")) {
			EXPECT_EQ(st, IB_WC_SUCCESS) << name;
			ok++;
		} else if (Starts(name, "bad-")) {
			EXPECT_NE(st, IB_WC_SUCCESS) << name;
			bad++;
		}
	}
	EXPECT_GE(ok, 10);
	EXPECT_GE(bad, 10);
}

}  // namespace
