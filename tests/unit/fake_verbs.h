/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * A fake libibverbs and trdma.ko for host tests of the provider's verbs.
 *
 * fake_verbs.c defines the libibverbs private entry points the provider
 * imports (verbs_register_driver_34, ibv_cmd_*, ...) and behind them a
 * small model of kernel/trdma_{cq,qp,srq}.c: real rings in a memfd that
 * stands in for the uverbs command fd, so the provider mmap()s them as it
 * would the kernel's.  The provider's own sources are linked into the
 * test as they are; only libibverbs is replaced.
 *
 * The fk_* verbs call the provider's ops the way libibverbs' public verbs
 * do (ibv_create_cq() -> ops.create_cq, ...), plus the bits of
 * bookkeeping libibverbs adds around them that the provider relies on.
 */
#ifndef TRDMA_FAKE_VERBS_H
#define TRDMA_FAKE_VERBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opens a context on a fresh fake device; NULL with errno on failure. */
struct ibv_context *fk_open(void);
void fk_close(struct ibv_context *ctx);

/* Whether the provider set ops.<name> (for the ops listed in the .c). */
bool fk_op_is_set(const char *name);

struct ibv_pd *fk_alloc_pd(struct ibv_context *ctx);
int fk_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *fk_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
				size_t length, uint64_t iova, int fd,
				int access);
struct ibv_mr *fk_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			 uint64_t iova, int access);
int fk_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
		size_t length, int access);
int fk_dereg_mr(struct ibv_mr *mr);

/* The provider's own: whether an empty poll yields the CPU (cq.c). */
bool trdma_poll_yield_default(const char *env, long online_cpus);

struct ibv_cq *fk_create_cq(struct ibv_context *ctx, int cqe);
int fk_destroy_cq(struct ibv_cq *cq);
int fk_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int fk_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int fk_resize_cq(struct ibv_cq *cq, int cqe);

struct ibv_cq_ex *fk_create_cq_ex(struct ibv_context *ctx,
				  struct ibv_cq_init_attr_ex *attr);
struct ibv_qp *fk_create_qp_ex(struct ibv_context *ctx,
			       struct ibv_qp_init_attr_ex *attr);
/* The fake libibverbs' ibv_qp_to_qp_ex() (VERBS_QP_EX at the offset). */
struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp);
/* verbs_init_cq() calls; where ibv_qp_to_qp_ex() reads (0: v44's). */
extern unsigned int fk_init_cq_calls;
extern size_t fk_qpx_comp_off;
struct ibv_qp *fk_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
int fk_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
int fk_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		struct ibv_qp_init_attr *init_attr);
int fk_destroy_qp(struct ibv_qp *qp);
int fk_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		 struct ibv_send_wr **bad_wr);
int fk_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		 struct ibv_recv_wr **bad_wr);

struct ibv_srq *fk_create_srq(struct ibv_pd *pd,
			      struct ibv_srq_init_attr *attr);
int fk_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask);
int fk_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
int fk_destroy_srq(struct ibv_srq *srq);
int fk_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		     struct ibv_recv_wr **bad_wr);

struct ibv_ah *fk_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int fk_destroy_ah(struct ibv_ah *ah);

/* What the fake kernel saw. */
struct fk_stats {
	unsigned int send_doorbells;	/* POST_SEND without WRs */
	unsigned int recv_doorbells;	/* POST_RECV without WRs */
	unsigned int bad_commands;	/* commands trdma.ko would refuse */
	unsigned int cq_overflows;
	unsigned int corrupt_rings;	/* impossible producer indices */
	unsigned int notify_calls;
	unsigned int destroyed;		/* CQs, QPs and SRQs destroyed */
	unsigned int cq_resizes;	/* RESIZE_CQ commands that succeeded */
	int last_mr_access;
	uint64_t last_mr_iova;
	int last_notify_solicited;
};

void fk_get_stats(struct fk_stats *stats);

/*
 * While set, the SQ doorbell takes nothing in (a busy "wire"); clearing it
 * takes in what every QP has posted, as the kernel's transmit path would.
 */
void fk_stall_sq(bool stall);

/*
 * An incoming message for qp: takes the next receive WQE (of its RQ or
 * SRQ) and completes it with byte_len len, and with IBV_WC_WITH_IMM and
 * imm (network order) if with_imm.  Returns 0, -ENOENT when no receive is
 * posted, -EINVAL when the QP is not in RTR or RTS.
 */
int fk_deliver(struct ibv_qp *qp, uint32_t len, bool with_imm, uint32_t imm);

/*
 * Sets or clears the SQ ring's tx_active, as the kernel does while a
 * transmitter is at work; clearing it takes in what was posted meanwhile,
 * as the kernel's transmitter looks at prod again before it stops.
 */
void fk_set_tx_active(struct ibv_qp *qp, bool on);

/* The kernel's view of a QP's ring indices (from the shared control). */
uint32_t fk_sq_prod(struct ibv_qp *qp);
uint32_t fk_sq_cons(struct ibv_qp *qp);
uint32_t fk_rq_prod(struct ibv_qp *qp);
uint32_t fk_rq_cons(struct ibv_qp *qp);

/*
 * The number the kernel gave ah in its CREATE_AH response
 * (trdma_create_ah_resp.ah_num); 0 once destroyed.
 */
uint32_t fk_ah_num(struct ibv_ah *ah);

/*
 * Copies SQ slot idx of qp (as the provider wrote it: the kernel leaves
 * slots as they are) into buf, at most size bytes; returns the count.
 */
size_t fk_sq_slot(struct ibv_qp *qp, uint32_t idx, void *buf, size_t size);

/*
 * The kernel writes cqe into cq's ring as it is (trdma_cq_post()).
 * Returns 0, or -ENOSPC if the CQ overflowed.
 */
struct trdma_cqe;
int fk_cq_push(struct ibv_cq *cq, const struct trdma_cqe *cqe);

/*
 * A broken kernel: cq's shared producer index claims extra more CQEs than
 * it wrote (0 puts the true one back).
 */
void fk_cq_lie_prod(struct ibv_cq *cq, uint32_t extra);

/* The payload of the last inline send the kernel took in from qp. */
size_t fk_last_inline(struct ibv_qp *qp, void *buf, size_t size);

/*
 * Whether the provider mapped each ring of the object at the length of the
 * kernel's mmap entry and at the right offset (it sees what the kernel
 * writes into the ring's control block).
 */
bool fk_cq_mapped_ok(struct ibv_cq *cq);
bool fk_qp_mapped_ok(struct ibv_qp *qp);
bool fk_srq_mapped_ok(struct ibv_srq *srq);

/* Makes the next create response of that kind impossible. */
enum fk_break {
	FK_BREAK_NONE,
	FK_BREAK_CQ_SLOTS,	/* CQ num_slots not a power of two */
	FK_BREAK_CQ_KEY,	/* CQ mmap key that maps nothing */
	FK_BREAK_QP_SGE,	/* max_send_sge above what a slot holds */
	FK_BREAK_QP_INLINE,	/* driver max_inline_data != core one */
	FK_BREAK_SRQ_SHIFT,	/* SRQ slots smaller than an RQE */
};
void fk_break_next_create(enum fk_break what);

#ifdef __cplusplus
}
#endif

#endif /* TRDMA_FAKE_VERBS_H */
