/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Layout facts of provider/trdma-verbs-private.h, measured by a C
 * translation unit (private_abi_probe.c): the header needs <stdatomic.h>,
 * which C++17 cannot include, so the C++ tests read the numbers from here.
 */
#ifndef TRDMA_PRIVATE_ABI_PROBE_H
#define TRDMA_PRIVATE_ABI_PROBE_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct trdma_probe_value {
	const char *key;	/* e.g. "offsetof(struct verbs_device, ops)" */
	size_t value;
};

extern const struct trdma_probe_value trdma_probe_values[];
extern const size_t trdma_probe_count;

/* provider/trdma.h's trdma_hca_type_matches(), callable from C++. */
bool trdma_probe_hca_type_matches(const char *buf, int len);

#ifdef __cplusplus
}
#endif

#endif /* TRDMA_PRIVATE_ABI_PROBE_H */
