// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: receive path.
 *
 * The QP's TCP socket calls trdma_rx_data_ready in softirq context; it
 * drains the socket with tcp_read_sock into trdma_rx_actor, which assembles
 * segment headers incrementally (a header may straddle skbs), decodes them
 * with trdma_wire_parse (trdma_wire.c) and copies payload straight from the
 * skb into registered memory.  Keys, addresses,
 * lengths and access rights are checked before a byte is written.  A
 * malformed stream stops the reader and moves the QP to error; a protection
 * error is answered with a NAK.  A UC QP answers nothing: a message it
 * cannot place is dropped and counted, and the QP goes on.
 *
 * ODP and dma-buf memory may not be present (or mapped) when bytes come,
 * and softirq cannot fault it in: a request's placement is answered with
 * an RNR NAK (the peer sends it again), while a READ response or atomic
 * ACK, which nobody can be asked to resend, stalls the receive path
 * (trdma_rx_stall()) until rx_stall_work has read on in process context,
 * faulting in as it places (trdma_rx_state.may_sleep).
 */
#include <linux/highmem.h>
#include <linux/skbuff.h>
#include <net/tcp.h>

#include "trdma.h"
#include "trdma_verbs.h"

/* Why a segment cannot be accepted. */
enum trdma_rx_err {
	TRDMA_RX_OK,
	TRDMA_RX_PROTO,		/* malformed: close the connection */
	TRDMA_RX_ACCESS,	/* NAK remote access error */
	TRDMA_RX_OPERR,		/* NAK remote operational error */
	TRDMA_RX_INVAL,		/* NAK invalid request */
	TRDMA_RX_RNR,		/* no receive WQE */
	TRDMA_RX_STALL,		/* a response's local page: stop, fault */
	TRDMA_RX_LOCAL,		/* a response refused locally: QP errs */
};

/* READs and atomics complete with their response, not with an ACK. */
static bool trdma_wqe_answered(u8 opcode)
{
	return opcode == IB_UVERBS_WR_RDMA_READ ||
	       opcode == IB_UVERBS_WR_ATOMIC_CMP_AND_SWP ||
	       opcode == IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD;
}

/*
 * Copies n bytes at skb offset off into [va, va + n) of mr; sleep: process
 * context (trdma_rx_state.may_sleep), where pages are faulted in.  0, or
 * for an ODP or dma-buf MR -EAGAIN (a page is being faulted in, the buffer
 * mapped) or -EFAULT.
 */
static int trdma_place(struct trdma_mr *mr, u64 va, struct sk_buff *skb,
		       u32 off, u32 n, bool sleep)
{
	while (n) {
		u32 pg_off, chunk;
		struct page *page = trdma_mr_page_get(mr, va, true, &pg_off,
						      sleep);
		void *dst;

		if (IS_ERR(page))
			return PTR_ERR(page);
		chunk = min_t(u32, n, PAGE_SIZE - pg_off);
		dst = kmap_local_page(page);
		skb_copy_bits(skb, off, dst + pg_off, chunk);
		kunmap_local(dst);
		flush_dcache_page(page);
		trdma_mr_page_put(mr, page, true);
		va += chunk;
		off += chunk;
		n -= chunk;
	}
	return 0;
}

/*
 * Places n bytes into a checked range of the MR a key names.  Returns 0,
 * -EACCES when the key, its PD, its rights or the range do not allow it
 * or its memory is gone, or -EAGAIN when an ODP page is being faulted in
 * (a dma-buf mapped).
 */
static int trdma_place_key(struct trdma_qp *qp, u32 key, u64 va, int access,
			   struct sk_buff *skb, u32 off, u32 n)
{
	struct trdma_mr *mr;
	int rv;

	if (!n)
		return 0;
	mr = trdma_rkey_get(qp, key, va, n, access);
	if (!mr)
		return -EACCES;
	rv = trdma_place(mr, va, skb, off, n, qp->rx.may_sleep);
	trdma_mr_put(mr);
	return rv == -EAGAIN ? rv : rv ? -EACCES : 0;
}

/* Copies len bytes from buf to [va, va + len) of the MR lkey names. */
static int trdma_place_buf(struct trdma_qp *qp, u32 lkey, u64 va,
			   const void *buf, u32 len)
{
	struct trdma_mr *mr = trdma_mr_get(qp->tdev, lkey);
	int rv;

	if (!mr)
		return -EACCES;
	rv = trdma_mr_check(mr, to_tpd(qp->ibqp.pd), va, len,
			    IB_ACCESS_LOCAL_WRITE);
	while (!rv && len) {
		u32 pg_off, n;
		struct page *page = trdma_mr_page_get(mr, va, true, &pg_off,
						      qp->rx.may_sleep);
		void *dst;

		if (IS_ERR(page)) {
			rv = PTR_ERR(page) == -EAGAIN ? -EAGAIN : -EACCES;
			break;
		}
		dst = kmap_local_page(page);
		n = min_t(u32, len, PAGE_SIZE - pg_off);
		memcpy(dst + pg_off, buf, n);
		kunmap_local(dst);
		trdma_mr_page_put(mr, page, true);
		buf += n;
		va += n;
		len -= n;
	}
	trdma_mr_put(mr);
	return rv;
}

/*
 * The MR holding the 8-byte target of an atomic (access
 * IB_ACCESS_REMOTE_ATOMIC) or an ATOMIC_WRITE (IB_ACCESS_REMOTE_WRITE) at
 * h->va, referenced in *mrp: the QP allows the access, the target is
 * aligned, the rkey allows the access to it.
 */
static enum trdma_rx_err trdma_rx_atomic_mr(struct trdma_qp *qp,
					    const struct trdma_wire_hdr *h,
					    int access, struct trdma_mr **mrp)
{
	if (!(qp->attr.qp_access_flags & access))
		return TRDMA_RX_ACCESS;
	if (h->va & (sizeof(u64) - 1))
		return TRDMA_RX_INVAL;
	*mrp = trdma_rkey_get(qp, h->rkey, h->va, sizeof(u64), access);
	return *mrp ? TRDMA_RX_OK : TRDMA_RX_ACCESS;
}

/*
 * Executes an atomic or an ATOMIC_WRITE on the responder's memory, atomic
 * with respect to the CPU's own atomics and to each other on the same 8
 * bytes.  COMPARE_SWAP and FETCH_ADD return the original value in *val;
 * ATOMIC_WRITE stores *val, its 8 bytes as they came, with one aligned
 * 64-bit store, so no one sees half of it.  The target is checked here
 * (again for an ATOMIC_WRITE: the MR may have gone since its header).
 */
static enum trdma_rx_err trdma_rx_atomic(struct trdma_qp *qp,
					 const struct trdma_wire_hdr *h,
					 u64 *val)
{
	bool write = h->opcode == TRDMA_OP_ATOMIC_WRITE;
	enum trdma_rx_err e;
	struct trdma_mr *mr;
	struct page *page;
	u32 pg_off;
	void *p, *t;

	e = trdma_rx_atomic_mr(qp, h, write ? IB_ACCESS_REMOTE_WRITE :
					      IB_ACCESS_REMOTE_ATOMIC, &mr);
	if (e)
		return e;
	page = trdma_mr_page_get(mr, h->va, true, &pg_off, qp->rx.may_sleep);
	if (IS_ERR(page)) {
		trdma_mr_put(mr);
		return PTR_ERR(page) == -EAGAIN ? TRDMA_RX_RNR : TRDMA_RX_ACCESS;
	}
	p = kmap_local_page(page);
	t = p + pg_off;
	if (write)
		atomic64_set(t, *val);
	else if (h->opcode == TRDMA_OP_COMPARE_SWAP)
		*val = cmpxchg64((u64 *)t, h->compare, h->swap_add);
	else
		*val = atomic64_fetch_add(h->swap_add, t);
	kunmap_local(p);
	trdma_mr_page_put(mr, page, true);
	trdma_mr_put(mr);
	return TRDMA_RX_OK;
}

/* Places n bytes at message offset msg_off into a scatter list. */
int trdma_place_sges(struct trdma_qp *qp, const struct trdma_sge *sge,
		     u32 num_sge, u32 msg_off, struct sk_buff *skb, u32 off,
		     u32 n)
{
	u32 i;

	for (i = 0; i < num_sge && n; i++) {
		u32 chunk;
		int rv;

		if (msg_off >= sge[i].length) {
			msg_off -= sge[i].length;
			continue;
		}
		chunk = min(n, sge[i].length - msg_off);
		rv = trdma_place_key(qp, sge[i].lkey, sge[i].addr + msg_off,
				     IB_ACCESS_LOCAL_WRITE, skb, off, chunk);
		if (rv)
			return rv;
		off += chunk;
		n -= chunk;
		msg_off = 0;
	}
	return n ? -EMSGSIZE : 0;
}

/* Places the n bytes of buf at the start of a scatter list. */
int trdma_place_sges_buf(struct trdma_qp *qp, const struct trdma_sge *sge,
			 u32 num_sge, const void *buf, u32 n)
{
	u32 i;

	for (i = 0; i < num_sge && n; i++) {
		u32 chunk = min(n, sge[i].length);
		int rv;

		if (!chunk)
			continue;
		rv = trdma_place_buf(qp, sge[i].lkey, sge[i].addr, buf, chunk);
		if (rv)
			return rv;
		buf += chunk;
		n -= chunk;
	}
	return n ? -EMSGSIZE : 0;
}

/*
 * Queues an ACK or NAK for the transmitter; req: the requester asked for it
 * (TRDMA_BTH_ACKREQ).  Under qp->lock.
 */
static void trdma_rx_queue_ack(struct trdma_qp *qp, u8 syndrome, u32 msn,
			       bool req)
{
	/* A NAK is never overwritten by a later plain ACK. */
	if (qp->ack_pending && qp->ack_syndrome != TRDMA_AETH_ACK)
		return;
	/* A new one: not held until trdma_tx_ack_soon() says so. */
	if (!qp->ack_pending)
		qp->ack_due_at = 0;
	qp->ack_req = req || syndrome != TRDMA_AETH_ACK ||
		      (qp->ack_pending && qp->ack_req);
	qp->ack_pending = true;
	qp->ack_syndrome = syndrome;
	qp->ack_msn = msn;
}

/*
 * Takes the next receive WQE of the QP's RQ or SRQ into *out.  Returns 1
 * when it took one, 0 when there is none, and -EIO when the producer index
 * claims more than the ring holds: then the QP is moved to ERR with
 * IB_EVENT_QP_FATAL (as for a corrupt SQ), and a corrupt SRQ raises
 * IB_EVENT_SRQ_ERR once; only the process that wrote the index suffers.
 * Each slot is read once.  *taken (if not NULL) is set under the RQ's lock,
 * so that trdma_rq_flush() sees the WQE taken.  Any context.
 */
int trdma_rqe_take(struct trdma_qp *qp, struct trdma_rqe_copy *out,
		   bool *taken)
{
	struct trdma_slot_limits lim = {};
	struct trdma_ring *ring;
	struct trdma_rqe *rqe;
	unsigned long flags;
	u32 *cons, prod, max_sge;
	spinlock_t *lock;	/* the ring's: the QP's or the SRQ's */
	struct trdma_srq *srq = NULL;
	bool limit = false, srq_err = false;
	int rv = 0;

	if (qp->ibqp.srq) {
		srq = to_tsrq(qp->ibqp.srq);
		ring = &srq->ring;
		cons = &srq->cons;
		lock = &srq->lock;
		max_sge = srq->max_sge;
	} else {
		ring = &qp->rq;
		cons = &qp->rq_cons;
		lock = &qp->lock;
		max_sge = qp->cap.max_recv_sge;
	}

	spin_lock_irqsave(lock, flags);
	/*
	 * A datagram that checked its QP's state before an error moved it to
	 * ERR takes nothing: the RQ (under qp->lock) is flushed.
	 */
	if (trdma_qp_is_ud(qp) && !trdma_state_connected(READ_ONCE(qp->state)))
		goto out;
	/* Slots up to prod are written; pairs with the producer's release. */
	prod = smp_load_acquire(&ring->ctrl->prod);
	if (prod == *cons)
		goto out;
	if (prod - *cons > ring->num_slots) {
		rv = -EIO;
		if (srq && !srq->corrupt) {
			srq->corrupt = true;
			srq_err = true;
		}
		goto out;
	}
	rqe = trdma_ring_slot(ring, *cons);
	lim.slot_size = 1U << ring->slot_shift;
	lim.max_sge = max_sge;
	out->wr_id = READ_ONCE(rqe->wr_id);
	out->num_sge = trdma_slot_rqe_num_sge(READ_ONCE(rqe->num_sge), &lim);
	memcpy(out->sge, rqe->sge, out->num_sge * sizeof(rqe->sge[0]));
	(*cons)++;
	/* Done with the slot before the producer may reuse it. */
	smp_store_release(&ring->ctrl->cons, *cons);
	if (taken)
		WRITE_ONCE(*taken, true);
	rv = 1;
	if (srq && srq->limit && prod - *cons < srq->limit) {
		srq->limit = 0;
		limit = true;
	}
out:
	spin_unlock_irqrestore(lock, flags);

	if ((limit || srq_err) && srq->ibsrq.event_handler) {
		struct ib_event ev = {
			.device = srq->ibsrq.device,
			.element.srq = &srq->ibsrq,
			.event = srq_err ? IB_EVENT_SRQ_ERR :
					   IB_EVENT_SRQ_LIMIT_REACHED,
		};

		srq->ibsrq.event_handler(&ev, srq->ibsrq.srq_context);
	}
	if (rv < 0) {
		ibdev_dbg(qp->ibqp.device, "QP %u: corrupt %s producer index\n",
			  qp->ibqp.qp_num, srq ? "SRQ" : "RQ");
		trdma_qp_error(qp, IB_EVENT_QP_FATAL, true);
	}
	return rv;
}

/*
 * The receive WQE of a new inbound request: TRDMA_RX_RNR when there is
 * none; a corrupt ring has taken the QP to ERR (TRDMA_RX_LOCAL: nothing
 * more is read).
 */
static enum trdma_rx_err trdma_rx_take_rqe(struct trdma_qp *qp)
{
	int rv = trdma_rqe_take(qp, &qp->rx.rqe, &qp->rx.req_has_rqe);

	if (rv > 0)
		return TRDMA_RX_OK;
	if (!rv)
		return TRDMA_RX_RNR;
	qp->rx.dead = true;
	return TRDMA_RX_LOCAL;
}

static void trdma_rx_complete_recv(struct trdma_qp *qp, enum ib_wc_status st,
				   enum ib_wc_opcode op, bool solicited)
{
	struct trdma_rx_state *rx = &qp->rx;
	struct trdma_cqe cqe = {
		.wr_id = rx->rqe.wr_id,
		.status = st,
		.opcode = op,
		.byte_len = op == IB_WC_RECV_RDMA_WITH_IMM ? rx->req_len :
							    rx->req_placed,
		.imm_data = rx->imm,
		.qp_num = qp->ibqp.qp_num,
		.src_qp = qp->attr.dest_qp_num,
		.wc_flags = (rx->has_imm ? TRDMA_CQE_F_WITH_IMM : 0) |
			    (rx->has_inv ? TRDMA_CQE_F_WITH_INV : 0),
	};

	trdma_cq_post(to_tcq(qp->ibqp.recv_cq), &cqe, solicited);
	rx->req_has_rqe = false;
}

/*
 * The connection is gone with a message half received: the receive WQE
 * taken for it (from the RQ or the SRQ, so no ring flush finds it) ends in
 * IB_WC_WR_FLUSH_ERR.  Only while no socket callback can run.
 */
void trdma_rx_flush(struct trdma_qp *qp)
{
	if (qp->rx.req_has_rqe)
		trdma_rx_complete_recv(qp, IB_WC_WR_FLUSH_ERR, IB_WC_RECV,
				       false);
}

/* The wait an RNR NAK timer code asks for (IBA table 45), in jiffies. */
static unsigned long trdma_rnr_delay(u8 code)
{
	static const u32 usecs[32] = {
		655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640,
		960, 1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480,
		30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680,
		491520,
	};

	return max(usecs_to_jiffies(usecs[code & 31]), 1UL);
}

/* Acknowledgements and NAKs for our requests, and READ completions. */
static void trdma_rx_acked(struct trdma_qp *qp, u32 msn, u8 syndrome)
{
	enum ib_wc_status st = IB_WC_SUCCESS;
	unsigned long flags;
	u32 i;

	switch (syndrome) {
	case TRDMA_AETH_ACK:
		break;
	case TRDMA_AETH_NAK_REM_ACCESS:
		st = IB_WC_REM_ACCESS_ERR;
		break;
	case TRDMA_AETH_NAK_REM_OP:
		st = IB_WC_REM_OP_ERR;
		break;
	default:
		if ((syndrome & 0xe0) != TRDMA_AETH_RNR_NAK) {
			st = IB_WC_REM_INV_REQ_ERR;
			break;
		}
		/* Everything before the refused request is acknowledged. */
		trdma_rx_acked(qp, msn - 1, TRDMA_AETH_ACK);
		spin_lock_irqsave(&qp->lock, flags);
		if (qp->rnr_left) {
			unsigned long delay = trdma_rnr_delay(syndrome & 0x1f);

			if (qp->rnr_left != 7)
				qp->rnr_left--;
			qp->rnr_rewind = true;
			qp->rnr_msn = msn;
			qp->rnr_until = jiffies + delay;
			spin_unlock_irqrestore(&qp->lock, flags);
			mod_delayed_work(trdma_wq, &qp->rnr_work, delay);
			return;
		}
		spin_unlock_irqrestore(&qp->lock, flags);
		st = IB_WC_RNR_RETRY_EXC_ERR;
		break;
	}

	/*
	 * Over loopback the answer can arrive while the transmitter is still
	 * finishing the request's segment, before sq_tx moved past it: look
	 * at every WQE whose transmission has started.
	 */
	spin_lock_irqsave(&qp->lock, flags);
	for (i = qp->sq_retire; i != qp->sq_intake; i++) {
		struct trdma_swqe_info *swi =
			&qp->swi[i & (qp->sq.num_slots - 1)];
		struct trdma_sqe *sqe = trdma_swq_slot(qp, i);
		s32 d = (s32)(msn - swi->msn);

		/* REG_MR, BIND_MW, LOCAL_INV: done once the transmitter passed. */
		if (trdma_sqe_is_local(sqe)) {
			if (!swi->done)
				break;
			continue;
		}
		if (!swi->msn_set || d < 0)
			break;
		if (d == 0 && st != IB_WC_SUCCESS) {
			swi->status = st;
			break;
		}
		/* A READ completes with its response, not with an ACK. */
		if (!trdma_wqe_answered(sqe->opcode) && !swi->done) {
			swi->done = true;
			qp->rnr_left = qp->attr.rnr_retry;
		}
	}
	trdma_tx_answered(qp);
	trdma_sq_retire(qp);
	spin_unlock_irqrestore(&qp->lock, flags);

	if (st != IB_WC_SUCCESS) {
		trdma_count(qp->tdev, TRDMA_CNT_REMOTE_ERRORS, 1);
		trdma_qp_wr_error(qp);
	}
}

/* The READ (or atomic) WQE a response with this MSN answers, or NULL. */
static struct trdma_sqe *trdma_rx_read_wqe(struct trdma_qp *qp, u32 msn,
					   struct trdma_swqe_info **swip)
{
	u32 i;

	for (i = qp->sq_retire; i != qp->sq_intake; i++) {
		struct trdma_swqe_info *swi =
			&qp->swi[i & (qp->sq.num_slots - 1)];
		struct trdma_sqe *sqe = trdma_swq_slot(qp, i);

		if (!swi->msn_set)
			break;
		if (swi->msn == msn && trdma_wqe_answered(sqe->opcode) &&
		    !swi->done) {
			*swip = swi;
			return sqe;
		}
	}
	return NULL;
}

/*
 * The local memory of the READ or atomic WQE a response with this MSN
 * answers refused it (its MR gone, no local write, memory the process
 * unmapped): that WQE ends with IB_WC_LOC_PROT_ERR, the requests before it
 * are acknowledged by the response, the ones after it flushed, and the QP
 * goes to error (its completion tells the application: no async event).
 * The rest of the stream is not read.
 */
static enum trdma_rx_err trdma_rx_answer_refused(struct trdma_qp *qp,
						 u32 msn)
{
	struct trdma_swqe_info *swi;
	unsigned long flags;

	spin_lock_irqsave(&qp->lock, flags);
	if (trdma_rx_read_wqe(qp, msn, &swi)) {
		if (swi->status == IB_WC_SUCCESS)
			swi->status = IB_WC_LOC_PROT_ERR;
		qp->rd_outstanding--;
	}
	spin_unlock_irqrestore(&qp->lock, flags);
	trdma_rx_acked(qp, msn, TRDMA_AETH_ACK);
	qp->rx.dead = true;
	trdma_qp_wr_error(qp);
	return TRDMA_RX_LOCAL;
}

/* Checks a new inbound WRITE or READ target against rkey and rights. */
static enum trdma_rx_err trdma_rx_check_reth(struct trdma_qp *qp,
					     const struct trdma_wire_hdr *h,
					     int access)
{
	u64 va = h->va;
	u32 len = h->dma_len;
	struct trdma_mr *mr;

	if (!(qp->attr.qp_access_flags & access))
		return TRDMA_RX_ACCESS;
	if (!len)
		return TRDMA_RX_OK;
	mr = trdma_rkey_get(qp, h->rkey, va, len, access);
	if (!mr)
		return TRDMA_RX_ACCESS;
	trdma_mr_put(mr);
	return TRDMA_RX_OK;
}

static bool trdma_op_is_send(u8 op)
{
	return op <= TRDMA_OP_SEND_ONLY_IMM || op == TRDMA_OP_SEND_LAST_INV ||
	       op == TRDMA_OP_SEND_ONLY_INV;
}

static bool trdma_op_is_write(u8 op)
{
	return op >= TRDMA_OP_WRITE_FIRST && op <= TRDMA_OP_WRITE_ONLY_IMM;
}

static bool trdma_op_first(u8 op)
{
	return op == TRDMA_OP_SEND_FIRST || op == TRDMA_OP_SEND_ONLY ||
	       op == TRDMA_OP_SEND_ONLY_IMM || op == TRDMA_OP_SEND_ONLY_INV ||
	       op == TRDMA_OP_WRITE_FIRST ||
	       op == TRDMA_OP_WRITE_ONLY || op == TRDMA_OP_WRITE_ONLY_IMM;
}

static bool trdma_op_last(u8 op)
{
	return op == TRDMA_OP_SEND_LAST || op == TRDMA_OP_SEND_LAST_IMM ||
	       op == TRDMA_OP_SEND_ONLY || op == TRDMA_OP_SEND_ONLY_IMM ||
	       op == TRDMA_OP_SEND_LAST_INV || op == TRDMA_OP_SEND_ONLY_INV ||
	       op == TRDMA_OP_WRITE_LAST || op == TRDMA_OP_WRITE_LAST_IMM ||
	       op == TRDMA_OP_WRITE_ONLY || op == TRDMA_OP_WRITE_ONLY_IMM;
}

static bool trdma_op_imm(u8 op)
{
	return op == TRDMA_OP_SEND_LAST_IMM || op == TRDMA_OP_SEND_ONLY_IMM ||
	       op == TRDMA_OP_WRITE_LAST_IMM || op == TRDMA_OP_WRITE_ONLY_IMM;
}

/*
 * Whether one more READ or atomic response fits: at most max_dest_rd_atomic
 * outstanding (one more in flight on loopback, see trdma_qp.rd_resp).  Only
 * the receive path adds responses, so room found stays.
 */
static bool trdma_rx_resp_room(struct trdma_qp *qp)
{
	unsigned long flags;
	bool room;

	spin_lock_irqsave(&qp->lock, flags);
	room = qp->rd_tail - qp->rd_head <=
	       min_t(u32, qp->attr.max_dest_rd_atomic, TRDMA_MAX_RD_ATOM);
	spin_unlock_irqrestore(&qp->lock, flags);
	return room;
}

/* Queues the response to a READ or atomic request, which takes its MSN. */
static void trdma_rx_queue_resp(struct trdma_qp *qp,
				const struct trdma_rd_resp *resp)
{
	unsigned long flags;

	spin_lock_irqsave(&qp->lock, flags);
	qp->rd_resp[qp->rd_tail % ARRAY_SIZE(qp->rd_resp)] = *resp;
	qp->rd_tail++;
	spin_unlock_irqrestore(&qp->lock, flags);
	qp->rx.expected_msn++;
	qp->rx.resp_queued = true;	/* trdma_rx_drain() sends them */
}

/*
 * A complete segment header arrived in rx->hdr; take it in.  What needs
 * no QP (opcode, reserved fields, lengths, offsets of first segments) is
 * trdma_wire_parse's to check.
 */
static enum trdma_rx_err trdma_rx_header(struct trdma_qp *qp)
{
	struct trdma_rx_state *rx = &qp->rx;
	const struct trdma_wire_hdr *h = &rx->seg;
	enum trdma_wire_err we;
	unsigned long flags;
	u32 msn, off;
	u8 op;

	we = trdma_wire_parse(rx->hdr, rx->hdr_len, &rx->seg);
	if (we) {
		ibdev_dbg(qp->ibqp.device, "QP %u: malformed header (%d)\n",
			  qp->ibqp.qp_num, we);
		return TRDMA_RX_PROTO;
	}
	op = h->opcode;
	msn = h->msn;
	off = h->offset;
	rx->left = h->length;
	if (h->dest_qpn != qp->ibqp.qp_num)
		return TRDMA_RX_PROTO;
	/* A UC QP speaks UC only (SENDs and WRITEs), an RC QP RC only. */
	if (h->uc != trdma_qp_is_uc(qp))
		return TRDMA_RX_PROTO;
	/* The rest of a UC message being dropped. */
	if (rx->uc_drop) {
		rx->uc_drop = false;
		if (!trdma_op_first(op) && msn == rx->uc_drop_msn) {
			rx->uc_drop = !trdma_op_last(op);
			rx->discard = true;
			return TRDMA_RX_OK;
		}
	}
	/*
	 * The peer's ACK of our requests, riding along with a request of
	 * its own: it was sent before that request, take it in first.
	 */
	if (h->flags & TRDMA_BTH_AETH)
		trdma_rx_acked(qp, h->aeth_msn, TRDMA_AETH_ACK);

	if (rx->rnr_wait && (trdma_op_is_send(op) || trdma_op_is_write(op) ||
			     op == TRDMA_OP_READ_REQUEST ||
			     op == TRDMA_OP_COMPARE_SWAP ||
			     op == TRDMA_OP_FETCH_ADD ||
			     op == TRDMA_OP_ATOMIC_WRITE)) {
		/*
		 * Requests, atomics included, are dropped until the refused
		 * one comes again: the requester sends them all again.
		 */
		if ((trdma_op_first(op) || op == TRDMA_OP_READ_REQUEST ||
		     op == TRDMA_OP_COMPARE_SWAP || op == TRDMA_OP_FETCH_ADD ||
		     op == TRDMA_OP_ATOMIC_WRITE) && msn == rx->rnr_msn) {
			rx->rnr_wait = false;
		} else {
			rx->discard = true;
			return TRDMA_RX_OK;
		}
	}

	if (trdma_op_is_send(op) || trdma_op_is_write(op)) {
		enum trdma_rx_err e;

		if (trdma_op_first(op)) {
			if (rx->req_active || msn != rx->expected_msn)
				return TRDMA_RX_PROTO;
			rx->req_active = true;
			rx->req_is_send = trdma_op_is_send(op);
			rx->req_msn = msn;
			rx->req_placed = 0;
			rx->has_imm = false;
			rx->has_inv = false;
			if (trdma_op_is_write(op)) {
				rx->req_va = h->va;
				rx->req_rkey = h->rkey;
				rx->req_len = h->dma_len;
				e = trdma_rx_check_reth(qp, h,
							IB_ACCESS_REMOTE_WRITE);
				if (e)
					return e;
			} else if (!rx->req_has_rqe) {
				e = trdma_rx_take_rqe(qp);
				if (e)
					return e;
			}
		} else if (!rx->req_active || msn != rx->req_msn ||
			   off != rx->req_placed ||
			   trdma_op_is_send(op) != rx->req_is_send) {
			/* Continuations must follow their message. */
			return TRDMA_RX_PROTO;
		}
		if (trdma_op_is_write(op) &&
		    rx->req_placed + rx->left > rx->req_len)
			return TRDMA_RX_PROTO;
		/*
		 * SEND_WITH_INV: the named MR is invalidated once the
		 * message is in (trdma_rx_seg_end()), not here: a segment
		 * refused for an ODP page (RNR) comes again, header and all.
		 */
		if (h->ext & TRDMA_EXT_IETH) {
			rx->imm = h->inv_rkey;
			rx->has_inv = true;
		}
		if (trdma_op_imm(op)) {
			rx->imm = (__force u32)h->imm;
			rx->has_imm = true;
			/* WRITE with immediate consumes a receive WQE. */
			if (trdma_op_is_write(op) && !rx->req_has_rqe) {
				e = trdma_rx_take_rqe(qp);
				if (e)
					return e;
			}
		}
		return TRDMA_RX_OK;
	}

	switch (op) {
	case TRDMA_OP_READ_REQUEST: {
		struct trdma_rd_resp r = {
			.msn = msn,
			.va = h->va,
			.rkey = h->rkey,
			.len = h->dma_len,
		};
		enum trdma_rx_err e;

		if (rx->req_active || msn != rx->expected_msn)
			return TRDMA_RX_PROTO;
		e = trdma_rx_check_reth(qp, h, IB_ACCESS_REMOTE_READ);
		if (e)
			return e;
		if (!trdma_rx_resp_room(qp))
			return TRDMA_RX_INVAL;
		trdma_rx_queue_resp(qp, &r);
		return TRDMA_RX_OK;
	}
	case TRDMA_OP_READ_RESPONSE_FIRST:
	case TRDMA_OP_READ_RESPONSE_MIDDLE:
	case TRDMA_OP_READ_RESPONSE_LAST:
	case TRDMA_OP_READ_RESPONSE_ONLY: {
		struct trdma_swqe_info *swi;
		struct trdma_sqe *sqe;
		bool bad;

		spin_lock_irqsave(&qp->lock, flags);
		sqe = trdma_rx_read_wqe(qp, msn, &swi);
		bad = !sqe || off != swi->rcvd || off + rx->left > swi->len ||
		      ((op == TRDMA_OP_READ_RESPONSE_LAST ||
			op == TRDMA_OP_READ_RESPONSE_ONLY) &&
		       off + rx->left != swi->len);
		spin_unlock_irqrestore(&qp->lock, flags);
		return bad ? TRDMA_RX_PROTO : TRDMA_RX_OK;
	}
	case TRDMA_OP_COMPARE_SWAP:
	case TRDMA_OP_FETCH_ADD: {
		struct trdma_rd_resp r = { .atomic = true, .msn = msn };
		enum trdma_rx_err e;

		if (rx->req_active || msn != rx->expected_msn)
			return TRDMA_RX_PROTO;
		/* Room first: an executed atomic must be answered. */
		if (!trdma_rx_resp_room(qp))
			return TRDMA_RX_INVAL;
		e = trdma_rx_atomic(qp, h, &r.orig);
		if (e)
			return e;
		trdma_rx_queue_resp(qp, &r);
		return TRDMA_RX_OK;
	}
	case TRDMA_OP_ATOMIC_WRITE: {
		struct trdma_mr *mr;
		enum trdma_rx_err e;

		if (rx->req_active || msn != rx->expected_msn)
			return TRDMA_RX_PROTO;
		/* Refused before its bytes are in, as a WRITE is. */
		e = trdma_rx_atomic_mr(qp, h, IB_ACCESS_REMOTE_WRITE, &mr);
		if (e)
			return e;
		trdma_mr_put(mr);
		rx->req_placed = 0;
		return TRDMA_RX_OK;
	}
	case TRDMA_OP_ATOMIC_ACK: {
		struct trdma_swqe_info *swi;
		struct trdma_sqe *sqe;
		u64 orig = h->orig;
		u64 addr = 0;
		u32 lkey = 0;
		int rv;

		spin_lock_irqsave(&qp->lock, flags);
		sqe = trdma_rx_read_wqe(qp, msn, &swi);
		if (sqe && sqe->opcode != IB_UVERBS_WR_RDMA_READ) {
			addr = sqe->sge[0].addr;
			lkey = sqe->sge[0].lkey;
		} else {
			sqe = NULL;
		}
		spin_unlock_irqrestore(&qp->lock, flags);
		if (!sqe)
			return TRDMA_RX_PROTO;
		rv = trdma_place_buf(qp, lkey, addr, &orig, sizeof(orig));
		/* Not present: this header is taken in again once it is. */
		if (rv == -EAGAIN)
			return TRDMA_RX_STALL;
		if (rv)
			return trdma_rx_answer_refused(qp, msn);
		spin_lock_irqsave(&qp->lock, flags);
		swi->done = true;
		qp->rd_outstanding--;
		spin_unlock_irqrestore(&qp->lock, flags);
		trdma_rx_acked(qp, msn, TRDMA_AETH_ACK);
		trdma_tx_kick(qp);
		return TRDMA_RX_OK;
	}
	case TRDMA_OP_ACK:
		trdma_rx_acked(qp, h->aeth_msn, h->syndrome);
		return TRDMA_RX_OK;
	default:
		return TRDMA_RX_PROTO;
	}
}

/*
 * A SEND's or WRITE's payload met a page of its target not present (ODP;
 * a dma-buf not mapped).  The first time, RNR: the request is NAKed and
 * dropped, the fault work brings the pages in meanwhile, and the requester
 * sends it again from its start.  Where its resend misses a page again
 * (the process, or the kernel compacting, took pages away in between, as
 * often as the RNR round trip), NAKing again could go on for ever: the
 * stream stalls at these bytes instead, and rx_stall_work places them in
 * process context, faulting each page in and holding it while it copies.
 */
static enum trdma_rx_err trdma_rx_not_present(struct trdma_qp *qp)
{
	struct trdma_rx_state *rx = &qp->rx;

	/* UC drops what it cannot place, and nobody sends it again. */
	if (rx->odp_rnr && rx->rnr_msn == rx->seg.msn && !trdma_qp_is_uc(qp))
		return TRDMA_RX_STALL;
	return TRDMA_RX_RNR;	/* sent again when faulted in */
}

/* n payload bytes of the current segment at skb offset off. */
static enum trdma_rx_err trdma_rx_payload(struct trdma_qp *qp,
					  struct sk_buff *skb, u32 off, u32 n)
{
	struct trdma_rx_state *rx = &qp->rx;
	u8 op = rx->seg.opcode;
	unsigned long flags;
	int rv = 0;

	if (rx->discard)
		return TRDMA_RX_OK;
	if (trdma_op_is_send(op)) {
		rv = trdma_place_sges(qp, rx->rqe.sge, rx->rqe.num_sge,
				      rx->req_placed, skb, off, n);
		if (rv == -EMSGSIZE)
			return TRDMA_RX_INVAL;
		if (rv == -EAGAIN)
			return trdma_rx_not_present(qp);
		/*
		 * The receive WQE's own buffers refused it (an lkey not of
		 * this PD, no local write, out of range): the responder's
		 * fault, not the request's; a remote operational error to
		 * the requester, as on other RC devices.
		 */
		if (rv)
			return TRDMA_RX_OPERR;
		rx->req_placed += n;
	} else if (trdma_op_is_write(op)) {
		rv = trdma_place_key(qp, rx->req_rkey,
				     rx->req_va + rx->req_placed,
				     IB_ACCESS_REMOTE_WRITE, skb, off, n);
		if (rv == -EAGAIN)
			return trdma_rx_not_present(qp);
		rx->req_placed += n;
	} else if (op == TRDMA_OP_ATOMIC_WRITE) {
		/* 8 bytes (trdma_wire_parse), maybe in pieces. */
		skb_copy_bits(skb, off, (u8 *)&rx->aw_val + rx->req_placed, n);
		rx->req_placed += n;
		if (rx->req_placed == sizeof(rx->aw_val))
			return trdma_rx_atomic(qp, &rx->seg, &rx->aw_val);
	} else {
		struct trdma_swqe_info *swi;
		struct trdma_sqe *sqe;
		u32 at;

		spin_lock_irqsave(&qp->lock, flags);
		sqe = trdma_rx_read_wqe(qp, rx->seg.msn, &swi);
		at = swi ? swi->rcvd : 0;
		spin_unlock_irqrestore(&qp->lock, flags);
		if (!sqe)
			return TRDMA_RX_PROTO;
		rv = trdma_place_sges(qp, sqe->sge, sqe->num_sge, at, skb, off,
				      n);
		/*
		 * A page not present: these n bytes stay in the socket, and
		 * are placed (all of them, again) once it is.
		 */
		if (rv == -EAGAIN)
			return TRDMA_RX_STALL;
		if (rv)
			return trdma_rx_answer_refused(qp, rx->seg.msn);
		spin_lock_irqsave(&qp->lock, flags);
		swi->rcvd += n;
		spin_unlock_irqrestore(&qp->lock, flags);
	}
	return rv ? TRDMA_RX_ACCESS : TRDMA_RX_OK;
}

static void trdma_rx_stop(struct trdma_qp *qp, enum trdma_rx_err e);

/* The current segment is complete. */
static void trdma_rx_seg_end(struct trdma_qp *qp)
{
	struct trdma_rx_state *rx = &qp->rx;
	u8 op = rx->seg.opcode;
	unsigned long flags;

	if (rx->discard) {
		rx->discard = false;
		return;
	}
	if (trdma_op_is_send(op) || trdma_op_is_write(op)) {
		if (!trdma_op_last(op))
			return;
		/*
		 * SEND_WITH_INV: the named MR (of this QP's PD, allowing
		 * remote access) is invalid from here on, its payload placed,
		 * before the ACK and the completion.  Anything else is the
		 * requester's remote access error.
		 */
		if (rx->has_inv && trdma_fr_inv(qp, rx->imm, true)) {
			trdma_rx_stop(qp, TRDMA_RX_ACCESS);
			return;
		}
		/*
		 * The ACK is due before the completion shows: an application
		 * that destroys the QP on seeing it still gets it sent.  UC
		 * acknowledges nothing.
		 */
		if (!trdma_qp_is_uc(qp)) {
			spin_lock_irqsave(&qp->lock, flags);
			trdma_rx_queue_ack(qp, TRDMA_AETH_ACK, rx->req_msn,
					   rx->seg.flags & TRDMA_BTH_ACKREQ);
			spin_unlock_irqrestore(&qp->lock, flags);
		}
		rx->acked_bytes += rx->req_placed;
		if (rx->req_has_rqe)
			trdma_rx_complete_recv(qp, IB_WC_SUCCESS,
					       trdma_op_is_send(op) ?
					       IB_WC_RECV :
					       IB_WC_RECV_RDMA_WITH_IMM,
					       rx->seg.flags & TRDMA_BTH_SE);
		rx->req_active = false;
		rx->expected_msn++;
		return;
	}
	if (op == TRDMA_OP_ATOMIC_WRITE) {
		/* Executed (trdma_rx_payload()): acknowledged as a WRITE. */
		spin_lock_irqsave(&qp->lock, flags);
		trdma_rx_queue_ack(qp, TRDMA_AETH_ACK, rx->seg.msn,
				   rx->seg.flags & TRDMA_BTH_ACKREQ);
		spin_unlock_irqrestore(&qp->lock, flags);
		rx->acked_bytes += sizeof(rx->aw_val);
		rx->expected_msn++;
		return;
	}
	if (op == TRDMA_OP_READ_RESPONSE_LAST ||
	    op == TRDMA_OP_READ_RESPONSE_ONLY) {
		struct trdma_swqe_info *swi;
		u32 msn = rx->seg.msn;

		spin_lock_irqsave(&qp->lock, flags);
		if (trdma_rx_read_wqe(qp, msn, &swi)) {
			swi->done = true;
			qp->rd_outstanding--;
		}
		spin_unlock_irqrestore(&qp->lock, flags);
		/* A READ response acknowledges every earlier request. */
		trdma_rx_acked(qp, msn, TRDMA_AETH_ACK);
		trdma_tx_kick(qp);
	}
}

/*
 * UC: a message that cannot be placed (no receive WQE, a bad rkey, longer
 * than its receive WQE) is dropped, without a word to the requester, and
 * counted; the QP goes on with the next message.  A receive WQE it took
 * already (a SEND found too long, a WRITE's key revoked in mid-message)
 * completes in error.  Returns false (nothing done) for an RC QP, or for an
 * error no QP goes on from (malformed).
 */
static bool trdma_rx_uc_drop(struct trdma_qp *qp, enum trdma_rx_err e)
{
	struct trdma_rx_state *rx = &qp->rx;

	if (!trdma_qp_is_uc(qp) || e == TRDMA_RX_OK || e == TRDMA_RX_PROTO ||
	    e == TRDMA_RX_STALL || e == TRDMA_RX_LOCAL)
		return false;
	trdma_count(qp->tdev, TRDMA_CNT_UC_RX_DROPPED, 1);
	if (rx->req_has_rqe)
		trdma_rx_complete_recv(qp, e == TRDMA_RX_INVAL ?
				       IB_WC_LOC_LEN_ERR : IB_WC_LOC_PROT_ERR,
				       IB_WC_RECV, false);
	rx->discard = true;
	if (rx->req_active) {
		rx->req_active = false;
		rx->expected_msn++;
		rx->uc_drop = !trdma_op_last(rx->seg.opcode);
		rx->uc_drop_msn = rx->req_msn;
	}
	return true;
}

/*
 * Refuses the current inbound request: NAK it, complete its receive WQE in
 * error where it has one, and move the QP to error.
 */
static void trdma_rx_refuse(struct trdma_qp *qp, enum trdma_rx_err e)
{
	struct trdma_rx_state *rx = &qp->rx;
	u8 syndrome = e == TRDMA_RX_ACCESS ? TRDMA_AETH_NAK_REM_ACCESS :
		      e == TRDMA_RX_OPERR ? TRDMA_AETH_NAK_REM_OP :
					    TRDMA_AETH_NAK_INV_REQ;
	u32 msn = rx->seg.msn;
	unsigned long flags;

	if (e == TRDMA_RX_RNR) {
		/*
		 * Not an error of this QP: NAK, drop this request and all later
		 * ones until the requester sends it again.
		 */
		rx->rnr_wait = true;
		rx->rnr_msn = msn;
		rx->req_active = false;
		rx->discard = true;
		spin_lock_irqsave(&qp->lock, flags);
		qp->ack_pending = false;
		trdma_rx_queue_ack(qp, TRDMA_AETH_RNR_NAK |
				   (qp->attr.min_rnr_timer & 0x1f), msn, true);
		spin_unlock_irqrestore(&qp->lock, flags);
		trdma_tx_kick(qp);
		return;
	}
	if (rx->req_has_rqe)
		trdma_rx_complete_recv(qp, e == TRDMA_RX_INVAL ?
				       IB_WC_LOC_LEN_ERR : IB_WC_LOC_PROT_ERR,
				       IB_WC_RECV, false);
	spin_lock_irqsave(&qp->lock, flags);
	qp->ack_pending = false;
	trdma_rx_queue_ack(qp, syndrome, msn, true);
	qp->close_after_nak = true;
	spin_unlock_irqrestore(&qp->lock, flags);
	rx->dead = true;
	/* The QP errs now; the transmitter sends the NAK, then closes. */
	trdma_qp_error(qp, e == TRDMA_RX_ACCESS ? IB_EVENT_QP_ACCESS_ERR :
		       e == TRDMA_RX_OPERR ? IB_EVENT_QP_FATAL :
		       IB_EVENT_QP_REQ_ERR, false);
	trdma_tx_kick(qp);
}

/*
 * Checks the trdma TCP option of an skb against the BTH of the trdma
 * segment holding that skb's first byte (the current one, complete).
 */
static void trdma_rx_opt_check(struct trdma_qp *qp,
			       const struct trdma_tcp_opt *opt)
{
	struct trdma_rx_state *rx = &qp->rx;
	const struct trdma_bth *bth = (const struct trdma_bth *)rx->hdr;
	u32 op_qpn = (u32)bth->opcode << 24 |
		     (be32_to_cpu(bth->dest_qpn) & 0xffffff);
	bool agree = be32_to_cpu(opt->offset) == rx->seg_start &&
		     be32_to_cpu(opt->op_qpn) == op_qpn &&
		     opt->msn == bth->msn;

	trdma_count(qp->tdev, agree ? TRDMA_CNT_TCPOPT_AGREE :
		    TRDMA_CNT_TCPOPT_DISAGREE, 1);
	if (!agree)
		ibdev_dbg(qp->ibqp.device,
			  "QP %u: TCP option %#x/%u/%u disagrees with header %#x/%u/%u\n",
			  qp->ibqp.qp_num, be32_to_cpu(opt->op_qpn),
			  be32_to_cpu(opt->msn), be32_to_cpu(opt->offset),
			  op_qpn, be32_to_cpu(bth->msn), rx->seg_start);
}

/* The current BTH is complete: check the options that waited for it. */
static void trdma_rx_opt_pending(struct trdma_qp *qp)
{
	struct trdma_rx_state *rx = &qp->rx;
	u8 i;

	for (i = 0; i < rx->opt_n; i++)
		trdma_rx_opt_check(qp, &rx->opt[i]);
	rx->opt_n = 0;
}

/* A new skb begins: take its trdma TCP option, if it has one. */
static void trdma_rx_opt_skb(struct trdma_qp *qp, const struct sk_buff *skb)
{
	struct trdma_rx_state *rx = &qp->rx;
	struct trdma_tcp_opt opt;

	if (!trdma_tcpopt_get(skb, &opt))
		return;
	/* Its first byte is in a segment whose BTH we have: check now. */
	if (rx->hdr_got >= sizeof(struct trdma_bth)) {
		trdma_rx_opt_check(qp, &opt);
		return;
	}
	if (rx->opt_n < TRDMA_RX_OPTS)
		rx->opt[rx->opt_n++] = opt;
	else
		ibdev_dbg(qp->ibqp.device,
			  "QP %u: TCP option left unchecked (BTH in pieces)\n",
			  qp->ibqp.qp_num);
}

/*
 * Takes in the complete header in rx->hdr: once it is all there, or again
 * after a stall (hdr_redo).  The errors a QP goes on from (a UC drop, an
 * RNR NAK) are dealt with here.
 */
static enum trdma_rx_err trdma_rx_hdr_done(struct trdma_qp *qp)
{
	struct trdma_rx_state *rx = &qp->rx;
	enum trdma_rx_err e;

	rx->hdr_redo = false;
	e = trdma_rx_header(qp);
	if (e == TRDMA_RX_STALL) {
		rx->hdr_redo = true;
		return e;
	}
	if (trdma_rx_uc_drop(qp, e))
		return TRDMA_RX_OK;
	if (e == TRDMA_RX_RNR) {
		/* Not fatal: the stream goes on. */
		trdma_rx_refuse(qp, e);
		rx->odp_rnr = false;
		return TRDMA_RX_OK;
	}
	return e;
}

/* After a header or payload: a segment all in ends, the next begins. */
static void trdma_rx_seg_next(struct trdma_qp *qp)
{
	struct trdma_rx_state *rx = &qp->rx;

	if (rx->left)
		return;
	trdma_rx_seg_end(qp);
	rx->hdr_got = 0;
	rx->hdr_len = 0;
}

/*
 * The stream stops where it is: a READ response's or an atomic ACK's
 * local page is not present, or the dma-buf not mapped, and in softirq
 * neither can be helped.  Nothing more is taken from the socket (TCP's
 * window holds the peer) until rx_stall_work has faulted it in and read
 * on, in process context.  An encrypted link's reader is in process
 * context already and tries again itself (trdma_rx_feed()).
 */
static void trdma_rx_stall(struct trdma_qp *qp)
{
	qp->rx.stalled = true;
	trdma_count(qp->tdev, TRDMA_CNT_RX_FAULT_STALLS, 1);
	if (qp->tls)
		return;
	refcount_inc(&qp->ref);
	if (!queue_work(trdma_wq, &qp->rx_stall_work))
		trdma_qp_put(qp);
}

/* The actor stops on e (not TRDMA_RX_OK). */
static void trdma_rx_stop(struct trdma_qp *qp, enum trdma_rx_err e)
{
	struct trdma_rx_state *rx = &qp->rx;
	const struct trdma_bth *b = (void *)rx->hdr;

	if (e == TRDMA_RX_STALL) {
		trdma_rx_stall(qp);
		return;
	}
	ibdev_dbg(qp->ibqp.device,
		  "QP %u: refused segment (%d): op %#x msn %u off %u len %u, expected msn %u, placed %u\n",
		  qp->ibqp.qp_num, e, b->opcode, be32_to_cpu(b->msn),
		  be32_to_cpu(b->offset), be32_to_cpu(b->length),
		  rx->expected_msn, rx->req_placed);
	if (e == TRDMA_RX_LOCAL)
		return;		/* trdma_rx_answer_refused() did it all */
	if (e == TRDMA_RX_PROTO) {
		trdma_count(qp->tdev, TRDMA_CNT_MALFORMED, 1);
		rx->dead = true;
		trdma_qp_fatal(qp, IB_EVENT_QP_FATAL);
	} else {
		trdma_rx_refuse(qp, e);
	}
}

/*
 * Picks a stalled stream up where it stopped (the header that stalled, if
 * it was one, taken in again); it may stall again.  Process context, with
 * may_sleep set, owning the receive path.
 */
static void trdma_rx_unstall(struct trdma_qp *qp)
{
	enum trdma_rx_err e;

	qp->rx.stalled = false;
	if (!qp->rx.hdr_redo || qp->rx.dead)
		return;
	e = trdma_rx_hdr_done(qp);
	if (e)
		trdma_rx_stop(qp, e);
	else
		trdma_rx_seg_next(qp);
}

static int trdma_rx_actor(read_descriptor_t *desc, struct sk_buff *skb,
			  unsigned int offset, size_t len)
{
	struct trdma_qp *qp = desc->arg.data;
	struct trdma_rx_state *rx = &qp->rx;
	enum trdma_rx_err e = TRDMA_RX_OK;
	size_t done = 0;

	/* Stalled: these bytes wait in the socket (trdma_rx_stall()). */
	if (rx->stalled || rx->dead) {
		desc->count = 0;
		return 0;
	}
	/* An encrypted link's skb is ours (trdma_rx_feed()): no TCP option. */
	if (offset == 0 && !qp->tls)
		trdma_rx_opt_skb(qp, skb);
	while (done < len && !rx->dead) {
		u32 n;

		if (rx->hdr_len == 0 || rx->hdr_got < rx->hdr_len) {
			u32 need;

			if (rx->hdr_got == 0)
				rx->seg_start = rx->pos + done;

			if (rx->hdr_got < sizeof(struct trdma_bth))
				need = sizeof(struct trdma_bth) - rx->hdr_got;
			else
				need = rx->hdr_len - rx->hdr_got;
			n = min_t(size_t, need, len - done);
			skb_copy_bits(skb, offset + done, rx->hdr + rx->hdr_got,
				      n);
			rx->hdr_got += n;
			done += n;
			if (rx->hdr_got == sizeof(struct trdma_bth)) {
				rx->hdr_len = trdma_hdr_len(rx->hdr[0], rx->hdr[1]);
				if (!rx->hdr_len) {
					e = TRDMA_RX_PROTO;
					break;
				}
				trdma_rx_opt_pending(qp);
			}
			if (rx->hdr_got < sizeof(struct trdma_bth) ||
			    rx->hdr_got < rx->hdr_len)
				continue;
			trdma_count(qp->tdev, TRDMA_CNT_RX_SEGMENTS, 1);
			trdma_count(qp->tdev, TRDMA_CNT_RX_BYTES,
				    rx->hdr_len + be32_to_cpu(((struct trdma_bth *)
							       rx->hdr)->length));
			e = trdma_rx_hdr_done(qp);
			if (e)
				break;
		} else {
			n = min_t(size_t, rx->left, len - done);
			e = trdma_rx_payload(qp, skb, offset + done, n);
			if (trdma_rx_uc_drop(qp, e)) {
				e = TRDMA_RX_OK;
			} else if (e == TRDMA_RX_RNR) {
				/* An ODP page: the rest of it is dropped. */
				trdma_rx_refuse(qp, e);
				rx->odp_rnr = true;
				e = TRDMA_RX_OK;
			}
			if (e)
				break;
			rx->left -= n;
			done += n;
		}
		trdma_rx_seg_next(qp);
	}

	if (e)
		trdma_rx_stop(qp, e);
	if (rx->dead || rx->stalled)
		desc->count = 0;
	rx->pos += done;
	return done;
}

/*
 * Bytes of messages an ACK the receive path sends itself may cover on a
 * connection that stays on this host (rx.local).
 */
#define TRDMA_RX_ACK_INLINE_MAX	4096

/*
 * Takes in what the socket holds.  From sk_data_ready, the peer's FIN
 * (softirq, socket spinlock held), or process context under lock_sock().
 */
static void trdma_rx_answer(struct trdma_qp *qp, struct sock *sk);

void trdma_rx_drain(struct trdma_qp *qp, struct sock *sk)
{
	read_descriptor_t rd = { .arg.data = qp, .count = 1 };

	if (qp->rx.dead)
		return;
	/* kTLS decrypts for recvmsg only: its reader is a work item. */
	if (qp->tls) {
		trdma_tls_rx_kick(qp);
		return;
	}
	qp->rx.acked_bytes = 0;
	qp->rx.resp_queued = false;
	tcp_read_sock(sk, &rd, trdma_rx_actor);
	trdma_rx_answer(qp, sk);
}

/*
 * An encrypted link's receive path (trdma_tls.c) hands over what it read
 * and decrypted, in the skb it owns.  Process context: pages are faulted
 * in here, and a stall (invalidations that took the page again after each
 * fault) is tried again at once, as the skb is read again by no one.
 * False when the stream is refused.
 */
bool trdma_rx_feed(struct trdma_qp *qp, struct sk_buff *skb)
{
	read_descriptor_t rd = { .arg.data = qp, .count = 1 };
	u32 off = 0;

	qp->rx.acked_bytes = 0;
	qp->rx.resp_queued = false;
	qp->rx.may_sleep = true;
	for (;;) {
		off += trdma_rx_actor(&rd, skb, off, skb->len - off);
		if (!qp->rx.stalled || qp->rx.dead)
			break;
		cond_resched();
		trdma_rx_unstall(qp);
	}
	qp->rx.may_sleep = false;
	trdma_rx_answer(qp, NULL);
	return !qp->rx.dead;
}

/*
 * Resumes a stalled receive path (trdma_rx_stall()): in process context,
 * owning the socket, it takes the stream up where it stopped and reads on
 * with may_sleep, faulting pages in (or mapping a dma-buf) as it places.
 * Holds a QP reference.  Under state_mutex, so the connection is the one
 * the stall was on, or none (detached: the QP is in ERR or being reset,
 * and the stall's WQE is flushed) or a new one (attached after a reset,
 * not stalled).
 */
void trdma_rx_stall_work(struct work_struct *work)
{
	struct trdma_qp *qp = container_of(work, struct trdma_qp,
					   rx_stall_work);
	read_descriptor_t rd = { .arg.data = qp, .count = 1 };
	struct sock *sk;

	mutex_lock(&qp->state_mutex);
	if (!qp->sock || qp->tls)
		goto out;
	sk = qp->sock->sk;
	lock_sock(sk);
	if (qp->rx.stalled && !qp->rx.dead) {
		qp->rx.acked_bytes = 0;
		qp->rx.resp_queued = false;
		qp->rx.may_sleep = true;
		trdma_rx_unstall(qp);
		if (!qp->rx.stalled && !qp->rx.dead)
			tcp_read_sock(sk, &rd, trdma_rx_actor);
		qp->rx.may_sleep = false;
		trdma_rx_answer(qp, sk);
	}
	release_sock(sk);
out:
	mutex_unlock(&qp->state_mutex);
	trdma_qp_put(qp);
}

/* Sends or schedules the ACK and responses the bytes just read owe. */
static void trdma_rx_answer(struct trdma_qp *qp, struct sock *sk)
{
	bool ack;

	/*
	 * A peek, not under qp->lock: only we set ack_pending (in the
	 * actor, just now), and trdma_tx_ack_soon() looks again under the
	 * lock, so one the transmitter sent meanwhile costs nothing.
	 */
	ack = READ_ONCE(qp->ack_pending);
	/*
	 * Where the socket is not owned its spinlock is ours, and the ACK
	 * and small responses may go from here (the transmitter checks),
	 * as TCP's own ACKs go from its receive softirq.  But over a
	 * loopback route that softirq runs inside the sender's transmit, and
	 * an ACK of much data sent from it is the sender's work: there the
	 * worker sends it, on another CPU where there is one, and, coming
	 * later, may acknowledge more at once (docs/performance.md).  A
	 * heuristic: an ACK already owed before this drain goes from here.
	 */
	if (ack)
		trdma_tx_ack_soon(qp, (qp->rx.local && qp->rx.acked_bytes >
				       TRDMA_RX_ACK_INLINE_MAX) ? NULL : sk);
	if (qp->rx.resp_queued)
		trdma_tx_resp_soon(qp, sk);
}

void trdma_rx_data_ready(struct sock *sk)
{
	struct trdma_qp *qp;

	read_lock_bh(&sk->sk_callback_lock);
	qp = sk->sk_user_data;
	/* kTLS's own first: it parses the records that came. */
	if (qp && qp->tls)
		qp->saved_data_ready(sk);
	if (qp)
		trdma_rx_drain(qp, sk);
	read_unlock_bh(&sk->sk_callback_lock);
}

/* Process context: reads what arrived before the callbacks were set. */
void trdma_rx_pump(struct trdma_qp *qp)
{
	struct sock *sk = qp->sock->sk;

	lock_sock(sk);
	trdma_rx_drain(qp, sk);
	release_sock(sk);
}
