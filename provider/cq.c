// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma provider: completion queues.
 *
 * The kernel writes struct trdma_cqe slots into the CQ ring and publishes
 * its producer index with a store-release; poll_cq reads them without a
 * system call and hands the slots back by publishing the consumer index.
 * Arming (req_notify_cq) is a system call; completion channels,
 * ibv_get_cq_event() and ibv_ack_cq_events() are libibverbs' own (the
 * cq_event hook has nothing to do for trdma and stays libibverbs' no-op).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "trdma.h"

/* log2(sizeof(struct trdma_cqe)): the CQ ring's slot size. */
#define TRDMA_CQE_SHIFT 5
_Static_assert(sizeof(struct trdma_cqe) == 1U << TRDMA_CQE_SHIFT,
	       "CQ slots are exactly one struct trdma_cqe");

struct ibv_cq *trdma_create_cq(struct ibv_context *ibctx, int cqe,
			       struct ibv_comp_channel *channel,
			       int comp_vector)
{
	struct trdma_cmd_create_cq_resp resp;
	struct ibv_create_cq cmd;
	struct trdma_cq *cq;
	uint32_t num_slots;
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

	/* The ring must hold every CQE the CQ was granted (ibv_cq.cqe). */
	num_slots = resp.drv_payload.num_slots;
	if (!trdma_ring_geometry_ok(num_slots, TRDMA_CQE_SHIFT,
				    sizeof(struct trdma_cqe)) ||
	    cq->ibv_cq.cqe < 0 || (uint32_t)cq->ibv_cq.cqe > num_slots) {
		ret = EPROTO;
		goto err_destroy;
	}
	ret = trdma_ring_mmap(ibctx, &cq->ring, resp.drv_payload.mmap_key,
			      num_slots, TRDMA_CQE_SHIFT);
	if (ret)
		goto err_destroy;
	return &cq->ibv_cq;

err_destroy:
	ibv_cmd_destroy_cq(&cq->ibv_cq);
err_lock:
	pthread_spin_destroy(&cq->lock);
err_free:
	free(cq);
	errno = ret;
	return NULL;
}

int trdma_poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc)
{
	struct trdma_cq *cq = to_tcq(ibcq);
	struct trdma_uring *r = &cq->ring;
	uint32_t cons, avail, n;

	if (num_entries <= 0)
		return 0;

	pthread_spin_lock(&cq->lock);
	cons = r->idx;
	/* Acquire: the CQEs up to prod are written. */
	avail = trdma_ring_count(trdma_uring_load_prod(r), cons);
	if (avail > r->num_slots) {
		/* The kernel never claims more CQEs than slots. */
		pthread_spin_unlock(&cq->lock);
		errno = EPROTO;
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
	return n;
}

int trdma_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	return ibv_cmd_req_notify_cq(ibcq, solicited_only);
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
