// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: completion queues.
 *
 * A CQ is a ring of struct trdma_cqe that the kernel produces into and the
 * consumer (the provider through its mapping, or trdma_poll_cq for a kernel
 * CQ) drains.  The consumer index of a user CQ is written by user space:
 * it is read once per CQE and any value that claims more free slots than
 * the ring has is taken for an overflow.
 */
#include <linux/log2.h>
#include <rdma/uverbs_ioctl.h>

#include "trdma.h"
#include "trdma_verbs.h"

int trdma_create_cq_udata(struct ib_cq *ibcq,
			  const struct ib_cq_init_attr *attr,
			  struct ib_udata *udata)
{
	struct trdma_dev *tdev = to_tdev(ibcq->device);
	struct trdma_ucontext *uctx = rdma_udata_to_drv_context(udata,
				struct trdma_ucontext, ibucontext);
	struct trdma_create_cq_resp resp = {};
	struct trdma_cq *cq = to_tcq(ibcq);
	u32 slots;
	int rv;

	if (attr->flags)
		return -EOPNOTSUPP;
	if (attr->cqe < 1 || attr->cqe > trdma_limits.max_cqe)
		return -EINVAL;
	if (udata && udata->outlen < sizeof(resp))
		return -EINVAL;
	if (!trdma_count_get(&tdev->counts.cq, trdma_limits.max_cq))
		return -ENOMEM;

	spin_lock_init(&cq->lock);
	cq->is_user = !!udata;
	slots = roundup_pow_of_two(attr->cqe);
	rv = trdma_ring_alloc(&cq->ring, uctx ? &uctx->ibucontext : NULL, slots,
			      ilog2(sizeof(struct trdma_cqe)), &resp.mmap_key);
	if (rv)
		goto err_count;
	ibcq->cqe = slots;

	if (udata) {
		resp.num_slots = slots;
		rv = ib_copy_to_udata(udata, &resp, sizeof(resp));
		if (rv)
			goto err_ring;
	}
	return 0;

err_ring:
	trdma_ring_free(&cq->ring);
err_count:
	atomic_dec(&tdev->counts.cq);
	return rv;
}

/*
 * Resizing moves the CQEs not consumed yet into a new ring and swaps the
 * rings under the CQ's lock, so producers see one ring or the other.  A
 * user CQ's consumer (the provider, holding its own CQ lock across the
 * command so nothing polls meanwhile) then maps the new ring from the key
 * in the response and unmaps the old one; the old ring's pages live until
 * that unmap (rdma_user_mmap_entry_remove keeps a mapped entry).  The
 * consumer index it published is read once and checked like any other.
 * The CQ cannot shrink below the CQEs it holds: -EINVAL, CQ unchanged.
 */
int trdma_resize_cq(struct ib_cq *ibcq, int cqe, struct ib_udata *udata)
{
	struct trdma_ucontext *uctx = rdma_udata_to_drv_context(udata,
				struct trdma_ucontext, ibucontext);
	struct trdma_resize_cq_resp resp = {};
	struct trdma_cq *cq = to_tcq(ibcq);
	struct trdma_ring ring, old;
	unsigned long flags;
	u32 slots, cons, n, i;
	int rv;

	if (cqe < 1 || cqe > trdma_limits.max_cqe)
		return -EINVAL;
	if (!!udata != cq->is_user)
		return -EINVAL;
	if (udata && udata->outlen < sizeof(resp))
		return -EINVAL;

	slots = roundup_pow_of_two(cqe);
	rv = trdma_ring_alloc(&ring, uctx ? &uctx->ibucontext : NULL, slots,
			      ilog2(sizeof(struct trdma_cqe)), &resp.mmap_key);
	if (rv)
		return rv;
	/* Before the swap: copying out may fault, and the key is known. */
	if (udata) {
		resp.num_slots = slots;
		rv = ib_copy_to_udata(udata, &resp, sizeof(resp));
		if (rv)
			goto err_ring;
	}

	spin_lock_irqsave(&cq->lock, flags);
	cons = cq->is_user ? READ_ONCE(cq->ring.ctrl->cons) : cq->kcons;
	n = cq->prod - cons;
	if (n > cq->ring.num_slots || n > slots) {
		/* A corrupt consumer index, or more CQEs than the new size. */
		spin_unlock_irqrestore(&cq->lock, flags);
		rv = -EINVAL;
		goto err_ring;
	}
	for (i = 0; i < n; i++)
		memcpy(trdma_ring_slot(&ring, i),
		       trdma_ring_slot(&cq->ring, cons + i),
		       sizeof(struct trdma_cqe));
	/* The consumer starts the new ring at 0 (it is zeroed). */
	old = cq->ring;
	cq->ring = ring;
	cq->prod = n;
	cq->kcons = 0;
	/* The CQEs before their index; pairs with the consumer's acquire. */
	smp_store_release(&cq->ring.ctrl->prod, n);
	ibcq->cqe = slots;
	spin_unlock_irqrestore(&cq->lock, flags);

	trdma_ring_free(&old);
	return 0;

err_ring:
	trdma_ring_free(&ring);
	return rv;
}

int trdma_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	struct trdma_cq *cq = to_tcq(ibcq);

	trdma_ring_free(&cq->ring);
	atomic_dec(&to_tdev(ibcq->device)->counts.cq);
	return 0;
}

/*
 * Adds a completion.  Returns -ENOSPC when the CQ has overflowed: the
 * completion is lost and IB_EVENT_CQ_ERR reported (once), as the verbs
 * specification has it for a CQ too small for its work.
 */
int trdma_cq_post(struct trdma_cq *cq, const struct trdma_cqe *cqe,
		  bool solicited)
{
	bool notify = false, overflow = false;
	struct trdma_ring_ctrl *ctrl;
	unsigned long flags;
	u32 cons;

	spin_lock_irqsave(&cq->lock, flags);
	/* Under the lock: trdma_resize_cq() swaps the ring. */
	ctrl = cq->ring.ctrl;
	/* The slot is free once the consumer released it; pairs with that. */
	cons = cq->is_user ? smp_load_acquire(&ctrl->cons) : cq->kcons;
	if (cq->overflow || cq->prod - cons >= cq->ring.num_slots) {
		overflow = !cq->overflow;
		cq->overflow = true;
		spin_unlock_irqrestore(&cq->lock, flags);
		goto err;
	}
	memcpy(trdma_ring_slot(&cq->ring, cq->prod), cqe, sizeof(*cqe));
	cq->prod++;
	/* Publish the CQE before the index; pairs with the consumer's acquire. */
	smp_store_release(&ctrl->prod, cq->prod);

	if (cq->notify & IB_CQ_NEXT_COMP ||
	    (cq->notify & IB_CQ_SOLICITED && solicited)) {
		cq->notify = 0;
		notify = true;
	}
	spin_unlock_irqrestore(&cq->lock, flags);

	if (notify && cq->ibcq.comp_handler)
		cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
	return 0;

err:
	if (overflow && cq->ibcq.event_handler) {
		struct ib_event ev = {
			.device = cq->ibcq.device,
			.element.cq = &cq->ibcq,
			.event = IB_EVENT_CQ_ERR,
		};

		ibdev_warn_ratelimited(cq->ibcq.device, "CQ %u overflow\n",
				       cq->ibcq.res.id);
		cq->ibcq.event_handler(&ev, cq->ibcq.cq_context);
	}
	return -ENOSPC;
}

int trdma_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	struct trdma_cq *cq = to_tcq(ibcq);
	unsigned long irqf;
	int rv = 0;
	u32 cons;

	spin_lock_irqsave(&cq->lock, irqf);
	cq->notify |= flags & IB_CQ_SOLICITED_MASK;
	cons = cq->is_user ? READ_ONCE(cq->ring.ctrl->cons) : cq->kcons;
	if (flags & IB_CQ_REPORT_MISSED_EVENTS && cons != cq->prod)
		rv = 1;
	spin_unlock_irqrestore(&cq->lock, irqf);
	return rv;
}

/* Kernel consumers only; user CQs are polled through the mapping. */
int trdma_poll_cq(struct ib_cq *ibcq, int num, struct ib_wc *wc)
{
	struct trdma_dev *tdev = to_tdev(ibcq->device);
	struct trdma_cq *cq = to_tcq(ibcq);
	struct trdma_qp *qp;
	unsigned long flags;
	int n;

	if (cq->is_user)
		return -EINVAL;

	spin_lock_irqsave(&cq->lock, flags);
	for (n = 0; n < num && cq->kcons != cq->prod; n++, wc++) {
		struct trdma_cqe *cqe = trdma_ring_slot(&cq->ring, cq->kcons);

		memset(wc, 0, sizeof(*wc));
		wc->wr_id = cqe->wr_id;
		wc->status = cqe->status;
		wc->opcode = cqe->opcode;
		wc->wc_flags = (cqe->wc_flags & TRDMA_CQE_F_WITH_IMM ?
				IB_WC_WITH_IMM : 0) |
			       (cqe->wc_flags & TRDMA_CQE_F_WITH_INV ?
				IB_WC_WITH_INVALIDATE : 0);
		/* A datagram: what ib_init_ah_attr_from_wc() reads. */
		if (cqe->wc_flags & TRDMA_CQE_F_GRH) {
			wc->wc_flags |= IB_WC_GRH | IB_WC_WITH_NETWORK_HDR_TYPE;
			wc->network_hdr_type =
				cqe->wc_flags & TRDMA_CQE_F_NET_IPV6 ?
				RDMA_NETWORK_IPV6 : RDMA_NETWORK_IPV4;
		}
		wc->vendor_err = cqe->vendor_err;
		wc->byte_len = cqe->byte_len;
		wc->ex.imm_data = (__force __be32)cqe->imm_data;
		wc->src_qp = cqe->src_qp;
		wc->sl = trdma_cqe_sl(cqe->wc_flags);
		wc->port_num = 1;
		/* NULL for a CQE whose QP was destroyed since. */
		qp = xa_load(&tdev->qp_xa, cqe->qp_num);
		wc->qp = qp ? &qp->ibqp : NULL;
		cq->kcons++;
		cq->ring.ctrl->cons = cq->kcons;
	}
	spin_unlock_irqrestore(&cq->lock, flags);
	return n;
}
