// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: shared receive queues and address handles.
 */
#include <linux/log2.h>
#include <rdma/uverbs_ioctl.h>

#include "trdma.h"
#include "trdma_verbs.h"

int trdma_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
		     struct ib_udata *udata)
{
	struct trdma_dev *tdev = to_tdev(ibsrq->device);
	struct trdma_ucontext *uctx = rdma_udata_to_drv_context(udata,
				struct trdma_ucontext, ibucontext);
	struct trdma_create_srq_resp resp = {};
	struct trdma_srq *srq = to_tsrq(ibsrq);
	struct ib_srq_attr *attr = &init->attr;
	u32 slots, shift, room;
	int rv;

	if (init->srq_type != IB_SRQT_BASIC)
		return -EOPNOTSUPP;
	if (attr->max_wr > trdma_limits.max_srq_wr ||
	    attr->max_sge > trdma_limits.max_sge)
		return -EINVAL;
	if (udata && udata->outlen < sizeof(resp))
		return -EINVAL;
	if (!trdma_count_get(&tdev->counts.srq, trdma_limits.max_srq))
		return -ENOMEM;

	spin_lock_init(&srq->lock);
	srq->is_user = !!udata;
	slots = roundup_pow_of_two(max(attr->max_wr, 1U));
	shift = order_base_2(max_t(u32, 32, sizeof(struct trdma_rqe) +
				   attr->max_sge * sizeof(struct trdma_sge)));
	rv = trdma_ring_alloc(&srq->ring, uctx ? &uctx->ibucontext : NULL,
			      slots, shift, &resp.mmap_key);
	if (rv)
		goto err_count;

	room = (1U << shift) - sizeof(struct trdma_rqe);
	srq->max_sge = min_t(u32, room / sizeof(struct trdma_sge),
			     trdma_limits.max_sge);
	attr->max_wr = slots;
	attr->max_sge = srq->max_sge;
	/* The limit given at creation is ignored, as the spec says. */
	srq->limit = 0;

	if (udata) {
		resp.num_slots = slots;
		resp.wqe_shift = shift;
		rv = ib_copy_to_udata(udata, &resp, sizeof(resp));
		if (rv)
			goto err_ring;
	}
	return 0;

err_ring:
	trdma_ring_free(&srq->ring);
err_count:
	atomic_dec(&tdev->counts.srq);
	return rv;
}

int trdma_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		     enum ib_srq_attr_mask mask, struct ib_udata *udata)
{
	struct trdma_srq *srq = to_tsrq(ibsrq);
	unsigned long flags;

	if (mask & ~(IB_SRQ_MAX_WR | IB_SRQ_LIMIT))
		return -EINVAL;
	/* Resizing is not offered. */
	if (mask & IB_SRQ_MAX_WR)
		return -EOPNOTSUPP;
	if (mask & IB_SRQ_LIMIT) {
		if (attr->srq_limit > srq->ring.num_slots)
			return -EINVAL;
		spin_lock_irqsave(&srq->lock, flags);
		srq->limit = attr->srq_limit;
		spin_unlock_irqrestore(&srq->lock, flags);
	}
	return 0;
}

int trdma_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr)
{
	struct trdma_srq *srq = to_tsrq(ibsrq);

	attr->max_wr = srq->ring.num_slots;
	attr->max_sge = srq->max_sge;
	attr->srq_limit = READ_ONCE(srq->limit);
	return 0;
}

int trdma_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata)
{
	struct trdma_srq *srq = to_tsrq(ibsrq);

	trdma_ring_free(&srq->ring);
	atomic_dec(&to_tdev(ibsrq->device)->counts.srq);
	return 0;
}

/* Kernel consumers only; the provider writes the SRQ ring itself. */
int trdma_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr)
{
	struct trdma_srq *srq = to_tsrq(ibsrq);
	unsigned long flags;
	int rv = 0;

	if (srq->is_user) {
		*bad_wr = wr;
		return -EINVAL;
	}
	spin_lock_irqsave(&srq->lock, flags);
	for (; wr; wr = wr->next) {
		rv = trdma_rqe_post(&srq->ring, srq->cons, srq->max_sge, wr);
		if (rv) {
			*bad_wr = wr;
			break;
		}
	}
	spin_unlock_irqrestore(&srq->lock, flags);
	return rv;
}
