/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Encoding of work requests into ring slots, decoding of completions, and
 * the checks of the queue geometry a create response describes.  Pure
 * functions (provider/wqe.c) on public libibverbs types and the trdma ABI,
 * shared by the provider and its host unit tests.
 */
#ifndef TRDMA_WQE_H
#define TRDMA_WQE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/trdma-abi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What one SQ slot can take, from the QP's create response. */
struct trdma_sq_caps {
	uint32_t slot_size;	/* 1 << sq_wqe_shift */
	uint32_t max_sge;	/* granted max_send_sge */
	uint32_t max_inline;	/* granted max_inline_data */
};

/*
 * Checks the send queue part of a CREATE_QP response and fills *caps:
 * sq_slots a power of two, slots large enough for the trdma_sqe header
 * plus granted_sge SGEs and for granted_inline bytes of inline data, and
 * granted_sge representable in trdma_sqe.num_sge.  Returns 0 or EPROTO.
 */
int trdma_sq_caps_init(struct trdma_sq_caps *caps, uint32_t sq_slots,
		       unsigned int sq_wqe_shift, uint32_t granted_sge,
		       uint32_t granted_inline);

/*
 * The same for a receive ring (RQ or SRQ) holding granted_sge SGEs per
 * trdma_rqe.  Returns 0 or EPROTO.
 */
int trdma_rq_geometry_check(uint32_t slots, unsigned int wqe_shift,
			    uint32_t granted_sge);

/*
 * Writes the send WQE for wr into slot (caps->slot_size bytes):
 * wr_id, opcode (an ibv_wr_opcode, numerically the ib_uverbs_wr_opcode),
 * TRDMA_WQE_* flags (SIGNALED also when sig_all), imm_data as given (network
 * order) or the rkey to invalidate, remote address and rkey of RDMA and
 * atomic operations, the atomic operands, then either the SGEs or, with
 * IBV_SEND_INLINE, the gathered payload.
 *
 * Returns 0, or EINVAL (slot contents then unspecified) for a WR the SQE
 * cannot express: num_sge < 0 or above caps->max_sge, inline payload above
 * caps->max_inline, IBV_SEND_INLINE on an opcode without outbound payload
 * (RDMA read, atomics, local invalidate), IBV_WR_ATOMIC_WRITE (struct
 * ibv_send_wr has no room for its 8 bytes: ibv_wr_atomic_write() only), or
 * an opcode trdma_sqe has no encoding for (TSO, driver opcodes).  Opcodes the
 * device does not offer but the SQE can express (local invalidate, send
 * with invalidate) are encoded: the kernel refuses them with a completion
 * error.
 */
int trdma_sqe_encode(void *slot, const struct trdma_sq_caps *caps,
		     const struct ibv_send_wr *wr, bool sig_all);

/*
 * The pieces of trdma_sqe_encode(), shared with the ibv_wr_* API (qp.c),
 * which builds a WQE in the same steps:
 *
 * trdma_sqe_encode_hdr() zeroes the header and writes everything but the
 * data: wr_id, opcode, SIGNALED/SOLICITED/FENCE, imm_data or the rkey to
 * invalidate, the remote address and rkey, the atomic operands.  It
 * ignores IBV_SEND_INLINE and wr->num_sge/sg_list.  EINVAL for an opcode
 * trdma_sqe has no encoding for.  IBV_WR_ATOMIC_WRITE takes the remote
 * address and rkey from wr->wr.rdma; the caller puts the 8 bytes into
 * compare_add.
 *
 * trdma_sqe_set_sges() writes num SGEs (num <= caps->max_sge, checked by
 * the caller) and clears any inline payload.
 *
 * trdma_sqe_inline_ok() says whether the opcode in the slot's header
 * carries an outbound payload that may go inline.  trdma_sqe_inline_begin()
 * switches the WQE to an empty inline payload (no SGEs);
 * trdma_sqe_inline_add() appends len bytes from addr, EINVAL once the
 * payload would exceed caps->max_inline.
 */
int trdma_sqe_encode_hdr(void *slot, const struct ibv_send_wr *wr,
			 bool sig_all);
void trdma_sqe_set_sges(void *slot, const struct ibv_sge *sg, uint32_t num);
bool trdma_sqe_inline_ok(const void *slot);
void trdma_sqe_inline_begin(void *slot);
int trdma_sqe_inline_add(void *slot, const struct trdma_sq_caps *caps,
			 const void *addr, size_t len);

/*
 * Writes the receive WQE for wr into slot.  Returns 0, or EINVAL when
 * wr->num_sge is negative or above max_sge.
 */
int trdma_rqe_encode(void *slot, uint32_t max_sge,
		     const struct ibv_recv_wr *wr);

/*
 * Fills *wc from a completion copied out of the CQ ring.  The fields trdma
 * has no use for (pkey_index, slid, sl, dlid_path_bits) are zero.
 */
void trdma_cqe_to_wc(const struct trdma_cqe *cqe, struct ibv_wc *wc);

#ifdef __cplusplus
}
#endif

#endif /* TRDMA_WQE_H */
