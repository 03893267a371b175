/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * trdma userspace provider: types shared by the provider's sources and its
 * host unit tests.
 */
#ifndef TRDMA_PROVIDER_H
#define TRDMA_PROVIDER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/trdma-abi.h>

#include "trdma-ring.h"
#include "trdma-verbs-private.h"
#include "trdma-wqe.h"

#define trdma_container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

struct trdma_device {
	struct verbs_device ibv_dev;
};

struct trdma_context {
	struct verbs_context ibv_ctx;
	size_t page_size;	/* for the lengths of ring mappings */
	bool poll_yield;	/* an empty poll yields the CPU: see cq.c */
};

struct trdma_mr {
	struct verbs_mr vmr;
};

/*
 * A CQ: the kernel produces completions into the ring, poll_cq consumes
 * them without a system call.  ring.idx is the consumer index.
 */
struct trdma_cq {
	union {
		struct ibv_cq ibv_cq;
		struct ibv_cq_ex ibv_cq_ex;	/* CQs of ibv_create_cq_ex() */
	};
	pthread_spinlock_t lock;	/* serializes pollers */
	struct trdma_uring ring;
	/*
	 * ibv_start_poll() .. ibv_end_poll(), under lock: the CQE the read_*
	 * getters answer from (a copy, never the ring slot) and the consumer
	 * index to publish at end_poll.
	 */
	struct trdma_cqe cur;
	uint32_t poll_cons;
};

/* An address handle: ah_num names it in UD send WQEs. */
struct trdma_ah {
	struct ibv_ah ibv_ah;
	uint32_t ah_num;
};

/* An SRQ: post_srq_recv produces RQEs, the kernel consumes them. */
struct trdma_srq {
	struct ibv_srq ibv_srq;
	pthread_spinlock_t lock;	/* serializes posters; ring.idx = prod */
	struct trdma_uring ring;
	uint32_t max_sge;		/* granted */
};

/*
 * An RC QP with its SQ ring and, without an SRQ, its RQ ring.
 *
 * libibverbs treats every ibv_qp as the start of its private
 * struct verbs_qp { union { ibv_qp; ibv_qp_ex; }; uint32_t comp_mask; ... }
 * and ibv_qp_to_qp_ex() tests that comp_mask.  Its offset is
 * sizeof(struct ibv_qp_ex) of the running libibverbs, which grew by a
 * function pointer in v44 and again in v45 (344, 352, 360 bytes on LP64).
 * So the QP starts with this build's ibv_qp_ex and 64 more bytes, none of
 * them written beyond the ibv_qp (the QP is calloc()ed): comp_mask reads 0
 * in every release and ibv_qp_to_qp_ex() answers NULL, as for any QP
 * without the ibv_qp_ex interface, instead of reading our fields.
 *
 * Locking: sq_lock covers the SQ ring and sq_caps, rq_lock the RQ ring;
 * state is written with both held and read with either.
 */
struct trdma_qp {
	union {
		struct ibv_qp ibv_qp;
		struct ibv_qp_ex ibv_qpx;	/* ibv_wr_* QPs only */
	};
	uint8_t verbs_qp_tail_room[64];

	pthread_spinlock_t sq_lock;
	pthread_spinlock_t rq_lock;
	enum ibv_qp_state state;	/* as last set through modify_qp */
	bool sq_sig_all;
	bool has_srq;
	bool is_ud;
	bool is_uc;	/* SENDs, WRITEs and local WRs only */

	struct trdma_uring sq;		/* sq.idx = the SQ producer index */
	struct trdma_sq_caps sq_caps;
	struct trdma_uring rq;		/* unmapped with an SRQ */
	uint32_t max_recv_sge;		/* granted */

	/*
	 * The ibv_wr_* API (QPs of ibv_create_qp_ex() with
	 * IBV_QP_INIT_ATTR_SEND_OPS_FLAGS).  Between wr_start and
	 * wr_complete/wr_abort sq_lock is held; WQEs are built in the free
	 * slots from sq.idx on, wr_prod is the producer index they will
	 * publish, wr_cur the WQE the wr_set_* calls fill (NULL before the
	 * first), wr_err the first error (then nothing is published).
	 */
	uint64_t send_ops;		/* IBV_QP_EX_WITH_*, 0: no ibv_wr_* */
	uint32_t wr_prod;
	int wr_err;
	struct trdma_sqe *wr_cur;
};

static inline struct trdma_context *to_tctx(struct ibv_context *ibctx)
{
	return trdma_container_of(ibctx, struct trdma_context,
				  ibv_ctx.context);
}

static inline struct trdma_cq *to_tcq(struct ibv_cq *ibcq)
{
	return trdma_container_of(ibcq, struct trdma_cq, ibv_cq);
}

static inline struct trdma_srq *to_tsrq(struct ibv_srq *ibsrq)
{
	return trdma_container_of(ibsrq, struct trdma_srq, ibv_srq);
}

static inline struct trdma_ah *to_tah(struct ibv_ah *ibah)
{
	return trdma_container_of(ibah, struct trdma_ah, ibv_ah);
}

static inline struct trdma_qp *to_tqp(struct ibv_qp *ibqp)
{
	return trdma_container_of(ibqp, struct trdma_qp, ibv_qp);
}

static inline struct trdma_mr *to_tmr(struct verbs_mr *vmr)
{
	return trdma_container_of(vmr, struct trdma_mr, vmr);
}

/* GET_CONTEXT request and response with trdma's driver data appended. */
struct trdma_get_context_cmd {
	struct ibv_get_context ibv_cmd;
	struct trdma_alloc_ucontext_req drv_payload;
};

struct trdma_get_context_resp {
	struct ib_uverbs_get_context_resp ibv_resp;
	struct trdma_alloc_ucontext_resp drv_payload;
};

/*
 * The driver data must start exactly where libibverbs expects it (at
 * sizeof() of the core struct) with no padding in between or after it,
 * and write commands are sized in 4-byte words.
 */
_Static_assert(offsetof(struct trdma_get_context_cmd, drv_payload) ==
		       sizeof(struct ibv_get_context),
	       "GET_CONTEXT driver data must follow the core command");
_Static_assert(sizeof(struct trdma_get_context_cmd) ==
		       sizeof(struct ibv_get_context) +
			       sizeof(struct trdma_alloc_ucontext_req),
	       "no padding after the GET_CONTEXT driver data");
_Static_assert(sizeof(struct trdma_get_context_cmd) % 4 == 0,
	       "GET_CONTEXT command must be whole 32-bit words");
_Static_assert(offsetof(struct trdma_get_context_resp, drv_payload) ==
		       sizeof(struct ib_uverbs_get_context_resp),
	       "GET_CONTEXT driver response must follow the core response");
_Static_assert(sizeof(struct trdma_get_context_resp) ==
		       sizeof(struct ib_uverbs_get_context_resp) +
			       sizeof(struct trdma_alloc_ucontext_resp),
	       "no padding after the GET_CONTEXT driver response");
_Static_assert(sizeof(struct trdma_get_context_resp) % 4 == 0,
	       "GET_CONTEXT response must be whole 32-bit words");

/*
 * Create responses with trdma's driver data appended (no driver data goes
 * with the requests: the core command structs are sent as they are).
 */
struct trdma_cmd_create_cq_resp {
	struct ib_uverbs_create_cq_resp ibv_resp;
	struct trdma_create_cq_resp drv_payload;
};

struct trdma_cmd_resize_cq_resp {
	struct ib_uverbs_resize_cq_resp ibv_resp;
	struct trdma_resize_cq_resp drv_payload;
};

struct trdma_cmd_create_qp_resp {
	struct ib_uverbs_create_qp_resp ibv_resp;
	struct trdma_create_qp_resp drv_payload;
};

struct trdma_cmd_create_ah_resp {
	struct ib_uverbs_create_ah_resp ibv_resp;
	struct trdma_create_ah_resp drv_payload;
};

struct trdma_cmd_create_srq_resp {
	struct ib_uverbs_create_srq_resp ibv_resp;
	struct trdma_create_srq_resp drv_payload;
};

#define TRDMA_ASSERT_DRV_RESP(type, core)                                      \
	_Static_assert(offsetof(struct type, drv_payload) ==                   \
			       sizeof(struct core),                            \
		       #type ": driver data must follow the core response");  \
	_Static_assert(sizeof(struct type) ==                                  \
			       sizeof(struct core) +                           \
				       sizeof(((struct type *)0)->drv_payload), \
		       #type ": no padding after the driver data");           \
	_Static_assert(sizeof(struct type) % 8 == 0,                           \
		       #type ": whole 64-bit words")

TRDMA_ASSERT_DRV_RESP(trdma_cmd_create_cq_resp, ib_uverbs_create_cq_resp);
TRDMA_ASSERT_DRV_RESP(trdma_cmd_resize_cq_resp, ib_uverbs_resize_cq_resp);
TRDMA_ASSERT_DRV_RESP(trdma_cmd_create_qp_resp, ib_uverbs_create_qp_resp);
TRDMA_ASSERT_DRV_RESP(trdma_cmd_create_srq_resp, ib_uverbs_create_srq_resp);
/* The core AH response is one 32-bit word: 12 bytes in all, as rxe's. */
_Static_assert(offsetof(struct trdma_cmd_create_ah_resp, drv_payload) ==
		       sizeof(struct ib_uverbs_create_ah_resp),
	       "CREATE_AH driver data must follow the core response");
_Static_assert(sizeof(struct trdma_cmd_create_ah_resp) ==
		       sizeof(struct ib_uverbs_create_ah_resp) +
			       sizeof(struct trdma_create_ah_resp),
	       "no padding after the CREATE_AH driver data");

/* mem.c */
struct ibv_pd *trdma_alloc_pd(struct ibv_context *ibctx);
int trdma_dealloc_pd(struct ibv_pd *pd);
int trdma_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
		    uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sge);
struct ibv_mr *trdma_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
				   size_t length, uint64_t iova, int fd,
				   int access);
struct ibv_mr *trdma_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			    uint64_t hca_va, int access);
int trdma_rereg_mr(struct verbs_mr *vmr, int flags, struct ibv_pd *pd,
		   void *addr, size_t length, int access);
int trdma_dereg_mr(struct verbs_mr *vmr);
void trdma_cq_clean(struct ibv_cq *ibcq, uint32_t qpn);
struct ibv_mw *trdma_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int trdma_dealloc_mw(struct ibv_mw *mw);
int trdma_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw,
		  struct ibv_mw_bind *mw_bind);
int trdma_ring_mmap(struct ibv_context *ibctx, struct trdma_uring *r,
		    uint64_t mmap_key, uint32_t num_slots,
		    unsigned int slot_shift);
void trdma_ring_munmap(struct trdma_uring *r);

/* cq.c */
struct ibv_cq_ex *trdma_create_cq_ex(struct ibv_context *ibctx,
				     struct ibv_cq_init_attr_ex *attr);
struct ibv_cq *trdma_create_cq(struct ibv_context *ibctx, int cqe,
			       struct ibv_comp_channel *channel,
			       int comp_vector);
int trdma_poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc);
bool trdma_poll_yield_default(const char *env, long online_cpus);
int trdma_req_notify_cq(struct ibv_cq *ibcq, int solicited_only);
int trdma_resize_cq(struct ibv_cq *ibcq, int cqe);
int trdma_destroy_cq(struct ibv_cq *ibcq);

/* qp.c */
struct ibv_qp *trdma_create_qp_ex(struct ibv_context *ibctx,
				  struct ibv_qp_init_attr_ex *attr);
struct ibv_qp *trdma_create_qp(struct ibv_pd *pd,
			       struct ibv_qp_init_attr *attr);
int trdma_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
		   int attr_mask, struct ibv_qp_init_attr *init_attr);
int trdma_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
		    int attr_mask);
int trdma_destroy_qp(struct ibv_qp *ibqp);
int trdma_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		    struct ibv_send_wr **bad_wr);
int trdma_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		    struct ibv_recv_wr **bad_wr);
int trdma_recv_fill(struct trdma_uring *r, uint32_t max_sge,
		    struct ibv_recv_wr **wrp, uint32_t *kflags);

/* srq.c */
struct ibv_srq *trdma_create_srq(struct ibv_pd *pd,
				 struct ibv_srq_init_attr *attr);
int trdma_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr,
		     int attr_mask);
int trdma_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr);
int trdma_destroy_srq(struct ibv_srq *ibsrq);
int trdma_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
			struct ibv_recv_wr **bad_wr);
struct ibv_ah *trdma_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int trdma_destroy_ah(struct ibv_ah *ah);

/* Read buffer for hca_type; longer contents never match. */
#define TRDMA_HCA_TYPE_BUFSZ 32

/*
 * Decide from the contents of a device's sysfs hca_type attribute, as
 * returned by ibv_read_ibdev_sysfs_file() (length without the trailing
 * newline, or negative on error), whether it is a trdma device.
 */
static inline bool trdma_hca_type_matches(const char *buf, int len)
{
	static const char want[] = TRDMA_HCA_TYPE;

	if (len != (int)(sizeof(want) - 1))
		return false;
	return memcmp(buf, want, sizeof(want) - 1) == 0;
}

#endif /* TRDMA_PROVIDER_H */
