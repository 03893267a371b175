// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma provider: shared receive queues and address handles.
 *
 * post_srq_recv writes struct trdma_rqe slots into the SRQ ring and
 * publishes the producer index; the kernel takes them as messages arrive
 * for any QP using the SRQ, so posting needs no system call at all.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "trdma.h"

struct ibv_srq *trdma_create_srq(struct ibv_pd *pd,
				 struct ibv_srq_init_attr *attr)
{
	struct trdma_cmd_create_srq_resp resp;
	struct ibv_create_srq cmd;
	struct trdma_srq *srq;
	int ret;

	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return NULL;
	ret = pthread_spin_init(&srq->lock, PTHREAD_PROCESS_PRIVATE);
	if (ret)
		goto err_free;

	memset(&cmd, 0, sizeof(cmd));
	memset(&resp, 0, sizeof(resp));
	/* On success attr->attr holds the granted max_wr and max_sge. */
	ret = ibv_cmd_create_srq(pd, &srq->ibv_srq, attr, &cmd, sizeof(cmd),
				 &resp.ibv_resp, sizeof(resp));
	if (ret)
		goto err_lock;

	srq->max_sge = attr->attr.max_sge;
	if (attr->attr.max_wr > resp.drv_payload.num_slots) {
		ret = EPROTO;
		goto err_destroy;
	}
	ret = trdma_rq_geometry_check(resp.drv_payload.num_slots,
				      resp.drv_payload.wqe_shift,
				      srq->max_sge);
	if (ret)
		goto err_destroy;
	ret = trdma_ring_mmap(pd->context, &srq->ring,
			      resp.drv_payload.mmap_key,
			      resp.drv_payload.num_slots,
			      resp.drv_payload.wqe_shift);
	if (ret)
		goto err_destroy;
	return &srq->ibv_srq;

err_destroy:
	ibv_cmd_destroy_srq(&srq->ibv_srq);
err_lock:
	pthread_spin_destroy(&srq->lock);
err_free:
	free(srq);
	errno = ret;
	return NULL;
}

int trdma_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr,
		     int attr_mask)
{
	struct ibv_modify_srq cmd;

	memset(&cmd, 0, sizeof(cmd));
	return ibv_cmd_modify_srq(ibsrq, attr, attr_mask, &cmd, sizeof(cmd));
}

int trdma_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct ibv_query_srq cmd;

	memset(&cmd, 0, sizeof(cmd));
	return ibv_cmd_query_srq(ibsrq, attr, &cmd, sizeof(cmd));
}

int trdma_destroy_srq(struct ibv_srq *ibsrq)
{
	struct trdma_srq *srq = to_tsrq(ibsrq);
	int ret;

	ret = ibv_cmd_destroy_srq(ibsrq);
	if (ret)
		return ret;
	trdma_ring_munmap(&srq->ring);
	pthread_spin_destroy(&srq->lock);
	free(srq);
	return 0;
}

int trdma_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
			struct ibv_recv_wr **bad_wr)
{
	struct trdma_srq *srq = to_tsrq(ibsrq);
	uint32_t kflags;
	int ret;

	/* An SRQ has no error state: kflags is of no use. */
	pthread_spin_lock(&srq->lock);
	ret = trdma_recv_fill(&srq->ring, srq->max_sge, &wr, &kflags);
	pthread_spin_unlock(&srq->lock);

	if (ret)
		*bad_wr = wr;
	return ret;
}

/*
 * Address handles live in the kernel, which resolves them and gives each
 * the number UD send WQEs carry (struct trdma_create_ah_resp).
 */
struct ibv_ah *trdma_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct trdma_cmd_create_ah_resp resp;
	struct trdma_ah *ah;
	int ret;

	ah = calloc(1, sizeof(*ah));
	if (!ah)
		return NULL;

	memset(&resp, 0, sizeof(resp));
	ret = ibv_cmd_create_ah(pd, &ah->ibv_ah, attr, &resp.ibv_resp,
				sizeof(resp));
	if (ret) {
		free(ah);
		errno = ret;
		return NULL;
	}
	ah->ah_num = resp.drv_payload.ah_num;
	return &ah->ibv_ah;
}

int trdma_destroy_ah(struct ibv_ah *ibah)
{
	struct trdma_ah *ah = to_tah(ibah);
	int ret;

	ret = ibv_cmd_destroy_ah(ibah);
	if (ret)
		return ret;
	free(ah);
	return 0;
}
