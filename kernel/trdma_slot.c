// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: the checks of a work request slot that need nothing but the slot's
 * bytes and the queue's limits.
 *
 * Pure functions, built into the module and into the userspace unit tests
 * and fuzz targets (tests/unit, tests/fuzz).  The checks that need MRs
 * (keys, PDs, ranges, access) are the send queue intake's (trdma_qp.c).
 */
#include "trdma_slot.h"

/*
 * Checks the kernel's copy of a send WQE, a whole slot of lim->slot_size
 * bytes, for everything that needs no MR: flags, opcode, the atomics' sink,
 * an atomic write's lack of SGEs, inline length, SGE count and total
 * length.  Returns the status the WQE completes with if it is refused, or
 * IB_WC_SUCCESS with the message length in *len.  Nothing past the slot is
 * read.
 */
enum ib_wc_status trdma_slot_sqe_check(const struct trdma_sqe *sqe,
				       const struct trdma_slot_limits *lim,
				       u32 *len)
{
	u64 total = 0;
	u32 room, i;

	if (lim->slot_size < sizeof(*sqe))
		return IB_WC_LOC_QP_OP_ERR;
	room = lim->slot_size - sizeof(*sqe);

	if (sqe->flags & ~TRDMA_WQE_FLAGS_ALL)
		return IB_WC_LOC_QP_OP_ERR;

	switch (sqe->opcode) {
	case IB_UVERBS_WR_SEND:
	case IB_UVERBS_WR_SEND_WITH_IMM:
	case IB_UVERBS_WR_SEND_WITH_INV:
	case IB_UVERBS_WR_RDMA_WRITE:
	case IB_UVERBS_WR_RDMA_WRITE_WITH_IMM:
		break;
	case IB_UVERBS_WR_RDMA_READ:
		if (sqe->flags & TRDMA_WQE_INLINE)
			return IB_WC_LOC_QP_OP_ERR;
		break;
	case IB_UVERBS_WR_ATOMIC_CMP_AND_SWP:
	case IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD:
		/* One 8-byte sink for the original value. */
		if (sqe->flags & TRDMA_WQE_INLINE || sqe->num_sge != 1 ||
		    room < sizeof(sqe->sge[0]) ||
		    sqe->sge[0].length != sizeof(u64))
			return IB_WC_LOC_QP_OP_ERR;
		break;
	case TRDMA_WR_ATOMIC_WRITE:
		/* The 8 bytes are in the WQE (compare_add): no SGE, no inline. */
		if (sqe->flags & TRDMA_WQE_INLINE || sqe->num_sge)
			return IB_WC_LOC_QP_OP_ERR;
		*len = sizeof(u64);
		return IB_WC_SUCCESS;
	case IB_UVERBS_WR_LOCAL_INV:
	case IB_UVERBS_WR_BIND_MW:
	case TRDMA_SQE_REG_MR:
		/*
		 * Local operations on an MR or a window: no payload.  Only a
		 * kernel QP may post REG_MR, only a user QP BIND_MW (the
		 * intake's checks).
		 */
		if (sqe->flags & TRDMA_WQE_INLINE || sqe->num_sge)
			return IB_WC_LOC_QP_OP_ERR;
		*len = 0;
		return IB_WC_SUCCESS;
	default:
		/* No READ_WITH_INV. */
		return IB_WC_LOC_QP_OP_ERR;
	}

	if (sqe->flags & TRDMA_WQE_INLINE) {
		if (sqe->inline_len > lim->max_inline || sqe->inline_len > room)
			return IB_WC_LOC_LEN_ERR;
		*len = sqe->inline_len;
		return IB_WC_SUCCESS;
	}

	if (sqe->num_sge > lim->max_sge ||
	    sqe->num_sge > room / sizeof(sqe->sge[0]))
		return IB_WC_LOC_QP_OP_ERR;
	for (i = 0; i < sqe->num_sge; i++)
		total += sqe->sge[i].length;
	if (total > TRDMA_MAX_MSG_SZ)
		return IB_WC_LOC_LEN_ERR;
	*len = total;
	return IB_WC_SUCCESS;
}

/*
 * The number of SGEs taken from a receive WQE whose num_sge field reads
 * num_sge: a larger count than the queue's max_sge, or than a slot holds,
 * is cut down to it, not refused.
 */
u32 trdma_slot_rqe_num_sge(u8 num_sge, const struct trdma_slot_limits *lim)
{
	u32 room = 0, n = num_sge;

	if (lim->slot_size > sizeof(struct trdma_rqe))
		room = (lim->slot_size - sizeof(struct trdma_rqe)) /
		       sizeof(struct trdma_sge);
	if (n > lim->max_sge)
		n = lim->max_sge;
	if (n > room)
		n = room;
	if (n > TRDMA_MAX_SGE)
		n = TRDMA_MAX_SGE;
	return n;
}
