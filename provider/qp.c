// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma provider: RC and UD queue pairs and the posting of work requests.
 *
 * post_send writes struct trdma_sqe slots into the SQ ring, publishes the
 * producer index with a store-release and rings the send doorbell, the
 * uverbs POST_SEND command without work requests, which makes the kernel
 * look at the ring again; no doorbell is needed while the ring's tx_active
 * says a kernel transmitter will look again anyway.  post_recv writes struct trdma_rqe slots into
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

	/* RC, UC and UD; the kernel would refuse anything else too. */
	if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC &&
	    attr->qp_type != IBV_QPT_UD) {
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
	qp->is_uc = attr->qp_type == IBV_QPT_UC;
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
	/* Nothing of a reset QP is left to poll. */
	if (!ret && state && attr->qp_state == IBV_QPS_RESET) {
		trdma_cq_clean(ibqp->send_cq, ibqp->qp_num);
		if (ibqp->recv_cq && ibqp->recv_cq != ibqp->send_cq)
			trdma_cq_clean(ibqp->recv_cq, ibqp->qp_num);
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
 * What a UC QP sends: SENDs and WRITEs (with immediate or not), and the
 * local work requests.  No READ, atomic or SEND with invalidate: refused
 * at post with EINVAL, as rxe refuses them.
 */
static int trdma_sqe_uc(const struct ibv_send_wr *wr)
{
	switch (wr->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_LOCAL_INV:
	case IBV_WR_BIND_MW:
		return 0;
	default:
		return EINVAL;
	}
}

/*
 * Writes WRs into the SQ ring from *wrp on while they fit and encode, and
 * publishes them.  *ret is 0 or the errno value of the WR left in *wrp.
 * Returns whether the kernel must be told: something was published and no
 * kernel transmitter is active to find it (trdma_usq_needs_doorbell()).
 * Under sq_lock.
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
		*ret = qp->is_uc ? trdma_sqe_uc(wr) : 0;
		if (!*ret)
			*ret = trdma_sqe_encode(trdma_uring_slot(sq, prod),
						&qp->sq_caps, wr,
						qp->sq_sig_all);
		if (!*ret && qp->is_ud)
			*ret = trdma_sqe_ud(trdma_uring_slot(sq, prod), wr);
		if (*ret)
			break;
		prod++;
	}
	*wrp = wr;
	if (prod == sq->idx)
		return false;

	/* In error the doorbell flushes what was posted. */
	return trdma_usq_needs_doorbell(sq, trdma_uring_publish_prod(sq, prod));
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
	bool ring = false;
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
		ring = trdma_sq_fill(qp, &wr, &ret);
		break;
	}
	pthread_spin_unlock(&qp->sq_lock);

	/* Outside the lock: other threads may go on posting meanwhile. */
	if (ring) {
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

/*
 * The ibv_wr_* API.
 *
 * wr_start takes sq_lock; every wr_<opcode> call starts a WQE in the next
 * free SQ slot (after sq.idx, so the kernel does not see it) by the same
 * encoding post_send uses (trdma_sqe_encode_hdr()), the wr_set_* calls
 * fill in its data (trdma_sqe_set_sges(), trdma_sqe_inline_*()).
 * wr_complete publishes them all with one producer index store and rings
 * the send doorbell once, exactly like ibv_post_send(); wr_abort publishes
 * nothing, so the kernel's view of the ring (prod and the slots before it)
 * stays as it was.  The wr_* calls return nothing: the first error is
 * kept in wr_err, the rest of the batch is ignored and wr_complete returns
 * the error without publishing any WQE of the batch.
 */
static inline struct trdma_qp *to_tqpx(struct ibv_qp_ex *qpx)
{
	return trdma_container_of(qpx, struct trdma_qp, ibv_qpx);
}

static void trdma_wr_fail(struct trdma_qp *qp, int err)
{
	if (!qp->wr_err)
		qp->wr_err = err;
}

/* A UD WQE needs an address: wr_set_ud_addr() before the next WQE. */
static void trdma_wr_check_cur(struct trdma_qp *qp)
{
	if (qp->wr_cur && qp->is_ud && !qp->wr_cur->ah)
		trdma_wr_fail(qp, EINVAL);
}

/* IBV_QP_EX_WITH_* of an opcode the ibv_wr_* API can start. */
static uint64_t trdma_wr_op_flag(enum ibv_wr_opcode opcode)
{
	switch (opcode) {
	case IBV_WR_SEND:
		return IBV_QP_EX_WITH_SEND;
	case IBV_WR_SEND_WITH_IMM:
		return IBV_QP_EX_WITH_SEND_WITH_IMM;
	case IBV_WR_RDMA_WRITE:
		return IBV_QP_EX_WITH_RDMA_WRITE;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
	case IBV_WR_RDMA_READ:
		return IBV_QP_EX_WITH_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	case IBV_WR_BIND_MW:
		return IBV_QP_EX_WITH_BIND_MW;
	case IBV_WR_LOCAL_INV:
		return IBV_QP_EX_WITH_LOCAL_INV;
	case IBV_WR_SEND_WITH_INV:
		return IBV_QP_EX_WITH_SEND_WITH_INV;
	case IBV_WR_ATOMIC_WRITE:
		return IBV_QP_EX_WITH_ATOMIC_WRITE;
	default:
		return 0;
	}
}

/*
 * Starts a WQE for wr (opcode and operands; wr_id and the flags are taken
 * from the ibv_qp_ex here) in the next free slot.
 */
static void trdma_wr_begin(struct trdma_qp *qp, struct ibv_send_wr *wr)
{
	struct trdma_uring *sq = &qp->sq;
	void *slot;
	int ret;

	trdma_wr_check_cur(qp);
	qp->wr_cur = NULL;
	if (qp->wr_err)
		return;
	/* Only the operations asked for at create time. */
	if (!(trdma_wr_op_flag(wr->opcode) & qp->send_ops)) {
		trdma_wr_fail(qp, EINVAL);
		return;
	}
	/* Acquire: the kernel is done with the slots before cons. */
	if (!trdma_ring_has_space(qp->wr_prod, trdma_uring_load_cons(sq),
				  sq->num_slots)) {
		trdma_wr_fail(qp, ENOMEM);
		return;
	}

	wr->wr_id = qp->ibv_qpx.wr_id;
	wr->send_flags = (int)qp->ibv_qpx.wr_flags;
	slot = trdma_uring_slot(sq, qp->wr_prod);
	ret = trdma_sqe_encode_hdr(slot, wr, qp->sq_sig_all);
	if (ret) {
		trdma_wr_fail(qp, ret);
		return;
	}
	qp->wr_cur = slot;
	qp->wr_prod++;
}

static void trdma_wr_send(struct ibv_qp_ex *qpx)
{
	struct ibv_send_wr wr = { .opcode = IBV_WR_SEND };

	trdma_wr_begin(to_tqpx(qpx), &wr);
}

static void trdma_wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm_data)
{
	struct ibv_send_wr wr = { .opcode = IBV_WR_SEND_WITH_IMM,
				  .imm_data = imm_data };

	trdma_wr_begin(to_tqpx(qpx), &wr);
}

static void trdma_wr_rdma(struct ibv_qp_ex *qpx, enum ibv_wr_opcode opcode,
			  uint32_t rkey, uint64_t remote_addr, __be32 imm)
{
	struct ibv_send_wr wr = { .opcode = opcode, .imm_data = imm };

	wr.wr.rdma.rkey = rkey;
	wr.wr.rdma.remote_addr = remote_addr;
	trdma_wr_begin(to_tqpx(qpx), &wr);
}

static void trdma_wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey,
				uint64_t remote_addr)
{
	trdma_wr_rdma(qpx, IBV_WR_RDMA_WRITE, rkey, remote_addr, 0);
}

static void trdma_wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey,
				    uint64_t remote_addr, __be32 imm_data)
{
	trdma_wr_rdma(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr,
		      imm_data);
}

static void trdma_wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey,
			       uint64_t remote_addr)
{
	trdma_wr_rdma(qpx, IBV_WR_RDMA_READ, rkey, remote_addr, 0);
}

static void trdma_wr_atomic(struct ibv_qp_ex *qpx, enum ibv_wr_opcode opcode,
			    uint32_t rkey, uint64_t remote_addr,
			    uint64_t compare_add, uint64_t swap)
{
	struct ibv_send_wr wr = { .opcode = opcode };

	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.remote_addr = remote_addr;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	trdma_wr_begin(to_tqpx(qpx), &wr);
}

static void trdma_wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey,
				    uint64_t remote_addr, uint64_t compare,
				    uint64_t swap)
{
	trdma_wr_atomic(qpx, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, remote_addr,
			compare, swap);
}

static void trdma_wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey,
				      uint64_t remote_addr, uint64_t add)
{
	trdma_wr_atomic(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, remote_addr,
			add, 0);
}

/* The operations trdma does not offer: wr_complete returns EOPNOTSUPP. */
static void trdma_wr_unsupported(struct ibv_qp_ex *qpx)
{
	struct trdma_qp *qp = to_tqpx(qpx);

	trdma_wr_check_cur(qp);
	qp->wr_cur = NULL;
	trdma_wr_fail(qp, EOPNOTSUPP);
}

static void trdma_wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw,
			     uint32_t rkey,
			     const struct ibv_mw_bind_info *bind_info)
{
	struct ibv_send_wr wr = { .opcode = IBV_WR_BIND_MW };

	if (!mw || !bind_info) {
		trdma_wr_check_cur(to_tqpx(qpx));
		to_tqpx(qpx)->wr_cur = NULL;
		trdma_wr_fail(to_tqpx(qpx), EINVAL);
		return;
	}
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info = *bind_info;
	trdma_wr_begin(to_tqpx(qpx), &wr);
}

static void trdma_wr_local_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	struct ibv_send_wr wr = { .opcode = IBV_WR_LOCAL_INV };

	wr.invalidate_rkey = rkey;
	trdma_wr_begin(to_tqpx(qpx), &wr);
}

static void trdma_wr_send_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	struct ibv_send_wr wr = { .opcode = IBV_WR_SEND_WITH_INV };

	wr.invalidate_rkey = rkey;
	trdma_wr_begin(to_tqpx(qpx), &wr);
}

static void trdma_wr_send_tso(struct ibv_qp_ex *qpx, void *hdr,
			      uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr;
	(void)hdr_sz;
	(void)mss;
	trdma_wr_unsupported(qpx);
}

/*
 * RDMA ATOMIC WRITE: the 8 bytes at atomic_wr, as they are, go into the
 * WQE's compare_add; the responder stores them with one aligned 64-bit
 * store.  No SGEs, no inline data.
 */
static void trdma_wr_atomic_write(struct ibv_qp_ex *qpx, uint32_t rkey,
				  uint64_t remote_addr,
				  const void *atomic_wr)
{
	struct ibv_send_wr wr = { .opcode = IBV_WR_ATOMIC_WRITE };
	struct trdma_qp *qp = to_tqpx(qpx);
	struct trdma_sqe *sqe;

	wr.wr.rdma.rkey = rkey;
	wr.wr.rdma.remote_addr = remote_addr;
	trdma_wr_begin(qp, &wr);
	sqe = qp->wr_cur;
	if (!sqe)
		return;
	if (!atomic_wr) {
		qp->wr_cur = NULL;
		trdma_wr_fail(qp, EINVAL);
		return;
	}
	memcpy(&sqe->compare_add, atomic_wr, sizeof(sqe->compare_add));
}

static void trdma_wr_set_xrc_srqn(struct ibv_qp_ex *qpx, uint32_t srqn)
{
	(void)srqn;
	trdma_wr_fail(to_tqpx(qpx), EOPNOTSUPP);
}

static void trdma_wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah,
				 uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct trdma_qp *qp = to_tqpx(qpx);

	if (qp->wr_err)
		return;
	if (!qp->wr_cur || !qp->is_ud || !ah) {
		trdma_wr_fail(qp, EINVAL);
		return;
	}
	qp->wr_cur->ah = to_tah(ah)->ah_num;
	qp->wr_cur->ud.remote_qpn = remote_qpn;
	qp->wr_cur->ud.remote_qkey = remote_qkey;
}

static void trdma_wr_set_sge_list(struct ibv_qp_ex *qpx, size_t num_sge,
				  const struct ibv_sge *sg_list)
{
	struct trdma_qp *qp = to_tqpx(qpx);

	if (qp->wr_err)
		return;
	if (!qp->wr_cur || num_sge > qp->sq_caps.max_sge) {
		trdma_wr_fail(qp, EINVAL);
		return;
	}
	trdma_sqe_set_sges(qp->wr_cur, sg_list, (uint32_t)num_sge);
}

static void trdma_wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey,
			     uint64_t addr, uint32_t length)
{
	struct ibv_sge sge = { .addr = addr, .length = length, .lkey = lkey };

	trdma_wr_set_sge_list(qpx, 1, &sge);
}

static void trdma_wr_set_inline_data_list(struct ibv_qp_ex *qpx,
					  size_t num_buf,
					  const struct ibv_data_buf *buf_list)
{
	struct trdma_qp *qp = to_tqpx(qpx);
	size_t i;

	if (qp->wr_err)
		return;
	if (!qp->wr_cur || !trdma_sqe_inline_ok(qp->wr_cur)) {
		trdma_wr_fail(qp, EINVAL);
		return;
	}
	trdma_sqe_inline_begin(qp->wr_cur);
	for (i = 0; i < num_buf; i++) {
		int ret = trdma_sqe_inline_add(qp->wr_cur, &qp->sq_caps,
					       buf_list[i].addr,
					       buf_list[i].length);

		if (ret) {
			trdma_wr_fail(qp, ret);
			return;
		}
	}
}

static void trdma_wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr,
				     size_t length)
{
	struct ibv_data_buf buf = { .addr = addr, .length = length };

	trdma_wr_set_inline_data_list(qpx, 1, &buf);
}

static void trdma_wr_start(struct ibv_qp_ex *qpx)
{
	struct trdma_qp *qp = to_tqpx(qpx);

	pthread_spin_lock(&qp->sq_lock);
	qp->wr_prod = qp->sq.idx;
	qp->wr_cur = NULL;
	qp->wr_err = 0;
	switch (qp->state) {
	case IBV_QPS_RESET:
	case IBV_QPS_INIT:
	case IBV_QPS_RTR:
		/* As ibv_post_send(): sends from RTS on. */
		qp->wr_err = EINVAL;
		break;
	default:
		break;
	}
}

static int trdma_wr_complete(struct ibv_qp_ex *qpx)
{
	struct trdma_qp *qp = to_tqpx(qpx);
	bool ring = false;
	int ret;

	trdma_wr_check_cur(qp);
	ret = qp->wr_err;
	if (!ret && qp->wr_prod != qp->sq.idx)
		/* As in trdma_sq_fill(). */
		ring = trdma_usq_needs_doorbell(&qp->sq,
				trdma_uring_publish_prod(&qp->sq, qp->wr_prod));
	qp->wr_cur = NULL;
	pthread_spin_unlock(&qp->sq_lock);

	/* The one doorbell, outside the lock as in trdma_post_send(). */
	if (ring) {
		struct ibv_send_wr *db_bad;

		ret = ibv_cmd_post_send(&qp->ibv_qp, NULL, &db_bad);
	}
	return ret;
}

static void trdma_wr_abort(struct ibv_qp_ex *qpx)
{
	struct trdma_qp *qp = to_tqpx(qpx);

	qp->wr_cur = NULL;
	pthread_spin_unlock(&qp->sq_lock);
}

/*
 * Where the running libibverbs keeps struct verbs_qp.comp_mask: right
 * after its struct ibv_qp_ex, which has grown by function pointers over
 * the releases (344 bytes on LP64 up to v43, 352 in v44, 360 from v45).
 * ibv_qp_to_qp_ex() reads it, so ask it: mark one candidate offset at a
 * time in a zeroed buffer and see which one makes it answer (a few pure
 * calls per create_qp_ex).  -1 if none (a libibverbs this provider does
 * not know): no ibv_wr_* then.
 */
#define TRDMA_QPX_ROOM (sizeof(struct ibv_qp_ex) + 64)
_Static_assert(offsetof(struct trdma_qp, verbs_qp_tail_room) ==
			       sizeof(struct ibv_qp_ex) &&
		       sizeof(((struct trdma_qp *)0)->verbs_qp_tail_room) == 64,
	       "the room for verbs_qp is this build's ibv_qp_ex + 64 bytes");
#define TRDMA_QPX_MIN_SIZE (offsetof(struct ibv_qp_ex, wr_abort) + \
			    sizeof(void (*)(void)))

static ptrdiff_t trdma_qpx_probe(void)
{
	ptrdiff_t found = -1, o;

	for (o = TRDMA_QPX_MIN_SIZE;
	     o + 16 <= (ptrdiff_t)TRDMA_QPX_ROOM && found < 0; o += 8) {
		uint64_t buf[TRDMA_QPX_ROOM / 8] = { 0 };

		*(uint32_t *)((char *)buf + o) = VERBS_QP_EX;
		if (ibv_qp_to_qp_ex((struct ibv_qp *)buf))
			found = o;
	}
	return found;
}

/* Per-opcode function pointers a future ibv_qp_ex adds past this build's. */
static void trdma_wr_future_op(struct ibv_qp_ex *qpx)
{
	trdma_wr_unsupported(qpx);
}

static void trdma_qp_init_wr_api(struct trdma_qp *qp, ptrdiff_t comp_off)
{
	struct ibv_qp_ex *qpx = &qp->ibv_qpx;
	char *base = (char *)qpx;
	ptrdiff_t o;

	qpx->wr_send = trdma_wr_send;
	qpx->wr_send_imm = trdma_wr_send_imm;
	qpx->wr_rdma_write = trdma_wr_rdma_write;
	qpx->wr_rdma_write_imm = trdma_wr_rdma_write_imm;
	qpx->wr_rdma_read = trdma_wr_rdma_read;
	qpx->wr_atomic_cmp_swp = trdma_wr_atomic_cmp_swp;
	qpx->wr_atomic_fetch_add = trdma_wr_atomic_fetch_add;
	qpx->wr_bind_mw = trdma_wr_bind_mw;
	qpx->wr_local_inv = trdma_wr_local_inv;
	qpx->wr_send_inv = trdma_wr_send_inv;
	qpx->wr_send_tso = trdma_wr_send_tso;
	qpx->wr_atomic_write = trdma_wr_atomic_write;
	qpx->wr_set_ud_addr = trdma_wr_set_ud_addr;
	qpx->wr_set_xrc_srqn = trdma_wr_set_xrc_srqn;
	qpx->wr_set_inline_data = trdma_wr_set_inline_data;
	qpx->wr_set_inline_data_list = trdma_wr_set_inline_data_list;
	qpx->wr_set_sge = trdma_wr_set_sge;
	qpx->wr_set_sge_list = trdma_wr_set_sge_list;
	qpx->wr_start = trdma_wr_start;
	qpx->wr_complete = trdma_wr_complete;
	qpx->wr_abort = trdma_wr_abort;

	/*
	 * A newer libibverbs: its extra opcode pointers come before its
	 * comp_mask and fail with EOPNOTSUPP.  An older one: its comp_mask
	 * lies over our last pointers (which it does not know of).
	 */
	for (o = sizeof(*qpx); o < comp_off; o += 8) {
		void (*fn)(struct ibv_qp_ex *) = trdma_wr_future_op;

		memcpy(base + o, &fn, sizeof(fn));
	}
	memset(base + comp_off, 0, TRDMA_QPX_ROOM - comp_off);
	*(uint32_t *)(base + comp_off) = VERBS_QP_EX;
}

/* The opcodes trdma.ko executes (kernel/trdma_slot.c), per QP type. */
#define TRDMA_UD_SEND_OPS (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM)
#define TRDMA_RC_SEND_OPS                                                      \
	(TRDMA_UD_SEND_OPS | IBV_QP_EX_WITH_RDMA_WRITE |                       \
	 IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |       \
	 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |                                   \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_BIND_MW |        \
	 IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV |             \
	 IBV_QP_EX_WITH_ATOMIC_WRITE)
#define TRDMA_UC_SEND_OPS                                                      \
	(TRDMA_UD_SEND_OPS | IBV_QP_EX_WITH_RDMA_WRITE |                       \
	 IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_BIND_MW |        \
	 IBV_QP_EX_WITH_LOCAL_INV)

/*
 * ibv_create_qp_ex(): a PD (required), send_ops_flags for the ibv_wr_*
 * API, and create_flags only when 0; anything else (XRC, RSS, TSO headers,
 * source QPN, ...) is refused with EOPNOTSUPP, as are send_ops_flags
 * the QP type does not execute (TSO everywhere; READ, atomics, atomic
 * write and send with invalidate on UC; all but SEND on UD).
 */
struct ibv_qp *trdma_create_qp_ex(struct ibv_context *ibctx,
				  struct ibv_qp_init_attr_ex *attr)
{
	const uint32_t known = IBV_QP_INIT_ATTR_PD |
			       IBV_QP_INIT_ATTR_CREATE_FLAGS |
			       IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	struct ibv_qp_init_attr legacy;
	ptrdiff_t comp_off = -1;
	struct ibv_qp *ibqp;
	uint64_t ops = 0;

	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd ||
	    attr->pd->context != ibctx) {
		errno = EINVAL;
		return NULL;
	}
	if ((attr->comp_mask & ~known) ||
	    ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
	     attr->create_flags)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		uint64_t can = attr->qp_type == IBV_QPT_UD ? TRDMA_UD_SEND_OPS :
			       attr->qp_type == IBV_QPT_UC ? TRDMA_UC_SEND_OPS :
							      TRDMA_RC_SEND_OPS;

		ops = attr->send_ops_flags;
		comp_off = trdma_qpx_probe();
		if (!ops || (ops & ~can) || comp_off < 0) {
			errno = EOPNOTSUPP;
			return NULL;
		}
	}

	/* The same leading members as struct ibv_qp_init_attr_ex. */
	memset(&legacy, 0, sizeof(legacy));
	legacy.qp_context = attr->qp_context;
	legacy.send_cq = attr->send_cq;
	legacy.recv_cq = attr->recv_cq;
	legacy.srq = attr->srq;
	legacy.cap = attr->cap;
	legacy.qp_type = attr->qp_type;
	legacy.sq_sig_all = attr->sq_sig_all;

	ibqp = trdma_create_qp(attr->pd, &legacy);
	if (!ibqp)
		return NULL;
	attr->cap = legacy.cap;
	if (ops) {
		struct trdma_qp *qp = to_tqp(ibqp);

		qp->send_ops = ops;
		trdma_qp_init_wr_api(qp, comp_off);
	}
	return ibqp;
}
