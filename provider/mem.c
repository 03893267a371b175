// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma provider: protection domains, memory regions and ring mappings.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "trdma.h"

struct ibv_pd *trdma_alloc_pd(struct ibv_context *ibctx)
{
	struct ib_uverbs_alloc_pd_resp resp;
	struct ibv_alloc_pd cmd;
	struct ibv_pd *pd;
	int ret;

	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return NULL;

	memset(&cmd, 0, sizeof(cmd));
	ret = ibv_cmd_alloc_pd(ibctx, pd, &cmd, sizeof(cmd), &resp,
			       sizeof(resp));
	if (ret) {
		free(pd);
		errno = ret;
		return NULL;
	}
	return pd;
}

int trdma_dealloc_pd(struct ibv_pd *pd)
{
	int ret;

	ret = ibv_cmd_dealloc_pd(pd);
	if (ret)
		return ret;
	free(pd);
	return 0;
}

/*
 * Access flags in the optional range (IBV_ACCESS_OPTIONAL_RANGE) are hints
 * a device may ignore.  libibverbs passes them on whenever the kernel
 * reports IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS (every kernel trdma
 * builds for).  trdma.ko accepts the whole optional range; all of it but
 * IBV_ACCESS_RELAXED_ORDERING is dropped here anyway.
 */
#define TRDMA_DROPPED_MR_ACCESS \
	(IBV_ACCESS_OPTIONAL_RANGE & ~IBV_ACCESS_RELAXED_ORDERING)

struct ibv_mr *trdma_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			    uint64_t hca_va, int access)
{
	struct ib_uverbs_reg_mr_resp resp;
	struct ibv_reg_mr cmd;
	struct trdma_mr *mr;
	int ret;

	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return NULL;

	memset(&cmd, 0, sizeof(cmd));
	ret = ibv_cmd_reg_mr(pd, addr, length, hca_va,
			     access & ~TRDMA_DROPPED_MR_ACCESS, &mr->vmr, &cmd,
			     sizeof(cmd), &resp, sizeof(resp));
	if (ret) {
		free(mr);
		errno = ret;
		return NULL;
	}
	return &mr->vmr.ibv_mr;
}

/*
 * ibv_reg_dmabuf_mr(): [offset, offset + length) of the dma-buf fd, at
 * iova.  The kernel attaches to the buffer and places bytes into its pages
 * (docs/architecture.md); libibverbs sets the MR's addr to offset.
 */
struct ibv_mr *trdma_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
				   size_t length, uint64_t iova, int fd,
				   int access)
{
	struct trdma_mr *mr;
	int ret;

	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return NULL;
	ret = ibv_cmd_reg_dmabuf_mr(pd, offset, length, iova, fd,
				    access & ~TRDMA_DROPPED_MR_ACCESS, &mr->vmr,
				    NULL);
	if (ret) {
		free(mr);
		errno = ret;
		return NULL;
	}
	return &mr->vmr.ibv_mr;
}

/*
 * ibv_advise_mr(): the kernel faults the ranges of on-demand paging MRs in
 * (IBV_ADVISE_MR_ADVICE_PREFETCH and PREFETCH_WRITE; PREFETCH_NO_FAULT is
 * refused with EOPNOTSUPP).  Returns 0 or an errno.
 */
int trdma_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
		    uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sge)
{
	return ibv_cmd_advise_mr(pd, advice, flags, sg_list, num_sge);
}

/*
 * ibv_rereg_mr(): the kernel registers anew under new keys (the old keys
 * then fail) and ibv_cmd_rereg_mr() copies the keys, and the PD when it
 * changes, into the ibv_mr; libibverbs updates its address and length.
 * Returns 0 or an errno value, which libibverbs turns into
 * IBV_REREG_MR_ERR_CMD with errno left as set here.
 */
int trdma_rereg_mr(struct verbs_mr *vmr, int flags, struct ibv_pd *pd,
		   void *addr, size_t length, int access)
{
	struct ib_uverbs_rereg_mr_resp resp;
	struct ibv_rereg_mr cmd;
	int ret;

	memset(&cmd, 0, sizeof(cmd));
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		access &= ~TRDMA_DROPPED_MR_ACCESS;
	ret = ibv_cmd_rereg_mr(vmr, flags, addr, length, (uintptr_t)addr,
			       access, pd, &cmd, sizeof(cmd), &resp,
			       sizeof(resp));
	if (ret)
		errno = ret;
	return ret;
}

int trdma_dereg_mr(struct verbs_mr *vmr)
{
	int ret;

	ret = ibv_cmd_dereg_mr(vmr);
	if (ret)
		return ret;
	free(to_tmr(vmr));
	return 0;
}

/*
 * Memory windows (type 1 and 2).  The kernel gives the window its first
 * rkey; a bind (ibv_bind_mw() for type 1, IBV_WR_BIND_MW for type 2) is a
 * BIND_MW send WQE that the kernel executes in SQ order.
 */
struct ibv_mw *trdma_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct ib_uverbs_alloc_mw_resp resp;
	struct ibv_alloc_mw cmd;
	struct ibv_mw *mw;
	int ret;

	mw = calloc(1, sizeof(*mw));
	if (!mw)
		return NULL;

	memset(&cmd, 0, sizeof(cmd));
	ret = ibv_cmd_alloc_mw(pd, type, mw, &cmd, sizeof(cmd), &resp,
			       sizeof(resp));
	if (ret) {
		free(mw);
		errno = ret;
		return NULL;
	}
	return mw;
}

int trdma_dealloc_mw(struct ibv_mw *mw)
{
	int ret;

	ret = ibv_cmd_dealloc_mw(mw);
	if (ret)
		return ret;
	free(mw);
	return 0;
}

/*
 * ibv_bind_mw() of a type-1 window (libibverbs checked the type and the
 * PDs): a BIND_MW WQE under the window's next rkey, which the window takes
 * now, as rdma-core's other providers do; if the bind completes in error
 * the caller puts the old one back.  Zero-based windows are not offered.
 */
int trdma_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw,
		  struct ibv_mw_bind *mw_bind)
{
	struct ibv_send_wr wr, *bad_wr;
	int ret;

	if (mw_bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED)
		return EINVAL;
	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_BIND_MW;
	wr.wr_id = mw_bind->wr_id;
	wr.send_flags = (int)mw_bind->send_flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = mw_bind->bind_info;
	ret = qp->context->ops.post_send(qp, &wr, &bad_wr);
	if (ret)
		return ret;
	mw->rkey = wr.bind_mw.rkey;
	return 0;
}

/*
 * Maps the ring a create response describes.  The length must be exactly
 * that of the kernel's mmap entry (the kernel refuses any other), which is
 * the control block plus the slots rounded up to pages.  Returns 0 or an
 * errno value: EPROTO for an impossible geometry or key, else mmap()'s.
 */
int trdma_ring_mmap(struct ibv_context *ibctx, struct trdma_uring *r,
		    uint64_t mmap_key, uint32_t num_slots,
		    unsigned int slot_shift)
{
	size_t size = trdma_ring_map_size(num_slots, slot_shift,
					  to_tctx(ibctx)->page_size);
	off_t offset = (off_t)mmap_key;
	void *map;

	if (!size || offset < 0 || (uint64_t)offset != mmap_key)
		return EPROTO;

	map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED,
		   ibctx->cmd_fd, offset);
	if (map == MAP_FAILED)
		return errno;

	r->map = map;
	r->map_size = size;
	r->ctrl = map;
	r->num_slots = num_slots;
	r->slot_shift = slot_shift;
	/* A new ring is zeroed by the kernel: both indices start at 0. */
	r->idx = 0;
	return 0;
}

void trdma_ring_munmap(struct trdma_uring *r)
{
	if (!r->map)
		return;
	munmap(r->map, r->map_size);
	r->map = NULL;
	r->ctrl = NULL;
}
