/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * trdma userspace provider: types shared by the provider's sources and its
 * host unit tests.
 */
#ifndef TRDMA_PROVIDER_H
#define TRDMA_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/trdma-abi.h>

#include "trdma-verbs-private.h"

#define trdma_container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

struct trdma_device {
	struct verbs_device ibv_dev;
};

struct trdma_context {
	struct verbs_context ibv_ctx;
};

/* GET_CONTEXT request and response with trdma's driver data appended. */
struct trdma_get_context_cmd {
	struct ibv_get_context ibv_cmd;
	struct trdma_alloc_ucontext_req drv_payload;
};

struct trdma_get_context_resp {
	struct ib_uverbs_get_context_resp ibv_resp;
	struct trdma_alloc_ucontext_resp drv_payload;
};

/*
 * The driver data must start exactly where libibverbs expects it (at
 * sizeof() of the core struct) with no padding in between or after it,
 * and write commands are sized in 4-byte words.
 */
_Static_assert(offsetof(struct trdma_get_context_cmd, drv_payload) ==
		       sizeof(struct ibv_get_context),
	       "GET_CONTEXT driver data must follow the core command");
_Static_assert(sizeof(struct trdma_get_context_cmd) ==
		       sizeof(struct ibv_get_context) +
			       sizeof(struct trdma_alloc_ucontext_req),
	       "no padding after the GET_CONTEXT driver data");
_Static_assert(sizeof(struct trdma_get_context_cmd) % 4 == 0,
	       "GET_CONTEXT command must be whole 32-bit words");
_Static_assert(offsetof(struct trdma_get_context_resp, drv_payload) ==
		       sizeof(struct ib_uverbs_get_context_resp),
	       "GET_CONTEXT driver response must follow the core response");
_Static_assert(sizeof(struct trdma_get_context_resp) ==
		       sizeof(struct ib_uverbs_get_context_resp) +
			       sizeof(struct trdma_alloc_ucontext_resp),
	       "no padding after the GET_CONTEXT driver response");
_Static_assert(sizeof(struct trdma_get_context_resp) % 4 == 0,
	       "GET_CONTEXT response must be whole 32-bit words");

/* Read buffer for hca_type; longer contents never match. */
#define TRDMA_HCA_TYPE_BUFSZ 32

/*
 * Decide from the contents of a device's sysfs hca_type attribute, as
 * returned by ibv_read_ibdev_sysfs_file() (length without the trailing
 * newline, or negative on error), whether it is a trdma device.
 */
static inline bool trdma_hca_type_matches(const char *buf, int len)
{
	static const char want[] = TRDMA_HCA_TYPE;

	if (len != (int)(sizeof(want) - 1))
		return false;
	return memcmp(buf, want, sizeof(want) - 1) == 0;
}

#endif /* TRDMA_PROVIDER_H */
