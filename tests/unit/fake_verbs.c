// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * A fake libibverbs and trdma.ko for host tests of the provider's verbs;
 * see fake_verbs.h.
 *
 * The "kernel" follows kernel/trdma_{cq,qp,srq}.c where the provider can
 * tell the difference: ring sizing and create responses, the SQ intake
 * with its checks (minus memory keys), completions into the CQ ring with
 * overflow detection, the error state with TRDMA_RING_F_ERROR and flushing,
 * RESET zeroing both rings' indices, the doorbells.  Send WQEs that pass
 * the checks complete at once (signaled ones with a CQE), as if the wire
 * were infinitely fast.  One mutex stands for the kernel's QP and CQ
 * locks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "trdma.h"

#include "fake_verbs.h"
#include "../common/wc_opcode.h"

#define FK_MAX_OBJS	64
#define FK_MAX_SGE	16
#define FK_MAX_INLINE	256
#define FK_MAX_WR	16384
#define FK_MAX_CQE	((1 << 20) - 1)
#define FK_MAX_SRQ_WR	16384

struct fk_ring {
	void *kmap;			/* the kernel's own mapping */
	size_t size;
	off_t off;			/* the mmap key */
	struct trdma_ring_ctrl *ctrl;
	uint32_t num_slots;
	uint32_t shift;
};

struct fk_cq {
	struct fk_ring ring;
	uint32_t prod;
	bool overflow;
	int users;
};

struct fk_srq {
	struct fk_ring ring;
	uint32_t cons;
	uint32_t max_sge;
	int users;
};

struct fk_qp {
	enum ibv_qp_state state;
	bool sig_all;
	bool ud;			/* IBV_QPT_UD, else RC or UC */
	bool uc;			/* IBV_QPT_UC */
	struct ibv_qp_cap cap;
	uint32_t qpn;
	struct fk_cq *scq, *rcq;
	struct fk_srq *srq;
	struct fk_ring sq, rq;
	uint32_t sq_intake;		/* == sq_retire: WQEs complete at once */
	uint32_t rq_cons;
	uint8_t last_inline[FK_MAX_INLINE];
	uint32_t last_inline_len;
};

static struct {
	pthread_mutex_t lock;
	int fd;
	off_t next_off;
	const struct verbs_device_ops *dev_ops;
	struct verbs_context_ops ops;
	struct verbs_device *vdev;
	struct fk_cq *cqs[FK_MAX_OBJS];
	struct fk_qp *qps[FK_MAX_OBJS];
	struct fk_srq *srqs[FK_MAX_OBJS];
	uint32_t ahs[FK_MAX_OBJS];	/* ah_num by AH handle; 0: free */
	uint32_t next_ah_num;
	uint32_t next_handle;
	bool stall_sq;
	enum fk_break brk;
	struct fk_stats stats;
} fk = { .lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1 };

static size_t fk_page(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

static uint32_t fk_pow2(uint32_t n)
{
	uint32_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

static unsigned int fk_order(uint32_t n)
{
	unsigned int s = 0;

	while ((1ULL << s) < n)
		s++;
	return s;
}

static int fk_ring_alloc(struct fk_ring *r, uint32_t slots, uint32_t shift)
{
	size_t size = TRDMA_RING_SLOTS_OFFSET + ((size_t)slots << shift);

	size = (size + fk_page() - 1) & ~(fk_page() - 1);
	if (ftruncate(fk.fd, fk.next_off + (off_t)size))
		return errno;
	r->kmap = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fk.fd,
		       fk.next_off);
	if (r->kmap == MAP_FAILED)
		return errno;
	r->size = size;
	r->off = fk.next_off;
	r->ctrl = r->kmap;
	r->num_slots = slots;
	r->shift = shift;
	fk.next_off += (off_t)size;
	/* Something the provider can only see through a good mapping. */
	r->ctrl->reserved2[0] = 0x7464616d;
	r->ctrl->reserved2[13] = (uint32_t)r->off;
	return 0;
}

static void fk_ring_free(struct fk_ring *r)
{
	if (r->kmap)
		munmap(r->kmap, r->size);
	r->kmap = NULL;
}

static void *fk_slot(struct fk_ring *r, uint32_t idx)
{
	return (char *)r->kmap + trdma_ring_slot_offset(idx, r->num_slots,
							 r->shift);
}

static uint32_t fk_load_prod(struct fk_ring *r)
{
	return __atomic_load_n(&r->ctrl->prod, __ATOMIC_ACQUIRE);
}

static void fk_store_cons(struct fk_ring *r, uint32_t cons)
{
	__atomic_store_n(&r->ctrl->cons, cons, __ATOMIC_RELEASE);
}

static bool fk_ring_seen_by(const struct trdma_uring *u, struct fk_ring *r)
{
	return u->map && u->map_size == r->size &&
	       u->ctrl->reserved2[0] == 0x7464616d &&
	       u->ctrl->reserved2[13] == (uint32_t)r->off &&
	       u->num_slots == r->num_slots && u->slot_shift == r->shift;
}

/* ---- the kernel: completions ---- */

static void fk_cq_post(struct fk_cq *cq, const struct trdma_cqe *cqe)
{
	uint32_t cons = __atomic_load_n(&cq->ring.ctrl->cons, __ATOMIC_ACQUIRE);

	if (cq->overflow || cq->prod - cons >= cq->ring.num_slots) {
		cq->overflow = true;
		fk.stats.cq_overflows++;
		return;
	}
	memcpy(fk_slot(&cq->ring, cq->prod), cqe, sizeof(*cqe));
	cq->prod++;
	__atomic_store_n(&cq->ring.ctrl->prod, cq->prod, __ATOMIC_RELEASE);
}

static void fk_complete(struct fk_qp *qp, struct fk_cq *cq, uint64_t wr_id,
			uint8_t opcode, uint8_t status, uint32_t len)
{
	struct trdma_cqe cqe = {
		.wr_id = wr_id,
		.status = status,
		.opcode = opcode,
		.byte_len = len,
		.qp_num = qp->qpn,
	};

	fk_cq_post(cq, &cqe);
}

/* ---- the kernel: QPs ---- */

static void fk_sq_flush(struct fk_qp *qp)
{
	uint32_t prod = fk_load_prod(&qp->sq);

	if (prod - qp->sq_intake > qp->sq.num_slots) {
		fk.stats.corrupt_rings++;
		return;
	}
	for (; qp->sq_intake != prod; qp->sq_intake++) {
		struct trdma_sqe *sqe = fk_slot(&qp->sq, qp->sq_intake);

		fk_complete(qp, qp->scq, sqe->wr_id,
			    trdma_send_wc_opcode(sqe->opcode),
			    IBV_WC_WR_FLUSH_ERR, 0);
	}
	fk_store_cons(&qp->sq, qp->sq_intake);
}

static void fk_rq_flush(struct fk_qp *qp)
{
	uint32_t prod;

	if (qp->srq)
		return;
	prod = fk_load_prod(&qp->rq);
	if (prod - qp->rq_cons > qp->rq.num_slots) {
		fk.stats.corrupt_rings++;
		return;
	}
	for (; qp->rq_cons != prod; qp->rq_cons++) {
		struct trdma_rqe *rqe = fk_slot(&qp->rq, qp->rq_cons);

		fk_complete(qp, qp->rcq, rqe->wr_id, IBV_WC_RECV,
			    IBV_WC_WR_FLUSH_ERR, 0);
	}
	fk_store_cons(&qp->rq, qp->rq_cons);
}

static void fk_qp_to_error(struct fk_qp *qp)
{
	qp->state = IBV_QPS_ERR;
	__atomic_store_n(&qp->sq.ctrl->kflags, TRDMA_RING_F_ERROR,
			 __ATOMIC_RELAXED);
	if (!qp->srq)
		__atomic_store_n(&qp->rq.ctrl->kflags, TRDMA_RING_F_ERROR,
				 __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	fk_sq_flush(qp);
	fk_rq_flush(qp);
}

/* Whether ah_num names a live AH (trdma_ud_dest(), minus the PD). */
static bool fk_ah_live(uint32_t ah_num)
{
	int h;

	for (h = 1; ah_num && h < FK_MAX_OBJS; h++)
		if (fk.ahs[h] == ah_num)
			return true;
	return false;
}

/*
 * trdma_sqe_check() without the memory key checks, and on a UD QP the
 * SEND-only rule and trdma_ud_tx()'s AH lookup.
 */
static uint8_t fk_sqe_check(struct fk_qp *qp, const struct trdma_sqe *sqe)
{
	if (sqe->flags & ~(TRDMA_WQE_SIGNALED | TRDMA_WQE_SOLICITED |
			   TRDMA_WQE_INLINE | TRDMA_WQE_FENCE))
		return IBV_WC_LOC_QP_OP_ERR;
	if (qp->ud && ((sqe->opcode != IBV_WR_SEND &&
			sqe->opcode != IBV_WR_SEND_WITH_IMM) ||
		       !fk_ah_live(sqe->ah)))
		return IBV_WC_LOC_QP_OP_ERR;
	switch (sqe->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		break;
	case IBV_WR_RDMA_READ:
		if (sqe->flags & TRDMA_WQE_INLINE)
			return IBV_WC_LOC_QP_OP_ERR;
		break;
	default:
		return IBV_WC_LOC_QP_OP_ERR;
	}
	if (sqe->flags & TRDMA_WQE_INLINE)
		return sqe->inline_len <= qp->cap.max_inline_data ?
			       IBV_WC_SUCCESS : IBV_WC_LOC_LEN_ERR;
	if (sqe->num_sge > qp->cap.max_send_sge)
		return IBV_WC_LOC_QP_OP_ERR;
	return IBV_WC_SUCCESS;
}

/* The send doorbell: trdma_sq_kick(). */
static void fk_sq_kick(struct fk_qp *qp)
{
	size_t size = (size_t)1 << qp->sq.shift;
	uint32_t prod;

	if (qp->state == IBV_QPS_ERR) {
		fk_sq_flush(qp);
		return;
	}
	if (qp->state != IBV_QPS_RTS || fk.stall_sq)
		return;

	prod = fk_load_prod(&qp->sq);
	if (prod - qp->sq_intake > qp->sq.num_slots) {
		fk.stats.corrupt_rings++;
		fk_qp_to_error(qp);
		return;
	}
	for (; qp->sq_intake != prod;) {
		uint8_t copy[8192] __attribute__((aligned(8)));
		struct trdma_sqe *sqe = (struct trdma_sqe *)copy;
		uint32_t len = 0;
		uint8_t status;
		int i;

		memcpy(copy, fk_slot(&qp->sq, qp->sq_intake), size);
		status = fk_sqe_check(qp, sqe);
		qp->sq_intake++;
		if (status != IBV_WC_SUCCESS) {
			fk_complete(qp, qp->scq, sqe->wr_id,
				    trdma_send_wc_opcode(sqe->opcode), status, 0);
			fk_store_cons(&qp->sq, qp->sq_intake);
			fk_qp_to_error(qp);
			return;
		}
		if (sqe->flags & TRDMA_WQE_INLINE) {
			len = sqe->inline_len;
			memcpy(qp->last_inline, sqe->sge, len);
			qp->last_inline_len = len;
		} else {
			for (i = 0; i < sqe->num_sge; i++)
				len += sqe->sge[i].length;
		}
		if (sqe->flags & TRDMA_WQE_SIGNALED)
			fk_complete(qp, qp->scq, sqe->wr_id,
				    trdma_send_wc_opcode(sqe->opcode), IBV_WC_SUCCESS,
				    len);
	}
	fk_store_cons(&qp->sq, qp->sq_intake);
}

/* ---- libibverbs' private interface, as the provider uses it ---- */

void verbs_register_driver_34(const struct verbs_device_ops *ops)
{
	fk.dev_ops = ops;
}

void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd,
				    size_t alloc_size,
				    struct verbs_context *context_offset,
				    uint32_t driver_id)
{
	char *drv = calloc(1, alloc_size);
	struct verbs_context *vctx;

	(void)driver_id;
	if (!drv)
		return NULL;
	vctx = (struct verbs_context *)(drv + (uintptr_t)context_offset);
	vctx->context.device = device;
	vctx->context.cmd_fd = cmd_fd;
	vctx->context.async_fd = -1;
	return drv;
}

void verbs_uninit_context(struct verbs_context *context)
{
	(void)context;
}

void verbs_set_ops(struct verbs_context *vctx,
		   const struct verbs_context_ops *ops)
{
	(void)vctx;
	fk.ops = *ops;
}

int ibv_cmd_get_context(struct verbs_context *context,
			struct ibv_get_context *cmd, size_t cmd_size,
			struct ib_uverbs_get_context_resp *resp,
			size_t resp_size)
{
	struct trdma_get_context_cmd *c = (void *)cmd;
	struct trdma_get_context_resp *r = (void *)resp;

	(void)context;
	if (cmd_size < sizeof(*c) || resp_size < sizeof(*r) ||
	    c->drv_payload.abi_version != TRDMA_ABI_VERSION)
		return EPROTO;
	r->drv_payload.abi_version = TRDMA_ABI_VERSION;
	return 0;
}

int ibv_cmd_query_device_any(struct ibv_context *context,
			     const struct ibv_query_device_ex_input *input,
			     struct ibv_device_attr_ex *attr, size_t attr_size,
			     struct ib_uverbs_ex_query_device_resp *resp,
			     size_t *resp_size)
{
	(void)context, (void)input, (void)attr, (void)attr_size, (void)resp;
	(void)resp_size;
	return EOPNOTSUPP;
}

int ibv_cmd_query_port(struct ibv_context *context, uint8_t port_num,
		       struct ibv_port_attr *port_attr,
		       struct ibv_query_port *cmd, size_t cmd_size)
{
	(void)context, (void)port_num, (void)port_attr, (void)cmd;
	(void)cmd_size;
	return EOPNOTSUPP;
}

int ibv_read_ibdev_sysfs_file(char *buf, size_t size,
			      struct verbs_sysfs_dev *sysfs_dev,
			      const char *fnfmt, ...)
{
	(void)buf, (void)size, (void)sysfs_dev, (void)fnfmt;
	return -1;
}

int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op,
			       uint32_t flags)
{
	(void)qp, (void)op, (void)flags;
	return 0;
}

/* libibverbs' own, as in v44.0 (cmd_cq.c / verbs.c). */
unsigned int fk_init_cq_calls;
void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context,
		   struct ibv_comp_channel *channel, void *cq_context)
{
	cq->context = context;
	cq->channel = channel;
	cq->cq_context = cq_context;
	cq->comp_events_completed = 0;
	cq->async_events_completed = 0;
	pthread_mutex_init(&cq->mutex, NULL);
	pthread_cond_init(&cq->cond, NULL);
	fk_init_cq_calls++;
}

/*
 * v44.0's struct verbs_qp: comp_mask right after struct ibv_qp_ex (of
 * this build's verbs.h, which is v44's), or fk_qpx_comp_off if set: a
 * libibverbs of another release.
 */
size_t fk_qpx_comp_off;
struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	size_t off = fk_qpx_comp_off ? fk_qpx_comp_off :
				       sizeof(struct ibv_qp_ex);
	uint32_t comp_mask;

	memcpy(&comp_mask, (char *)qp + off, sizeof(comp_mask));
	return comp_mask & VERBS_QP_EX ? (struct ibv_qp_ex *)qp : NULL;
}

int ibv_cmd_alloc_pd(struct ibv_context *context, struct ibv_pd *pd,
		     struct ibv_alloc_pd *cmd, size_t cmd_size,
		     struct ib_uverbs_alloc_pd_resp *resp, size_t resp_size)
{
	(void)cmd, (void)cmd_size, (void)resp, (void)resp_size;
	pd->context = context;
	pd->handle = ++fk.next_handle;
	return 0;
}

int ibv_cmd_dealloc_pd(struct ibv_pd *pd)
{
	(void)pd;
	return 0;
}

int ibv_cmd_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
		   uint64_t hca_va, int access, struct verbs_mr *vmr,
		   struct ibv_reg_mr *cmd, size_t cmd_size,
		   struct ib_uverbs_reg_mr_resp *resp, size_t resp_size)
{
	(void)addr, (void)length, (void)resp, (void)resp_size;
	if (cmd_size != sizeof(*cmd)) {
		fk.stats.bad_commands++;
		return EINVAL;
	}
	/* trdma_reg_user_mr() */
	if (access & ~(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
		       IBV_ACCESS_MW_BIND | IBV_ACCESS_RELAXED_ORDERING))
		return EOPNOTSUPP;
	fk.stats.last_mr_access = access;
	fk.stats.last_mr_iova = hca_va;
	vmr->ibv_mr.context = pd->context;
	vmr->ibv_mr.handle = ++fk.next_handle;
	vmr->ibv_mr.lkey = vmr->ibv_mr.handle << 8 | 1;
	vmr->ibv_mr.rkey = vmr->ibv_mr.lkey;
	vmr->mr_type = IBV_MR_TYPE_MR;
	vmr->access = access;
	return 0;
}

/*
 * trdma_rereg_user_mr(): a new registration under new keys, refused (the
 * MR unchanged) for access bits trdma.ko does not offer.
 */
int ibv_cmd_rereg_mr(struct verbs_mr *vmr, uint32_t flags, void *addr,
		     size_t length, uint64_t hca_va, int access,
		     struct ibv_pd *pd, struct ibv_rereg_mr *cmd,
		     size_t cmd_sz, struct ib_uverbs_rereg_mr_resp *resp,
		     size_t resp_sz)
{
	(void)addr, (void)length, (void)resp, (void)resp_sz;
	if (cmd_sz != sizeof(*cmd) || !flags ||
	    (flags & ~(uint32_t)IBV_REREG_MR_FLAGS_SUPPORTED)) {
		fk.stats.bad_commands++;
		return EINVAL;
	}
	if (!(flags & IBV_REREG_MR_CHANGE_ACCESS))
		access = vmr->access;
	if (access & ~(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
		       IBV_ACCESS_MW_BIND | IBV_ACCESS_RELAXED_ORDERING))
		return EOPNOTSUPP;
	fk.stats.last_mr_access = access;
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION)
		fk.stats.last_mr_iova = hca_va;
	vmr->access = access;
	vmr->ibv_mr.lkey = ++fk.next_handle << 8 | 1;
	vmr->ibv_mr.rkey = vmr->ibv_mr.lkey;
	if (flags & IBV_REREG_MR_CHANGE_PD)
		vmr->ibv_mr.pd = pd;
	return 0;
}

int ibv_cmd_dereg_mr(struct verbs_mr *vmr)
{
	(void)vmr;
	return 0;
}

/*
 * trdma_reg_dmabuf_mr(): the command's arguments as the kernel checks
 * them: a negative fd is no file (EBADF), offset and iova share their
 * offset in a page, rights are those a dma-buf MR may have.
 */
int ibv_cmd_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
			  uint64_t iova, int fd, int access,
			  struct verbs_mr *vmr,
			  struct ibv_command_buffer *driver)
{
	if (driver) {
		fk.stats.bad_commands++;
		return EINVAL;
	}
	if (fd < 0)
		return EBADF;
	if (!length || (offset ^ iova) & 4095)
		return EINVAL;
	if (access & ~(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
		       IBV_ACCESS_RELAXED_ORDERING))
		return EINVAL;
	fk.stats.last_mr_access = access;
	fk.stats.last_mr_iova = iova;
	vmr->ibv_mr.context = pd->context;
	vmr->ibv_mr.handle = ++fk.next_handle;
	vmr->ibv_mr.lkey = vmr->ibv_mr.handle << 8 | 1;
	vmr->ibv_mr.rkey = vmr->ibv_mr.lkey;
	vmr->mr_type = IBV_MR_TYPE_DMABUF_MR;
	vmr->access = access;
	return 0;
}

/* trdma_advise_mr(): the kernel does the work; nothing to fake. */
int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
		      uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sge)
{
	(void)pd, (void)advice, (void)flags, (void)sg_list, (void)num_sge;
	return 0;
}

/* trdma_alloc_mw(): a window of either type, rkey of a fresh index. */
int ibv_cmd_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type,
		     struct ibv_mw *mw, struct ibv_alloc_mw *cmd,
		     size_t cmd_size, struct ib_uverbs_alloc_mw_resp *resp,
		     size_t resp_size)
{
	(void)resp, (void)resp_size;
	if (cmd_size != sizeof(*cmd)) {
		fk.stats.bad_commands++;
		return EINVAL;
	}
	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)
		return EINVAL;
	mw->context = pd->context;
	mw->pd = pd;
	mw->handle = ++fk.next_handle;
	mw->rkey = mw->handle << 8 | 1;
	mw->type = type;
	return 0;
}

int ibv_cmd_dealloc_mw(struct ibv_mw *mw)
{
	(void)mw;
	return 0;
}

static uint32_t fk_handle(void **table)
{
	uint32_t h;

	for (h = 1; h < FK_MAX_OBJS; h++)
		if (!table[h])
			return h;
	return 0;
}

int ibv_cmd_create_cq(struct ibv_context *context, int cqe,
		      struct ibv_comp_channel *channel, int comp_vector,
		      struct ibv_cq *cq, struct ibv_create_cq *cmd,
		      size_t cmd_size, struct ib_uverbs_create_cq_resp *resp,
		      size_t resp_size)
{
	struct trdma_cmd_create_cq_resp *r = (void *)resp;
	struct fk_cq *kcq;
	uint32_t h, slots;
	int ret;

	(void)channel, (void)comp_vector, (void)cmd;
	if (cmd_size != sizeof(*cmd) || resp_size < sizeof(*r)) {
		fk.stats.bad_commands++;
		return EINVAL;
	}
	if (cqe < 1 || cqe > FK_MAX_CQE)
		return EINVAL;
	h = fk_handle((void **)fk.cqs);
	kcq = calloc(1, sizeof(*kcq));
	if (!h || !kcq) {
		free(kcq);
		return ENOMEM;
	}
	slots = fk_pow2((uint32_t)cqe + 1);
	ret = fk_ring_alloc(&kcq->ring, slots, 5);
	if (ret) {
		free(kcq);
		return ret;
	}
	fk.cqs[h] = kcq;
	cq->context = context;
	cq->handle = h;
	cq->cqe = (int)slots;
	r->ibv_resp.cq_handle = h;
	r->ibv_resp.cqe = slots;
	r->drv_payload.mmap_key = (uint64_t)kcq->ring.off;
	r->drv_payload.num_slots = slots;
	if (fk.brk == FK_BREAK_CQ_SLOTS)
		r->drv_payload.num_slots = slots + slots / 2;
	if (fk.brk == FK_BREAK_CQ_KEY)
		r->drv_payload.mmap_key = 123;
	if (fk.brk == FK_BREAK_CQ_SLOTS || fk.brk == FK_BREAK_CQ_KEY)
		fk.brk = FK_BREAK_NONE;
	return 0;
}

/* trdma_resize_cq(): the unpolled CQEs move to a new ring, from slot 0. */
int ibv_cmd_resize_cq(struct ibv_cq *cq, int cqe, struct ibv_resize_cq *cmd,
		      size_t cmd_size, struct ib_uverbs_resize_cq_resp *resp,
		      size_t resp_size)
{
	struct trdma_cmd_resize_cq_resp *r = (void *)resp;
	struct fk_cq *kcq = fk.cqs[cq->handle];
	struct fk_ring ring;
	uint32_t slots, cons, n, i;
	int ret;

	if (cmd_size != sizeof(*cmd) || resp_size < sizeof(*r)) {
		fk.stats.bad_commands++;
		return EINVAL;
	}
	if (cqe < 1 || cqe > FK_MAX_CQE)
		return EINVAL;
	slots = fk_pow2((uint32_t)cqe + 1);
	pthread_mutex_lock(&fk.lock);
	cons = __atomic_load_n(&kcq->ring.ctrl->cons, __ATOMIC_ACQUIRE);
	n = kcq->prod - cons;
	if (n > kcq->ring.num_slots || n > slots) {
		pthread_mutex_unlock(&fk.lock);
		return EINVAL;
	}
	ret = fk_ring_alloc(&ring, slots, 5);
	if (ret) {
		pthread_mutex_unlock(&fk.lock);
		return ret;
	}
	for (i = 0; i < n; i++)
		memcpy(fk_slot(&ring, i), fk_slot(&kcq->ring, cons + i),
		       sizeof(struct trdma_cqe));
	__atomic_store_n(&ring.ctrl->prod, n, __ATOMIC_RELEASE);
	fk_ring_free(&kcq->ring);
	kcq->ring = ring;
	kcq->prod = n;
	pthread_mutex_unlock(&fk.lock);
	fk.stats.cq_resizes++;
	cq->cqe = (int)slots;
	r->ibv_resp.cqe = slots;
	r->drv_payload.mmap_key = (uint64_t)ring.off;
	r->drv_payload.num_slots = slots;
	if (fk.brk == FK_BREAK_CQ_KEY) {
		r->drv_payload.mmap_key = 123;
		fk.brk = FK_BREAK_NONE;
	}
	return 0;
}

int ibv_cmd_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	(void)cq;
	fk.stats.notify_calls++;
	fk.stats.last_notify_solicited = solicited_only;
	return 0;
}

int ibv_cmd_destroy_cq(struct ibv_cq *cq)
{
	struct fk_cq *kcq = fk.cqs[cq->handle];

	if (kcq->users)
		return EBUSY;
	fk.cqs[cq->handle] = NULL;
	fk_ring_free(&kcq->ring);
	free(kcq);
	fk.stats.destroyed++;
	return 0;
}

static uint32_t fk_rq_shift(uint32_t max_sge)
{
	return fk_order(32 > 16 + max_sge * 16 ? 32 : 16 + max_sge * 16);
}

int ibv_cmd_create_srq(struct ibv_pd *pd, struct ibv_srq *srq,
		       struct ibv_srq_init_attr *attr,
		       struct ibv_create_srq *cmd, size_t cmd_size,
		       struct ib_uverbs_create_srq_resp *resp,
		       size_t resp_size)
{
	struct trdma_cmd_create_srq_resp *r = (void *)resp;
	uint32_t h, slots, shift, room;
	struct fk_srq *ksrq;
	int ret;

	(void)cmd;
	if (cmd_size != sizeof(*cmd) || resp_size < sizeof(*r)) {
		fk.stats.bad_commands++;
		return EINVAL;
	}
	if (attr->attr.max_wr > FK_MAX_SRQ_WR ||
	    attr->attr.max_sge > FK_MAX_SGE)
		return EINVAL;
	h = fk_handle((void **)fk.srqs);
	ksrq = calloc(1, sizeof(*ksrq));
	if (!h || !ksrq) {
		free(ksrq);
		return ENOMEM;
	}
	slots = fk_pow2(attr->attr.max_wr ? attr->attr.max_wr : 1);
	shift = fk_rq_shift(attr->attr.max_sge);
	ret = fk_ring_alloc(&ksrq->ring, slots, shift);
	if (ret) {
		free(ksrq);
		return ret;
	}
	room = (1U << shift) - sizeof(struct trdma_rqe);
	ksrq->max_sge = room / sizeof(struct trdma_sge) < FK_MAX_SGE ?
				room / sizeof(struct trdma_sge) : FK_MAX_SGE;
	fk.srqs[h] = ksrq;
	srq->context = pd->context;
	srq->handle = h;
	attr->attr.max_wr = slots;
	attr->attr.max_sge = ksrq->max_sge;
	r->ibv_resp.srq_handle = h;
	r->drv_payload.mmap_key = (uint64_t)ksrq->ring.off;
	r->drv_payload.num_slots = slots;
	r->drv_payload.wqe_shift = (uint8_t)shift;
	if (fk.brk == FK_BREAK_SRQ_SHIFT) {
		r->drv_payload.wqe_shift = 3;
		fk.brk = FK_BREAK_NONE;
	}
	return 0;
}

int ibv_cmd_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		       int srq_attr_mask, struct ibv_modify_srq *cmd,
		       size_t cmd_size)
{
	(void)srq, (void)srq_attr, (void)cmd;
	if (cmd_size != sizeof(*cmd)) {
		fk.stats.bad_commands++;
		return EINVAL;
	}
	if (srq_attr_mask & IBV_SRQ_MAX_WR)
		return EOPNOTSUPP;
	return 0;
}

int ibv_cmd_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		      struct ibv_query_srq *cmd, size_t cmd_size)
{
	struct fk_srq *ksrq = fk.srqs[srq->handle];

	(void)cmd;
	if (cmd_size != sizeof(*cmd)) {
		fk.stats.bad_commands++;
		return EINVAL;
	}
	srq_attr->max_wr = ksrq->ring.num_slots;
	srq_attr->max_sge = ksrq->max_sge;
	srq_attr->srq_limit = 0;
	return 0;
}

int ibv_cmd_destroy_srq(struct ibv_srq *srq)
{
	struct fk_srq *ksrq = fk.srqs[srq->handle];

	if (ksrq->users)
		return EBUSY;
	fk.srqs[srq->handle] = NULL;
	fk_ring_free(&ksrq->ring);
	free(ksrq);
	fk.stats.destroyed++;
	return 0;
}

int ibv_cmd_create_qp(struct ibv_pd *pd, struct ibv_qp *qp,
		      struct ibv_qp_init_attr *attr, struct ibv_create_qp *cmd,
		      size_t cmd_size, struct ib_uverbs_create_qp_resp *resp,
		      size_t resp_size)
{
	struct trdma_cmd_create_qp_resp *r = (void *)resp;
	struct ibv_qp_cap *cap = &attr->cap;
	uint32_t h, slots, shift, room;
	struct fk_qp *kqp;
	int ret;

	(void)cmd;
	if (cmd_size != sizeof(*cmd) || resp_size < sizeof(*r)) {
		fk.stats.bad_commands++;
		return EINVAL;
	}
	/* The provider must refuse other types before asking the kernel. */
	if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC &&
	    attr->qp_type != IBV_QPT_UD) {
		fk.stats.bad_commands++;
		return EOPNOTSUPP;
	}
	if (cap->max_send_wr > FK_MAX_WR || cap->max_send_sge > FK_MAX_SGE ||
	    cap->max_inline_data > FK_MAX_INLINE)
		return EINVAL;
	if (!attr->srq && (cap->max_recv_wr > FK_MAX_WR ||
			   cap->max_recv_sge > FK_MAX_SGE))
		return EINVAL;
	h = fk_handle((void **)fk.qps);
	kqp = calloc(1, sizeof(*kqp));
	if (!h || !kqp) {
		free(kqp);
		return ENOMEM;
	}

	/* trdma_create_qp()'s sizing. */
	slots = fk_pow2(cap->max_send_wr ? cap->max_send_wr : 1);
	room = cap->max_send_sge * 16 > cap->max_inline_data ?
		       cap->max_send_sge * 16 : cap->max_inline_data;
	shift = fk_order(48 + room > 64 ? 48 + room : 64);
	ret = fk_ring_alloc(&kqp->sq, slots, shift);
	if (ret)
		goto err;
	room = (1U << shift) - 48;
	cap->max_send_wr = slots;
	cap->max_send_sge = room / 16 < FK_MAX_SGE ? room / 16 : FK_MAX_SGE;
	cap->max_inline_data = room < FK_MAX_INLINE ? room : FK_MAX_INLINE;
	r->drv_payload.sq_mmap_key = (uint64_t)kqp->sq.off;
	r->drv_payload.sq_slots = slots;
	r->drv_payload.sq_wqe_shift = (uint8_t)shift;
	r->drv_payload.max_inline_data = cap->max_inline_data;

	if (!attr->srq) {
		slots = fk_pow2(cap->max_recv_wr ? cap->max_recv_wr : 1);
		shift = fk_rq_shift(cap->max_recv_sge);
		ret = fk_ring_alloc(&kqp->rq, slots, shift);
		if (ret)
			goto err;
		room = (1U << shift) - 16;
		cap->max_recv_wr = slots;
		cap->max_recv_sge = room / 16 < FK_MAX_SGE ? room / 16 :
							      FK_MAX_SGE;
		r->drv_payload.rq_mmap_key = (uint64_t)kqp->rq.off;
		r->drv_payload.rq_slots = slots;
		r->drv_payload.rq_wqe_shift = (uint8_t)shift;
	} else {
		cap->max_recv_wr = 0;
		cap->max_recv_sge = 0;
		kqp->srq = fk.srqs[attr->srq->handle];
		kqp->srq->users++;
	}
	if (fk.brk == FK_BREAK_QP_SGE) {
		cap->max_send_sge = (1U << r->drv_payload.sq_wqe_shift) / 16;
		fk.brk = FK_BREAK_NONE;
	}
	if (fk.brk == FK_BREAK_QP_INLINE) {
		r->drv_payload.max_inline_data = cap->max_inline_data + 1;
		fk.brk = FK_BREAK_NONE;
	}

	kqp->state = IBV_QPS_RESET;
	kqp->sig_all = attr->sq_sig_all;
	kqp->ud = attr->qp_type == IBV_QPT_UD;
	kqp->uc = attr->qp_type == IBV_QPT_UC;
	kqp->cap = *cap;
	kqp->qpn = 16 + h;
	kqp->scq = fk.cqs[attr->send_cq->handle];
	kqp->rcq = fk.cqs[attr->recv_cq->handle];
	kqp->scq->users++;
	kqp->rcq->users++;
	fk.qps[h] = kqp;

	/* What ibv_cmd_create_qp()'s set_qp() does. */
	qp->context = pd->context;
	qp->qp_context = attr->qp_context;
	qp->pd = pd;
	qp->send_cq = attr->send_cq;
	qp->recv_cq = attr->recv_cq;
	qp->srq = attr->srq;
	qp->qp_type = attr->qp_type;
	qp->state = IBV_QPS_RESET;
	qp->handle = h;
	qp->qp_num = kqp->qpn;
	r->ibv_resp.qp_handle = h;
	r->ibv_resp.qpn = kqp->qpn;
	return 0;

err:
	fk_ring_free(&kqp->sq);
	free(kqp);
	return ret;
}

int ibv_cmd_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		     int attr_mask, struct ibv_qp_init_attr *init_attr,
		     struct ibv_query_qp *cmd, size_t cmd_size)
{
	struct fk_qp *kqp = fk.qps[qp->handle];

	(void)cmd;
	if (cmd_size != sizeof(*cmd)) {
		fk.stats.bad_commands++;
		return EINVAL;
	}
	/* What libibverbs v36..v56 refuses before sending the command. */
	if (attr_mask & ~(IBV_QP_RATE_LIMIT - 1))
		return EOPNOTSUPP;
	pthread_mutex_lock(&fk.lock);
	memset(attr, 0, sizeof(*attr));
	attr->rate_limit = 0xdeadbeef;	/* not reported by the kernel */
	attr->qp_state = kqp->state;
	attr->cur_qp_state = kqp->state;
	attr->cap = kqp->cap;
	memset(init_attr, 0, sizeof(*init_attr));
	init_attr->cap = kqp->cap;
	init_attr->qp_type = kqp->ud ? IBV_QPT_UD :
			     kqp->uc ? IBV_QPT_UC : IBV_QPT_RC;
	init_attr->sq_sig_all = kqp->sig_all;
	pthread_mutex_unlock(&fk.lock);
	return 0;
}

/* ib_modify_qp_is_ok() for RC, on states only. */
static bool fk_transition_ok(enum ibv_qp_state cur, enum ibv_qp_state next)
{
	if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
		return true;
	switch (cur) {
	case IBV_QPS_RESET:
		return next == IBV_QPS_INIT;
	case IBV_QPS_INIT:
		return next == IBV_QPS_INIT || next == IBV_QPS_RTR;
	case IBV_QPS_RTR:
		return next == IBV_QPS_RTS;
	case IBV_QPS_RTS:
		return next == IBV_QPS_RTS;
	default:
		return false;
	}
}

int ibv_cmd_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		      int attr_mask, struct ibv_modify_qp *cmd,
		      size_t cmd_size)
{
	struct fk_qp *kqp = fk.qps[qp->handle];
	enum ibv_qp_state next;
	int ret = 0;

	(void)cmd;
	if (cmd_size != sizeof(*cmd)) {
		fk.stats.bad_commands++;
		return EINVAL;
	}
	pthread_mutex_lock(&fk.lock);
	next = attr_mask & IBV_QP_STATE ? attr->qp_state : kqp->state;
	if (!fk_transition_ok(kqp->state, next)) {
		ret = EINVAL;
		goto out;
	}
	if (next != kqp->state) {
		if (next == IBV_QPS_ERR) {
			fk_qp_to_error(kqp);
		} else if (next == IBV_QPS_RESET) {
			/* trdma_qp_reset() */
			kqp->sq_intake = 0;
			kqp->sq.ctrl->prod = 0;
			kqp->sq.ctrl->cons = 0;
			kqp->sq.ctrl->kflags = 0;
			kqp->rq_cons = 0;
			if (!kqp->srq) {
				kqp->rq.ctrl->prod = 0;
				kqp->rq.ctrl->cons = 0;
				kqp->rq.ctrl->kflags = 0;
			}
		}
		kqp->state = next;
	}
	if (next == IBV_QPS_RTS)
		fk_sq_kick(kqp);
out:
	pthread_mutex_unlock(&fk.lock);
	return ret;
}

int ibv_cmd_destroy_qp(struct ibv_qp *qp)
{
	struct fk_qp *kqp = fk.qps[qp->handle];

	pthread_mutex_lock(&fk.lock);
	if (kqp->state != IBV_QPS_RESET)
		fk_qp_to_error(kqp);
	pthread_mutex_unlock(&fk.lock);
	fk.qps[qp->handle] = NULL;
	kqp->scq->users--;
	kqp->rcq->users--;
	if (kqp->srq)
		kqp->srq->users--;
	fk_ring_free(&kqp->sq);
	fk_ring_free(&kqp->rq);
	free(kqp);
	fk.stats.destroyed++;
	return 0;
}

int ibv_cmd_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		      struct ibv_send_wr **bad_wr)
{
	struct fk_qp *kqp = fk.qps[ibqp->handle];

	/* trdma_post_send(): a user QP only takes the bare doorbell. */
	if (wr) {
		fk.stats.bad_commands++;
		*bad_wr = wr;
		return EINVAL;
	}
	pthread_mutex_lock(&fk.lock);
	fk.stats.send_doorbells++;
	fk_sq_kick(kqp);
	pthread_mutex_unlock(&fk.lock);
	return 0;
}

int ibv_cmd_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad_wr)
{
	struct fk_qp *kqp = fk.qps[ibqp->handle];

	/* trdma_post_recv() */
	if (wr || kqp->srq) {
		fk.stats.bad_commands++;
		*bad_wr = wr;
		return EINVAL;
	}
	pthread_mutex_lock(&fk.lock);
	fk.stats.recv_doorbells++;
	if (kqp->state == IBV_QPS_ERR)
		fk_rq_flush(kqp);
	pthread_mutex_unlock(&fk.lock);
	return 0;
}

/*
 * trdma_create_ah(): the driver data (struct trdma_create_ah_resp) follows
 * the core response; the kernel refuses a response without room for it.
 * AH numbers are never 0 and never the AH's handle.
 */
int ibv_cmd_create_ah(struct ibv_pd *pd, struct ibv_ah *ah,
		      struct ibv_ah_attr *attr,
		      struct ib_uverbs_create_ah_resp *resp, size_t resp_size)
{
	struct trdma_cmd_create_ah_resp *r = (void *)resp;
	uint32_t h;

	if (resp_size < sizeof(*r)) {
		fk.stats.bad_commands++;
		return EINVAL;
	}
	if (!attr->is_global)
		return EINVAL;
	for (h = 1; h < FK_MAX_OBJS && fk.ahs[h]; h++)
		;
	if (h == FK_MAX_OBJS)
		return ENOMEM;
	fk.ahs[h] = fk.next_ah_num++;
	ah->context = pd->context;
	ah->handle = h;
	r->ibv_resp.ah_handle = h;
	r->drv_payload.ah_num = fk.ahs[h];
	r->drv_payload.reserved = 0;
	return 0;
}

int ibv_cmd_destroy_ah(struct ibv_ah *ah)
{
	if (ah->handle >= FK_MAX_OBJS || !fk.ahs[ah->handle]) {
		fk.stats.bad_commands++;
		return EINVAL;
	}
	fk.ahs[ah->handle] = 0;
	return 0;
}

/* ---- the public verbs, as libibverbs wraps the provider's ops ---- */

struct ibv_context *fk_open(void)
{
	struct verbs_context *vctx;
	int fd;

	if (!fk.dev_ops)
		return NULL;	/* the provider's constructor did not run */
	memset(fk.cqs, 0, sizeof(fk.cqs));
	memset(fk.qps, 0, sizeof(fk.qps));
	memset(fk.srqs, 0, sizeof(fk.srqs));
	memset(fk.ahs, 0, sizeof(fk.ahs));
	fk.next_ah_num = 0x4a01;
	memset(&fk.stats, 0, sizeof(fk.stats));
	fk.stall_sq = false;
	fk.brk = FK_BREAK_NONE;
	fd = memfd_create("trdma-fake-uverbs", MFD_CLOEXEC);
	if (fd < 0)
		return NULL;
	fk.fd = fd;
	fk.next_off = 0;
	fk.vdev = fk.dev_ops->alloc_device(NULL);
	if (!fk.vdev)
		goto err;
	fk.vdev->ops = fk.dev_ops;
	vctx = fk.dev_ops->alloc_context(&fk.vdev->device, fd, NULL);
	if (!vctx)
		goto err_dev;
	return &vctx->context;

err_dev:
	fk.dev_ops->uninit_device(fk.vdev);
err:
	close(fd);
	return NULL;
}

void fk_close(struct ibv_context *ctx)
{
	fk.ops.free_context(ctx);
	fk.dev_ops->uninit_device(fk.vdev);
	close(fk.fd);
	fk.fd = -1;
}

bool fk_op_is_set(const char *name)
{
	static const struct {
		const char *name;
		size_t off;
	} ops[] = {
#define OP(n) { #n, offsetof(struct verbs_context_ops, n) }
		OP(alloc_pd), OP(dealloc_pd), OP(reg_mr), OP(dereg_mr),
		OP(create_cq), OP(create_cq_ex), OP(poll_cq),
		OP(req_notify_cq), OP(destroy_cq), OP(cq_event),
		OP(async_event), OP(resize_cq), OP(create_qp),
		OP(create_qp_ex), OP(query_qp), OP(modify_qp), OP(destroy_qp),
		OP(post_send), OP(post_recv), OP(create_srq),
		OP(create_srq_ex), OP(modify_srq), OP(query_srq),
		OP(destroy_srq), OP(post_srq_recv), OP(create_ah),
		OP(destroy_ah), OP(alloc_mw), OP(bind_mw), OP(dealloc_mw),
		OP(reg_dmabuf_mr),
		OP(rereg_mr),
		OP(query_device_ex), OP(query_port), OP(free_context),
#undef OP
	};
	size_t i;

	for (i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		void *p;

		if (strcmp(ops[i].name, name))
			continue;
		memcpy(&p, (char *)&fk.ops + ops[i].off, sizeof(p));
		return p != NULL;
	}
	abort();
}

struct ibv_pd *fk_alloc_pd(struct ibv_context *ctx)
{
	return fk.ops.alloc_pd(ctx);
}

int fk_dealloc_pd(struct ibv_pd *pd)
{
	return fk.ops.dealloc_pd(pd);
}

/* ibv_reg_mr_iova2() */
struct ibv_mr *fk_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			 uint64_t iova, int access)
{
	struct ibv_mr *mr = fk.ops.reg_mr(pd, addr, length, iova, access);

	if (mr) {
		mr->context = pd->context;
		mr->pd = pd;
		mr->addr = addr;
		mr->length = length;
	}
	return mr;
}

/* ibv_rereg_mr() past its input checks: what it updates on success. */
int fk_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
		size_t length, int access)
{
	int ret = fk.ops.rereg_mr(trdma_container_of(mr, struct verbs_mr,
						     ibv_mr),
				  flags, pd, addr, length, access);

	if (ret)
		return ret;
	if (flags & IBV_REREG_MR_CHANGE_PD)
		mr->pd = pd;
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		mr->addr = addr;
		mr->length = length;
	}
	return 0;
}

struct ibv_mr *fk_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
				size_t length, uint64_t iova, int fd,
				int access)
{
	struct ibv_mr *mr = fk.ops.reg_dmabuf_mr(pd, offset, length, iova, fd,
						 access);

	if (mr) {
		mr->context = pd->context;
		mr->pd = pd;
		mr->addr = (void *)(uintptr_t)offset;
		mr->length = length;
	}
	return mr;
}

int fk_dereg_mr(struct ibv_mr *mr)
{
	return fk.ops.dereg_mr(trdma_container_of(mr, struct verbs_mr, ibv_mr));
}

struct ibv_cq *fk_create_cq(struct ibv_context *ctx, int cqe)
{
	return fk.ops.create_cq(ctx, cqe, NULL, 0);
}

int fk_destroy_cq(struct ibv_cq *cq)
{
	return fk.ops.destroy_cq(cq);
}

int fk_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
	return fk.ops.poll_cq(cq, num_entries, wc);
}

int fk_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return fk.ops.req_notify_cq(cq, solicited_only);
}

int fk_resize_cq(struct ibv_cq *cq, int cqe)
{
	return fk.ops.resize_cq(cq, cqe);
}

/* ibv_create_cq_ex(): the inline of verbs.h calls the op directly. */
struct ibv_cq_ex *fk_create_cq_ex(struct ibv_context *ctx,
				  struct ibv_cq_init_attr_ex *attr)
{
	return fk.ops.create_cq_ex(ctx, attr);
}

/* ibv_create_qp_ex(): a PD alone goes to ibv_create_qp(). */
struct ibv_qp *fk_create_qp_ex(struct ibv_context *ctx,
			       struct ibv_qp_init_attr_ex *attr)
{
	if (attr->comp_mask == IBV_QP_INIT_ATTR_PD)
		return fk.ops.create_qp(attr->pd,
					(struct ibv_qp_init_attr *)attr);
	return fk.ops.create_qp_ex(ctx, attr);
}

struct ibv_qp *fk_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	return fk.ops.create_qp(pd, attr);
}

/* ibv_modify_qp() */
int fk_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	int ret = fk.ops.modify_qp(qp, attr, attr_mask);

	if (!ret && attr_mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return ret;
}

int fk_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		struct ibv_qp_init_attr *init_attr)
{
	return fk.ops.query_qp(qp, attr, attr_mask, init_attr);
}

int fk_destroy_qp(struct ibv_qp *qp)
{
	return fk.ops.destroy_qp(qp);
}

int fk_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		 struct ibv_send_wr **bad_wr)
{
	return fk.ops.post_send(qp, wr, bad_wr);
}

int fk_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		 struct ibv_recv_wr **bad_wr)
{
	return fk.ops.post_recv(qp, wr, bad_wr);
}

/* ibv_create_srq() */
struct ibv_srq *fk_create_srq(struct ibv_pd *pd,
			      struct ibv_srq_init_attr *attr)
{
	struct ibv_srq *srq = fk.ops.create_srq(pd, attr);

	if (srq) {
		srq->context = pd->context;
		srq->srq_context = attr->srq_context;
		srq->pd = pd;
	}
	return srq;
}

int fk_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	return fk.ops.modify_srq(srq, attr, mask);
}

int fk_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	return fk.ops.query_srq(srq, attr);
}

int fk_destroy_srq(struct ibv_srq *srq)
{
	return fk.ops.destroy_srq(srq);
}

int fk_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		     struct ibv_recv_wr **bad_wr)
{
	return fk.ops.post_srq_recv(srq, wr, bad_wr);
}

struct ibv_ah *fk_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct ibv_ah *ah = fk.ops.create_ah(pd, attr);

	if (ah) {
		ah->context = pd->context;
		ah->pd = pd;
	}
	return ah;
}

int fk_destroy_ah(struct ibv_ah *ah)
{
	return fk.ops.destroy_ah(ah);
}

/* ---- controls and observations ---- */

void fk_get_stats(struct fk_stats *stats)
{
	pthread_mutex_lock(&fk.lock);
	*stats = fk.stats;
	pthread_mutex_unlock(&fk.lock);
}

void fk_stall_sq(bool stall)
{
	int i;

	pthread_mutex_lock(&fk.lock);
	fk.stall_sq = stall;
	/* The "wire" drains again: the kernel goes on without a doorbell. */
	for (i = 0; !stall && i < FK_MAX_OBJS; i++)
		if (fk.qps[i])
			fk_sq_kick(fk.qps[i]);
	pthread_mutex_unlock(&fk.lock);
}

void fk_break_next_create(enum fk_break what)
{
	fk.brk = what;
}

int fk_deliver(struct ibv_qp *qp, uint32_t len, bool with_imm, uint32_t imm)
{
	struct fk_qp *kqp = fk.qps[qp->handle];
	struct trdma_cqe cqe = { 0 };
	struct fk_ring *r;
	struct trdma_rqe *rqe;
	uint32_t *cons, room = 0;
	int i, ret = 0;

	pthread_mutex_lock(&fk.lock);
	if (kqp->state != IBV_QPS_RTR && kqp->state != IBV_QPS_RTS) {
		ret = -EINVAL;
		goto out;
	}
	r = kqp->srq ? &kqp->srq->ring : &kqp->rq;
	cons = kqp->srq ? &kqp->srq->cons : &kqp->rq_cons;
	if (fk_load_prod(r) == *cons) {
		ret = -ENOENT;
		goto out;
	}
	rqe = fk_slot(r, *cons);
	for (i = 0; i < rqe->num_sge; i++)
		room += rqe->sge[i].length;
	cqe.wr_id = rqe->wr_id;
	cqe.status = len <= room ? IBV_WC_SUCCESS : IBV_WC_LOC_LEN_ERR;
	cqe.opcode = IBV_WC_RECV;
	cqe.byte_len = len;
	cqe.qp_num = kqp->qpn;
	cqe.src_qp = 99;
	if (with_imm) {
		cqe.wc_flags = IBV_WC_WITH_IMM;
		cqe.imm_data = imm;
	}
	(*cons)++;
	fk_store_cons(r, *cons);
	fk_cq_post(kqp->rcq, &cqe);
out:
	pthread_mutex_unlock(&fk.lock);
	return ret;
}

void fk_set_tx_active(struct ibv_qp *qp, bool on)
{
	struct fk_qp *q;

	pthread_mutex_lock(&fk.lock);
	q = fk.qps[qp->handle];
	__atomic_store_n(&q->sq.ctrl->tx_active, on, __ATOMIC_SEQ_CST);
	if (!on)
		fk_sq_kick(q);
	pthread_mutex_unlock(&fk.lock);
}

uint32_t fk_sq_prod(struct ibv_qp *qp)
{
	return fk_load_prod(&fk.qps[qp->handle]->sq);
}

uint32_t fk_sq_cons(struct ibv_qp *qp)
{
	return __atomic_load_n(&fk.qps[qp->handle]->sq.ctrl->cons,
			       __ATOMIC_ACQUIRE);
}

uint32_t fk_rq_prod(struct ibv_qp *qp)
{
	return fk_load_prod(&fk.qps[qp->handle]->rq);
}

uint32_t fk_rq_cons(struct ibv_qp *qp)
{
	return __atomic_load_n(&fk.qps[qp->handle]->rq.ctrl->cons,
			       __ATOMIC_ACQUIRE);
}

size_t fk_last_inline(struct ibv_qp *qp, void *buf, size_t size)
{
	struct fk_qp *kqp = fk.qps[qp->handle];
	size_t n;

	pthread_mutex_lock(&fk.lock);
	n = kqp->last_inline_len < size ? kqp->last_inline_len : size;
	memcpy(buf, kqp->last_inline, n);
	pthread_mutex_unlock(&fk.lock);
	return n;
}

uint32_t fk_ah_num(struct ibv_ah *ah)
{
	return ah->handle < FK_MAX_OBJS ? fk.ahs[ah->handle] : 0;
}

size_t fk_sq_slot(struct ibv_qp *qp, uint32_t idx, void *buf, size_t size)
{
	struct fk_qp *kqp = fk.qps[qp->handle];
	size_t n = (size_t)1 << kqp->sq.shift;

	n = n < size ? n : size;
	pthread_mutex_lock(&fk.lock);
	memcpy(buf, fk_slot(&kqp->sq, idx), n);
	pthread_mutex_unlock(&fk.lock);
	return n;
}

int fk_cq_push(struct ibv_cq *cq, const struct trdma_cqe *cqe)
{
	struct fk_cq *kcq = fk.cqs[cq->handle];
	int ret = 0;

	pthread_mutex_lock(&fk.lock);
	fk_cq_post(kcq, cqe);
	if (kcq->overflow)
		ret = -ENOSPC;
	pthread_mutex_unlock(&fk.lock);
	return ret;
}

void fk_cq_lie_prod(struct ibv_cq *cq, uint32_t extra)
{
	struct fk_cq *kcq = fk.cqs[cq->handle];

	__atomic_store_n(&kcq->ring.ctrl->prod, kcq->prod + extra,
			 __ATOMIC_RELEASE);
}

bool fk_cq_mapped_ok(struct ibv_cq *cq)
{
	return fk_ring_seen_by(&to_tcq(cq)->ring, &fk.cqs[cq->handle]->ring);
}

bool fk_qp_mapped_ok(struct ibv_qp *qp)
{
	struct trdma_qp *tqp = to_tqp(qp);
	struct fk_qp *kqp = fk.qps[qp->handle];

	if (!fk_ring_seen_by(&tqp->sq, &kqp->sq))
		return false;
	if (kqp->srq)
		return tqp->rq.map == NULL;
	return fk_ring_seen_by(&tqp->rq, &kqp->rq);
}

bool fk_srq_mapped_ok(struct ibv_srq *srq)
{
	return fk_ring_seen_by(&to_tsrq(srq)->ring,
			       &fk.srqs[srq->handle]->ring);
}
