// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: queue pairs.
 *
 * RC QPs with the IB state machine, their send and receive rings, the intake
 * of posted send WQEs (each slot copied once and checked before anything
 * else looks at it) and the flushing of outstanding work when a QP errors or
 * is destroyed.  Moving data is the transmit and receive paths' job.
 */
#include <linux/log2.h>
#include <linux/slab.h>
#include <rdma/uverbs_ioctl.h>

#include "trdma.h"
#include "trdma_verbs.h"

void *trdma_swq_slot(struct trdma_qp *qp, u32 idx)
{
	return qp->swq + ((size_t)(idx & (qp->sq.num_slots - 1)) <<
			  qp->sq.slot_shift);
}

struct trdma_swqe_info *trdma_swi(struct trdma_qp *qp, u32 idx)
{
	return &qp->swi[idx & (qp->sq.num_slots - 1)];
}

enum ib_wc_opcode trdma_wc_opcode(u8 wr_opcode)
{
	switch (wr_opcode) {
	case IB_UVERBS_WR_RDMA_WRITE:
	case IB_UVERBS_WR_RDMA_WRITE_WITH_IMM:
		return IB_WC_RDMA_WRITE;
	case IB_UVERBS_WR_RDMA_READ:
		return IB_WC_RDMA_READ;
	case IB_UVERBS_WR_ATOMIC_CMP_AND_SWP:
		return IB_WC_COMP_SWAP;
	case IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD:
		return IB_WC_FETCH_ADD;
	case IB_UVERBS_WR_LOCAL_INV:
		return IB_WC_LOCAL_INV;
	case TRDMA_SQE_REG_MR:
		return IB_WC_REG_MR;
	case IB_UVERBS_WR_BIND_MW:
		return IB_WC_BIND_MW;
	case TRDMA_WR_ATOMIC_WRITE:
		/* IB_WC_ATOMIC_WRITE, which 6.1 lacks. */
		return (enum ib_wc_opcode)TRDMA_WC_ATOMIC_WRITE;
	default:
		return IB_WC_SEND;
	}
}

static void trdma_complete_len(struct trdma_qp *qp, struct ib_cq *ibcq,
			       u64 wr_id, enum ib_wc_opcode opcode,
			       enum ib_wc_status status, u32 byte_len)
{
	struct trdma_cqe cqe = {
		.wr_id = wr_id,
		.status = status,
		.opcode = opcode,
		.byte_len = byte_len,
		.qp_num = qp->ibqp.qp_num,
	};

	trdma_cq_post(to_tcq(ibcq), &cqe, false);
}

void trdma_complete(struct trdma_qp *qp, struct ib_cq *ibcq, u64 wr_id,
		    enum ib_wc_opcode opcode, enum ib_wc_status status)
{
	trdma_complete_len(qp, ibcq, wr_id, opcode, status, 0);
}

/*
 * Number of new entries a ring claims, or -1 when its user-written producer
 * index is impossible (more entries than slots beyond those still held).
 */
static int trdma_ring_new(struct trdma_ring *r, u32 held_from, u32 next)
{
	/* Slots up to prod are written; pairs with the producer's release. */
	u32 prod = smp_load_acquire(&r->ctrl->prod);

	if (prod - held_from > r->num_slots || next - held_from > prod - held_from)
		return -1;
	return prod - next;
}

/*
 * Completes every outstanding send WQE: those taken in with the status
 * their check recorded (FLUSH_ERR when they were fine), then those still in
 * the ring with FLUSH_ERR.  Under qp->lock.
 */
static void trdma_sq_flush(struct trdma_qp *qp)
{
	int n = trdma_ring_new(&qp->sq, qp->sq_retire, qp->sq_intake);
	struct trdma_sqe *sqe;

	lockdep_assert_held(&qp->lock);

	while (qp->sq_retire != qp->sq_intake) {
		u8 status = trdma_swi(qp, qp->sq_retire)->status;

		sqe = trdma_swq_slot(qp, qp->sq_retire);
		/* The slot is free before its completion shows. */
		smp_store_release(&qp->sq.ctrl->cons, ++qp->sq_retire);
		trdma_complete(qp, qp->ibqp.send_cq, sqe->wr_id,
			       trdma_wc_opcode(sqe->opcode),
			       status == IB_WC_SUCCESS ? IB_WC_WR_FLUSH_ERR :
							 status);
	}
	/* A corrupt producer index leaves nothing more to trust. */
	for (; n > 0; n--, qp->sq_intake++, qp->sq_retire++) {
		u64 wr_id;
		u8 opcode;

		sqe = trdma_ring_slot(&qp->sq, qp->sq_intake);
		wr_id = READ_ONCE(sqe->wr_id);
		opcode = READ_ONCE(sqe->opcode);
		/* The slot is free before its completion shows. */
		smp_store_release(&qp->sq.ctrl->cons, qp->sq_retire + 1);
		trdma_complete(qp, qp->ibqp.send_cq, wr_id,
			       trdma_wc_opcode(opcode), IB_WC_WR_FLUSH_ERR);
	}
	qp->sq_tx = qp->sq_retire;
	/* Done with the slots before the producer may reuse them. */
	smp_store_release(&qp->sq.ctrl->cons, qp->sq_retire);
}

/*
 * Retires finished send WQEs in order: a signaled one (or, with
 * sq_sig_all, every one) completes successfully.  Under qp->lock.
 */
void trdma_sq_retire(struct trdma_qp *qp)
{
	lockdep_assert_held(&qp->lock);
	while (qp->sq_retire != qp->sq_tx) {
		struct trdma_swqe_info *swi = trdma_swi(qp, qp->sq_retire);
		struct trdma_sqe *sqe = trdma_swq_slot(qp, qp->sq_retire);

		if (!swi->done)
			break;
		qp->sq_retire++;
		/*
		 * Free the slot before the completion can be seen: a consumer
		 * that posts again on seeing it must find room.  The kernel's
		 * copy stays ours while we hold qp->lock.
		 */
		smp_store_release(&qp->sq.ctrl->cons, qp->sq_retire);
		/*
		 * byte_len as rxe and mlx5 report it: the message length, 8
		 * for an atomic (ibv_poll_cq defines it for receives only).
		 */
		if (sqe->flags & TRDMA_WQE_SIGNALED || qp->sq_sig_all) {
			enum ib_wc_opcode op = trdma_wc_opcode(sqe->opcode);

			trdma_complete_len(qp, qp->ibqp.send_cq, sqe->wr_id, op,
					   IB_WC_SUCCESS,
					   op == IB_WC_COMP_SWAP ||
					   op == IB_WC_FETCH_ADD ? 8 : swi->len);
		}
	}
}

static void trdma_rq_flush(struct trdma_qp *qp)
{
	int n;

	lockdep_assert_held(&qp->lock);
	if (qp->ibqp.srq)
		return;
	/*
	 * A WQE the receive path took for a message in progress is older
	 * than every WQE in the ring and must complete first: when the
	 * message ends, or flushed once the receive path stopped.  The ring
	 * is flushed behind it then (trdma_qp_rx_stopped()).
	 */
	if (READ_ONCE(qp->rx.req_has_rqe))
		return;

	n = trdma_ring_new(&qp->rq, qp->rq_cons, qp->rq_cons);
	for (; n > 0; n--, qp->rq_cons++) {
		struct trdma_rqe *rqe = trdma_ring_slot(&qp->rq, qp->rq_cons);

		trdma_complete(qp, qp->ibqp.recv_cq, READ_ONCE(rqe->wr_id),
			       IB_WC_RECV, IB_WC_WR_FLUSH_ERR);
	}
	/* Done with the slots before the producer may reuse them. */
	smp_store_release(&qp->rq.ctrl->cons, qp->rq_cons);
}

/*
 * A UD QP's datagram has completed the receive WQE it took (trdma_rqe_take()
 * set rx.req_has_rqe): a flush that came meanwhile left the RQ behind it,
 * flushed now.  Any context.
 */
void trdma_rq_taken_done(struct trdma_qp *qp)
{
	unsigned long flags;

	spin_lock_irqsave(&qp->lock, flags);
	WRITE_ONCE(qp->rx.req_has_rqe, false);
	if (qp->state == IB_QPS_ERR)
		trdma_rq_flush(qp);
	spin_unlock_irqrestore(&qp->lock, flags);
}

static void trdma_qp_set_kflags(struct trdma_qp *qp, u32 kflags)
{
	WRITE_ONCE(qp->sq.ctrl->kflags, kflags);
	if (!qp->ibqp.srq)
		WRITE_ONCE(qp->rq.ctrl->kflags, kflags);
}

/* Moves the QP to ERR and flushes both queues.  Under qp->lock. */
static void trdma_qp_to_error(struct trdma_qp *qp)
{
	lockdep_assert_held(&qp->lock);
	qp->state = IB_QPS_ERR;
	trdma_qp_set_kflags(qp, TRDMA_RING_F_ERROR);
	/* Pairs with the provider's fence between prod and kflags. */
	smp_mb();
	trdma_sq_flush(qp);
	trdma_rq_flush(qp);
}

static void trdma_qp_close(struct trdma_qp *qp);

/*
 * The datagram transmitter is done with WQE idx, the next to transmit:
 * it retires in order, or, refused with status, ends the QP as an intake
 * refusal does (its completion carries status, the rest are flushed).
 */
void trdma_sq_wqe_done(struct trdma_qp *qp, u32 idx, enum ib_wc_status st)
{
	unsigned long flags;
	bool failed = false;

	spin_lock_irqsave(&qp->lock, flags);
	/* A RESET or ERR since has dealt with it. */
	if (qp->state == IB_QPS_RTS && qp->sq_tx == idx &&
	    idx != qp->sq_intake) {
		struct trdma_swqe_info *swi = trdma_swi(qp, idx);

		swi->done = true;
		qp->sq_tx++;
		if (st == IB_WC_SUCCESS) {
			trdma_sq_retire(qp);
		} else {
			swi->status = st;
			trdma_qp_to_error(qp);
			failed = true;
		}
	}
	spin_unlock_irqrestore(&qp->lock, flags);
	/* trdma_qp_rx_stopped() from fatal_work, for an SRQ's QP. */
	if (failed)
		trdma_qp_close(qp);
}

struct trdma_qp *trdma_qp_get(struct trdma_dev *tdev, u32 qpn)
{
	struct trdma_qp *qp;

	xa_lock_bh(&tdev->qp_xa);
	qp = xa_load(&tdev->qp_xa, qpn);
	if (qp && !refcount_inc_not_zero(&qp->ref))
		qp = NULL;
	xa_unlock_bh(&tdev->qp_xa);
	return qp;
}

void trdma_qp_put(struct trdma_qp *qp)
{
	if (refcount_dec_and_test(&qp->ref))
		complete(&qp->freed);
}

/* Closes the QP's connection in process context (fatal_work). */
static void trdma_qp_close(struct trdma_qp *qp)
{
	if (refcount_inc_not_zero(&qp->ref) &&
	    !queue_work(trdma_wq, &qp->fatal_work))
		trdma_qp_put(qp);
}

/*
 * Moves the QP to ERR with everything flushed, unless it is being reset: it
 * has let go of the connection the error came from.  Returns the state it
 * was in.  Any context.
 */
static enum ib_qp_state trdma_qp_err_unless_reset(struct trdma_qp *qp)
{
	enum ib_qp_state was;
	unsigned long flags;

	spin_lock_irqsave(&qp->lock, flags);
	was = qp->state;
	if (was != IB_QPS_RESET)
		trdma_qp_to_error(qp);
	spin_unlock_irqrestore(&qp->lock, flags);
	return was;
}

/*
 * Moves the QP to ERR with everything flushed and raises the affiliated
 * async event, once; with close, the connection is closed too.  Any context.
 */
void trdma_qp_error(struct trdma_qp *qp, enum ib_event_type event,
		    bool close)
{
	struct ib_event ev = {
		.device = qp->ibqp.device,
		.element.qp = &qp->ibqp,
		.event = event,
	};
	enum ib_qp_state was = trdma_qp_err_unless_reset(qp);

	if (was == IB_QPS_RESET)
		return;
	/*
	 * The connection is closed in process context, also when the QP was
	 * in ERR already: one waiting to send its last NAK (close_after_nak)
	 * whose transmitter failed would otherwise keep it open, and the
	 * peer would wait forever for the rest of a segment it was promised.
	 */
	if (close)
		trdma_qp_close(qp);
	if (was == IB_QPS_ERR)
		return;
	if (event == IB_EVENT_QP_FATAL)
		trdma_count(qp->tdev, TRDMA_CNT_QP_FATAL, 1);
	if (qp->ibqp.event_handler)
		qp->ibqp.event_handler(&ev, qp->ibqp.qp_context);
}

/*
 * A remote error ended the QP's oldest WQE (a NAK, RNR retries run out):
 * its completion tells the application, and as on IB no affiliated event
 * is raised.  The QP goes to ERR, its connection closes.  Any context.
 */
void trdma_qp_wr_error(struct trdma_qp *qp)
{
	if (trdma_qp_err_unless_reset(qp) != IB_QPS_RESET)
		trdma_qp_close(qp);
}

/*
 * A failure the QP cannot continue from (corrupt ring, broken connection,
 * malformed peer): ERR with everything flushed, the affiliated async event,
 * and the connection closed.
 */
void trdma_qp_fatal(struct trdma_qp *qp, enum ib_event_type event)
{
	trdma_qp_error(qp, event, true);
}

/*
 * As on an IB transport whose retries ran out: the oldest outstanding WQE
 * (only if it went on the wire, with sent_only) ends with
 * IB_WC_RETRY_EXC_ERR, the rest are flushed, the QP goes to error.
 */
void trdma_qp_retries_exhausted(struct trdma_qp *qp, bool sent_only)
{
	unsigned long flags;

	spin_lock_irqsave(&qp->lock, flags);
	if (qp->state == IB_QPS_RTS && qp->sq_retire != qp->sq_intake) {
		struct trdma_swqe_info *swi = trdma_swi(qp, qp->sq_retire);

		if ((swi->msn_set || !sent_only) && !swi->done &&
		    swi->status == IB_WC_SUCCESS)
			swi->status = IB_WC_RETRY_EXC_ERR;
	}
	spin_unlock_irqrestore(&qp->lock, flags);
	trdma_qp_fatal(qp, IB_EVENT_QP_FATAL);
}

/*
 * The connection timed out (TCP_USER_TIMEOUT, from the QP's timeout and
 * retry_cnt): the oldest WQE on the wire fails, the rest are flushed.
 */
void trdma_qp_timed_out(struct trdma_qp *qp)
{
	trdma_qp_retries_exhausted(qp, true);
}

static uint trdma_peer_close_grace = 1000;
module_param_named(peer_close_grace, trdma_peer_close_grace, uint, 0644);
MODULE_PARM_DESC(peer_close_grace,
		 "ms a QP stays usable after its peer closed, at most (1000)");

/*
 * The QP's transport timeout in ms: its local ACK timeout (4.096 us *
 * 2^timeout) times its retry count plus one; 0 (timeout 0) is infinite,
 * as in IB.  What TCP_USER_TIMEOUT is set to on its connection.
 */
u32 trdma_qp_transport_ms(const struct trdma_qp *qp)
{
	u64 ms;

	if (!qp->attr.timeout)
		return 0;
	ms = div_u64((4096ULL << qp->attr.timeout) * (qp->attr.retry_cnt + 1),
		     1000000);
	return clamp_t(u64, ms, 1, INT_MAX);
}

/*
 * How long after its peer closed a QP stays as it is: peer_close_grace,
 * or, with requests that will now never be answered, as long as an IB
 * requester would retry them (its transport timeout) if that is sooner.
 */
static unsigned long trdma_peer_gone_delay(struct trdma_qp *qp, bool req)
{
	u32 ms = READ_ONCE(trdma_peer_close_grace);
	u32 t = trdma_qp_transport_ms(qp);

	if (req && t)
		ms = min(ms, t);
	return msecs_to_jiffies(ms);
}

/*
 * The peer closed the connection in order: its QP was destroyed or its
 * process exited.  As on a fabric, where nothing tells a QP that its peer
 * is gone, the QP stays as it is for a while: requests it sent (or sends
 * from now on) are not answered, and after its transport timeout, as an
 * IB requester whose retries ran out, the oldest ends with
 * IB_WC_RETRY_EXC_ERR and the QP goes to error; a QP with no request
 * outstanding waits peer_close_grace ms.  What it still owed the peer
 * (ACKs, READ responses) has nobody to go to.  An application that tears
 * down after its last completion (ibv_rc_pingpong does) or that posted one
 * request more than it waits for (ibv_srq_pingpong does) exits before
 * this QP fails, without error completions for what it left behind.
 * Softirq or process context.
 */
void trdma_qp_peer_closed(struct trdma_qp *qp)
{
	unsigned long flags;
	bool req;

	spin_lock_irqsave(&qp->lock, flags);
	qp->peer_closed = true;
	req = qp->sq_retire != qp->sq_intake;
	qp->peer_req_timed = req;
	spin_unlock_irqrestore(&qp->lock, flags);

	mod_delayed_work(trdma_wq, &qp->peer_gone_work,
			 trdma_peer_gone_delay(qp, req));
}

static void trdma_qp_peer_gone_work(struct work_struct *work)
{
	struct trdma_qp *qp = container_of(to_delayed_work(work),
					   struct trdma_qp, peer_gone_work);
	unsigned long flags;
	bool gone, timed;

	spin_lock_irqsave(&qp->lock, flags);
	gone = qp->peer_closed;		/* not since reset */
	timed = qp->peer_req_timed;
	spin_unlock_irqrestore(&qp->lock, flags);
	/* Its retries ran out, sent or not: nobody was there to answer. */
	if (gone && timed)
		trdma_qp_retries_exhausted(qp, false);
	else if (gone)
		trdma_qp_fatal(qp, IB_EVENT_QP_FATAL);
}

/*
 * The QP's connection is closed and its receive path idle (from
 * trdma_cm_detach_locked(); for a UD QP, from the move to ERR, and no
 * datagram is being delivered once ud_rx_lock was free).  A receive WQE
 * taken for a message that never finished is flushed, and in ERR the RQ
 * behind it; then a QP on an SRQ that is in ERR will never take another
 * WQE from it: IB_EVENT_QP_LAST_WQE_REACHED, once per error, so that its
 * owner knows when the QP's receive completions are all out.
 * Under state_mutex.
 */
void trdma_qp_rx_stopped(struct trdma_qp *qp)
{
	struct ib_event ev = {
		.device = qp->ibqp.device,
		.element.qp = &qp->ibqp,
		.event = IB_EVENT_QP_LAST_WQE_REACHED,
	};
	unsigned long flags;
	bool last;

	lockdep_assert_held(&qp->state_mutex);
	/* No datagram is being delivered any more (seen in ERR: none will). */
	if (trdma_qp_is_ud(qp)) {
		spin_lock_irqsave(&qp->ud_rx_lock, flags);
		spin_unlock_irqrestore(&qp->ud_rx_lock, flags);
	}
	/* A QP being reset drops what it took, without a completion. */
	if (qp->state == IB_QPS_RESET)
		qp->rx.req_has_rqe = false;
	else
		trdma_rx_flush(qp);

	spin_lock_irqsave(&qp->lock, flags);
	/* What trdma_rq_flush() left behind a taken WQE. */
	if (qp->state == IB_QPS_ERR)
		trdma_rq_flush(qp);
	last = qp->ibqp.srq && qp->state == IB_QPS_ERR && !qp->last_wqe_done;
	if (last)
		qp->last_wqe_done = true;
	spin_unlock_irqrestore(&qp->lock, flags);
	if (last && qp->ibqp.event_handler)
		qp->ibqp.event_handler(&ev, qp->ibqp.qp_context);
}

/*
 * Closes the connection of a QP in error (trdma_qp_close()).  A QP reset
 * since let go of it already, and its next life's connection or dial is
 * not this error's to end.
 */
static void trdma_qp_fatal_work(struct work_struct *work)
{
	struct trdma_qp *qp = container_of(work, struct trdma_qp, fatal_work);

	mutex_lock(&qp->state_mutex);
	if (READ_ONCE(qp->state) == IB_QPS_ERR)
		trdma_cm_detach_locked(qp);
	mutex_unlock(&qp->state_mutex);
	trdma_qp_put(qp);
}

/*
 * Checks the kernel's copy of a send WQE: first what needs only the slot
 * (trdma_slot_sqe_check), then each SGE's lkey, its PD, its range and, for
 * the sinks of READs and atomics, local write access.  Returns the
 * completion status the WQE ends with if it is refused, or IB_WC_SUCCESS.
 */
static enum ib_wc_status trdma_sqe_check(struct trdma_qp *qp,
					 const struct trdma_sqe *sqe, u32 *len)
{
	const struct trdma_slot_limits lim = {
		.slot_size = 1U << qp->sq.slot_shift,
		.max_sge = qp->cap.max_send_sge,
		.max_inline = qp->cap.max_inline_data,
	};
	struct trdma_pd *pd = to_tpd(qp->ibqp.pd);
	enum ib_wc_status status;
	int access = 0;
	int i;

	status = trdma_slot_sqe_check(sqe, &lim, len);
	if (status != IB_WC_SUCCESS)
		return status;
	/*
	 * UC has SENDs and WRITEs, no READ, atomic or SEND with invalidate
	 * (local work requests are the QP's own business).
	 */
	if (trdma_qp_is_uc(qp) && !trdma_sqe_is_local(sqe) &&
	    !trdma_uc_opcode(sqe->opcode))
		return IB_WC_LOC_QP_OP_ERR;
	/* A datagram is one SEND of at most the port's MTU. */
	if (trdma_qp_is_ud(qp)) {
		if (sqe->opcode != IB_UVERBS_WR_SEND &&
		    sqe->opcode != IB_UVERBS_WR_SEND_WITH_IMM)
			return IB_WC_LOC_QP_OP_ERR;
		if (*len > trdma_ud_mtu(qp->tdev))
			return IB_WC_LOC_LEN_ERR;
	}
	/*
	 * Fast registration: the kernel's MRs only; memory windows: user
	 * QPs only.  LOCAL_INV: either (a user QP's invalidates type-2
	 * windows only, trdma_fr_inv()).
	 */
	if ((sqe->opcode == TRDMA_SQE_REG_MR && qp->is_user) ||
	    (sqe->opcode == IB_UVERBS_WR_BIND_MW && !qp->is_user))
		return IB_WC_LOC_QP_OP_ERR;
	if (sqe->flags & TRDMA_WQE_INLINE)
		return status;

	if (sqe->opcode == IB_UVERBS_WR_RDMA_READ ||
	    sqe->opcode == IB_UVERBS_WR_ATOMIC_CMP_AND_SWP ||
	    sqe->opcode == IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD)
		access = IB_ACCESS_LOCAL_WRITE;
	for (i = 0; i < sqe->num_sge; i++) {
		const struct trdma_sge *sge = &sqe->sge[i];
		struct trdma_mr *mr;
		int rv;

		mr = trdma_mr_get(qp->tdev, sge->lkey);
		if (!mr)
			return IB_WC_LOC_PROT_ERR;
		rv = trdma_mr_check(mr, pd, sge->addr, sge->length, access);
		trdma_mr_put(mr);
		if (rv)
			return IB_WC_LOC_PROT_ERR;
	}
	return IB_WC_SUCCESS;
}

/*
 * Takes newly posted send WQEs in: each slot is copied once into the
 * kernel's own queue and checked there.  A refused WQE moves the QP to ERR;
 * its completion carries the reason and everything after it is flushed.
 * Under qp->lock, with the QP in RTS.
 */
static void trdma_sq_intake(struct trdma_qp *qp)
{
	int n = trdma_ring_new(&qp->sq, qp->sq_retire, qp->sq_intake);
	size_t size = 1UL << qp->sq.slot_shift;

	lockdep_assert_held(&qp->lock);

	if (n < 0) {
		ibdev_dbg(qp->ibqp.device, "QP %u: corrupt SQ producer index\n",
			  qp->ibqp.qp_num);
		qp->corrupt = true;
		/* trdma_sq_kick() raises IB_EVENT_QP_FATAL for it. */
		trdma_count(qp->tdev, TRDMA_CNT_QP_FATAL, 1);
		trdma_qp_to_error(qp);
		return;
	}
	for (; n > 0; n--) {
		struct trdma_sqe *sqe = trdma_swq_slot(qp, qp->sq_intake);
		enum ib_wc_status status;

		struct trdma_swqe_info *swi = trdma_swi(qp, qp->sq_intake);

		memcpy(sqe, trdma_ring_slot(&qp->sq, qp->sq_intake), size);
		memset(swi, 0, sizeof(*swi));
		status = trdma_sqe_check(qp, sqe, &swi->len);
		/*
		 * REG_MR, BIND_MW and LOCAL_INV take effect here, in SQ
		 * order with the intake checks of the WQEs after them, which
		 * may use the key just registered; they complete in order when the
		 * transmitter passes them (trdma_tx_req_seg()).
		 */
		if (status == IB_WC_SUCCESS &&
		    sqe->opcode == TRDMA_SQE_REG_MR)
			status = trdma_fr_reg(qp, sqe->rkey, sqe->imm_data);
		else if (status == IB_WC_SUCCESS &&
			 sqe->opcode == IB_UVERBS_WR_BIND_MW)
			status = trdma_mw_bind(qp, sqe);
		else if (status == IB_WC_SUCCESS &&
			 sqe->opcode == IB_UVERBS_WR_LOCAL_INV &&
			 trdma_fr_inv(qp, sqe->imm_data, false))
			/* A user's: no type-2 window of its PD has the key. */
			status = qp->is_user ? IB_WC_LOC_QP_OP_ERR :
					       IB_WC_LOC_PROT_ERR;
		swi->status = status;
		qp->sq_intake++;
		if (status != IB_WC_SUCCESS) {
			trdma_qp_to_error(qp);
			return;
		}
	}
}

/*
 * The send doorbell: look at the SQ ring again.  now: the caller is a
 * user's doorbell (process context, no locks held), which transmits
 * itself (trdma_tx_now) rather than kicking the worker, unless sends were
 * outstanding already (trdma_tx_defer()).
 */
static void trdma_sq_kick(struct trdma_qp *qp, bool now)
{
	bool fatal = false, kick = false, gone = false, failed = false;
	bool outstanding = false;
	unsigned long flags;

	spin_lock_irqsave(&qp->lock, flags);
	switch (qp->state) {
	case IB_QPS_RTS:
		outstanding = qp->sq_retire != qp->sq_intake;
		trdma_sq_intake(qp);
		fatal = qp->corrupt;
		qp->corrupt = false;
		/* A WQE refused at intake took the QP to ERR. */
		failed = qp->state == IB_QPS_ERR;
		kick = qp->sq_tx != qp->sq_intake;
		/*
		 * Nothing will carry it: the peer is gone.  The first such
		 * request starts its transport timeout; later ones do not
		 * push it back.
		 */
		gone = kick && qp->peer_closed && !qp->peer_req_timed;
		if (gone)
			qp->peer_req_timed = true;
		else if (qp->peer_closed)
			kick = false;
		break;
	case IB_QPS_ERR:
		trdma_sq_flush(qp);
		break;
	default:
		/* Not postable yet; left in the ring for a later state. */
		break;
	}
	spin_unlock_irqrestore(&qp->lock, flags);

	if (gone) {
		/* Unanswered: fails as trdma_qp_peer_closed() says. */
		mod_delayed_work(trdma_wq, &qp->peer_gone_work,
				 trdma_peer_gone_delay(qp, true));
		kick = false;
	}
	/* A QP in ERR has no use for its connection: the peer learns it. */
	if (failed)
		trdma_qp_close(qp);
	if (kick && now && trdma_qp_is_ud(qp)) {
		trdma_ud_tx(qp);
	} else if (kick && now && trdma_tx_defer(qp, outstanding)) {
		trdma_count(qp->tdev, TRDMA_CNT_TX_DEFERRED, 1);
		trdma_tx_kick_user(qp);
	} else if (kick && now) {
		trdma_tx_now(qp);
	} else if (kick) {
		trdma_tx_kick_user(qp);
	}
	if (fatal && qp->ibqp.event_handler) {
		struct ib_event ev = {
			.device = qp->ibqp.device,
			.element.qp = &qp->ibqp,
			.event = IB_EVENT_QP_FATAL,
		};

		qp->ibqp.event_handler(&ev, qp->ibqp.qp_context);
	}
}

/*
 * A doorbell the provider did not ring: the transmitter found WQEs posted
 * while tx_active said it would (trdma_tx_idle()).  The worker sends them.
 * Process context, no locks held.
 */
void trdma_sq_doorbell(struct trdma_qp *qp)
{
	trdma_sq_kick(qp, false);
}

static int trdma_qp_check_cap(struct ib_qp_init_attr *init)
{
	struct ib_qp_cap *cap = &init->cap;

	if (cap->max_send_wr > trdma_limits.max_qp_wr ||
	    cap->max_send_sge > trdma_limits.max_sge ||
	    cap->max_inline_data > trdma_limits.max_inline)
		return -EINVAL;
	if (!init->srq && (cap->max_recv_wr > trdma_limits.max_qp_wr ||
			   cap->max_recv_sge > trdma_limits.max_sge))
		return -EINVAL;
	return 0;
}

int trdma_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init,
		    struct ib_udata *udata)
{
	struct trdma_dev *tdev = to_tdev(ibqp->device);
	struct trdma_ucontext *uctx = rdma_udata_to_drv_context(udata,
				struct trdma_ucontext, ibucontext);
	struct ib_ucontext *ibuctx = uctx ? &uctx->ibucontext : NULL;
	struct trdma_create_qp_resp resp = {};
	struct trdma_qp *qp = to_tqp(ibqp);
	struct ib_qp_cap *cap = &init->cap;
	u32 slots, shift, qpn, room;
	int rv;

	switch (init->qp_type) {
	case IB_QPT_RC:
	case IB_QPT_UC:
	case IB_QPT_UD:
		break;
	case IB_QPT_GSI:
		/* QP1, for the kernel's MAD layer only. */
		if (udata || init->port_num != 1)
			return -EINVAL;
		break;
	default:
		ibdev_dbg(ibqp->device, "QP type %d not supported\n",
			  init->qp_type);
		return -EOPNOTSUPP;
	}
	if (init->create_flags)
		return -EOPNOTSUPP;
	rv = trdma_qp_check_cap(init);
	if (rv)
		return rv;
	if (udata && udata->outlen < sizeof(resp))
		return -EINVAL;
	if (!trdma_count_get(&tdev->counts.qp, trdma_limits.max_qp))
		return -ENOMEM;

	qp->tdev = tdev;
	qp->type = init->qp_type;
	mutex_init(&qp->state_mutex);
	spin_lock_init(&qp->lock);
	spin_lock_init(&qp->txopt.lock);
	mutex_init(&qp->tx_mutex);
	spin_lock_init(&qp->ud_rx_lock);
	INIT_LIST_HEAD(&qp->frag_node);
	refcount_set(&qp->ref, 1);
	init_completion(&qp->freed);
	trdma_tx_work_init(qp);
	INIT_DELAYED_WORK(&qp->connect_work, trdma_cm_connect_work);
	INIT_WORK(&qp->fatal_work, trdma_qp_fatal_work);
	INIT_WORK(&qp->rx_stall_work, trdma_rx_stall_work);
	INIT_DELAYED_WORK(&qp->peer_gone_work, trdma_qp_peer_gone_work);
	INIT_DELAYED_WORK(&qp->rnr_work, trdma_tx_rnr_work);
	hrtimer_init(&qp->ack_timer, CLOCK_MONOTONIC,
		     HRTIMER_MODE_REL_PINNED_HARD);
	qp->ack_timer.function = trdma_tx_ack_timer;
	tasklet_setup(&qp->ack_tasklet, trdma_tx_ack_tasklet);
	qp->last_req_tx = jiffies - HZ;
	qp->ack_turn_ns = TRDMA_ACK_TURN_INIT_NS;
	qp->state = IB_QPS_RESET;
	qp->sq_sig_all = init->sq_sig_type == IB_SIGNAL_ALL_WR;
	qp->is_user = !!udata;

	/* Send queue: a slot holds the header and the SGEs or inline data. */
	slots = roundup_pow_of_two(max(cap->max_send_wr, 1U));
	room = max(cap->max_send_sge * (u32)sizeof(struct trdma_sge),
		   cap->max_inline_data);
	shift = order_base_2(max_t(u32, 64, sizeof(struct trdma_sqe) + room));
	rv = trdma_ring_alloc(&qp->sq, ibuctx, slots, shift, &resp.sq_mmap_key);
	if (rv)
		goto err_count;
	qp->swq = kvcalloc(slots, 1UL << shift, GFP_KERNEL);
	qp->swi = kvcalloc(slots, sizeof(*qp->swi), GFP_KERNEL);
	if (!qp->swq || !qp->swi) {
		rv = -ENOMEM;
		goto err_sq;
	}
	room = (1U << shift) - sizeof(struct trdma_sqe);
	cap->max_send_wr = slots;
	cap->max_send_sge = min_t(u32, room / sizeof(struct trdma_sge),
				  trdma_limits.max_sge);
	cap->max_inline_data = min(room, trdma_limits.max_inline);
	resp.sq_slots = slots;
	resp.sq_wqe_shift = shift;
	resp.max_inline_data = cap->max_inline_data;
	if (trdma_qp_is_ud(qp)) {
		qp->ud_sqe = kmalloc(1UL << shift, GFP_KERNEL);
		qp->ud_buf = kmalloc(TRDMA_UD_HDR_MAX + TRDMA_UD_MAX_PAYLOAD,
				     GFP_KERNEL);
		if (!qp->ud_sqe || !qp->ud_buf) {
			rv = -ENOMEM;
			goto err_sq;
		}
	}

	if (!init->srq) {
		slots = roundup_pow_of_two(max(cap->max_recv_wr, 1U));
		shift = order_base_2(max_t(u32, 32, sizeof(struct trdma_rqe) +
					   cap->max_recv_sge *
					   sizeof(struct trdma_sge)));
		rv = trdma_ring_alloc(&qp->rq, ibuctx, slots, shift,
				      &resp.rq_mmap_key);
		if (rv)
			goto err_sq;
		room = (1U << shift) - sizeof(struct trdma_rqe);
		cap->max_recv_wr = slots;
		cap->max_recv_sge = min_t(u32, room / sizeof(struct trdma_sge),
					  trdma_limits.max_sge);
		resp.rq_slots = slots;
		resp.rq_wqe_shift = shift;
	} else {
		cap->max_recv_wr = 0;
		cap->max_recv_sge = 0;
	}
	qp->cap = *cap;

	if (init->qp_type == IB_QPT_GSI) {
		qpn = 1;
		rv = xa_insert_bh(&tdev->qp_xa, qpn, NULL, GFP_KERNEL);
	} else {
		rv = xa_alloc_cyclic_bh(&tdev->qp_xa, &qpn, NULL,
					XA_LIMIT(TRDMA_MIN_QPN, TRDMA_MAX_QPN),
					&tdev->qp_next, GFP_KERNEL);
	}
	if (rv < 0)
		goto err_rq;
	ibqp->qp_num = qpn;
	qp->uid = atomic64_inc_return(&tdev->qp_uid);

	if (udata) {
		rv = ib_copy_to_udata(udata, &resp,
				      min(udata->outlen, sizeof(resp)));
		if (rv)
			goto err_qpn;
	}
	xa_store_bh(&tdev->qp_xa, qpn, qp, GFP_KERNEL);
	return 0;

err_qpn:
	xa_erase_bh(&tdev->qp_xa, qpn);
err_rq:
	trdma_ring_free(&qp->rq);
err_sq:
	kfree(qp->ud_buf);
	kfree(qp->ud_sqe);
	kvfree(qp->swi);
	kvfree(qp->swq);
	trdma_ring_free(&qp->sq);
err_count:
	atomic_dec(&tdev->counts.qp);
	return rv;
}

int trdma_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	struct trdma_qp *qp = to_tqp(ibqp);
	unsigned long flags;

	/*
	 * ACKs for messages whose completions the application may have seen
	 * go out first: the peer completes its WRs on them.
	 */
	if (!trdma_qp_is_ud(qp) && trdma_state_connected(READ_ONCE(qp->state)))
		trdma_tx_sync(qp);

	mutex_lock(&qp->state_mutex);
	spin_lock_irqsave(&qp->lock, flags);
	/* No event for a QP going away. */
	qp->last_wqe_done = true;
	if (qp->state != IB_QPS_RESET)
		trdma_qp_to_error(qp);
	spin_unlock_irqrestore(&qp->lock, flags);
	mutex_unlock(&qp->state_mutex);

	xa_erase_bh(&qp->tdev->qp_xa, ibqp->qp_num);
	if (!trdma_qp_is_ud(qp))
		trdma_cm_qp_destroy(qp);
	/*
	 * Detached: no socket callback queues these or arms the timer again.
	 * peer_gone_work may still have queued fatal_work (with a reference)
	 * since trdma_cm_qp_destroy() flushed it.
	 */
	cancel_delayed_work_sync(&qp->peer_gone_work);
	cancel_delayed_work_sync(&qp->rnr_work);
	/*
	 * ack_tasklet arms the timer too, but only in RTR/RTS (destroy
	 * leaves RESET or ERR, above).  Only the timer schedules the
	 * tasklet.
	 */
	hrtimer_cancel(&qp->ack_timer);
	tasklet_kill(&qp->ack_tasklet);
	trdma_tx_work_cancel(qp);
	trdma_frag_forget(qp);
	trdma_qp_put(qp);
	wait_for_completion(&qp->freed);
	/*
	 * A reference holder that ended meanwhile (fatal_work's detach, the
	 * idle-fragment release) may have queued the worker on its way out:
	 * trdma_tx_unlock() does where a kick cancelled above left tx_again
	 * set.  Nobody is left to queue it now; it must not outlive the QP.
	 */
	trdma_tx_work_cancel(qp);

	rdma_destroy_ah_attr(&qp->attr.ah_attr);
	trdma_ring_free(&qp->rq);
	trdma_ring_free(&qp->sq);
	kfree(qp->ud_buf);
	kfree(qp->ud_sqe);
	kvfree(qp->swi);
	kvfree(qp->swq);
	trdma_txopt_release(&qp->txopt);
	atomic_dec(&qp->tdev->counts.qp);
	return 0;
}

/* Checks the values of the attributes a modify_qp sets. */
static int trdma_qp_check_attr(struct trdma_qp *qp, struct ib_qp_attr *attr,
			       int mask)
{
	/*
	 * Q_Keys with the high bit set are privileged: a process needs
	 * CAP_NET_RAW for one, so it cannot pose as QP1 (0x80010000).
	 */
	if (mask & IB_QP_QKEY && attr->qkey & 0x80000000 && qp->is_user &&
	    !capable(CAP_NET_RAW))
		return -EPERM;
	if (mask & (IB_QP_ALT_PATH | IB_QP_PATH_MIG_STATE | IB_QP_RATE_LIMIT))
		return -EOPNOTSUPP;
	if (mask & IB_QP_STATE &&
	    (attr->qp_state == IB_QPS_SQD || attr->qp_state == IB_QPS_SQE))
		return -EOPNOTSUPP;
	if (mask & IB_QP_PORT && attr->port_num != 1)
		return -EINVAL;
	if (mask & IB_QP_PKEY_INDEX && attr->pkey_index >= TRDMA_PKEY_TBL_LEN)
		return -EINVAL;
	/*
	 * Only the remote rights mean anything; local write and on-demand
	 * paging (MR flags some applications pass here too) are tolerated.
	 */
	if (mask & IB_QP_ACCESS_FLAGS &&
	    attr->qp_access_flags & ~(IB_ACCESS_LOCAL_WRITE |
				      IB_ACCESS_ON_DEMAND |
				      IB_ACCESS_REMOTE_WRITE |
				      IB_ACCESS_REMOTE_READ |
				      IB_ACCESS_REMOTE_ATOMIC))
		return -EINVAL;
	/* UC has no READ and no atomics to allow. */
	if (mask & IB_QP_ACCESS_FLAGS && trdma_qp_is_uc(qp) &&
	    attr->qp_access_flags & (IB_ACCESS_REMOTE_READ |
				     IB_ACCESS_REMOTE_ATOMIC))
		return -EINVAL;
	if (mask & IB_QP_AV &&
	    !(rdma_ah_get_ah_flags(&attr->ah_attr) & IB_AH_GRH))
		return -EINVAL;
	if (mask & IB_QP_PATH_MTU &&
	    (attr->path_mtu < IB_MTU_256 || attr->path_mtu > IB_MTU_4096))
		return -EINVAL;
	if (mask & IB_QP_MAX_QP_RD_ATOMIC &&
	    attr->max_rd_atomic > trdma_limits.max_qp_rd_atom)
		return -EINVAL;
	if (mask & IB_QP_MAX_DEST_RD_ATOMIC &&
	    attr->max_dest_rd_atomic > trdma_limits.max_qp_rd_atom)
		return -EINVAL;
	if ((mask & IB_QP_RETRY_CNT && attr->retry_cnt > 7) ||
	    (mask & IB_QP_RNR_RETRY && attr->rnr_retry > 7) ||
	    (mask & IB_QP_MIN_RNR_TIMER && attr->min_rnr_timer > 31) ||
	    (mask & IB_QP_TIMEOUT && attr->timeout > 31))
		return -EINVAL;
	if ((mask & IB_QP_SQ_PSN && attr->sq_psn > 0xffffff) ||
	    (mask & IB_QP_RQ_PSN && attr->rq_psn > 0xffffff) ||
	    (mask & IB_QP_DEST_QPN && attr->dest_qp_num > 0xffffff))
		return -EINVAL;
	return 0;
}

/* Copies the attributes a modify_qp sets into qp->attr. */
static void trdma_qp_store_attr(struct trdma_qp *qp, struct ib_qp_attr *attr,
				int mask)
{
	struct ib_qp_attr *a = &qp->attr;

	if (mask & IB_QP_CUR_STATE)
		a->cur_qp_state = attr->cur_qp_state;
	if (mask & IB_QP_EN_SQD_ASYNC_NOTIFY)
		a->en_sqd_async_notify = attr->en_sqd_async_notify;
	if (mask & IB_QP_ACCESS_FLAGS)
		a->qp_access_flags = attr->qp_access_flags;
	if (mask & IB_QP_PKEY_INDEX)
		a->pkey_index = attr->pkey_index;
	if (mask & IB_QP_PORT)
		a->port_num = attr->port_num;
	if (mask & IB_QP_QKEY)
		a->qkey = attr->qkey;
	if (mask & IB_QP_AV)
		rdma_replace_ah_attr(&a->ah_attr, &attr->ah_attr);
	if (mask & IB_QP_PATH_MTU)
		a->path_mtu = attr->path_mtu;
	if (mask & IB_QP_TIMEOUT)
		a->timeout = attr->timeout;
	if (mask & IB_QP_RETRY_CNT)
		a->retry_cnt = attr->retry_cnt;
	if (mask & IB_QP_RNR_RETRY)
		a->rnr_retry = attr->rnr_retry;
	if (mask & IB_QP_RQ_PSN)
		a->rq_psn = attr->rq_psn;
	if (mask & IB_QP_MAX_QP_RD_ATOMIC)
		a->max_rd_atomic = attr->max_rd_atomic;
	if (mask & IB_QP_MIN_RNR_TIMER)
		a->min_rnr_timer = attr->min_rnr_timer;
	if (mask & IB_QP_SQ_PSN)
		a->sq_psn = attr->sq_psn;
	if (mask & IB_QP_MAX_DEST_RD_ATOMIC)
		a->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IB_QP_DEST_QPN)
		a->dest_qp_num = attr->dest_qp_num;
}

/* RESET empties both queues without completions, as the IB spec has it. */
static void trdma_qp_reset(struct trdma_qp *qp)
{
	qp->sq_intake = 0;
	qp->sq_retire = 0;
	qp->sq_tx = 0;
	qp->rd_outstanding = 0;
	qp->rd_head = 0;
	qp->rd_tail = 0;
	qp->ack_pending = false;
	qp->ack_req = false;
	qp->ack_owed_at = 0;
	qp->ack_due_at = 0;
	qp->rnr_rewind = false;
	qp->peer_closed = false;
	qp->peer_req_timed = false;
	qp->last_wqe_done = false;
	WRITE_ONCE(qp->sq.ctrl->prod, 0);
	WRITE_ONCE(qp->sq.ctrl->cons, 0);
	qp->rq_cons = 0;
	if (!qp->ibqp.srq) {
		WRITE_ONCE(qp->rq.ctrl->prod, 0);
		WRITE_ONCE(qp->rq.ctrl->cons, 0);
	}
	trdma_qp_set_kflags(qp, 0);
	WRITE_ONCE(qp->sq.ctrl->tx_active, 0);
}

/*
 * The move from cur to next, queues and all.  An error since the move was
 * checked (a corrupt ring, a failed datagram, a broken connection: ERR
 * without state_mutex) ends that life: RESET and ERR may follow, any
 * other move fails with -EINVAL.  Under state_mutex.
 */
static int trdma_qp_set_state(struct trdma_qp *qp, enum ib_qp_state cur,
			      enum ib_qp_state next)
{
	unsigned long flags;

	spin_lock_irqsave(&qp->lock, flags);
	if (qp->state != cur && next != IB_QPS_RESET && next != IB_QPS_ERR) {
		spin_unlock_irqrestore(&qp->lock, flags);
		return -EINVAL;
	}
	if (cur != next) {
		if (next == IB_QPS_ERR) {
			trdma_qp_to_error(qp);
		} else if (next == IB_QPS_RESET) {
			trdma_qp_reset(qp);
		} else if (next == IB_QPS_RTS) {
			qp->tx_msn = qp->attr.sq_psn;
			qp->rnr_left = qp->attr.rnr_retry;
		}
		qp->state = next;
	}
	spin_unlock_irqrestore(&qp->lock, flags);
	return 0;
}

/*
 * A UD QP changes state between two datagrams (ud_rx_lock), and is reset
 * between two transmissions (tx_mutex): a WQE taken or sent before never
 * completes into the QP's next life.  Under state_mutex.
 */
static int trdma_ud_set_state(struct trdma_qp *qp, enum ib_qp_state cur,
			      enum ib_qp_state next)
{
	unsigned long flags;
	int rv;

	if (next == IB_QPS_RESET)
		mutex_lock(&qp->tx_mutex);
	spin_lock_irqsave(&qp->ud_rx_lock, flags);
	rv = trdma_qp_set_state(qp, cur, next);
	spin_unlock_irqrestore(&qp->ud_rx_lock, flags);
	if (next == IB_QPS_RESET)
		mutex_unlock(&qp->tx_mutex);
	return rv;
}

int trdma_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		    struct ib_udata *udata)
{
	struct trdma_qp *qp = to_tqp(ibqp);
	enum ib_qp_state cur, next;
	unsigned long flags;
	int rv;

	if (mask & ~IB_QP_ATTR_STANDARD_BITS)
		return -EOPNOTSUPP;

	mutex_lock(&qp->state_mutex);
	cur = mask & IB_QP_CUR_STATE ? attr->cur_qp_state : qp->state;
	next = mask & IB_QP_STATE ? attr->qp_state : cur;
	if (cur != qp->state ||
	    !ib_modify_qp_is_ok(cur, next, qp->type, mask)) {
		rv = -EINVAL;
		goto out;
	}
	rv = trdma_qp_check_attr(qp, attr, mask);
	if (rv)
		goto out;

	trdma_qp_store_attr(qp, attr, mask);

	/*
	 * A QP reset lets go of its connection before its queues are
	 * emptied: nothing arriving later is placed in it, and moved back to
	 * RTR it connects afresh.  trdma_qp_rx_stopped() sees RESET and drops
	 * a receive the connection had begun without a completion.
	 */
	if (cur != next && next == IB_QPS_RESET && !trdma_qp_is_ud(qp)) {
		spin_lock_irqsave(&qp->lock, flags);
		qp->state = IB_QPS_RESET;
		spin_unlock_irqrestore(&qp->lock, flags);
		trdma_cm_detach_locked(qp);
	}

	if (trdma_qp_is_ud(qp) && cur != next)
		rv = trdma_ud_set_state(qp, cur, next);
	else
		rv = trdma_qp_set_state(qp, cur, next);
	if (rv)
		goto out;

	if (trdma_qp_is_ud(qp)) {
		/* On an SRQ: IB_EVENT_QP_LAST_WQE_REACHED. */
		if (cur != next && next == IB_QPS_ERR)
			trdma_qp_rx_stopped(qp);
		goto kick;
	}
	if (cur != next && next == IB_QPS_RTR)
		trdma_cm_qp_rtr(qp);
	if (cur != next && next == IB_QPS_RTS)
		trdma_cm_qp_rts(qp);
	if (cur != next && next == IB_QPS_ERR)
		trdma_cm_detach_locked(qp);
	if (mask & (IB_QP_TIMEOUT | IB_QP_RETRY_CNT))
		trdma_cm_set_timeout(qp);
kick:
	/* WQEs posted before RTS are taken in now. */
	if (next == IB_QPS_RTS)
		trdma_sq_kick(qp, false);
out:
	mutex_unlock(&qp->state_mutex);
	return rv;
}

int trdma_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		   struct ib_qp_init_attr *init)
{
	struct trdma_qp *qp = to_tqp(ibqp);

	mutex_lock(&qp->state_mutex);
	*attr = qp->attr;
	attr->qp_state = READ_ONCE(qp->state);
	attr->cur_qp_state = attr->qp_state;
	attr->cap = qp->cap;
	attr->ah_attr.grh.sgid_attr = NULL;
	mutex_unlock(&qp->state_mutex);

	memset(init, 0, sizeof(*init));
	init->qp_type = qp->type;
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->srq = ibqp->srq;
	init->cap = qp->cap;
	init->sq_sig_type = qp->sq_sig_all ? IB_SIGNAL_ALL_WR :
					     IB_SIGNAL_REQ_WR;
	return 0;
}

/* Writes a kernel consumer's send WR into the SQ ring. */
static int trdma_sqe_from_wr(struct trdma_qp *qp, struct trdma_sqe *sqe,
			     const struct ib_send_wr *wr)
{
	size_t room = (1UL << qp->sq.slot_shift) - sizeof(*sqe);
	int i;

	memset(sqe, 0, sizeof(*sqe));
	sqe->wr_id = wr->wr_id;
	sqe->opcode = wr->opcode;
	if (wr->send_flags & IB_SEND_SIGNALED || qp->sq_sig_all)
		sqe->flags |= TRDMA_WQE_SIGNALED;
	if (wr->send_flags & IB_SEND_SOLICITED)
		sqe->flags |= TRDMA_WQE_SOLICITED;
	if (wr->send_flags & IB_SEND_FENCE)
		sqe->flags |= TRDMA_WQE_FENCE;
	if (wr->opcode == IB_WR_SEND_WITH_IMM ||
	    wr->opcode == IB_WR_RDMA_WRITE_WITH_IMM)
		sqe->imm_data = (__force u32)wr->ex.imm_data;
	if (wr->opcode == IB_WR_SEND_WITH_INV ||
	    wr->opcode == IB_WR_LOCAL_INV)
		sqe->imm_data = wr->ex.invalidate_rkey;
	if (wr->opcode == IB_WR_REG_MR) {
		const struct ib_reg_wr *reg = reg_wr(wr);

		BUILD_BUG_ON(IB_WR_REG_MR != TRDMA_SQE_REG_MR);
		/* The key must name the MR: only its low byte may change. */
		if (!reg->mr || reg->mr->device != qp->ibqp.device ||
		    reg->key >> TRDMA_KEY_BITS != to_tmr(reg->mr)->index)
			return -EINVAL;
		sqe->rkey = reg->key;
		sqe->imm_data = reg->access;
		return 0;
	}
	switch (wr->opcode) {
	case IB_WR_RDMA_WRITE:
	case IB_WR_RDMA_WRITE_WITH_IMM:
	case IB_WR_SEND:
	case IB_WR_SEND_WITH_IMM:
	case IB_WR_SEND_WITH_INV:
	case IB_WR_RDMA_READ:
	case IB_WR_ATOMIC_CMP_AND_SWP:
	case IB_WR_ATOMIC_FETCH_AND_ADD:
	case IB_WR_LOCAL_INV:
		break;
	default:
		/* No memory windows, LSO, masked atomics or integrity MRs. */
		return -EOPNOTSUPP;
	}
	/* Refused at post, as rxe refuses them. */
	if (trdma_qp_is_uc(qp) && wr->opcode != IB_WR_LOCAL_INV &&
	    !trdma_uc_opcode(wr->opcode))
		return -EINVAL;
	if (trdma_qp_is_ud(qp)) {
		if (!ud_wr(wr)->ah)
			return -EINVAL;
		sqe->ah = to_tah(ud_wr(wr)->ah)->ah_num;
		sqe->ud.remote_qpn = ud_wr(wr)->remote_qpn;
		sqe->ud.remote_qkey = ud_wr(wr)->remote_qkey;
	} else if (wr->opcode == IB_WR_RDMA_WRITE ||
		   wr->opcode == IB_WR_RDMA_WRITE_WITH_IMM ||
		   wr->opcode == IB_WR_RDMA_READ) {
		sqe->remote_addr = rdma_wr(wr)->remote_addr;
		sqe->rkey = rdma_wr(wr)->rkey;
	}

	if (wr->send_flags & IB_SEND_INLINE) {
		u8 *dst = (u8 *)sqe->sge;

		sqe->flags |= TRDMA_WQE_INLINE;
		for (i = 0; i < wr->num_sge; i++) {
			u32 len = wr->sg_list[i].length;

			if (sqe->inline_len + len > qp->cap.max_inline_data)
				return -EINVAL;
			memcpy(dst + sqe->inline_len,
			       (void *)(uintptr_t)wr->sg_list[i].addr, len);
			sqe->inline_len += len;
		}
		return 0;
	}
	if (wr->num_sge > qp->cap.max_send_sge ||
	    wr->num_sge * sizeof(struct trdma_sge) > room)
		return -EINVAL;
	sqe->num_sge = wr->num_sge;
	for (i = 0; i < wr->num_sge; i++) {
		sqe->sge[i].addr = wr->sg_list[i].addr;
		sqe->sge[i].length = wr->sg_list[i].length;
		sqe->sge[i].lkey = wr->sg_list[i].lkey;
	}
	return 0;
}

/*
 * post_send.  For a user QP this is the doorbell the provider rings (the
 * uverbs POST_SEND command with no WR): the WQEs are already in the ring.
 * A kernel consumer's WRs are written into the ring here first.
 */
int trdma_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		    const struct ib_send_wr **bad_wr)
{
	struct trdma_qp *qp = to_tqp(ibqp);
	unsigned long flags;
	int rv = 0;

	if (qp->is_user) {
		if (wr) {
			*bad_wr = wr;
			return -EINVAL;
		}
		trdma_count(qp->tdev, TRDMA_CNT_SQ_DOORBELLS, 1);
		trdma_sq_kick(qp, true);
		return 0;
	}

	spin_lock_irqsave(&qp->lock, flags);
	if (qp->state < IB_QPS_RTS) {
		spin_unlock_irqrestore(&qp->lock, flags);
		*bad_wr = wr;
		return -EINVAL;
	}
	for (; wr; wr = wr->next) {
		u32 prod = qp->sq.ctrl->prod;

		if (prod - qp->sq_retire >= qp->sq.num_slots) {
			rv = -ENOMEM;
			break;
		}
		rv = trdma_sqe_from_wr(qp, trdma_ring_slot(&qp->sq, prod), wr);
		if (rv)
			break;
		/* Publish the WQE before the index; pairs with intake. */
		smp_store_release(&qp->sq.ctrl->prod, prod + 1);
	}
	if (rv)
		*bad_wr = wr;
	spin_unlock_irqrestore(&qp->lock, flags);

	trdma_sq_kick(qp, false);
	return rv;
}

/* Writes a receive WR into an RQ or SRQ ring; the caller holds its lock. */
int trdma_rqe_post(struct trdma_ring *r, u32 cons, u32 max_sge,
		   const struct ib_recv_wr *wr)
{
	u32 prod = r->ctrl->prod;
	struct trdma_rqe *rqe;
	int i;

	if (prod - cons >= r->num_slots)
		return -ENOMEM;
	if (wr->num_sge > max_sge)
		return -EINVAL;
	rqe = trdma_ring_slot(r, prod);
	rqe->wr_id = wr->wr_id;
	rqe->num_sge = wr->num_sge;
	for (i = 0; i < wr->num_sge; i++) {
		rqe->sge[i].addr = wr->sg_list[i].addr;
		rqe->sge[i].length = wr->sg_list[i].length;
		rqe->sge[i].lkey = wr->sg_list[i].lkey;
	}
	/* Publish the WQE before the index; pairs with the consumer. */
	smp_store_release(&r->ctrl->prod, prod + 1);
	return 0;
}

/*
 * post_recv.  For a user QP this is the receive doorbell, rung without WRs
 * only while the QP is in ERR (TRDMA_RING_F_ERROR); a kernel consumer's WRs
 * are written into the ring here.
 */
int trdma_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		    const struct ib_recv_wr **bad_wr)
{
	struct trdma_qp *qp = to_tqp(ibqp);
	unsigned long flags;
	int rv = 0;

	if (ibqp->srq || (qp->is_user && wr)) {
		*bad_wr = wr;
		return -EINVAL;
	}

	spin_lock_irqsave(&qp->lock, flags);
	if (qp->is_user) {
		if (qp->state == IB_QPS_ERR)
			trdma_rq_flush(qp);
	} else if (qp->state == IB_QPS_RESET) {
		rv = -EINVAL;
	} else {
		for (; wr; wr = wr->next) {
			rv = trdma_rqe_post(&qp->rq, qp->rq_cons,
					    qp->cap.max_recv_sge, wr);
			if (rv)
				break;
		}
		if (qp->state == IB_QPS_ERR)
			trdma_rq_flush(qp);
	}
	if (rv)
		*bad_wr = wr;
	spin_unlock_irqrestore(&qp->lock, flags);
	return rv;
}
