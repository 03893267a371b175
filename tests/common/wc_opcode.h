/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The completion opcode a send WR of a given opcode completes with: one
 * definition for the fake kernel of the provider's host tests (C) and the
 * lab tests (C++).
 */
#ifndef TRDMA_TESTS_WC_OPCODE_H
#define TRDMA_TESTS_WC_OPCODE_H

#include <infiniband/verbs.h>

static inline enum ibv_wc_opcode trdma_send_wc_opcode(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ:
		return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return IBV_WC_COMP_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return IBV_WC_FETCH_ADD;
	default:
		return IBV_WC_SEND;
	}
}

#endif /* TRDMA_TESTS_WC_OPCODE_H */
