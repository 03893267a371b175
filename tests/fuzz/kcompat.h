/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The little of the kernel that the shared sources kernel/trdma_wire.c and
 * kernel/trdma_slot.c use, for building them in user space (tests/unit,
 * tests/fuzz): fixed-width types, byte order helpers and the ib_wc_status
 * values the slot checks return.
 */
#ifndef TRDMA_KCOMPAT_H
#define TRDMA_KCOMPAT_H

#ifdef __KERNEL__
#error "kcompat.h is for user space builds only"
#endif

#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <linux/types.h>
#include <rdma/ib_user_verbs.h>	/* enum ib_uverbs_wr_opcode */

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int32_t s32;
typedef int64_t s64;

#ifndef __force
#define __force
#endif

#define be16_to_cpu(x) be16toh(x)
#define be32_to_cpu(x) be32toh(x)
#define be64_to_cpu(x) be64toh(x)
#define cpu_to_be16(x) htobe16(x)
#define cpu_to_be32(x) htobe32(x)
#define cpu_to_be64(x) htobe64(x)

/* The kernel's enum ib_wc_status (rdma/ib_verbs.h), as far as used. */
enum ib_wc_status {
	IB_WC_SUCCESS = 0,
	IB_WC_LOC_LEN_ERR = 1,
	IB_WC_LOC_QP_OP_ERR = 2,
	IB_WC_LOC_EEC_OP_ERR = 3,
	IB_WC_LOC_PROT_ERR = 4,
	IB_WC_WR_FLUSH_ERR = 5,
};

#endif /* TRDMA_KCOMPAT_H */
