// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Layout of the kernel <-> provider ABI, include/uapi/rdma/trdma-abi.h.
//
// The header is included first so that this translation unit also proves
// it compiles on its own as C++ (abi_c_standalone.c does the same for C).

#include <rdma/trdma-abi.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "abi_c_standalone.h"

namespace {

// A uapi field may only be a fixed-width kernel integer type or an array
// of one: no pointers, no long/size_t, no enums, no bool, no nested
// structs (which would need their own rules).
template <typename T>
constexpr bool is_uapi_int =
	std::is_same_v<T, __u8> || std::is_same_v<T, __u16> ||
	std::is_same_v<T, __u32> || std::is_same_v<T, __u64> ||
	std::is_same_v<T, __s8> || std::is_same_v<T, __s16> ||
	std::is_same_v<T, __s32> || std::is_same_v<T, __s64>;

template <typename T>
struct uapi_field_ok : std::bool_constant<is_uapi_int<std::remove_cv_t<T>> &&
					  !std::is_pointer_v<T>> {};
template <typename T, std::size_t N>
struct uapi_field_ok<T[N]> : uapi_field_ok<T> {};

struct Field {
	std::string name;
	std::size_t offset;
	std::size_t size;
	std::size_t align;
	bool type_ok;
};

#define FIELD(type, member)                                                  \
	Field{ #member, offsetof(type, member), sizeof(type::member),        \
	       alignof(decltype(type::member)),                              \
	       uapi_field_ok<decltype(type::member)>::value }

// Every field listed in declaration order.  The sum of their sizes must be
// sizeof(T), which also catches a field added to the header but not here.
template <typename T>
void ExpectPlainUapiStruct(const std::vector<Field> &fields)
{
	std::size_t next = 0;

	for (const Field &f : fields) {
		SCOPED_TRACE(f.name);
		EXPECT_TRUE(f.type_ok)
			<< "field is not a fixed-width __u/__s integer";
		EXPECT_EQ(f.offset, next) << "implicit padding before field";
		EXPECT_EQ(f.offset % f.align, 0u);
		next = f.offset + f.size;
	}
	EXPECT_EQ(next, sizeof(T)) << "implicit tail padding or unlisted field";
	// Driver data of the uverbs extended commands must be whole 64-bit
	// words; keeping every trdma struct that way lets members be appended
	// without changing alignment between 32- and 64-bit userspace.
	EXPECT_EQ(sizeof(T) % 8, 0u);
	EXPECT_LE(alignof(T), 8u);
}

TEST(TrdmaAbi, VersionIsAPositiveUverbsAbiVersion)
{
	// Published as the uverbs abi_version of the device, which libibverbs
	// compares with the provider's match_{min,max}_abi_version.
	EXPECT_GE(TRDMA_ABI_VERSION, 1);
	EXPECT_LE(static_cast<unsigned long long>(TRDMA_ABI_VERSION),
		  static_cast<unsigned long long>(UINT32_MAX));
}

TEST(TrdmaAbi, HcaTypeIsAPlainSysfsToken)
{
	const std::string hca = TRDMA_HCA_TYPE;

	ASSERT_FALSE(hca.empty());
	// Compared verbatim against a sysfs attribute whose trailing newline
	// libibverbs strips; anything but [a-z0-9_-] would be fragile.
	for (char c : hca)
		EXPECT_TRUE(std::islower(static_cast<unsigned char>(c)) ||
			    std::isdigit(static_cast<unsigned char>(c)) ||
			    c == '_' || c == '-')
			<< "unexpected character '" << c << "'";
	// sizeof a string literal counts its NUL: it must be a literal.
	EXPECT_EQ(sizeof(TRDMA_HCA_TYPE), hca.size() + 1);
}

TEST(TrdmaAbi, AllocUcontextReqLayout)
{
	using T = trdma_alloc_ucontext_req;

	EXPECT_EQ(sizeof(T), 8u);
	EXPECT_EQ(alignof(T), 4u);
	EXPECT_EQ(offsetof(T, abi_version), 0u);
	EXPECT_EQ(offsetof(T, reserved), 4u);
	ExpectPlainUapiStruct<T>({
		FIELD(T, abi_version),
		FIELD(T, reserved),
	});
}

TEST(TrdmaAbi, AllocUcontextRespLayout)
{
	using T = trdma_alloc_ucontext_resp;

	EXPECT_EQ(sizeof(T), 8u);
	EXPECT_EQ(alignof(T), 4u);
	EXPECT_EQ(offsetof(T, abi_version), 0u);
	EXPECT_EQ(offsetof(T, reserved), 4u);
	ExpectPlainUapiStruct<T>({
		FIELD(T, abi_version),
		FIELD(T, reserved),
	});
}

// Rings: one control block, then the slots.  The three indices written by
// different parties each have a 64-byte cache line of their own.
TEST(TrdmaAbi, RingCtrlLayout)
{
	using T = trdma_ring_ctrl;

	EXPECT_EQ(sizeof(T), 192u);
	EXPECT_EQ(TRDMA_RING_SLOTS_OFFSET, sizeof(T));
	EXPECT_EQ(alignof(T), 4u);
	EXPECT_EQ(offsetof(T, prod), 0u);
	EXPECT_EQ(offsetof(T, cons), 64u);
	EXPECT_EQ(offsetof(T, kflags), 128u);
	// Read with kflags after the same fence: on kflags' cache line.
	EXPECT_EQ(offsetof(T, tx_active), 132u);
	EXPECT_NE(offsetof(T, prod) / 64, offsetof(T, cons) / 64);
	EXPECT_NE(offsetof(T, cons) / 64, offsetof(T, kflags) / 64);
	EXPECT_NE(offsetof(T, prod) / 64, offsetof(T, kflags) / 64);
	ExpectPlainUapiStruct<T>({
		FIELD(T, prod),
		FIELD(T, reserved0),
		FIELD(T, cons),
		FIELD(T, reserved1),
		FIELD(T, kflags),
		FIELD(T, tx_active),
		FIELD(T, reserved2),
	});
	// The slots that follow start 64-byte aligned (mmap is page aligned).
	EXPECT_EQ(TRDMA_RING_SLOTS_OFFSET % 64, 0u);
}

TEST(TrdmaAbi, RingFlags)
{
	EXPECT_EQ(TRDMA_RING_F_ERROR, 1u);
}

TEST(TrdmaAbi, SgeLayout)
{
	using T = trdma_sge;

	EXPECT_EQ(sizeof(T), 16u);
	EXPECT_EQ(alignof(T), 8u);
	EXPECT_EQ(offsetof(T, addr), 0u);
	EXPECT_EQ(offsetof(T, length), 8u);
	EXPECT_EQ(offsetof(T, lkey), 12u);
	ExpectPlainUapiStruct<T>({
		FIELD(T, addr),
		FIELD(T, length),
		FIELD(T, lkey),
	});
}

// A struct ending in a flexible array of trdma_sge: the array starts right
// after the header, 8-byte aligned, and adds nothing to sizeof.
template <typename T>
void ExpectSgeArrayAfterHeader(std::size_t sge_offset)
{
	EXPECT_EQ(sge_offset, sizeof(T));
	EXPECT_EQ(sge_offset % alignof(trdma_sge), 0u);
}

TEST(TrdmaAbi, SqeLayout)
{
	using T = trdma_sqe;

	EXPECT_EQ(sizeof(T), 48u);
	EXPECT_EQ(alignof(T), 8u);
	EXPECT_EQ(offsetof(T, wr_id), 0u);
	EXPECT_EQ(offsetof(T, opcode), 8u);
	EXPECT_EQ(offsetof(T, flags), 9u);
	EXPECT_EQ(offsetof(T, num_sge), 10u);
	EXPECT_EQ(offsetof(T, reserved), 11u);
	EXPECT_EQ(offsetof(T, inline_len), 12u);
	EXPECT_EQ(offsetof(T, imm_data), 16u);
	EXPECT_EQ(offsetof(T, rkey), 20u);
	EXPECT_EQ(offsetof(T, remote_addr), 24u);
	EXPECT_EQ(offsetof(T, compare_add), 32u);
	EXPECT_EQ(offsetof(T, swap), 40u);
	// BIND_MW's MR and rights lie over swap, exactly.
	EXPECT_EQ(offsetof(T, bind), 40u);
	EXPECT_EQ(sizeof(trdma_sqe_bind), 8u);
	EXPECT_EQ(offsetof(trdma_sqe_bind, mr_lkey), 0u);
	EXPECT_EQ(offsetof(trdma_sqe_bind, mw_access), 4u);
	ExpectPlainUapiStruct<T>({
		FIELD(T, wr_id),
		FIELD(T, opcode),
		FIELD(T, flags),
		FIELD(T, num_sge),
		FIELD(T, reserved),
		FIELD(T, inline_len),
		FIELD(T, imm_data),
		FIELD(T, rkey),
		FIELD(T, remote_addr),
		FIELD(T, compare_add),
		FIELD(T, swap),
	});
	ExpectSgeArrayAfterHeader<T>(offsetof(T, sge));
}

TEST(TrdmaAbi, RqeLayout)
{
	using T = trdma_rqe;

	EXPECT_EQ(sizeof(T), 16u);
	EXPECT_EQ(alignof(T), 8u);
	EXPECT_EQ(offsetof(T, wr_id), 0u);
	EXPECT_EQ(offsetof(T, num_sge), 8u);
	EXPECT_EQ(offsetof(T, reserved), 9u);
	ExpectPlainUapiStruct<T>({
		FIELD(T, wr_id),
		FIELD(T, num_sge),
		FIELD(T, reserved),
	});
	ExpectSgeArrayAfterHeader<T>(offsetof(T, sge));
}

TEST(TrdmaAbi, CqeLayout)
{
	using T = trdma_cqe;

	EXPECT_EQ(sizeof(T), 32u);
	EXPECT_EQ(alignof(T), 8u);
	EXPECT_EQ(offsetof(T, wr_id), 0u);
	EXPECT_EQ(offsetof(T, status), 8u);
	EXPECT_EQ(offsetof(T, opcode), 9u);
	EXPECT_EQ(offsetof(T, wc_flags), 10u);
	EXPECT_EQ(offsetof(T, vendor_err), 12u);
	EXPECT_EQ(offsetof(T, byte_len), 16u);
	EXPECT_EQ(offsetof(T, imm_data), 20u);
	EXPECT_EQ(offsetof(T, qp_num), 24u);
	EXPECT_EQ(offsetof(T, src_qp), 28u);
	ExpectPlainUapiStruct<T>({
		FIELD(T, wr_id),
		FIELD(T, status),
		FIELD(T, opcode),
		FIELD(T, wc_flags),
		FIELD(T, vendor_err),
		FIELD(T, byte_len),
		FIELD(T, imm_data),
		FIELD(T, qp_num),
		FIELD(T, src_qp),
	});
	// CQ slots are exactly one CQE, a power of two.
	EXPECT_EQ(sizeof(T) & (sizeof(T) - 1), 0u);
}

TEST(TrdmaAbi, CreateCqRespLayout)
{
	using T = trdma_create_cq_resp;

	EXPECT_EQ(sizeof(T), 16u);
	EXPECT_EQ(alignof(T), 8u);
	EXPECT_EQ(offsetof(T, mmap_key), 0u);
	EXPECT_EQ(offsetof(T, num_slots), 8u);
	EXPECT_EQ(offsetof(T, reserved), 12u);
	ExpectPlainUapiStruct<T>({
		FIELD(T, mmap_key),
		FIELD(T, num_slots),
		FIELD(T, reserved),
	});
}

TEST(TrdmaAbi, ResizeCqRespLayout)
{
	using T = trdma_resize_cq_resp;

	EXPECT_EQ(sizeof(T), 16u);
	EXPECT_EQ(alignof(T), 8u);
	EXPECT_EQ(offsetof(T, mmap_key), 0u);
	EXPECT_EQ(offsetof(T, num_slots), 8u);
	EXPECT_EQ(offsetof(T, reserved), 12u);
	ExpectPlainUapiStruct<T>({
		FIELD(T, mmap_key),
		FIELD(T, num_slots),
		FIELD(T, reserved),
	});
}

TEST(TrdmaAbi, CreateQpRespLayout)
{
	using T = trdma_create_qp_resp;

	EXPECT_EQ(sizeof(T), 32u);
	EXPECT_EQ(alignof(T), 8u);
	EXPECT_EQ(offsetof(T, sq_mmap_key), 0u);
	EXPECT_EQ(offsetof(T, rq_mmap_key), 8u);
	EXPECT_EQ(offsetof(T, sq_slots), 16u);
	EXPECT_EQ(offsetof(T, rq_slots), 20u);
	EXPECT_EQ(offsetof(T, sq_wqe_shift), 24u);
	EXPECT_EQ(offsetof(T, rq_wqe_shift), 25u);
	EXPECT_EQ(offsetof(T, reserved), 26u);
	EXPECT_EQ(offsetof(T, max_inline_data), 28u);
	ExpectPlainUapiStruct<T>({
		FIELD(T, sq_mmap_key),
		FIELD(T, rq_mmap_key),
		FIELD(T, sq_slots),
		FIELD(T, rq_slots),
		FIELD(T, sq_wqe_shift),
		FIELD(T, rq_wqe_shift),
		FIELD(T, reserved),
		FIELD(T, max_inline_data),
	});
}

TEST(TrdmaAbi, CreateSrqRespLayout)
{
	using T = trdma_create_srq_resp;

	EXPECT_EQ(sizeof(T), 16u);
	EXPECT_EQ(alignof(T), 8u);
	EXPECT_EQ(offsetof(T, mmap_key), 0u);
	EXPECT_EQ(offsetof(T, num_slots), 8u);
	EXPECT_EQ(offsetof(T, wqe_shift), 12u);
	EXPECT_EQ(offsetof(T, reserved), 13u);
	ExpectPlainUapiStruct<T>({
		FIELD(T, mmap_key),
		FIELD(T, num_slots),
		FIELD(T, wqe_shift),
		FIELD(T, reserved),
	});
}

TEST(TrdmaAbi, WqeFlagsAreDistinctBitsOfAByte)
{
	const unsigned flags[] = { TRDMA_WQE_SIGNALED, TRDMA_WQE_SOLICITED,
				   TRDMA_WQE_INLINE, TRDMA_WQE_FENCE };
	unsigned seen = 0;

	for (unsigned f : flags) {
		EXPECT_NE(f, 0u);
		EXPECT_EQ(f & (f - 1), 0u) << f << " is not a single bit";
		EXPECT_EQ(seen & f, 0u) << f << " used twice";
		EXPECT_LE(f, 0x80u) << "trdma_sqe.flags is a __u8";
		seen |= f;
	}
}

// The kernel (C) and the provider (C) see the structs as this C++ test
// does: the numbers measured by a C translation unit must agree.
TEST(TrdmaAbi, CAndCxxAgree)
{
	const trdma_c_abi_layout *c = trdma_c_abi_layout_get();

	EXPECT_EQ(c->abi_version, static_cast<unsigned>(TRDMA_ABI_VERSION));
	EXPECT_STREQ(c->hca_type, TRDMA_HCA_TYPE);
	EXPECT_EQ(c->req_size, sizeof(trdma_alloc_ucontext_req));
	EXPECT_EQ(c->req_align, alignof(trdma_alloc_ucontext_req));
	EXPECT_EQ(c->req_abi_version_off,
		  offsetof(trdma_alloc_ucontext_req, abi_version));
	EXPECT_EQ(c->req_reserved_off,
		  offsetof(trdma_alloc_ucontext_req, reserved));
	EXPECT_EQ(c->resp_size, sizeof(trdma_alloc_ucontext_resp));
	EXPECT_EQ(c->resp_align, alignof(trdma_alloc_ucontext_resp));
	EXPECT_EQ(c->resp_abi_version_off,
		  offsetof(trdma_alloc_ucontext_resp, abi_version));
	EXPECT_EQ(c->resp_reserved_off,
		  offsetof(trdma_alloc_ucontext_resp, reserved));
}

TEST(TrdmaAbi, CAndCxxAgreeOnEveryStruct)
{
#define TRDMA_ABI_SIZE(type) { "sizeof(" #type ")", sizeof(struct type) },
#define TRDMA_ABI_ALIGN(type) { "alignof(" #type ")", alignof(struct type) },
#define TRDMA_ABI_OFF(type, member)                                            \
	{ "offsetof(" #type ", " #member ")", offsetof(struct type, member) },
	const std::map<std::string, std::size_t> cxx = {
#include "abi_layout_facts.def"
		{ "TRDMA_RING_SLOTS_OFFSET", TRDMA_RING_SLOTS_OFFSET },
		{ "TRDMA_RING_F_ERROR", TRDMA_RING_F_ERROR },
		{ "TRDMA_WQE_SIGNALED", TRDMA_WQE_SIGNALED },
		{ "TRDMA_WQE_SOLICITED", TRDMA_WQE_SOLICITED },
		{ "TRDMA_WQE_INLINE", TRDMA_WQE_INLINE },
		{ "TRDMA_WQE_FENCE", TRDMA_WQE_FENCE },
	};
#undef TRDMA_ABI_SIZE
#undef TRDMA_ABI_ALIGN
#undef TRDMA_ABI_OFF

	ASSERT_EQ(trdma_c_abi_fact_count, cxx.size());
	for (std::size_t i = 0; i < trdma_c_abi_fact_count; i++) {
		const trdma_c_abi_fact &f = trdma_c_abi_facts[i];
		auto it = cxx.find(f.key);

		SCOPED_TRACE(f.key);
		ASSERT_NE(it, cxx.end());
		EXPECT_EQ(f.value, it->second);
	}
}

} // namespace
