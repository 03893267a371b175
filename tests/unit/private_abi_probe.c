// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Measures the layout of the structs provider/trdma-verbs-private.h shares
 * with libibverbs.
 *
 * Built normally, it measures trdma's declarations.  Built with
 * -DTRDMA_PROBE_UPSTREAM against a configured rdma-core tree, it measures
 * rdma-core's own libibverbs/driver.h and kern-abi.h instead, which is how
 * check-rdma-core-layout.sh proves the two agree.
 */
#include <stdalign.h>
#include <stddef.h>

#ifdef TRDMA_PROBE_UPSTREAM
#include <infiniband/driver.h>
#include <infiniband/kern-abi.h>
#else
#include "trdma.h"
#endif

#include "private_abi_probe.h"

#define PROBE_SIZE(type) { "sizeof(" #type ")", sizeof(type) }
#define PROBE_ALIGN(type) { "alignof(" #type ")", alignof(type) }
#define PROBE_OFF(type, member) \
	{ "offsetof(" #type ", " #member ")", offsetof(type, member) }

const struct trdma_probe_value trdma_probe_values[] = {
	PROBE_SIZE(struct ibv_device),
	PROBE_SIZE(struct verbs_context),

	PROBE_SIZE(struct verbs_match_ent),
	PROBE_ALIGN(struct verbs_match_ent),
	PROBE_OFF(struct verbs_match_ent, driver_data),
	PROBE_OFF(struct verbs_match_ent, u),
	PROBE_OFF(struct verbs_match_ent, u.modalias),
	PROBE_OFF(struct verbs_match_ent, u.driver_id),
	PROBE_OFF(struct verbs_match_ent, vendor),
	PROBE_OFF(struct verbs_match_ent, device),
	PROBE_OFF(struct verbs_match_ent, kind),

	PROBE_SIZE(struct verbs_device_ops),
	PROBE_ALIGN(struct verbs_device_ops),
	PROBE_OFF(struct verbs_device_ops, name),
	PROBE_OFF(struct verbs_device_ops, match_min_abi_version),
	PROBE_OFF(struct verbs_device_ops, match_max_abi_version),
	PROBE_OFF(struct verbs_device_ops, match_table),
	PROBE_OFF(struct verbs_device_ops, static_providers),
	PROBE_OFF(struct verbs_device_ops, match_device),
	PROBE_OFF(struct verbs_device_ops, alloc_context),
	PROBE_OFF(struct verbs_device_ops, import_context),
	PROBE_OFF(struct verbs_device_ops, alloc_device),
	PROBE_OFF(struct verbs_device_ops, uninit_device),

	PROBE_SIZE(struct verbs_device),
	PROBE_ALIGN(struct verbs_device),
	PROBE_OFF(struct verbs_device, device),
	PROBE_OFF(struct verbs_device, ops),
	PROBE_OFF(struct verbs_device, refcount),
	PROBE_SIZE(atomic_int),
	PROBE_OFF(struct verbs_device, entry),
	PROBE_SIZE(struct list_node),
	PROBE_OFF(struct verbs_device, sysfs),
	PROBE_OFF(struct verbs_device, core_support),

	PROBE_SIZE(struct verbs_context_ops),
	PROBE_ALIGN(struct verbs_context_ops),
#define TRDMA_CTX_OP(name) PROBE_OFF(struct verbs_context_ops, name),
#include "context_ops_members.def"
#undef TRDMA_CTX_OP

	PROBE_SIZE(struct ibv_get_context),
	PROBE_ALIGN(struct ibv_get_context),
	PROBE_OFF(struct ibv_get_context, hdr),
	PROBE_OFF(struct ibv_get_context, core_payload),
	PROBE_OFF(struct ibv_get_context, core_payload.response),
	PROBE_SIZE(struct ibv_query_port),
	PROBE_ALIGN(struct ibv_query_port),
	PROBE_OFF(struct ibv_query_port, hdr),
	PROBE_OFF(struct ibv_query_port, core_payload),
	PROBE_OFF(struct ibv_query_port, core_payload.port_num),

	PROBE_SIZE(struct verbs_mr),
	PROBE_ALIGN(struct verbs_mr),
	PROBE_OFF(struct verbs_mr, ibv_mr),
	PROBE_OFF(struct verbs_mr, mr_type),
	PROBE_OFF(struct verbs_mr, access),
	PROBE_SIZE(enum ibv_mr_type),
	{ "IBV_MR_TYPE_MR", IBV_MR_TYPE_MR },
	{ "IBV_MR_TYPE_DMABUF_MR", IBV_MR_TYPE_DMABUF_MR },
	{ "VERBS_QP_EX", VERBS_QP_EX },

	/* Command buffers: header, then the core payload, nothing else. */
#define PROBE_CMD(type)                                                        \
	PROBE_SIZE(struct type), PROBE_ALIGN(struct type),                     \
		PROBE_OFF(struct type, hdr),                                   \
		PROBE_OFF(struct type, core_payload)
	PROBE_CMD(ibv_alloc_pd),
	PROBE_CMD(ibv_reg_mr),
	PROBE_OFF(struct ibv_reg_mr, core_payload.start),
	PROBE_OFF(struct ibv_reg_mr, core_payload.access_flags),
	PROBE_CMD(ibv_create_cq),
	PROBE_OFF(struct ibv_create_cq, core_payload.comp_channel),
	PROBE_CMD(ibv_create_qp),
	PROBE_OFF(struct ibv_create_qp, core_payload.max_inline_data),
	PROBE_CMD(ibv_query_qp),
	PROBE_OFF(struct ibv_query_qp, core_payload.attr_mask),
	PROBE_CMD(ibv_modify_qp),
	PROBE_OFF(struct ibv_modify_qp, core_payload.qp_state),
	PROBE_CMD(ibv_create_srq),
	PROBE_OFF(struct ibv_create_srq, core_payload.srq_limit),
	PROBE_CMD(ibv_modify_srq),
	PROBE_OFF(struct ibv_modify_srq, core_payload.srq_limit),
	PROBE_CMD(ibv_query_srq),
	PROBE_OFF(struct ibv_query_srq, core_payload.srq_handle),
#undef PROBE_CMD

#ifndef TRDMA_PROBE_UPSTREAM
	PROBE_SIZE(struct trdma_get_context_cmd),
	PROBE_OFF(struct trdma_get_context_cmd, ibv_cmd),
	PROBE_OFF(struct trdma_get_context_cmd, drv_payload),
	PROBE_OFF(struct trdma_get_context_cmd, drv_payload.abi_version),
	PROBE_SIZE(struct trdma_get_context_resp),
	PROBE_OFF(struct trdma_get_context_resp, ibv_resp),
	PROBE_OFF(struct trdma_get_context_resp, drv_payload),
	PROBE_OFF(struct trdma_get_context_resp, drv_payload.abi_version),
	PROBE_SIZE(struct trdma_cmd_create_cq_resp),
	PROBE_OFF(struct trdma_cmd_create_cq_resp, drv_payload),
	PROBE_OFF(struct trdma_cmd_create_cq_resp, drv_payload.mmap_key),
	PROBE_SIZE(struct trdma_cmd_create_qp_resp),
	PROBE_OFF(struct trdma_cmd_create_qp_resp, drv_payload),
	PROBE_OFF(struct trdma_cmd_create_qp_resp, drv_payload.sq_mmap_key),
	PROBE_SIZE(struct trdma_cmd_create_srq_resp),
	PROBE_OFF(struct trdma_cmd_create_srq_resp, drv_payload),
	PROBE_OFF(struct trdma_cmd_create_srq_resp, drv_payload.mmap_key),
	PROBE_OFF(struct trdma_mr, vmr),
	PROBE_OFF(struct trdma_cq, ibv_cq),
	PROBE_OFF(struct trdma_srq, ibv_srq),
	PROBE_OFF(struct trdma_qp, ibv_qp),
	PROBE_OFF(struct trdma_qp, verbs_qp_tail_room),
	{ "sizeof(trdma_qp.verbs_qp_tail_room)",
	  sizeof(((struct trdma_qp *)0)->verbs_qp_tail_room) },
	PROBE_SIZE(struct ibv_qp_ex),
	PROBE_OFF(struct trdma_device, ibv_dev),
	PROBE_OFF(struct trdma_context, ibv_ctx),
	{ "TRDMA_IBVERBS_PABI_VERSION", TRDMA_IBVERBS_PABI_VERSION },
	{ "TRDMA_HCA_TYPE_BUFSZ", TRDMA_HCA_TYPE_BUFSZ },
#endif
};

const size_t trdma_probe_count =
	sizeof(trdma_probe_values) / sizeof(trdma_probe_values[0]);

#ifndef TRDMA_PROBE_UPSTREAM
bool trdma_probe_hca_type_matches(const char *buf, int len)
{
	return trdma_hca_type_matches(buf, len);
}
#endif
