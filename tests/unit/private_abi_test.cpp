// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Layout of provider/trdma-verbs-private.h, the provider's declarations of
// rdma-core's private libibverbs <-> provider interface.
//
// The numbers are measured by private_abi_probe.c (the header is C only).
// The expected LP64 values were measured by compiling the same probe
// against rdma-core's own libibverbs/driver.h and kern-abi.h of v36.0,
// v44.0 and v56.0 (tests/unit/check-rdma-core-layout.sh), which agree.

#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/trdma-abi.h>

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "private_abi_probe.h"

namespace {

const std::map<std::string, std::size_t> &Probe()
{
	static const std::map<std::string, std::size_t> values = [] {
		std::map<std::string, std::size_t> m;

		for (std::size_t i = 0; i < trdma_probe_count; i++)
			m.emplace(trdma_probe_values[i].key,
				  trdma_probe_values[i].value);
		return m;
	}();
	return values;
}

::testing::AssertionResult Has(const std::string &key)
{
	if (Probe().count(key))
		return ::testing::AssertionSuccess();
	return ::testing::AssertionFailure() << "probe lacks " << key;
}

std::size_t P(const std::string &key)
{
	auto it = Probe().find(key);
	return it == Probe().end() ? static_cast<std::size_t>(-1) : it->second;
}

const std::vector<std::string> &ContextOpsMembers()
{
	static const std::vector<std::string> names = {
#define TRDMA_CTX_OP(name) #name,
#include "context_ops_members.def"
#undef TRDMA_CTX_OP
	};
	return names;
}

bool IsLP64()
{
	return sizeof(void *) == 8 && sizeof(long) == 8;
}

// Values for rdma-core v36..v56 on LP64 (x86_64, aarch64, ...).
const std::map<std::string, std::size_t> kUpstreamLP64 = {
	{ "sizeof(struct verbs_match_ent)", 24 },
	{ "alignof(struct verbs_match_ent)", 8 },
	{ "offsetof(struct verbs_match_ent, driver_data)", 0 },
	{ "offsetof(struct verbs_match_ent, u)", 8 },
	{ "offsetof(struct verbs_match_ent, u.modalias)", 8 },
	{ "offsetof(struct verbs_match_ent, u.driver_id)", 8 },
	{ "offsetof(struct verbs_match_ent, vendor)", 16 },
	{ "offsetof(struct verbs_match_ent, device)", 18 },
	{ "offsetof(struct verbs_match_ent, kind)", 20 },

	{ "sizeof(struct verbs_device_ops)", 72 },
	{ "alignof(struct verbs_device_ops)", 8 },
	{ "offsetof(struct verbs_device_ops, name)", 0 },
	{ "offsetof(struct verbs_device_ops, match_min_abi_version)", 8 },
	{ "offsetof(struct verbs_device_ops, match_max_abi_version)", 12 },
	{ "offsetof(struct verbs_device_ops, match_table)", 16 },
	{ "offsetof(struct verbs_device_ops, static_providers)", 24 },
	{ "offsetof(struct verbs_device_ops, match_device)", 32 },
	{ "offsetof(struct verbs_device_ops, alloc_context)", 40 },
	{ "offsetof(struct verbs_device_ops, import_context)", 48 },
	{ "offsetof(struct verbs_device_ops, alloc_device)", 56 },
	{ "offsetof(struct verbs_device_ops, uninit_device)", 64 },

	{ "sizeof(struct verbs_device)", 712 },
	{ "alignof(struct verbs_device)", 8 },
	{ "offsetof(struct verbs_device, device)", 0 },
	{ "offsetof(struct verbs_device, ops)", 664 },
	{ "offsetof(struct verbs_device, refcount)", 672 },
	{ "offsetof(struct verbs_device, entry)", 680 },
	{ "offsetof(struct verbs_device, sysfs)", 696 },
	{ "offsetof(struct verbs_device, core_support)", 704 },
	{ "sizeof(atomic_int)", 4 },
	{ "sizeof(struct list_node)", 16 },

	{ "sizeof(struct verbs_context_ops)", 608 },
	{ "alignof(struct verbs_context_ops)", 8 },
	{ "offsetof(struct verbs_context_ops, free_context)", 312 },
	{ "offsetof(struct verbs_context_ops, query_device_ex)", 464 },
	{ "offsetof(struct verbs_context_ops, query_port)", 480 },

	{ "sizeof(struct ibv_get_context)", 16 },
	{ "alignof(struct ibv_get_context)", 8 },
	{ "offsetof(struct ibv_get_context, hdr)", 0 },
	{ "offsetof(struct ibv_get_context, core_payload)", 8 },
	{ "offsetof(struct ibv_get_context, core_payload.response)", 8 },
	{ "sizeof(struct ibv_query_port)", 24 },
	{ "alignof(struct ibv_query_port)", 8 },
	{ "offsetof(struct ibv_query_port, hdr)", 0 },
	{ "offsetof(struct ibv_query_port, core_payload)", 8 },
	{ "offsetof(struct ibv_query_port, core_payload.port_num)", 16 },

	{ "sizeof(struct verbs_mr)", 56 },
	{ "alignof(struct verbs_mr)", 8 },
	{ "offsetof(struct verbs_mr, ibv_mr)", 0 },
	{ "offsetof(struct verbs_mr, mr_type)", 48 },
	{ "offsetof(struct verbs_mr, access)", 52 },
	{ "sizeof(enum ibv_mr_type)", 4 },
	{ "IBV_MR_TYPE_MR", 0 },
	{ "IBV_MR_TYPE_DMABUF_MR", 3 },

	{ "sizeof(struct ibv_alloc_pd)", 16 },
	{ "sizeof(struct ibv_reg_mr)", 48 },
	{ "offsetof(struct ibv_reg_mr, core_payload.start)", 16 },
	{ "offsetof(struct ibv_reg_mr, core_payload.access_flags)", 44 },
	{ "sizeof(struct ibv_create_cq)", 40 },
	{ "offsetof(struct ibv_create_cq, core_payload.comp_channel)", 32 },
	{ "sizeof(struct ibv_create_qp)", 64 },
	{ "offsetof(struct ibv_create_qp, core_payload.max_inline_data)", 56 },
	{ "sizeof(struct ibv_query_qp)", 24 },
	{ "offsetof(struct ibv_query_qp, core_payload.attr_mask)", 20 },
	{ "sizeof(struct ibv_modify_qp)", 120 },
	{ "offsetof(struct ibv_modify_qp, core_payload.qp_state)", 104 },
	{ "sizeof(struct ibv_create_srq)", 40 },
	{ "offsetof(struct ibv_create_srq, core_payload.srq_limit)", 36 },
	{ "sizeof(struct ibv_modify_srq)", 24 },
	{ "offsetof(struct ibv_modify_srq, core_payload.srq_limit)", 20 },
	{ "sizeof(struct ibv_query_srq)", 24 },
	{ "offsetof(struct ibv_query_srq, core_payload.srq_handle)", 16 },
};

// The command buffers beyond GET_CONTEXT and QUERY_PORT, with the kernel
// struct of their core payload.
struct CmdInfo {
	const char *name;
	std::size_t core_size;
};

const std::vector<CmdInfo> &Commands()
{
	static const std::vector<CmdInfo> cmds = {
		{ "ibv_alloc_pd", sizeof(struct ib_uverbs_alloc_pd) },
		{ "ibv_reg_mr", sizeof(struct ib_uverbs_reg_mr) },
		{ "ibv_create_cq", sizeof(struct ib_uverbs_create_cq) },
		{ "ibv_create_qp", sizeof(struct ib_uverbs_create_qp) },
		{ "ibv_query_qp", sizeof(struct ib_uverbs_query_qp) },
		{ "ibv_modify_qp", sizeof(struct ib_uverbs_modify_qp) },
		{ "ibv_create_srq", sizeof(struct ib_uverbs_create_srq) },
		{ "ibv_modify_srq", sizeof(struct ib_uverbs_modify_srq) },
		{ "ibv_query_srq", sizeof(struct ib_uverbs_query_srq) },
	};
	return cmds;
}

TEST(PrivateAbi, MatchesRdmaCoreV36ToV56OnLP64)
{
	if (!IsLP64())
		GTEST_SKIP() << "expected values recorded for LP64 only";

	for (const auto &[key, want] : kUpstreamLP64) {
		SCOPED_TRACE(key);
		ASSERT_TRUE(Has(key));
		EXPECT_EQ(P(key), want);
	}
}

TEST(PrivateAbi, BelongsToIbverbsPrivate34)
{
	// verbs_register_driver_34 and the IBVERBS_PRIVATE_34 symbol version
	// the provider links against must be the ABI declared here.
	EXPECT_EQ(P("TRDMA_IBVERBS_PABI_VERSION"), 34u);
}

// The structs embed public libibverbs types; the C probe and the public
// C++ view of <infiniband/verbs.h> must agree on them.
TEST(PrivateAbi, EmbeddedPublicStructs)
{
	EXPECT_EQ(P("sizeof(struct ibv_device)"), sizeof(struct ibv_device));
	EXPECT_EQ(P("sizeof(struct verbs_context)"),
		  sizeof(struct verbs_context));
	EXPECT_EQ(P("offsetof(struct verbs_device, device)"), 0u)
		<< "libibverbs converts ibv_device * to verbs_device *";
	// ops follows the embedded ibv_device at pointer alignment.
	const std::size_t pa = alignof(void *);
	EXPECT_EQ(P("offsetof(struct verbs_device, ops)"),
		  (sizeof(struct ibv_device) + pa - 1) / pa * pa);
	EXPECT_EQ(P("offsetof(struct trdma_device, ibv_dev)"), 0u);
	EXPECT_EQ(P("offsetof(struct trdma_context, ibv_ctx)"), 0u);
}

TEST(PrivateAbi, ContextOpsIsTheSortedListOfAllRdmaCoreOps)
{
	const auto &names = ContextOpsMembers();

	// rdma-core v36..v56 has 76 ops, kept sorted by name.
	EXPECT_EQ(names.size(), 76u);
	EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
	EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());

	// Each op is one function pointer, in exactly that order, with
	// nothing else in the struct.
	for (std::size_t i = 0; i < names.size(); i++) {
		const std::string key =
			"offsetof(struct verbs_context_ops, " + names[i] + ")";
		SCOPED_TRACE(key);
		ASSERT_TRUE(Has(key));
		EXPECT_EQ(P(key), i * sizeof(void (*)(void)));
	}
	EXPECT_EQ(P("sizeof(struct verbs_context_ops)"),
		  names.size() * sizeof(void (*)(void)));
}

// rdma-core's command buffers: struct ib_uverbs_cmd_hdr, then the kernel's
// core payload, with nothing in between or after.
TEST(PrivateAbi, GetContextCorePayloadFollowsHeader)
{
	EXPECT_EQ(P("offsetof(struct ibv_get_context, hdr)"), 0u);
	EXPECT_EQ(P("offsetof(struct ibv_get_context, core_payload)"),
		  sizeof(struct ib_uverbs_cmd_hdr));
	EXPECT_EQ(P("sizeof(struct ibv_get_context)"),
		  sizeof(struct ib_uverbs_cmd_hdr) +
			  sizeof(struct ib_uverbs_get_context));
	EXPECT_EQ(P("offsetof(struct ibv_get_context, core_payload.response)"),
		  sizeof(struct ib_uverbs_cmd_hdr) +
			  offsetof(struct ib_uverbs_get_context, response));
}

TEST(PrivateAbi, QueryPortCorePayloadFollowsHeader)
{
	EXPECT_EQ(P("offsetof(struct ibv_query_port, hdr)"), 0u);
	EXPECT_EQ(P("offsetof(struct ibv_query_port, core_payload)"),
		  sizeof(struct ib_uverbs_cmd_hdr));
	EXPECT_EQ(P("sizeof(struct ibv_query_port)"),
		  sizeof(struct ib_uverbs_cmd_hdr) +
			  sizeof(struct ib_uverbs_query_port));
	EXPECT_EQ(P("offsetof(struct ibv_query_port, core_payload.port_num)"),
		  sizeof(struct ib_uverbs_cmd_hdr) +
			  offsetof(struct ib_uverbs_query_port, port_num));
}

TEST(PrivateAbi, CommandCorePayloadsFollowHeader)
{
	for (const CmdInfo &c : Commands()) {
		const std::string s = std::string("struct ") + c.name;
		SCOPED_TRACE(s);
		ASSERT_TRUE(Has("sizeof(" + s + ")"));
		EXPECT_EQ(P("offsetof(" + s + ", hdr)"), 0u);
		EXPECT_EQ(P("offsetof(" + s + ", core_payload)"),
			  sizeof(struct ib_uverbs_cmd_hdr));
		EXPECT_EQ(P("sizeof(" + s + ")"),
			  sizeof(struct ib_uverbs_cmd_hdr) + c.core_size);
		EXPECT_EQ(P("alignof(" + s + ")"), 8u);
		// Write commands are sized in 32-bit words.
		EXPECT_EQ(P("sizeof(" + s + ")") % 4, 0u);
	}
	// A few members libibverbs fills in, at the kernel's offsets.
	const std::size_t h = sizeof(struct ib_uverbs_cmd_hdr);
	EXPECT_EQ(P("offsetof(struct ibv_reg_mr, core_payload.start)"),
		  h + offsetof(ib_uverbs_reg_mr, start));
	EXPECT_EQ(P("offsetof(struct ibv_reg_mr, core_payload.access_flags)"),
		  h + offsetof(ib_uverbs_reg_mr, access_flags));
	EXPECT_EQ(P("offsetof(struct ibv_create_qp, "
		    "core_payload.max_inline_data)"),
		  h + offsetof(ib_uverbs_create_qp, max_inline_data));
	EXPECT_EQ(P("offsetof(struct ibv_modify_qp, core_payload.qp_state)"),
		  h + offsetof(ib_uverbs_modify_qp, qp_state));
	EXPECT_EQ(P("offsetof(struct ibv_modify_srq, core_payload.srq_limit)"),
		  h + offsetof(ib_uverbs_modify_srq, srq_limit));
}

// ibv_cmd_reg_mr() fills and ibv_dereg_mr() reads a complete verbs_mr.
TEST(PrivateAbi, VerbsMrEmbedsIbvMr)
{
	EXPECT_EQ(P("offsetof(struct verbs_mr, ibv_mr)"), 0u);
	EXPECT_EQ(P("offsetof(struct verbs_mr, mr_type)"),
		  sizeof(struct ibv_mr));
	EXPECT_EQ(P("offsetof(struct trdma_mr, vmr)"), 0u);
}

// Every provider object starts with the libibverbs object, which is what
// libibverbs hands back to the provider's verbs.
TEST(PrivateAbi, ProviderObjectsStartWithTheVerbsObject)
{
	EXPECT_EQ(P("offsetof(struct trdma_cq, ibv_cq)"), 0u);
	EXPECT_EQ(P("offsetof(struct trdma_srq, ibv_srq)"), 0u);
	EXPECT_EQ(P("offsetof(struct trdma_qp, ibv_qp)"), 0u);
}

// libibverbs' ibv_qp_to_qp_ex() reads verbs_qp.comp_mask, placed after a
// union of ibv_qp and ibv_qp_ex whose size depends on the rdma-core
// release: 344 bytes in v36..v43, 352 in v44, 360 in v45..v56 (LP64).
// That word must be inside the part of trdma_qp that stays zero, for
// every release, so the answer is NULL (no ibv_qp_ex interface).
TEST(PrivateAbi, QpLeavesVerbsQpCompMaskZero)
{
	const std::size_t room_end =
		P("offsetof(struct trdma_qp, verbs_qp_tail_room)") +
		P("sizeof(trdma_qp.verbs_qp_tail_room)");

	EXPECT_EQ(P("offsetof(struct trdma_qp, verbs_qp_tail_room)"),
		  P("sizeof(struct ibv_qp_ex)"));
	// Up to 4 more pointers in ibv_qp_ex than in this build's header,
	// then the 32-bit comp_mask.
	EXPECT_GE(room_end, P("sizeof(struct ibv_qp_ex)") +
				    4 * sizeof(void *) + sizeof(uint32_t));
	if (IsLP64()) {
		EXPECT_GE(room_end, 360u + sizeof(uint32_t));
	}
}

// Create responses: the trdma driver data right after the core response.
TEST(PrivateAbi, TrdmaCreateResponsesDriverData)
{
	EXPECT_EQ(P("offsetof(struct trdma_cmd_create_cq_resp, drv_payload)"),
		  sizeof(struct ib_uverbs_create_cq_resp));
	EXPECT_EQ(P("sizeof(struct trdma_cmd_create_cq_resp)"),
		  sizeof(struct ib_uverbs_create_cq_resp) +
			  sizeof(trdma_create_cq_resp));
	EXPECT_EQ(P("offsetof(struct trdma_cmd_create_cq_resp, "
		    "drv_payload.mmap_key)"),
		  sizeof(struct ib_uverbs_create_cq_resp));

	EXPECT_EQ(P("offsetof(struct trdma_cmd_create_qp_resp, drv_payload)"),
		  sizeof(struct ib_uverbs_create_qp_resp));
	EXPECT_EQ(P("sizeof(struct trdma_cmd_create_qp_resp)"),
		  sizeof(struct ib_uverbs_create_qp_resp) +
			  sizeof(trdma_create_qp_resp));
	EXPECT_EQ(P("offsetof(struct trdma_cmd_create_qp_resp, "
		    "drv_payload.sq_mmap_key)"),
		  sizeof(struct ib_uverbs_create_qp_resp));

	EXPECT_EQ(P("offsetof(struct trdma_cmd_create_srq_resp, drv_payload)"),
		  sizeof(struct ib_uverbs_create_srq_resp));
	EXPECT_EQ(P("sizeof(struct trdma_cmd_create_srq_resp)"),
		  sizeof(struct ib_uverbs_create_srq_resp) +
			  sizeof(trdma_create_srq_resp));
	EXPECT_EQ(P("offsetof(struct trdma_cmd_create_srq_resp, "
		    "drv_payload.mmap_key)"),
		  sizeof(struct ib_uverbs_create_srq_resp));

	// The driver data's 64-bit keys are 8-byte aligned in the buffer.
	EXPECT_EQ(sizeof(struct ib_uverbs_create_cq_resp) % 8, 0u);
	EXPECT_EQ(sizeof(struct ib_uverbs_create_qp_resp) % 8, 0u);
	EXPECT_EQ(sizeof(struct ib_uverbs_create_srq_resp) % 8, 0u);
}

// libibverbs passes everything past sizeof(struct ibv_get_context) in the
// request, and past sizeof(struct ib_uverbs_get_context_resp) in the
// response, to the kernel driver as udata.
TEST(PrivateAbi, TrdmaGetContextDriverData)
{
	EXPECT_EQ(P("offsetof(struct trdma_get_context_cmd, ibv_cmd)"), 0u);
	EXPECT_EQ(P("offsetof(struct trdma_get_context_cmd, drv_payload)"),
		  P("sizeof(struct ibv_get_context)"));
	EXPECT_EQ(P("offsetof(struct trdma_get_context_cmd, "
		    "drv_payload.abi_version)"),
		  P("sizeof(struct ibv_get_context)") +
			  offsetof(trdma_alloc_ucontext_req, abi_version));
	EXPECT_EQ(P("sizeof(struct trdma_get_context_cmd)"),
		  P("sizeof(struct ibv_get_context)") +
			  sizeof(trdma_alloc_ucontext_req));
	// Write commands are sized in 32-bit words.
	EXPECT_EQ(P("sizeof(struct trdma_get_context_cmd)") % 4, 0u);

	EXPECT_EQ(P("offsetof(struct trdma_get_context_resp, ibv_resp)"), 0u);
	EXPECT_EQ(P("offsetof(struct trdma_get_context_resp, drv_payload)"),
		  sizeof(struct ib_uverbs_get_context_resp));
	EXPECT_EQ(P("offsetof(struct trdma_get_context_resp, "
		    "drv_payload.abi_version)"),
		  sizeof(struct ib_uverbs_get_context_resp) +
			  offsetof(trdma_alloc_ucontext_resp, abi_version));
	EXPECT_EQ(P("sizeof(struct trdma_get_context_resp)"),
		  sizeof(struct ib_uverbs_get_context_resp) +
			  sizeof(trdma_alloc_ucontext_resp));
	EXPECT_EQ(P("sizeof(struct trdma_get_context_resp)") % 4, 0u);
}

// Device matching: the value libibverbs read from sysfs hca_type, with the
// trailing newline stripped, and its length (negative on read error).
bool Matches(const char *buf)
{
	return trdma_probe_hca_type_matches(buf,
					    static_cast<int>(std::strlen(buf)));
}

TEST(HcaTypeMatch, AcceptsTrdma)
{
	EXPECT_TRUE(Matches(TRDMA_HCA_TYPE));
	EXPECT_TRUE(Matches("trdma"));
}

TEST(HcaTypeMatch, RejectsOtherDevices)
{
	EXPECT_FALSE(Matches(""));
	EXPECT_FALSE(Matches("MT4119"));	// mlx5
	EXPECT_FALSE(Matches("rxe"));
	EXPECT_FALSE(Matches("trdm"));
	EXPECT_FALSE(Matches("trdma0"));
	EXPECT_FALSE(Matches("trdmax"));
	EXPECT_FALSE(Matches("TRDMA"));
	EXPECT_FALSE(Matches("xtrdma"));
	EXPECT_FALSE(Matches("trdma\n"));	// libibverbs strips it first
}

TEST(HcaTypeMatch, UsesTheLengthNotTheTerminator)
{
	// A read error leaves the buffer unspecified.
	EXPECT_FALSE(trdma_probe_hca_type_matches("trdma", -1));
	EXPECT_FALSE(trdma_probe_hca_type_matches("trdma", 0));
	EXPECT_FALSE(trdma_probe_hca_type_matches("trdma", 4));
	EXPECT_TRUE(trdma_probe_hca_type_matches("trdma-and-more", 5));
}

TEST(HcaTypeMatch, ReadBufferHoldsTheAttribute)
{
	// "trdma\n" must fit, or ibv_read_ibdev_sysfs_file() reports an error.
	EXPECT_LT(std::strlen(TRDMA_HCA_TYPE) + 1,
		  P("TRDMA_HCA_TYPE_BUFSZ"));
}

} // namespace
