// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * include/uapi/rdma/trdma-abi.h must compile on its own, first, in strict
 * C99 (this file is built with -std=c99 -Wpedantic), as the kernel module
 * and any userspace consumer include it.
 */
#include <rdma/trdma-abi.h>

#include <stddef.h>

#include "abi_c_standalone.h"

#define ALIGNOF(type) offsetof(struct { char c; type t; }, t)

const struct trdma_c_abi_layout *trdma_c_abi_layout_get(void)
{
	static const struct trdma_c_abi_layout layout = {
		.abi_version = TRDMA_ABI_VERSION,
		.hca_type = TRDMA_HCA_TYPE,
		.req_size = sizeof(struct trdma_alloc_ucontext_req),
		.req_align = ALIGNOF(struct trdma_alloc_ucontext_req),
		.req_abi_version_off =
			offsetof(struct trdma_alloc_ucontext_req, abi_version),
		.req_reserved_off =
			offsetof(struct trdma_alloc_ucontext_req, reserved),
		.resp_size = sizeof(struct trdma_alloc_ucontext_resp),
		.resp_align = ALIGNOF(struct trdma_alloc_ucontext_resp),
		.resp_abi_version_off =
			offsetof(struct trdma_alloc_ucontext_resp, abi_version),
		.resp_reserved_off =
			offsetof(struct trdma_alloc_ucontext_resp, reserved),
	};

	return &layout;
}

#define TRDMA_ABI_SIZE(type) { "sizeof(" #type ")", sizeof(struct type) },
/*
 * C99 has no alignof, and the ALIGNOF() trick above cannot take a struct
 * with a flexible array member (trdma_sqe, trdma_rqe): GCC's __alignof__,
 * which -Wpedantic accepts, measures them all.  The header itself stays
 * plain C99.
 */
#define TRDMA_ABI_ALIGN(type) { "alignof(" #type ")", __alignof__(struct type) },
#define TRDMA_ABI_OFF(type, member)                                            \
	{ "offsetof(" #type ", " #member ")", offsetof(struct type, member) },

const struct trdma_c_abi_fact trdma_c_abi_facts[] = {
#include "abi_layout_facts.def"
	{ "TRDMA_RING_SLOTS_OFFSET", TRDMA_RING_SLOTS_OFFSET },
	{ "TRDMA_RING_F_ERROR", TRDMA_RING_F_ERROR },
	{ "TRDMA_WQE_SIGNALED", TRDMA_WQE_SIGNALED },
	{ "TRDMA_WQE_SOLICITED", TRDMA_WQE_SOLICITED },
	{ "TRDMA_WQE_INLINE", TRDMA_WQE_INLINE },
	{ "TRDMA_WQE_FENCE", TRDMA_WQE_FENCE },
};

const size_t trdma_c_abi_fact_count =
	sizeof(trdma_c_abi_facts) / sizeof(trdma_c_abi_facts[0]);
