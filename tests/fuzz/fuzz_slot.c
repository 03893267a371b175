// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libFuzzer target: the work request slot checks (kernel/trdma_slot.c).
 *
 * The input is a 4-byte prefix that sets the queue's limits (see
 * trdma_model_slot_limits in model.h), then a slot's bytes, copied into a
 * buffer of exactly the slot's size, so AddressSanitizer catches any read
 * past the slot.  The slot is checked as a send WQE and taken as a receive
 * WQE.  Every verdict must be the reference model's (tests/fuzz/model.c),
 * and a send WQE judged valid must satisfy the intake's promises: a known
 * opcode and flags, no SGE for REG_MR and LOCAL_INV, 8 bytes and neither
 * SGE nor inline data for ATOMIC_WRITE, at most max_sge SGEs
 * that lie in the slot, inline data
 * within max_inline and the slot, a total length summed without overflow
 * and at most 2 GiB.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#define CHECK(c)							\
	do {								\
		if (!(c)) {						\
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n",	\
				__FILE__, __LINE__, #c);		\
			abort();					\
		}							\
	} while (0)

static void check_sqe(const u8 *slot, const struct trdma_slot_limits *lim)
{
	const struct trdma_sqe *sqe = (const void *)slot;
	enum ib_wc_status st, model;
	u32 len = 0xdeadbeef, mlen = 0xfeedface, i;
	u64 total = 0;

	st = trdma_slot_sqe_check(sqe, lim, &len);
	model = trdma_model_sqe_verdict(slot, lim, &mlen);
	CHECK(st == model);
	CHECK(st == IB_WC_SUCCESS || st == IB_WC_LOC_QP_OP_ERR ||
	      st == IB_WC_LOC_LEN_ERR);
	if (st != IB_WC_SUCCESS) {
		CHECK(len == 0xdeadbeef);	/* untouched */
		return;
	}
	CHECK(len == mlen);
	CHECK(lim->slot_size >= sizeof(*sqe));
	CHECK(!(sqe->flags & ~TRDMA_WQE_FLAGS_ALL));
	CHECK(sqe->opcode <= IB_UVERBS_WR_LOCAL_INV ||
	      sqe->opcode == IB_UVERBS_WR_SEND_WITH_INV ||
	      sqe->opcode == IB_UVERBS_WR_BIND_MW ||
	      sqe->opcode == TRDMA_SQE_REG_MR ||
	      sqe->opcode == TRDMA_WR_ATOMIC_WRITE);
	CHECK(len <= TRDMA_MAX_MSG_SZ);
	/* ATOMIC_WRITE: its 8 bytes are in the WQE header. */
	if (sqe->opcode == TRDMA_WR_ATOMIC_WRITE) {
		CHECK(len == 8 && !sqe->num_sge &&
		      !(sqe->flags & TRDMA_WQE_INLINE));
		return;
	}
	/* REG_MR, BIND_MW and LOCAL_INV: no payload, no SGE. */
	if (trdma_sqe_is_local(sqe)) {
		CHECK(len == 0 && !sqe->num_sge &&
		      !(sqe->flags & TRDMA_WQE_INLINE));
		return;
	}
	if (sqe->flags & TRDMA_WQE_INLINE) {
		CHECK(sqe->opcode != IB_UVERBS_WR_RDMA_READ &&
		      sqe->opcode != IB_UVERBS_WR_ATOMIC_CMP_AND_SWP &&
		      sqe->opcode != IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD);
		CHECK(len == sqe->inline_len);
		CHECK(len <= lim->max_inline);
		CHECK(sizeof(*sqe) + (u64)len <= lim->slot_size);
		return;
	}
	CHECK(sqe->num_sge <= lim->max_sge);
	CHECK(sizeof(*sqe) + (u64)sqe->num_sge * sizeof(sqe->sge[0]) <=
	      lim->slot_size);
	for (i = 0; i < sqe->num_sge; i++)
		total += sqe->sge[i].length;	/* inside the slot: ASan */
	CHECK(total == len);
	if (sqe->opcode == IB_UVERBS_WR_ATOMIC_CMP_AND_SWP ||
	    sqe->opcode == IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD)
		CHECK(sqe->num_sge == 1 && sqe->sge[0].length == 8);
}

static void check_rqe(const u8 *slot, const struct trdma_slot_limits *lim)
{
	struct trdma_sge sge[TRDMA_MAX_SGE];
	const struct trdma_rqe *rqe = (const void *)slot;
	u32 n;

	if (lim->slot_size < sizeof(*rqe))
		return;		/* the module's slots are never that small */
	n = trdma_slot_rqe_num_sge(rqe->num_sge, lim);
	CHECK(n == trdma_model_rqe_num_sge(rqe->num_sge, lim));
	CHECK(n <= rqe->num_sge && n <= lim->max_sge && n <= TRDMA_MAX_SGE);
	CHECK(sizeof(*rqe) + (u64)n * sizeof(sge[0]) <= lim->slot_size);
	/* What the receive path copies: inside the slot (ASan). */
	memcpy(sge, rqe->sge, n * sizeof(sge[0]));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct trdma_slot_limits lim;
	size_t n;
	u8 *slot;

	if (size < TRDMA_MODEL_SLOT_PREFIX)
		return -1;
	trdma_model_slot_limits(data, &lim);
	data += TRDMA_MODEL_SLOT_PREFIX;
	size -= TRDMA_MODEL_SLOT_PREFIX;

	/* malloc: aligned for the slot structures, as the module's rings. */
	slot = malloc(lim.slot_size ? lim.slot_size : 1);
	CHECK(slot);
	n = size < lim.slot_size ? size : lim.slot_size;
	memset(slot, 0, lim.slot_size);
	memcpy(slot, data, n);

	check_sqe(slot, &lim);
	check_rqe(slot, &lim);
	free(slot);
	return 0;
}
