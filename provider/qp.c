// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma provider: RC and UD queue pairs and the posting of work requests.
 *
 * post_send writes struct trdma_sqe slots into the SQ ring, publishes the
 * producer index with a store-release and rings the send doorbell, the
 * uverbs POST_SEND command without work requests, which makes the kernel
 * look at the ring again.  post_recv writes struct trdma_rqe slots into
 * the RQ ring; the kernel takes them as messages arrive, so no system call
 * is needed, except while the QP is in the error state
 * (TRDMA_RING_F_ERROR): then the receive doorbell (POST_RECV without work
 * requests) makes the kernel flush what was posted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "trdma.h"

static int trdma_qp_map_rings(struct trdma_qp *qp, struct ibv_context *ibctx,
			      const struct trdma_create_qp_resp *d)
{
	int ret;

	ret = trdma_ring_mmap(ibctx, &qp->sq, d->sq_mmap_key, d->sq_slots,
			      d->sq_wqe_shift);
	if (ret || qp->has_srq)
		return ret;

	ret = trdma_ring_mmap(ibctx, &qp->rq, d->rq_mmap_key, d->rq_slots,
			      d->rq_wqe_shift);
	if (ret)
		trdma_ring_munmap(&qp->sq);
	return ret;
}

/*
 * Checks the rings a CREATE_QP response describes against the capacities
 * granted in the core response (already copied into *cap by libibverbs):
 * every granted WR must have a slot and every slot must hold a WR with the
 * granted SGEs and inline data.
 */
static int trdma_qp_check_resp(struct trdma_qp *qp,
			       const struct ibv_qp_cap *cap,
			       const struct trdma_create_qp_resp *d)
{
	int ret;

	if (d->max_inline_data != cap->max_inline_data ||
	    cap->max_send_wr > d->sq_slots)
		return EPROTO;
	ret = trdma_sq_caps_init(&qp->sq_caps, d->sq_slots, d->sq_wqe_shift,
				 cap->max_send_sge, cap->max_inline_data);
	if (ret || qp->has_srq)
		return ret;

	if (cap->max_recv_wr > d->rq_slots)
		return EPROTO;
	return trdma_rq_geometry_check(d->rq_slots, d->rq_wqe_shift,
				       cap->max_recv_sge);
}

struct ibv_qp *trdma_create_qp(struct ibv_pd *pd,
			       struct ibv_qp_init_attr *attr)
{
	struct trdma_cmd_create_qp_resp resp;
	struct ibv_create_qp cmd;
	struct trdma_qp *qp;
	int ret;

	/* RC and UD; the kernel would refuse anything else too. */
	if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UD) {
		errno = EOPNOTSUPP;
		return NULL;
	}

	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	ret = pthread_spin_init(&qp->sq_lock, PTHREAD_PROCESS_PRIVATE);
	if (ret)
		goto err_free;
	ret = pthread_spin_init(&qp->rq_lock, PTHREAD_PROCESS_PRIVATE);
	if (ret)
		goto err_sq_lock;

	memset(&cmd, 0, sizeof(cmd));
	memset(&resp, 0, sizeof(resp));
	/* On success attr->cap holds the capacities the kernel granted. */
	ret = ibv_cmd_create_qp(pd, &qp->ibv_qp, attr, &cmd, sizeof(cmd),
				&resp.ibv_resp, sizeof(resp));
	if (ret)
		goto err_rq_lock;

	qp->state = IBV_QPS_RESET;
	qp->sq_sig_all = attr->sq_sig_all;
	qp->has_srq = attr->srq != NULL;
	qp->is_ud = attr->qp_type == IBV_QPT_UD;
	qp->max_recv_sge = attr->cap.max_recv_sge;

	ret = trdma_qp_check_resp(qp, &attr->cap, &resp.drv_payload);
	if (ret)
		goto err_destroy;
	ret = trdma_qp_map_rings(qp, pd->context, &resp.drv_payload);
	if (ret)
		goto err_destroy;
	return &qp->ibv_qp;

err_destroy:
	ibv_cmd_destroy_qp(&qp->ibv_qp);
err_rq_lock:
	pthread_spin_destroy(&qp->rq_lock);
err_sq_lock:
	pthread_spin_destroy(&qp->sq_lock);
err_free:
	free(qp);
	errno = ret;
	return NULL;
}

/*
 * attr_mask only selects what to report, and the kernel reports every
 * attribute whatever the mask.  ibv_cmd_query_qp() refuses the bits from
 * IBV_QP_RATE_LIMIT up with EOPNOTSUPP (they would need the extended
 * command), which would fail a query of "everything" (~0); trdma has no
 * rate limit to report, so those bits are answered here: rate_limit 0.
 */
int trdma_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
		   int attr_mask, struct ibv_qp_init_attr *init_attr)
{
	struct ibv_query_qp cmd;
	int ret;

	memset(&cmd, 0, sizeof(cmd));
	ret = ibv_cmd_query_qp(ibqp, attr, attr_mask & (IBV_QP_RATE_LIMIT - 1),
			       init_attr, &cmd, sizeof(cmd));
	if (!ret && attr_mask & IBV_QP_RATE_LIMIT)
		attr->rate_limit = 0;
	return ret;
}

/*
 * A state change is made with both queues locked, so no post runs against
 * a state or ring indices that are about to change.  On a transition to
 * RESET the kernel zeroes both rings' prod and cons (and kflags); the
 * provider's producer indices restart at 0 with them.
 */
int trdma_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
		    int attr_mask)
{
	struct trdma_qp *qp = to_tqp(ibqp);
	bool state = attr_mask & IBV_QP_STATE;
	struct ibv_modify_qp cmd;
	int ret;

	memset(&cmd, 0, sizeof(cmd));
	if (state) {
		pthread_spin_lock(&qp->sq_lock);
		pthread_spin_lock(&qp->rq_lock);
	}

	ret = ibv_cmd_modify_qp(ibqp, attr, attr_mask, &cmd, sizeof(cmd));
	if (!ret && state) {
		qp->state = attr->qp_state;
		if (attr->qp_state == IBV_QPS_RESET) {
			qp->sq.idx = 0;
			qp->rq.idx = 0;
		}
	}

	if (state) {
		pthread_spin_unlock(&qp->rq_lock);
		pthread_spin_unlock(&qp->sq_lock);
	}
	return ret;
}

int trdma_destroy_qp(struct ibv_qp *ibqp)
{
	struct trdma_qp *qp = to_tqp(ibqp);
	int ret;

	ret = ibv_cmd_destroy_qp(ibqp);
	if (ret)
		return ret;
	trdma_ring_munmap(&qp->rq);
	trdma_ring_munmap(&qp->sq);
	pthread_spin_destroy(&qp->rq_lock);
	pthread_spin_destroy(&qp->sq_lock);
	free(qp);
	return 0;
}

/* A UD send: SEND or SEND_WITH_IMM to the address an AH names. */
static int trdma_sqe_ud(struct trdma_sqe *sqe, const struct ibv_send_wr *wr)
{
	if ((wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) ||
	    !wr->wr.ud.ah)
		return EINVAL;
	sqe->ah = to_tah(wr->wr.ud.ah)->ah_num;
	sqe->ud.remote_qpn = wr->wr.ud.remote_qpn;
	sqe->ud.remote_qkey = wr->wr.ud.remote_qkey;
	return 0;
}

/*
 * Writes WRs into the SQ ring from *wrp on while they fit and encode, and
 * publishes them.  *ret is 0 or the errno value of the WR left in *wrp.
 * Returns whether anything was published.  Under sq_lock.
 */
static bool trdma_sq_fill(struct trdma_qp *qp, struct ibv_send_wr **wrp,
			  int *ret)
{
	struct trdma_uring *sq = &qp->sq;
	struct ibv_send_wr *wr = *wrp;
	uint32_t prod = sq->idx;
	uint32_t cons = trdma_uring_load_cons(sq);

	*ret = 0;
	for (; wr; wr = wr->next) {
		/* Acquire: the kernel is done with the slots before cons. */
		if (!trdma_ring_has_space(prod, cons, sq->num_slots)) {
			cons = trdma_uring_load_cons(sq);
			if (!trdma_ring_has_space(prod, cons, sq->num_slots)) {
				*ret = ENOMEM;
				break;
			}
		}
		*ret = trdma_sqe_encode(trdma_uring_slot(sq, prod),
					&qp->sq_caps, wr, qp->sq_sig_all);
		if (!*ret && qp->is_ud)
			*ret = trdma_sqe_ud(trdma_uring_slot(sq, prod), wr);
		if (*ret)
			break;
		prod++;
	}
	*wrp = wr;
	if (prod == sq->idx)
		return false;

	/*
	 * kflags is of no use here: the send doorbell is rung after every
	 * post, and the kernel flushes on it while the QP is in error.
	 */
	trdma_uring_publish_prod(sq, prod);
	return true;
}

/*
 * If the doorbell fails, the WQEs already published stay in the ring (the
 * next doorbell or modify_qp to RTS picks them up); the error is returned
 * with *bad_wr at the first WR not written, NULL if all were.
 */
int trdma_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		    struct ibv_send_wr **bad_wr)
{
	struct trdma_qp *qp = to_tqp(ibqp);
	bool posted = false;
	int ret;

	pthread_spin_lock(&qp->sq_lock);
	switch (qp->state) {
	case IBV_QPS_RESET:
	case IBV_QPS_INIT:
	case IBV_QPS_RTR:
		/* Sends are posted from RTS on (and flushed in ERR). */
		ret = EINVAL;
		break;
	default:
		posted = trdma_sq_fill(qp, &wr, &ret);
		break;
	}
	pthread_spin_unlock(&qp->sq_lock);

	/* Outside the lock: other threads may go on posting meanwhile. */
	if (posted) {
		struct ibv_send_wr *db_bad;
		int db = ibv_cmd_post_send(ibqp, NULL, &db_bad);

		if (db && !ret)
			ret = db;
	}
	if (ret)
		*bad_wr = wr;
	return ret;
}

/*
 * Writes receive WRs into an RQ or SRQ ring from *wrp on while they fit
 * and encode, and publishes them; *kflags is the ring's kflags read after
 * publishing (0 if nothing was written).  Returns 0 or the errno value of
 * the WR left in *wrp.  Under the queue's lock.
 */
int trdma_recv_fill(struct trdma_uring *r, uint32_t max_sge,
		    struct ibv_recv_wr **wrp, uint32_t *kflags)
{
	struct ibv_recv_wr *wr = *wrp;
	uint32_t prod = r->idx;
	uint32_t cons = trdma_uring_load_cons(r);
	int ret = 0;

	for (; wr; wr = wr->next) {
		/* Acquire: the kernel is done with the slots before cons. */
		if (!trdma_ring_has_space(prod, cons, r->num_slots)) {
			cons = trdma_uring_load_cons(r);
			if (!trdma_ring_has_space(prod, cons, r->num_slots)) {
				ret = ENOMEM;
				break;
			}
		}
		ret = trdma_rqe_encode(trdma_uring_slot(r, prod), max_sge, wr);
		if (ret)
			break;
		prod++;
	}

	*kflags = 0;
	if (prod != r->idx)
		*kflags = trdma_uring_publish_prod(r, prod);
	*wrp = wr;
	return ret;
}

int trdma_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		    struct ibv_recv_wr **bad_wr)
{
	struct trdma_qp *qp = to_tqp(ibqp);
	uint32_t kflags = 0;
	int ret;

	/* Receives of a QP with an SRQ go to the SRQ. */
	if (qp->has_srq) {
		*bad_wr = wr;
		return EINVAL;
	}

	pthread_spin_lock(&qp->rq_lock);
	if (qp->state == IBV_QPS_RESET)
		ret = EINVAL;
	else
		ret = trdma_recv_fill(&qp->rq, qp->max_recv_sge, &wr, &kflags);
	pthread_spin_unlock(&qp->rq_lock);

	/*
	 * In the error state the kernel takes no more receives: the doorbell
	 * has it flush the new ones.  trdma_recv_fill() read kflags after a
	 * full barrier behind the new prod, so either the kernel's flush on
	 * entering the error state saw them or the flag is seen here.
	 */
	if (kflags & TRDMA_RING_F_ERROR) {
		struct ibv_recv_wr *db_bad;
		int db = ibv_cmd_post_recv(ibqp, NULL, &db_bad);

		if (db && !ret)
			ret = db;
	}
	if (ret)
		*bad_wr = wr;
	return ret;
}
