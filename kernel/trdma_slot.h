/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * trdma: the checks of a work request slot that need nothing but the slot's
 * bytes and the queue's limits.
 *
 * Shared by the module and the userspace harness (tests/unit, tests/fuzz),
 * where tests/fuzz/kcompat.h stands in for the kernel's types and the
 * ib_wc_status values.
 */
#ifndef _TRDMA_SLOT_H
#define _TRDMA_SLOT_H

#ifdef __KERNEL__
#include <linux/types.h>
#include <rdma/ib_verbs.h>
#else
#include "kcompat.h"
#endif
#include <rdma/trdma-abi.h>

#define TRDMA_MAX_MSG_SZ	0x80000000u	/* 2 GiB */
#define TRDMA_MAX_SGE		32	/* ceiling of the max_sge parameter */

/*
 * The kernel's IB_WR_REG_MR, which has no ib_uverbs_wr_opcode: a kernel
 * QP's send WQE with it carries the key in rkey and the access flags in
 * imm_data (trdma_qp.c).
 */
#define TRDMA_SQE_REG_MR	0x20

#define TRDMA_WQE_FLAGS_ALL (TRDMA_WQE_SIGNALED | TRDMA_WQE_SOLICITED | \
			     TRDMA_WQE_INLINE | TRDMA_WQE_FENCE)

/* What a queue's slots may hold, as granted when the queue was created. */
struct trdma_slot_limits {
	u32 slot_size;		/* bytes: 1 << the ring's slot_shift */
	u32 max_sge;		/* max_send_sge, max_recv_sge or the SRQ's */
	u32 max_inline;		/* max_inline_data (send queues) */
};

/* A WQE done at the send queue's intake, which sends nothing. */
static inline bool trdma_sqe_is_local(const struct trdma_sqe *sqe)
{
	return sqe->opcode == TRDMA_SQE_REG_MR ||
	       sqe->opcode == IB_UVERBS_WR_LOCAL_INV ||
	       sqe->opcode == IB_UVERBS_WR_BIND_MW;
}

/*
 * The payload a checked send WQE carries in itself: its inline data, or an
 * atomic write's 8 bytes; NULL when it gathers the payload from SGEs.
 */
static inline const u8 *trdma_sqe_data(const struct trdma_sqe *sqe)
{
	if (sqe->opcode == TRDMA_WR_ATOMIC_WRITE)
		return (const u8 *)&sqe->compare_add;
	if (sqe->flags & TRDMA_WQE_INLINE)
		return (const u8 *)sqe->sge;
	return NULL;
}

enum ib_wc_status trdma_slot_sqe_check(const struct trdma_sqe *sqe,
				       const struct trdma_slot_limits *lim,
				       u32 *len);
u32 trdma_slot_rqe_num_sge(u8 num_sge, const struct trdma_slot_limits *lim);

#endif /* _TRDMA_SLOT_H */
