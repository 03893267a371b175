// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma provider: work request encoding, completion decoding and queue
 * geometry checks.  Pure functions; see trdma-wqe.h.
 */
#include <errno.h>
#include <string.h>

#include "trdma-ring.h"
#include "trdma-wqe.h"

/* trdma.ko's atomic write opcodes (trdma-abi.h) are libibverbs'. */
_Static_assert(TRDMA_WR_ATOMIC_WRITE == IBV_WR_ATOMIC_WRITE,
	       "SQE opcode of atomic write");
_Static_assert(TRDMA_WC_ATOMIC_WRITE == IBV_WC_ATOMIC_WRITE,
	       "CQE opcode of atomic write");

/* trdma_sqe.num_sge and trdma_rqe.num_sge are __u8. */
#define TRDMA_MAX_WQE_SGE 255U

int trdma_sq_caps_init(struct trdma_sq_caps *caps, uint32_t sq_slots,
		       unsigned int sq_wqe_shift, uint32_t granted_sge,
		       uint32_t granted_inline)
{
	uint32_t room;

	if (!trdma_ring_geometry_ok(sq_slots, sq_wqe_shift,
				    sizeof(struct trdma_sqe)))
		return EPROTO;
	room = (1U << sq_wqe_shift) - sizeof(struct trdma_sqe);
	if (granted_sge > TRDMA_MAX_WQE_SGE ||
	    granted_sge > room / sizeof(struct trdma_sge) ||
	    granted_inline > room)
		return EPROTO;

	caps->slot_size = 1U << sq_wqe_shift;
	caps->max_sge = granted_sge;
	caps->max_inline = granted_inline;
	return 0;
}

int trdma_rq_geometry_check(uint32_t slots, unsigned int wqe_shift,
			    uint32_t granted_sge)
{
	uint32_t room;

	if (!trdma_ring_geometry_ok(slots, wqe_shift,
				    sizeof(struct trdma_rqe)))
		return EPROTO;
	room = (1U << wqe_shift) - sizeof(struct trdma_rqe);
	if (granted_sge > TRDMA_MAX_WQE_SGE ||
	    granted_sge > room / sizeof(struct trdma_sge))
		return EPROTO;
	return 0;
}

static void trdma_sge_set(struct trdma_sge *dst, const struct ibv_sge *src)
{
	dst->addr = src->addr;
	dst->length = src->length;
	dst->lkey = src->lkey;
}

void trdma_sqe_set_sges(void *slot, const struct ibv_sge *sg, uint32_t num)
{
	struct trdma_sqe *sqe = slot;
	uint32_t i;

	sqe->flags &= ~TRDMA_WQE_INLINE;
	sqe->inline_len = 0;
	sqe->num_sge = (uint8_t)num;
	for (i = 0; i < num; i++)
		trdma_sge_set(&sqe->sge[i], &sg[i]);
}

bool trdma_sqe_inline_ok(const void *slot)
{
	const struct trdma_sqe *sqe = slot;

	switch (sqe->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return true;
	default:
		/*
		 * RDMA read, atomics, LOCAL_INV, BIND_MW: no outbound payload;
		 * atomic write: its payload is in the WQE already.
		 */
		return false;
	}
}

void trdma_sqe_inline_begin(void *slot)
{
	struct trdma_sqe *sqe = slot;

	sqe->num_sge = 0;
	sqe->inline_len = 0;
	sqe->flags |= TRDMA_WQE_INLINE;
}

int trdma_sqe_inline_add(void *slot, const struct trdma_sq_caps *caps,
			 const void *addr, size_t len)
{
	struct trdma_sqe *sqe = slot;
	uint8_t *dst = (uint8_t *)sqe->sge;

	if (len > caps->max_inline - sqe->inline_len)
		return EINVAL;
	if (len)
		memcpy(dst + sqe->inline_len, addr, len);
	sqe->inline_len += (uint32_t)len;
	return 0;
}

int trdma_sqe_encode_hdr(void *slot, const struct ibv_send_wr *wr,
			 bool sig_all)
{
	struct trdma_sqe *sqe = slot;

	memset(sqe, 0, sizeof(*sqe));
	sqe->wr_id = wr->wr_id;
	sqe->opcode = (uint8_t)wr->opcode;

	switch (wr->opcode) {
	case IBV_WR_SEND:
		break;
	case IBV_WR_SEND_WITH_IMM:
		sqe->imm_data = wr->imm_data;
		break;
	case IBV_WR_SEND_WITH_INV:
		sqe->imm_data = wr->invalidate_rkey;
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		sqe->imm_data = wr->imm_data;
		/* fall through */
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_WRITE:
		/* ATOMIC_WRITE: its 8 bytes are the caller's (qp.c). */
		sqe->remote_addr = wr->wr.rdma.remote_addr;
		sqe->rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		sqe->remote_addr = wr->wr.atomic.remote_addr;
		sqe->rkey = wr->wr.atomic.rkey;
		sqe->compare_add = wr->wr.atomic.compare_add;
		sqe->swap = wr->wr.atomic.swap;
		break;
	case IBV_WR_LOCAL_INV:
		sqe->imm_data = wr->invalidate_rkey;
		break;
	case IBV_WR_BIND_MW:
		/* struct trdma_sqe_bind; no MR: a type-1 window's unbind. */
		if (!wr->bind_mw.mw)
			return EINVAL;
		sqe->rkey = wr->bind_mw.mw->rkey;
		sqe->imm_data = wr->bind_mw.rkey;
		sqe->remote_addr = wr->bind_mw.bind_info.addr;
		sqe->compare_add = wr->bind_mw.bind_info.length;
		sqe->bind.mr_lkey = wr->bind_mw.bind_info.mr ?
					    wr->bind_mw.bind_info.mr->lkey : 0;
		sqe->bind.mw_access =
			wr->bind_mw.bind_info.mw_access_flags;
		break;
	default:
		/* TSO, DRIVER1, unknown: no encoding. */
		return EINVAL;
	}

	if (wr->send_flags & IBV_SEND_SIGNALED || sig_all)
		sqe->flags |= TRDMA_WQE_SIGNALED;
	if (wr->send_flags & IBV_SEND_SOLICITED)
		sqe->flags |= TRDMA_WQE_SOLICITED;
	if (wr->send_flags & IBV_SEND_FENCE)
		sqe->flags |= TRDMA_WQE_FENCE;
	return 0;
}

int trdma_sqe_encode(void *slot, const struct trdma_sq_caps *caps,
		     const struct ibv_send_wr *wr, bool sig_all)
{
	int ret, i;

	/*
	 * struct ibv_send_wr has no field for an atomic write's 8 bytes (and
	 * ibv_post_send(3) of rdma-core 44 lists no IBV_WR_ATOMIC_WRITE):
	 * ibv_wr_atomic_write() only.
	 */
	if (wr->num_sge < 0 || wr->opcode == IBV_WR_ATOMIC_WRITE)
		return EINVAL;
	ret = trdma_sqe_encode_hdr(slot, wr, sig_all);
	if (ret)
		return ret;

	if (wr->send_flags & IBV_SEND_INLINE) {
		if (!trdma_sqe_inline_ok(slot))
			return EINVAL;
		/* Gathers the WR's buffers into the slot's payload area. */
		trdma_sqe_inline_begin(slot);
		for (i = 0; i < wr->num_sge; i++) {
			ret = trdma_sqe_inline_add(
				slot, caps,
				(const void *)(uintptr_t)wr->sg_list[i].addr,
				wr->sg_list[i].length);
			if (ret)
				return ret;
		}
		return 0;
	}

	if ((uint32_t)wr->num_sge > caps->max_sge)
		return EINVAL;
	trdma_sqe_set_sges(slot, wr->sg_list, (uint32_t)wr->num_sge);
	return 0;
}

int trdma_rqe_encode(void *slot, uint32_t max_sge,
		     const struct ibv_recv_wr *wr)
{
	struct trdma_rqe *rqe = slot;
	int i;

	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge)
		return EINVAL;

	memset(rqe, 0, sizeof(*rqe));
	rqe->wr_id = wr->wr_id;
	rqe->num_sge = (uint8_t)wr->num_sge;
	for (i = 0; i < wr->num_sge; i++)
		trdma_sge_set(&rqe->sge[i], &wr->sg_list[i]);
	return 0;
}

void trdma_cqe_to_wc(const struct trdma_cqe *cqe, struct ibv_wc *wc)
{
	wc->wr_id = cqe->wr_id;
	wc->status = (enum ibv_wc_status)cqe->status;
	wc->opcode = (enum ibv_wc_opcode)cqe->opcode;
	wc->vendor_err = cqe->vendor_err;
	wc->byte_len = cqe->byte_len;
	wc->imm_data = cqe->imm_data;	/* network order, or the rkey */
	wc->qp_num = cqe->qp_num;
	wc->src_qp = cqe->src_qp;
	wc->wc_flags = cqe->wc_flags & TRDMA_CQE_F_IBV_MASK;
	wc->pkey_index = 0;
	wc->slid = 0;
	wc->sl = trdma_cqe_sl(cqe->wc_flags);
	wc->dlid_path_bits = 0;
}
