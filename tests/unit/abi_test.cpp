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

} // namespace
