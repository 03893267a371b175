// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma provider: completion queues.
 *
 * The kernel writes struct trdma_cqe slots into the CQ ring and publishes
 * its producer index with a store-release; poll_cq reads them without a
 * system call and hands the slots back by publishing the consumer index.
 * ibv_create_cq_ex() CQs are the same CQs with the ibv_start_poll()
 * interface as well (below); ibv_poll_cq() works on them too.
 * Arming (req_notify_cq) is a system call; completion channels,
 * ibv_get_cq_event() and ibv_ack_cq_events() are libibverbs' own (the
 * cq_event hook has nothing to do for trdma and stays libibverbs' no-op).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "trdma.h"

/* log2(sizeof(struct trdma_cqe)): the CQ ring's slot size. */
#define TRDMA_CQE_SHIFT 5
_Static_assert(sizeof(struct trdma_cqe) == 1U << TRDMA_CQE_SHIFT,
	       "CQ slots are exactly one struct trdma_cqe");

/*
 * Maps the CQ ring the kernel described (key, num_slots) into r once its
 * geometry checks out and it holds every CQE the CQ was granted (cqe, at
 * least min_cqe).  Returns 0 or an errno value (EPROTO: a description no
 * trdma.ko gives).
 */
static int trdma_cq_ring_map(struct ibv_context *ibctx, struct trdma_uring *r,
			     uint64_t key, uint32_t num_slots, int cqe,
			     int min_cqe)
{
	if (!trdma_ring_geometry_ok(num_slots, TRDMA_CQE_SHIFT,
				    sizeof(struct trdma_cqe)) ||
	    cqe < min_cqe || (uint32_t)cqe > num_slots)
		return EPROTO;
	return trdma_ring_mmap(ibctx, r, key, num_slots, TRDMA_CQE_SHIFT);
}

static struct trdma_cq *trdma_cq_alloc(struct ibv_context *ibctx, int cqe,
				       struct ibv_comp_channel *channel,
				       int comp_vector)
{
	struct trdma_cmd_create_cq_resp resp;
	struct ibv_create_cq cmd;
	struct trdma_cq *cq;
	int ret;

	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return NULL;
	ret = pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	if (ret)
		goto err_free;

	memset(&cmd, 0, sizeof(cmd));
	memset(&resp, 0, sizeof(resp));
	ret = ibv_cmd_create_cq(ibctx, cqe, channel, comp_vector, &cq->ibv_cq,
				&cmd, sizeof(cmd), &resp.ibv_resp,
				sizeof(resp));
	if (ret)
		goto err_lock;

	ret = trdma_cq_ring_map(ibctx, &cq->ring, resp.drv_payload.mmap_key,
				resp.drv_payload.num_slots, cq->ibv_cq.cqe, 0);
	if (ret)
		goto err_destroy;
	return cq;

err_destroy:
	ibv_cmd_destroy_cq(&cq->ibv_cq);
err_lock:
	pthread_spin_destroy(&cq->lock);
err_free:
	free(cq);
	errno = ret;
	return NULL;
}

struct ibv_cq *trdma_create_cq(struct ibv_context *ibctx, int cqe,
			       struct ibv_comp_channel *channel,
			       int comp_vector)
{
	struct trdma_cq *cq = trdma_cq_alloc(ibctx, cqe, channel, comp_vector);

	return cq ? &cq->ibv_cq : NULL;
}

/*
 * How many CQEs are ready from cons on, in *avail (acquire: the CQEs up to
 * the producer index are written).  Returns 0, EIO when the CQ lost its
 * ring in a failed trdma_resize_cq(), or EPROTO when the kernel claims
 * more CQEs than the ring has slots.  Called under cq->lock.
 */
static int trdma_cq_ready(struct trdma_cq *cq, uint32_t cons, uint32_t *avail)
{
	struct trdma_uring *r = &cq->ring;

	if (!r->map)
		return EIO;
	*avail = trdma_ring_count(trdma_uring_load_prod(r), cons);
	return *avail > r->num_slots ? EPROTO : 0;
}

/*
 * The extended CQ: the same ring, read through ibv_start_poll(),
 * ibv_next_poll(), ibv_end_poll() and the read_* getters, none of which
 * makes a system call.  start_poll takes the CQ's lock and copies the
 * first CQE out of the ring, next_poll copies the next one, end_poll hands
 * the slots read back to the kernel (publishes the consumer index) and
 * drops the lock.  When start_poll finds nothing (ENOENT) it holds no lock
 * and the caller must not call end_poll.
 */
static int trdma_cq_ex_take(struct trdma_cq *cq)
{
	uint32_t avail;
	int ret;

	ret = trdma_cq_ready(cq, cq->poll_cons, &avail);
	if (ret)
		return ret;
	if (!avail)
		return ENOENT;

	/* One copy of the slot; the getters read the copy. */
	memcpy(&cq->cur, trdma_uring_slot(&cq->ring, cq->poll_cons),
	       sizeof(cq->cur));
	cq->poll_cons++;
	cq->ibv_cq_ex.wr_id = cq->cur.wr_id;
	cq->ibv_cq_ex.status = (enum ibv_wc_status)cq->cur.status;
	return 0;
}

static inline struct trdma_cq *to_tcq_ex(struct ibv_cq_ex *ibcq)
{
	return trdma_container_of(ibcq, struct trdma_cq, ibv_cq_ex);
}

/*
 * Whether an empty poll gives up the CPU (sched_yield()): on a host with
 * one CPU online, where the kernel's transmit worker (tx_spread is off
 * there, trdma_tx.c) and receive softirq, which make the completions a
 * busy poller waits for, need the CPU it holds; the scheduler would give
 * it them only at its next tick or wake-up.  Across two lab guests of one
 * vCPU each this took perftest's 64 B message rate from 7.6-8.5 to
 * 11.0-15.7 thousand/s (docs/performance.md).  With more CPUs the worker
 * runs on another, and polling never enters the kernel.  env, the value
 * of TRDMA_POLL_YIELD, decides where it is "0" or "1".
 */
bool trdma_poll_yield_default(const char *env, long online_cpus)
{
	if (env && !strcmp(env, "0"))
		return false;
	if (env && !strcmp(env, "1"))
		return true;
	return online_cpus == 1;
}

static void trdma_poll_empty(struct trdma_cq *cq)
{
	if (to_tctx(cq->ibv_cq.context)->poll_yield)
		sched_yield();
}

static int trdma_start_poll(struct ibv_cq_ex *ibcq,
			    struct ibv_poll_cq_attr *attr)
{
	struct trdma_cq *cq = to_tcq_ex(ibcq);
	int ret;

	if (attr->comp_mask)
		return EINVAL;
	pthread_spin_lock(&cq->lock);
	cq->poll_cons = cq->ring.idx;
	ret = trdma_cq_ex_take(cq);
	if (ret)
		pthread_spin_unlock(&cq->lock);
	if (ret == ENOENT)
		trdma_poll_empty(cq);
	return ret;
}

static int trdma_next_poll(struct ibv_cq_ex *ibcq)
{
	return trdma_cq_ex_take(to_tcq_ex(ibcq));
}

static void trdma_end_poll(struct ibv_cq_ex *ibcq)
{
	struct trdma_cq *cq = to_tcq_ex(ibcq);

	/* Release: done reading the slots before the kernel reuses them. */
	if (cq->poll_cons != cq->ring.idx)
		trdma_uring_publish_cons(&cq->ring, cq->poll_cons);
	pthread_spin_unlock(&cq->lock);
}

static enum ibv_wc_opcode trdma_read_opcode(struct ibv_cq_ex *ibcq)
{
	return (enum ibv_wc_opcode)to_tcq_ex(ibcq)->cur.opcode;
}

static uint32_t trdma_read_vendor_err(struct ibv_cq_ex *ibcq)
{
	return to_tcq_ex(ibcq)->cur.vendor_err;
}

static uint32_t trdma_read_byte_len(struct ibv_cq_ex *ibcq)
{
	return to_tcq_ex(ibcq)->cur.byte_len;
}

/* ImmDt in network order, or the invalidated rkey (IBV_WC_WITH_INV). */
static __be32 trdma_read_imm_data(struct ibv_cq_ex *ibcq)
{
	return (__be32)to_tcq_ex(ibcq)->cur.imm_data;
}

static uint32_t trdma_read_qp_num(struct ibv_cq_ex *ibcq)
{
	return to_tcq_ex(ibcq)->cur.qp_num;
}

static uint32_t trdma_read_src_qp(struct ibv_cq_ex *ibcq)
{
	return to_tcq_ex(ibcq)->cur.src_qp;
}

static unsigned int trdma_read_wc_flags(struct ibv_cq_ex *ibcq)
{
	return to_tcq_ex(ibcq)->cur.wc_flags & TRDMA_CQE_F_IBV_MASK;
}

/* No LIDs over Ethernet: 0, as ibv_poll_cq() reports. */
static uint32_t trdma_read_slid(struct ibv_cq_ex *ibcq)
{
	(void)ibcq;
	return 0;
}

static uint8_t trdma_read_sl(struct ibv_cq_ex *ibcq)
{
	return trdma_cqe_sl(to_tcq_ex(ibcq)->cur.wc_flags);
}

static uint8_t trdma_read_dlid_path_bits(struct ibv_cq_ex *ibcq)
{
	(void)ibcq;
	return 0;
}

/* The wc_flags of ibv_create_cq_ex() trdma can answer. */
#define TRDMA_CQ_EX_WC_FLAGS                                                   \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | \
	 IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |     \
	 IBV_WC_EX_WITH_DLID_PATH_BITS)

/*
 * Refused with EOPNOTSUPP: completion timestamps (trdma has no clock in
 * its CQEs), cvlan, flow tag and tag matching in wc_flags; a parent domain
 * (IBV_CQ_INIT_ATTR_MASK_PD); IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN.
 * IBV_CREATE_CQ_ATTR_SINGLE_THREADED is a hint: the lock stays.
 */
struct ibv_cq_ex *trdma_create_cq_ex(struct ibv_context *ibctx,
				     struct ibv_cq_init_attr_ex *attr)
{
	struct trdma_cq *cq;

	if ((attr->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS) ||
	    (attr->wc_flags & ~(uint64_t)TRDMA_CQ_EX_WC_FLAGS) ||
	    ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	     (attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (attr->cqe > INT32_MAX) {
		errno = EINVAL;
		return NULL;
	}

	cq = trdma_cq_alloc(ibctx, (int)attr->cqe, attr->channel,
			    (int)attr->comp_vector);
	if (!cq)
		return NULL;
	/* What ibv_create_cq() does after ops.create_cq. */
	verbs_init_cq(&cq->ibv_cq, ibctx, attr->channel, attr->cq_context);

	cq->ibv_cq_ex.start_poll = trdma_start_poll;
	cq->ibv_cq_ex.next_poll = trdma_next_poll;
	cq->ibv_cq_ex.end_poll = trdma_end_poll;
	cq->ibv_cq_ex.read_opcode = trdma_read_opcode;
	cq->ibv_cq_ex.read_vendor_err = trdma_read_vendor_err;
	cq->ibv_cq_ex.read_byte_len = trdma_read_byte_len;
	cq->ibv_cq_ex.read_imm_data = trdma_read_imm_data;
	cq->ibv_cq_ex.read_qp_num = trdma_read_qp_num;
	cq->ibv_cq_ex.read_src_qp = trdma_read_src_qp;
	cq->ibv_cq_ex.read_wc_flags = trdma_read_wc_flags;
	cq->ibv_cq_ex.read_slid = trdma_read_slid;
	cq->ibv_cq_ex.read_sl = trdma_read_sl;
	cq->ibv_cq_ex.read_dlid_path_bits = trdma_read_dlid_path_bits;
	return &cq->ibv_cq_ex;
}

int trdma_poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc)
{
	struct trdma_cq *cq = to_tcq(ibcq);
	struct trdma_uring *r = &cq->ring;
	uint32_t cons, avail, n;
	int ret;

	if (num_entries <= 0)
		return 0;

	pthread_spin_lock(&cq->lock);
	cons = r->idx;
	ret = trdma_cq_ready(cq, cons, &avail);
	if (ret) {
		pthread_spin_unlock(&cq->lock);
		errno = ret;
		return -1;
	}
	if (avail > (uint32_t)num_entries)
		avail = num_entries;

	for (n = 0; n < avail; n++) {
		struct trdma_cqe cqe;

		/* One copy of the slot; wc is filled from the copy. */
		memcpy(&cqe, trdma_uring_slot(r, cons + n), sizeof(cqe));
		trdma_cqe_to_wc(&cqe, &wc[n]);
	}
	/* Release: done reading the slots before the kernel reuses them. */
	if (n)
		trdma_uring_publish_cons(r, cons + n);
	pthread_spin_unlock(&cq->lock);
	if (!n)
		trdma_poll_empty(cq);
	return n;
}

/*
 * Removes the CQEs of QP qpn not polled yet (a QP moved to RESET reports
 * nothing more, as mlx4 and mlx5 do).  Under the CQ's lock, the CQEs of
 * other QPs in [cons, prod) move towards prod, keeping their order, and
 * the consumer index skips the slots freed; the kernel produces only from
 * prod on, so it never writes a slot this reads or moves.
 */
void trdma_cq_clean(struct ibv_cq *ibcq, uint32_t qpn)
{
	struct trdma_cq *cq = to_tcq(ibcq);
	struct trdma_uring *r = &cq->ring;
	uint32_t cons, avail, i, gone = 0;

	pthread_spin_lock(&cq->lock);
	cons = r->idx;
	if (trdma_cq_ready(cq, cons, &avail)) {
		/* Lost ring or a lying producer: polls report it. */
		pthread_spin_unlock(&cq->lock);
		return;
	}
	for (i = cons + avail; i != cons; i--) {
		struct trdma_cqe *cqe = trdma_uring_slot(r, i - 1);

		if (cqe->qp_num == qpn)
			gone++;
		else if (gone)
			memcpy(trdma_uring_slot(r, i - 1 + gone), cqe,
			       sizeof(*cqe));
	}
	if (gone)
		trdma_uring_publish_cons(r, cons + gone);
	pthread_spin_unlock(&cq->lock);
}

int trdma_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	return ibv_cmd_req_notify_cq(ibcq, solicited_only);
}

/*
 * The kernel moves the CQEs not polled yet into a new ring (from slot 0)
 * and returns its key; the lock keeps poll_cq off both rings meanwhile.
 * ibv_start_poll() .. ibv_end_poll() holds the same lock: resizing inside
 * it would deadlock, as the verbs forbid it anyway.
 */
int trdma_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct trdma_cq *cq = to_tcq(ibcq);
	struct trdma_cmd_resize_cq_resp resp;
	struct ibv_resize_cq cmd;
	struct trdma_uring ring;
	int old_cqe, ret;

	if (cqe <= 0)
		return EINVAL;

	memset(&cmd, 0, sizeof(cmd));
	memset(&resp, 0, sizeof(resp));
	pthread_spin_lock(&cq->lock);
	old_cqe = ibcq->cqe;
	ret = ibv_cmd_resize_cq(ibcq, cqe, &cmd, sizeof(cmd), &resp.ibv_resp,
				sizeof(resp));
	if (ret)
		goto out;

	ret = trdma_cq_ring_map(ibcq->context, &ring, resp.drv_payload.mmap_key,
				resp.drv_payload.num_slots, ibcq->cqe, cqe);
	if (ret)
		goto err_cqe;
	/*
	 * The kernel already produces into the new ring; the old one only
	 * held what was moved.
	 */
	trdma_ring_munmap(&cq->ring);
	cq->ring = ring;
	pthread_spin_unlock(&cq->lock);
	return 0;

err_cqe:
	/*
	 * The kernel swapped rings but this process cannot use the new one:
	 * nothing more can be polled from this CQ (poll fails with EIO)
	 * rather than read a ring the kernel has left.
	 */
	trdma_ring_munmap(&cq->ring);
	ibcq->cqe = old_cqe;
out:
	pthread_spin_unlock(&cq->lock);
	return ret;
}

int trdma_destroy_cq(struct ibv_cq *ibcq)
{
	struct trdma_cq *cq = to_tcq(ibcq);
	int ret;

	ret = ibv_cmd_destroy_cq(ibcq);
	if (ret)
		return ret;
	trdma_ring_munmap(&cq->ring);
	pthread_spin_destroy(&cq->lock);
	free(cq);
	return 0;
}
