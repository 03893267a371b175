// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The provider's work request encoding, completion decoding and create
// response checks (provider/wqe.c), without a kernel.

#include "trdma-wqe.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

#define SAME(a, b)                                                             \
	static_assert(static_cast<long>(a) == static_cast<long>(b), #a " == " #b)

// ibv_wr_opcode values go into trdma_sqe.opcode unchanged: they must be the
// kernel's ib_uverbs_wr_opcode for every opcode the provider encodes.
SAME(IBV_WR_RDMA_WRITE, IB_UVERBS_WR_RDMA_WRITE);
SAME(IBV_WR_RDMA_WRITE_WITH_IMM, IB_UVERBS_WR_RDMA_WRITE_WITH_IMM);
SAME(IBV_WR_SEND, IB_UVERBS_WR_SEND);
SAME(IBV_WR_SEND_WITH_IMM, IB_UVERBS_WR_SEND_WITH_IMM);
SAME(IBV_WR_RDMA_READ, IB_UVERBS_WR_RDMA_READ);
SAME(IBV_WR_ATOMIC_CMP_AND_SWP, IB_UVERBS_WR_ATOMIC_CMP_AND_SWP);
SAME(IBV_WR_ATOMIC_FETCH_AND_ADD, IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD);
SAME(IBV_WR_LOCAL_INV, IB_UVERBS_WR_LOCAL_INV);
SAME(IBV_WR_SEND_WITH_INV, IB_UVERBS_WR_SEND_WITH_INV);
// IBV_WR_DRIVER1 would be IB_UVERBS_WR_RDMA_READ_WITH_INV to the kernel,
// one more reason the provider refuses it.
SAME(IBV_WR_DRIVER1, IB_UVERBS_WR_RDMA_READ_WITH_INV);

// trdma_cqe.opcode is a __u8: the receive opcodes must fit.  The ABI's
// completion opcodes are ibv_wc_opcode values, for trdma's opcodes the
// same numbers as the kernel's.
static_assert(IBV_WC_RECV_RDMA_WITH_IMM <= 0xff);
SAME(IBV_WC_SEND, IB_UVERBS_WC_SEND);
SAME(IBV_WC_RDMA_WRITE, IB_UVERBS_WC_RDMA_WRITE);
SAME(IBV_WC_RDMA_READ, IB_UVERBS_WC_RDMA_READ);
SAME(IBV_WC_COMP_SWAP, IB_UVERBS_WC_COMP_SWAP);
SAME(IBV_WC_FETCH_ADD, IB_UVERBS_WC_FETCH_ADD);

// A slot buffer, pre-filled with garbage so stale bytes show.
struct Slot {
	explicit Slot(std::size_t size) : bytes(size, 0xa5) {}
	void *data() { return bytes.data(); }
	trdma_sqe *sqe() { return reinterpret_cast<trdma_sqe *>(data()); }
	trdma_rqe *rqe() { return reinterpret_cast<trdma_rqe *>(data()); }
	std::vector<std::uint8_t> bytes;	// new[]: aligned for any type
};

// The SQ of a QP created with the defaults: 128-byte slots, 4 SGEs.
trdma_sq_caps Caps(std::uint32_t slot = 128, std::uint32_t sge = 4,
		   std::uint32_t inl = 64)
{
	return trdma_sq_caps{ slot, sge, inl };
}

ibv_send_wr Wr(ibv_wr_opcode op, ibv_sge *sg, int n, unsigned flags = 0)
{
	ibv_send_wr wr;

	std::memset(&wr, 0, sizeof(wr));
	wr.wr_id = 0x1122334455667788ull;
	wr.opcode = op;
	wr.sg_list = sg;
	wr.num_sge = n;
	wr.send_flags = flags;
	return wr;
}

TEST(SqeEncode, SendWithSges)
{
	Slot s(128);
	trdma_sq_caps caps = Caps();
	ibv_sge sg[2] = { { 0x1000, 100, 0x42 }, { 0xfff0000000000000ull,
						  0xffffffffu, 0xabcdef01u } };
	ibv_send_wr wr = Wr(IBV_WR_SEND, sg, 2);

	ASSERT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
	const trdma_sqe *q = s.sqe();
	EXPECT_EQ(q->wr_id, 0x1122334455667788ull);
	EXPECT_EQ(q->opcode, IB_UVERBS_WR_SEND);
	EXPECT_EQ(q->flags, 0u);
	EXPECT_EQ(q->num_sge, 2u);
	EXPECT_EQ(q->reserved, 0u);
	EXPECT_EQ(q->inline_len, 0u);
	EXPECT_EQ(q->imm_data, 0u);
	EXPECT_EQ(q->rkey, 0u);
	EXPECT_EQ(q->remote_addr, 0u);
	EXPECT_EQ(q->compare_add, 0u);
	EXPECT_EQ(q->swap, 0u);
	EXPECT_EQ(q->sge[0].addr, 0x1000u);
	EXPECT_EQ(q->sge[0].length, 100u);
	EXPECT_EQ(q->sge[0].lkey, 0x42u);
	EXPECT_EQ(q->sge[1].addr, 0xfff0000000000000ull);
	EXPECT_EQ(q->sge[1].length, 0xffffffffu);
	EXPECT_EQ(q->sge[1].lkey, 0xabcdef01u);
}

TEST(SqeEncode, NoSges)
{
	Slot s(64);
	trdma_sq_caps caps = Caps(64, 1, 16);
	ibv_send_wr wr = Wr(IBV_WR_SEND, nullptr, 0);

	ASSERT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
	EXPECT_EQ(s.sqe()->num_sge, 0u);
}

TEST(SqeEncode, Flags)
{
	Slot s(128);
	trdma_sq_caps caps = Caps();
	ibv_send_wr wr = Wr(IBV_WR_SEND, nullptr, 0);

	wr.send_flags = IBV_SEND_SIGNALED;
	ASSERT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
	EXPECT_EQ(s.sqe()->flags, TRDMA_WQE_SIGNALED);

	// sq_sig_all signals every WR.
	wr.send_flags = 0;
	ASSERT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, true), 0);
	EXPECT_EQ(s.sqe()->flags, TRDMA_WQE_SIGNALED);

	wr.send_flags = IBV_SEND_SOLICITED | IBV_SEND_FENCE;
	ASSERT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
	EXPECT_EQ(s.sqe()->flags, TRDMA_WQE_SOLICITED | TRDMA_WQE_FENCE);

	// Flags trdma has no use for are not passed on.
	wr.send_flags = IBV_SEND_IP_CSUM;
	ASSERT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
	EXPECT_EQ(s.sqe()->flags, 0u);
}

TEST(SqeEncode, ImmediateDataStaysInNetworkOrder)
{
	Slot s(128);
	trdma_sq_caps caps = Caps();
	ibv_send_wr wr = Wr(IBV_WR_SEND_WITH_IMM, nullptr, 0);

	wr.imm_data = htonl(0x12345678);
	ASSERT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
	const auto *b = reinterpret_cast<const std::uint8_t *>(
		&s.sqe()->imm_data);
	EXPECT_EQ(b[0], 0x12);
	EXPECT_EQ(b[1], 0x34);
	EXPECT_EQ(b[2], 0x56);
	EXPECT_EQ(b[3], 0x78);
	EXPECT_EQ(s.sqe()->opcode, IB_UVERBS_WR_SEND_WITH_IMM);
}

TEST(SqeEncode, RdmaOperationsCarryRemoteAddressAndRkey)
{
	const ibv_wr_opcode ops[] = { IBV_WR_RDMA_WRITE,
				      IBV_WR_RDMA_WRITE_WITH_IMM,
				      IBV_WR_RDMA_READ };

	for (ibv_wr_opcode op : ops) {
		Slot s(128);
		trdma_sq_caps caps = Caps();
		ibv_sge sg = { 0x2000, 8, 7 };
		ibv_send_wr wr = Wr(op, &sg, 1);

		SCOPED_TRACE(op);
		wr.wr.rdma.remote_addr = 0xdeadbeef00ull;
		wr.wr.rdma.rkey = 0x1234;
		wr.imm_data = htonl(99);
		ASSERT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
		EXPECT_EQ(s.sqe()->opcode, op);
		EXPECT_EQ(s.sqe()->remote_addr, 0xdeadbeef00ull);
		EXPECT_EQ(s.sqe()->rkey, 0x1234u);
		EXPECT_EQ(s.sqe()->imm_data,
			  op == IBV_WR_RDMA_WRITE_WITH_IMM ? htonl(99) : 0u);
		EXPECT_EQ(s.sqe()->num_sge, 1u);
	}
}

// Atomics are not offered by the device yet, but they are encoded like
// any other WR: the kernel completes them with IBV_WC_LOC_QP_OP_ERR.
TEST(SqeEncode, AtomicsCarryTheirOperands)
{
	const ibv_wr_opcode ops[] = { IBV_WR_ATOMIC_CMP_AND_SWP,
				      IBV_WR_ATOMIC_FETCH_AND_ADD };

	for (ibv_wr_opcode op : ops) {
		Slot s(128);
		trdma_sq_caps caps = Caps();
		ibv_sge sg = { 0x3000, 8, 9 };
		ibv_send_wr wr = Wr(op, &sg, 1, IBV_SEND_SIGNALED);

		SCOPED_TRACE(op);
		wr.wr.atomic.remote_addr = 0x4000;
		wr.wr.atomic.compare_add = 0x0102030405060708ull;
		wr.wr.atomic.swap = 0x1112131415161718ull;
		wr.wr.atomic.rkey = 0x77;
		ASSERT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
		EXPECT_EQ(s.sqe()->opcode, op);
		EXPECT_EQ(s.sqe()->remote_addr, 0x4000u);
		EXPECT_EQ(s.sqe()->rkey, 0x77u);
		EXPECT_EQ(s.sqe()->compare_add, 0x0102030405060708ull);
		EXPECT_EQ(s.sqe()->swap, 0x1112131415161718ull);
		EXPECT_EQ(s.sqe()->num_sge, 1u);
		EXPECT_EQ(s.sqe()->sge[0].addr, 0x3000u);
	}
}

TEST(SqeEncode, InvalidateCarriesTheRkeyInImmData)
{
	const ibv_wr_opcode ops[] = { IBV_WR_LOCAL_INV, IBV_WR_SEND_WITH_INV };

	for (ibv_wr_opcode op : ops) {
		Slot s(128);
		trdma_sq_caps caps = Caps();
		ibv_send_wr wr = Wr(op, nullptr, 0);

		SCOPED_TRACE(op);
		wr.invalidate_rkey = 0xcafe;
		ASSERT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
		EXPECT_EQ(s.sqe()->opcode, op);
		EXPECT_EQ(s.sqe()->imm_data, 0xcafeu);
	}
}

TEST(SqeEncode, BindMwCarriesWindowMrRangeAndRights)
{
	Slot s(128);
	trdma_sq_caps caps = Caps();
	ibv_mr mr = {};
	ibv_mw mw = {};
	ibv_send_wr wr = Wr(IBV_WR_BIND_MW, nullptr, 0, IBV_SEND_SIGNALED);

	mr.lkey = 0x4201;
	mw.rkey = 0x5507;
	wr.bind_mw.mw = &mw;
	wr.bind_mw.rkey = 0x5508;
	wr.bind_mw.bind_info.mr = &mr;
	wr.bind_mw.bind_info.addr = 0x123456789aull;
	wr.bind_mw.bind_info.length = 0x10000000aull;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_REMOTE_WRITE;
	ASSERT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
	EXPECT_EQ(s.sqe()->opcode, IB_UVERBS_WR_BIND_MW);
	EXPECT_EQ(s.sqe()->flags, TRDMA_WQE_SIGNALED);
	EXPECT_EQ(s.sqe()->rkey, 0x5507u);
	EXPECT_EQ(s.sqe()->imm_data, 0x5508u);
	EXPECT_EQ(s.sqe()->remote_addr, 0x123456789aull);
	EXPECT_EQ(s.sqe()->compare_add, 0x10000000aull);
	EXPECT_EQ(s.sqe()->bind.mr_lkey, 0x4201u);
	EXPECT_EQ(s.sqe()->bind.mw_access,
		  static_cast<unsigned>(IBV_ACCESS_REMOTE_READ |
					IBV_ACCESS_REMOTE_WRITE));
	EXPECT_EQ(s.sqe()->num_sge, 0u);

	// A type-1 unbind names no MR; a bind names a window.
	wr.bind_mw.bind_info.mr = nullptr;
	wr.bind_mw.bind_info.length = 0;
	ASSERT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
	EXPECT_EQ(s.sqe()->bind.mr_lkey, 0u);
	wr.bind_mw.mw = nullptr;
	EXPECT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), EINVAL);
}

TEST(SqeEncode, OpcodesWithoutAnEncodingAreRefused)
{
	// IBV_WR_ATOMIC_WRITE: ibv_send_wr has no room for its 8 bytes.
	const int ops[] = { IBV_WR_TSO, IBV_WR_DRIVER1, IBV_WR_ATOMIC_WRITE,
			    12, 200, -1 };

	for (int op : ops) {
		Slot s(128);
		trdma_sq_caps caps = Caps();
		ibv_send_wr wr = Wr(static_cast<ibv_wr_opcode>(op), nullptr, 0);

		SCOPED_TRACE(op);
		EXPECT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false),
			  EINVAL);
	}
}

TEST(SqeEncode, SgeCountIsCheckedAgainstTheGrant)
{
	Slot s(128);
	trdma_sq_caps caps = Caps(128, 4, 64);
	std::vector<ibv_sge> sg(6, ibv_sge{ 0x1000, 1, 1 });
	ibv_send_wr wr = Wr(IBV_WR_RDMA_WRITE, sg.data(), 4);

	EXPECT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
	wr.num_sge = 5;
	EXPECT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), EINVAL);
	wr.num_sge = -1;
	EXPECT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), EINVAL);
}

TEST(SqeEncode, InlineGathersThePayload)
{
	Slot s(128);
	trdma_sq_caps caps = Caps(128, 1, 80);
	std::string a = "hello, ", b = "", c = "inline world";
	ibv_sge sg[3] = {
		{ reinterpret_cast<std::uintptr_t>(a.data()),
		  static_cast<std::uint32_t>(a.size()), 0 },
		{ 0, 0, 0 },	// empty: address never read
		{ reinterpret_cast<std::uintptr_t>(c.data()),
		  static_cast<std::uint32_t>(c.size()), 0 },
	};
	// More SGEs than max_send_sge is fine inline: only bytes count.
	ibv_send_wr wr = Wr(IBV_WR_SEND, sg, 3,
			    IBV_SEND_INLINE | IBV_SEND_SIGNALED);

	ASSERT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
	const trdma_sqe *q = s.sqe();
	EXPECT_EQ(q->flags, TRDMA_WQE_INLINE | TRDMA_WQE_SIGNALED);
	EXPECT_EQ(q->num_sge, 0u);
	ASSERT_EQ(q->inline_len, a.size() + c.size());
	EXPECT_EQ(std::string(reinterpret_cast<const char *>(q->sge),
			      q->inline_len),
		  a + b + c);
}

TEST(SqeEncode, InlineLengthIsCheckedAgainstTheGrant)
{
	Slot s(128);
	trdma_sq_caps caps = Caps(128, 4, 64);
	std::vector<char> buf(65, 'x');
	ibv_sge sg[2] = {
		{ reinterpret_cast<std::uintptr_t>(buf.data()), 32, 0 },
		{ reinterpret_cast<std::uintptr_t>(buf.data()), 32, 0 },
	};
	ibv_send_wr wr = Wr(IBV_WR_RDMA_WRITE, sg, 2, IBV_SEND_INLINE);

	EXPECT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
	EXPECT_EQ(s.sqe()->inline_len, 64u);
	sg[1].length = 33;
	EXPECT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), EINVAL);
	// A length that would wrap a 32-bit sum.
	sg[1].length = 0xffffffe0u;
	EXPECT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), EINVAL);
}

TEST(SqeEncode, InlineOnlyWhereThereIsOutboundPayload)
{
	const ibv_wr_opcode ok[] = { IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
				     IBV_WR_SEND_WITH_INV, IBV_WR_RDMA_WRITE,
				     IBV_WR_RDMA_WRITE_WITH_IMM };
	const ibv_wr_opcode bad[] = { IBV_WR_RDMA_READ,
				      IBV_WR_ATOMIC_CMP_AND_SWP,
				      IBV_WR_ATOMIC_FETCH_AND_ADD,
				      IBV_WR_LOCAL_INV, IBV_WR_BIND_MW };
	char byte = 'z';
	ibv_sge sg = { reinterpret_cast<std::uintptr_t>(&byte), 1, 0 };

	for (ibv_wr_opcode op : ok) {
		Slot s(128);
		trdma_sq_caps caps = Caps();
		ibv_send_wr wr = Wr(op, &sg, 1, IBV_SEND_INLINE);

		SCOPED_TRACE(op);
		EXPECT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false), 0);
	}
	for (ibv_wr_opcode op : bad) {
		Slot s(128);
		trdma_sq_caps caps = Caps();
		ibv_send_wr wr = Wr(op, &sg, 1, IBV_SEND_INLINE);

		SCOPED_TRACE(op);
		EXPECT_EQ(trdma_sqe_encode(s.data(), &caps, &wr, false),
			  EINVAL);
	}
}

TEST(RqeEncode, WritesWrIdAndSges)
{
	Slot s(64);
	ibv_sge sg[3] = { { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } };
	ibv_recv_wr wr;

	std::memset(&wr, 0, sizeof(wr));
	wr.wr_id = 77;
	wr.sg_list = sg;
	wr.num_sge = 3;
	ASSERT_EQ(trdma_rqe_encode(s.data(), 3, &wr), 0);
	const trdma_rqe *q = s.rqe();
	EXPECT_EQ(q->wr_id, 77u);
	EXPECT_EQ(q->num_sge, 3u);
	for (std::uint8_t r : q->reserved)
		EXPECT_EQ(r, 0u);
	EXPECT_EQ(q->sge[2].addr, 7u);
	EXPECT_EQ(q->sge[2].length, 8u);
	EXPECT_EQ(q->sge[2].lkey, 9u);

	wr.num_sge = 0;
	ASSERT_EQ(trdma_rqe_encode(s.data(), 3, &wr), 0);
	EXPECT_EQ(s.rqe()->num_sge, 0u);

	wr.num_sge = 4;
	EXPECT_EQ(trdma_rqe_encode(s.data(), 3, &wr), EINVAL);
	wr.num_sge = -2;
	EXPECT_EQ(trdma_rqe_encode(s.data(), 3, &wr), EINVAL);
}

TEST(CqeToWc, CopiesEveryFieldAndZeroesTheRest)
{
	trdma_cqe cqe = {};
	ibv_wc wc;

	cqe.wr_id = 0xfedcba9876543210ull;
	cqe.status = IBV_WC_REM_ACCESS_ERR;
	cqe.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
	cqe.wc_flags = IBV_WC_WITH_IMM;
	cqe.vendor_err = 0x99;
	cqe.byte_len = 4096;
	cqe.imm_data = htonl(0xa1b2c3d4);
	cqe.qp_num = 0x123456;
	cqe.src_qp = 0x654321;

	std::memset(&wc, 0xff, sizeof(wc));
	trdma_cqe_to_wc(&cqe, &wc);
	EXPECT_EQ(wc.wr_id, 0xfedcba9876543210ull);
	EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
	EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	EXPECT_EQ(wc.wc_flags, static_cast<unsigned>(IBV_WC_WITH_IMM));
	EXPECT_EQ(wc.vendor_err, 0x99u);
	EXPECT_EQ(wc.byte_len, 4096u);
	EXPECT_EQ(wc.imm_data, htonl(0xa1b2c3d4));
	EXPECT_EQ(wc.qp_num, 0x123456u);
	EXPECT_EQ(wc.src_qp, 0x654321u);
	EXPECT_EQ(wc.pkey_index, 0u);
	EXPECT_EQ(wc.slid, 0u);
	EXPECT_EQ(wc.sl, 0u);
	EXPECT_EQ(wc.dlid_path_bits, 0u);
}

TEST(CqeToWc, SendCompletion)
{
	trdma_cqe cqe = {};
	ibv_wc wc;

	cqe.wr_id = 5;
	cqe.status = IBV_WC_SUCCESS;
	cqe.opcode = IBV_WC_RDMA_READ;
	cqe.byte_len = 12;
	trdma_cqe_to_wc(&cqe, &wc);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
	EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
	EXPECT_EQ(wc.wc_flags, 0u);
	EXPECT_EQ(wc.imm_data, 0u);
}

// kernel/trdma_qp.c's sizing of the queues, to check that the provider
// accepts every geometry the kernel can hand out.
unsigned OrderBase2(std::uint32_t n)
{
	unsigned s = 0;

	while ((1ull << s) < n)
		s++;
	return s;
}

struct KernelSq {
	unsigned shift;
	std::uint32_t sge, inl;
};

KernelSq KernelSqSizing(std::uint32_t req_sge, std::uint32_t req_inline,
			std::uint32_t lim_sge, std::uint32_t lim_inline)
{
	std::uint32_t room = std::max<std::uint32_t>(req_sge * 16, req_inline);
	unsigned shift = OrderBase2(std::max<std::uint32_t>(64, 48 + room));

	room = (1u << shift) - 48;
	return { shift, std::min(room / 16, lim_sge),
		 std::min(room, lim_inline) };
}

TEST(CreateResp, AcceptsEverySqTheKernelSizes)
{
	const std::uint32_t lim_sges[] = { 1, 16, 255 };
	const std::uint32_t lim_inlines[] = { 0, 256, 4096 };

	for (std::uint32_t lim_sge : lim_sges)
		for (std::uint32_t lim_inline : lim_inlines)
			for (std::uint32_t sge = 0; sge <= lim_sge; sge++)
				for (std::uint32_t inl = 0; inl <= lim_inline;
				     inl += 61) {
					KernelSq k = KernelSqSizing(
						sge, inl, lim_sge, lim_inline);
					trdma_sq_caps caps;

					ASSERT_EQ(trdma_sq_caps_init(&caps, 64,
								     k.shift,
								     k.sge,
								     k.inl),
						  0)
						<< sge << " " << inl;
					EXPECT_EQ(caps.slot_size,
						  1u << k.shift);
					EXPECT_EQ(caps.max_sge, k.sge);
					EXPECT_EQ(caps.max_inline, k.inl);
				}
}

TEST(CreateResp, AcceptsEveryRqTheKernelSizes)
{
	for (std::uint32_t lim_sge : { 1u, 16u, 255u })
		for (std::uint32_t sge = 0; sge <= lim_sge; sge++) {
			unsigned shift = OrderBase2(
				std::max<std::uint32_t>(32, 16 + sge * 16));
			std::uint32_t granted = std::min(
				((1u << shift) - 16) / 16, lim_sge);

			ASSERT_EQ(trdma_rq_geometry_check(1u << 10, shift,
							  granted),
				  0)
				<< sge;
		}
}

TEST(CreateResp, RefusesImpossibleSqGeometry)
{
	trdma_sq_caps caps;

	// 128-byte slots: 80 bytes of room, 5 SGEs.
	EXPECT_EQ(trdma_sq_caps_init(&caps, 64, 7, 5, 80), 0);
	EXPECT_EQ(trdma_sq_caps_init(&caps, 64, 7, 6, 0), EPROTO);
	EXPECT_EQ(trdma_sq_caps_init(&caps, 64, 7, 1, 81), EPROTO);
	EXPECT_EQ(trdma_sq_caps_init(&caps, 0, 7, 1, 0), EPROTO);
	EXPECT_EQ(trdma_sq_caps_init(&caps, 48, 7, 1, 0), EPROTO);
	// A slot smaller than the SQE header.
	EXPECT_EQ(trdma_sq_caps_init(&caps, 64, 5, 0, 0), EPROTO);
	EXPECT_EQ(trdma_sq_caps_init(&caps, 64, 40, 0, 0), EPROTO);
	// num_sge is a __u8.
	EXPECT_EQ(trdma_sq_caps_init(&caps, 64, 13, 255, 0), 0);
	EXPECT_EQ(trdma_sq_caps_init(&caps, 64, 13, 256, 0), EPROTO);
}

TEST(CreateResp, RefusesImpossibleRqGeometry)
{
	// 32-byte slots: one SGE.
	EXPECT_EQ(trdma_rq_geometry_check(8, 5, 1), 0);
	EXPECT_EQ(trdma_rq_geometry_check(8, 5, 2), EPROTO);
	EXPECT_EQ(trdma_rq_geometry_check(8, 3, 0), EPROTO);
	EXPECT_EQ(trdma_rq_geometry_check(6, 5, 1), EPROTO);
	EXPECT_EQ(trdma_rq_geometry_check(0, 5, 1), EPROTO);
	EXPECT_EQ(trdma_rq_geometry_check(8, 13, 256), EPROTO);
}

} // namespace
