/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Layout of include/uapi/rdma/trdma-abi.h as a C compiler sees it. */
#ifndef TRDMA_ABI_C_STANDALONE_H
#define TRDMA_ABI_C_STANDALONE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct trdma_c_abi_layout {
	unsigned abi_version;
	const char *hca_type;
	size_t req_size, req_align, req_abi_version_off, req_reserved_off;
	size_t resp_size, resp_align, resp_abi_version_off, resp_reserved_off;
};

const struct trdma_c_abi_layout *trdma_c_abi_layout_get(void);

/*
 * Every entry of abi_layout_facts.def plus the ABI's constants, as
 * measured in C: key ("sizeof(trdma_sqe)", "offsetof(trdma_sqe, sge)",
 * "alignof(trdma_sqe)", or a constant's name) and value.
 */
struct trdma_c_abi_fact {
	const char *key;
	size_t value;
};

extern const struct trdma_c_abi_fact trdma_c_abi_facts[];
extern const size_t trdma_c_abi_fact_count;

#ifdef __cplusplus
}
#endif

#endif /* TRDMA_ABI_C_STANDALONE_H */
