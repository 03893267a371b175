/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
#ifndef _TRDMA_VERBS_H
#define _TRDMA_VERBS_H

#include <rdma/ib_verbs.h>

#include "trdma_compat.h"

struct trdma_ring;

/* trdma_verbs.c: device, port and user context */
int trdma_query_device(struct ib_device *ibdev, struct ib_device_attr *attr,
		       struct ib_udata *udata);
int trdma_query_port(struct ib_device *ibdev, u32 port,
		     struct ib_port_attr *attr);
int trdma_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey);
int trdma_get_port_immutable(struct ib_device *ibdev, u32 port,
			     struct ib_port_immutable *immutable);
enum rdma_link_layer trdma_get_link_layer(struct ib_device *ibdev, u32 port);
void trdma_get_dev_fw_str(struct ib_device *ibdev, char *str);
struct rdma_hw_stats *trdma_alloc_hw_port_stats(struct ib_device *ibdev,
						u32 port);
int trdma_get_hw_stats(struct ib_device *ibdev, struct rdma_hw_stats *stats,
		       u32 port, int index);
int trdma_alloc_ucontext(struct ib_ucontext *ibuctx, struct ib_udata *udata);
void trdma_dealloc_ucontext(struct ib_ucontext *ibuctx);

/* trdma_mem.c: PD, MR, mmap */
int trdma_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
int trdma_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
struct ib_mr *trdma_get_dma_mr(struct ib_pd *ibpd, int access);
struct ib_mr *trdma_alloc_mr(struct ib_pd *ibpd, enum ib_mr_type type,
			     u32 max_num_sg);
int trdma_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
		    unsigned int *sg_offset);
struct ib_mr *trdma_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
				u64 iova, int access, struct ib_udata *udata);
struct ib_mr *trdma_rereg_user_mr(struct ib_mr *ibmr, int flags, u64 start,
				  u64 length, u64 iova, int access,
				  struct ib_pd *ibpd, struct ib_udata *udata);
int trdma_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata);
/* trdma_reg_user_mr_dmabuf(): trdma_compat.h, trdma_dmabuf.c */
int trdma_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata);
int trdma_dealloc_mw(struct ib_mw *ibmw);
int trdma_mmap(struct ib_ucontext *uctx, struct vm_area_struct *vma);
void trdma_mmap_free(struct rdma_user_mmap_entry *rdma);

/* trdma_cq.c */
/* trdma_create_cq(): trdma_compat.h */
int trdma_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata);
int trdma_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags);
int trdma_resize_cq(struct ib_cq *ibcq, int cqe, struct ib_udata *udata);
int trdma_poll_cq(struct ib_cq *ibcq, int num, struct ib_wc *wc);

/* trdma_qp.c */
int trdma_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init,
		    struct ib_udata *udata);
int trdma_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		    struct ib_udata *udata);
int trdma_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		   struct ib_qp_init_attr *init);
int trdma_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata);
int trdma_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		    const struct ib_send_wr **bad_wr);
int trdma_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		    const struct ib_recv_wr **bad_wr);
int trdma_rqe_post(struct trdma_ring *r, u32 cons, u32 max_sge,
		   const struct ib_recv_wr *wr);

/* trdma_srq.c: SRQ and AH */
int trdma_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
		     struct ib_udata *udata);
int trdma_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		     enum ib_srq_attr_mask mask, struct ib_udata *udata);
int trdma_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr);
int trdma_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata);
int trdma_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr);
int trdma_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init,
		    struct ib_udata *udata);
int trdma_query_ah(struct ib_ah *ibah, struct rdma_ah_attr *attr);
int trdma_destroy_ah(struct ib_ah *ibah, u32 flags);

#endif /* _TRDMA_VERBS_H */
