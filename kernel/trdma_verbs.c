// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: device, port and user context verbs.
 */
#include <linux/if_ether.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_mad.h>
#include <rdma/uverbs_ioctl.h>

#include "trdma.h"
#include "trdma_verbs.h"

/*
 * Device attributes.  Every resource limit is the one the create verbs
 * enforce (trdma_limits, set by module parameters at load time); features
 * not offered (masked atomics, zero-based windows) are reported absent.
 * Atomics are atomic with respect to other trdma atomics and to the CPU's
 * own atomic operations on the target (IB_ATOMIC_HCA).
 */
int trdma_query_device(struct ib_device *ibdev, struct ib_device_attr *attr,
		       struct ib_udata *udata)
{
	const struct trdma_limits *l = &trdma_limits;

	if (udata->inlen || udata->outlen)
		return -EINVAL;

	memset(attr, 0, sizeof(*attr));
	attr->sys_image_guid = ibdev->node_guid;
	attr->max_mr_size = l->max_mr_size;
	attr->page_size_cap = PAGE_SIZE;
	attr->vendor_id = TRDMA_VENDOR_ID;
	attr->vendor_part_id = TRDMA_VENDOR_PART_ID;
	attr->hw_ver = TRDMA_HW_REV;
	attr->max_qp = l->max_qp;
	attr->max_qp_wr = l->max_qp_wr;
	/*
	 * Memory management extensions: fast-reg MRs, IB_WR_REG_MR,
	 * IB_WR_LOCAL_INV and SEND_WITH_INV (for kernel QPs; a user QP has
	 * SEND_WITH_INV, and LOCAL_INV of its windows).  Memory windows of
	 * type 1 and 2B, for user QPs, never zero-based; they count against
	 * max_mr.  No integrity MRs.  RDMA ATOMIC WRITE on user RC QPs
	 * (flagged where the kernel has the flag; kernel QPs refuse it).
	 */
	attr->device_cap_flags = IB_DEVICE_SYS_IMAGE_GUID |
				 IB_DEVICE_MEM_MGT_EXTENSIONS |
				 IB_DEVICE_MEM_WINDOW |
				 IB_DEVICE_MEM_WINDOW_TYPE_2B |
				 TRDMA_DEVICE_ATOMIC_WRITE;
	attr->max_mw = l->max_mr;
	attr->kernel_cap_flags = IBK_ALLOW_USER_UNREG;
#ifdef CONFIG_INFINIBAND_ON_DEMAND_PAGING
	/*
	 * Explicit and implicit ODP MRs for RC: the receive path answers a
	 * request for a page not present with an RNR NAK while a worker
	 * faults it in (trdma_mem.c, trdma_odp.c).
	 */
	attr->kernel_cap_flags |= IBK_ON_DEMAND_PAGING;
	attr->odp_caps.general_caps = IB_ODP_SUPPORT | IB_ODP_SUPPORT_IMPLICIT;
	attr->odp_caps.per_transport_caps.rc_odp_caps =
		IB_ODP_SUPPORT_SEND | IB_ODP_SUPPORT_RECV |
		IB_ODP_SUPPORT_WRITE | IB_ODP_SUPPORT_READ |
		IB_ODP_SUPPORT_ATOMIC;
#endif
	attr->max_fast_reg_page_list_len = TRDMA_MAX_FR_PAGES;
	attr->max_send_sge = l->max_sge;
	attr->max_recv_sge = l->max_sge;
	attr->max_sge_rd = l->max_sge;
	attr->max_cq = l->max_cq;
	attr->max_cqe = l->max_cqe;
	attr->max_mr = l->max_mr;
	attr->max_pd = l->max_pd;
	attr->max_qp_rd_atom = l->max_qp_rd_atom;
	attr->max_qp_init_rd_atom = l->max_qp_rd_atom;
	attr->max_res_rd_atom = l->max_qp_rd_atom * l->max_qp;
	attr->atomic_cap = IB_ATOMIC_HCA;
	attr->max_ah = l->max_ah;
	attr->max_srq = l->max_srq;
	attr->max_srq_wr = l->max_srq_wr;
	attr->max_srq_sge = l->max_sge;
	attr->max_pkeys = TRDMA_PKEY_TBL_LEN;
	return 0;
}

static const struct rdma_stat_desc trdma_counter_descs[] = {
	[TRDMA_CNT_TX_SEGMENTS].name = "tx_segments",
	[TRDMA_CNT_TX_BYTES].name = "tx_bytes",
	[TRDMA_CNT_RX_SEGMENTS].name = "rx_segments",
	[TRDMA_CNT_RX_BYTES].name = "rx_bytes",
	[TRDMA_CNT_ACKS_SENT].name = "acks_sent",
	[TRDMA_CNT_ACKS_CARRIED].name = "acks_carried",
	[TRDMA_CNT_NAKS_SENT].name = "naks_sent",
	[TRDMA_CNT_RNR_NAKS_SENT].name = "rnr_naks_sent",
	[TRDMA_CNT_RNR_RETRIES].name = "rnr_retries",
	[TRDMA_CNT_REMOTE_ERRORS].name = "remote_errors",
	[TRDMA_CNT_MALFORMED].name = "malformed_segments",
	[TRDMA_CNT_CONNECTIONS].name = "connections",
	[TRDMA_CNT_CONNECT_FAILURES].name = "connect_failures",
	[TRDMA_CNT_QP_FATAL].name = "qp_fatal",
	[TRDMA_CNT_TCPOPT_TAGGED].name = "tcp_option_tagged",
	[TRDMA_CNT_TCPOPT_LEFT_OFF].name = "tcp_option_left_off",
	[TRDMA_CNT_TCPOPT_NO_RECORD].name = "tcp_option_no_record",
	[TRDMA_CNT_TCPOPT_SPAN].name = "tcp_option_span",
	[TRDMA_CNT_TCPOPT_NO_ROOM].name = "tcp_option_no_room",
	[TRDMA_CNT_TCPOPT_UNFIT].name = "tcp_option_unfit",
	[TRDMA_CNT_TCPOPT_AGREE].name = "tcp_option_agree",
	[TRDMA_CNT_TCPOPT_DISAGREE].name = "tcp_option_disagree",
	[TRDMA_CNT_TX_FROM_RX].name = "tx_from_rx",
	[TRDMA_CNT_TX_CORKED].name = "tx_corked",
	[TRDMA_CNT_UD_TX].name = "ud_tx_datagrams",
	[TRDMA_CNT_UD_TX_DROPPED].name = "ud_tx_dropped",
	[TRDMA_CNT_UD_RX].name = "ud_rx_datagrams",
	[TRDMA_CNT_UD_RX_MALFORMED].name = "ud_rx_malformed",
	[TRDMA_CNT_UD_RX_NO_QP].name = "ud_rx_no_qp",
	[TRDMA_CNT_UD_RX_QKEY].name = "ud_rx_bad_qkey",
	[TRDMA_CNT_UD_RX_NO_RQE].name = "ud_rx_no_recv_wqe",
	[TRDMA_CNT_UD_RX_TOO_LONG].name = "ud_rx_too_long",
	[TRDMA_CNT_REFUSED].name = "connections_refused",
	[TRDMA_CNT_REFUSED_SOURCE].name = "refused_bad_source",
	[TRDMA_CNT_REFUSED_PSN].name = "refused_bad_psn",
	[TRDMA_CNT_REFUSED_UNKEYED].name = "refused_unkeyed",
	[TRDMA_CNT_FAST_REG].name = "fast_reg_mr",
	[TRDMA_CNT_LOCAL_INV].name = "local_invalidate",
	[TRDMA_CNT_REMOTE_INV].name = "remote_invalidate",
	[TRDMA_CNT_MW_BIND].name = "mw_bind",
	[TRDMA_CNT_MW_INV].name = "mw_invalidate",
	[TRDMA_CNT_UC_RX_DROPPED].name = "uc_rx_dropped",
	[TRDMA_CNT_FRAGS_RELEASED].name = "tx_frags_released",
	[TRDMA_CNT_REFUSED_TLS].name = "refused_tls",
	[TRDMA_CNT_TLS_CONNECTIONS].name = "tls_connections",
	[TRDMA_CNT_TLS_RX_ERRORS].name = "tls_rx_errors",
	[TRDMA_CNT_REFUSED_TLS_CONFIRM].name = "refused_tls_confirm",
	[TRDMA_CNT_ODP_RX_FAULTS].name = "odp_rx_faults",
	[TRDMA_CNT_ODP_INVAL].name = "odp_invalidations",
	[TRDMA_CNT_ODP_IMR_CHILDREN].name = "odp_implicit_children",
	[TRDMA_CNT_DMABUF_MAPS].name = "dmabuf_maps",
	[TRDMA_CNT_DMABUF_MOVES].name = "dmabuf_moves",
	[TRDMA_CNT_RX_FAULT_STALLS].name = "rx_fault_stalls",
	[TRDMA_CNT_SQ_DOORBELLS].name = "sq_doorbells",
	[TRDMA_CNT_TX_DEFERRED].name = "tx_deferred",
	[TRDMA_CNT_TX_FROM_TIMER].name = "tx_from_timer",
	[TRDMA_CNT_ACK_TIMER_ARMED].name = "ack_timer_armed",
	[TRDMA_CNT_ACK_TIMER_CANCELLED].name = "ack_timer_cancelled",
	[TRDMA_CNT_TX_BACKLOG_FLUSHES].name = "tx_backlog_flushes",
};

struct rdma_hw_stats *trdma_alloc_hw_port_stats(struct ib_device *ibdev,
						u32 port)
{
	BUILD_BUG_ON(ARRAY_SIZE(trdma_counter_descs) != TRDMA_NUM_COUNTERS);
	return rdma_alloc_hw_stats_struct(trdma_counter_descs,
					  TRDMA_NUM_COUNTERS,
					  RDMA_HW_STATS_DEFAULT_LIFESPAN);
}

int trdma_get_hw_stats(struct ib_device *ibdev, struct rdma_hw_stats *stats,
		       u32 port, int index)
{
	struct trdma_dev *tdev = to_tdev(ibdev);
	int i;

	for (i = 0; i < TRDMA_NUM_COUNTERS; i++)
		stats->value[i] = atomic64_read(&tdev->counters[i]);
	return TRDMA_NUM_COUNTERS;
}

int trdma_query_port(struct ib_device *ibdev, u32 port,
		     struct ib_port_attr *attr)
{
	struct trdma_dev *tdev = to_tdev(ibdev);
	struct net_device *ndev = tdev->netdev;
	int rv;

	/* The core zeroes *attr before calling. */
	attr->state = trdma_netdev_port_state(ndev);
	if (attr->state == IB_PORT_ACTIVE)
		attr->phys_state = IB_PORT_PHYS_STATE_LINK_UP;
	else if (netif_running(ndev))
		attr->phys_state = IB_PORT_PHYS_STATE_POLLING;
	else
		attr->phys_state = IB_PORT_PHYS_STATE_DISABLED;

	attr->max_mtu = IB_MTU_4096;
	attr->active_mtu = trdma_active_mtu(ndev);
	attr->port_cap_flags = IB_PORT_CM_SUP;
	attr->gid_tbl_len = TRDMA_GID_TBL_LEN;
	attr->ip_gids = true;
	attr->max_msg_sz = TRDMA_MAX_MSG_SZ;
	attr->pkey_tbl_len = TRDMA_PKEY_TBL_LEN;
	attr->max_vl_num = 1;

	rv = ib_get_eth_speed(ibdev, port, &attr->active_speed,
			      &attr->active_width);
	return rv;
}

int trdma_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey)
{
	if (index >= TRDMA_PKEY_TBL_LEN)
		return -EINVAL;

	*pkey = IB_DEFAULT_PKEY_FULL;
	return 0;
}

int trdma_get_port_immutable(struct ib_device *ibdev, u32 port,
			     struct ib_port_immutable *immutable)
{
	immutable->core_cap_flags = RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
	immutable->pkey_tbl_len = TRDMA_PKEY_TBL_LEN;
	immutable->gid_tbl_len = TRDMA_GID_TBL_LEN;
	immutable->max_mad_size = IB_MGMT_MAD_SIZE;
	return 0;
}

enum rdma_link_layer trdma_get_link_layer(struct ib_device *ibdev, u32 port)
{
	return IB_LINK_LAYER_ETHERNET;
}

void trdma_get_dev_fw_str(struct ib_device *ibdev, char *str)
{
	snprintf(str, IB_FW_VERSION_NAME_MAX, "trdma abi %u",
		 TRDMA_ABI_VERSION);
}

/*
 * The ucontext handshake: the provider states the ABI version it speaks in
 * the request, the kernel answers with its own.  Any other version, a
 * truncated request or non-zero reserved bytes are refused.
 */
int trdma_alloc_ucontext(struct ib_ucontext *ibuctx, struct ib_udata *udata)
{
	struct trdma_alloc_ucontext_resp resp = {};
	struct trdma_alloc_ucontext_req req;
	int rv;

	if (udata->inlen < sizeof(req) || udata->outlen < sizeof(resp))
		return -EINVAL;

	rv = ib_copy_from_udata(&req, udata, sizeof(req));
	if (rv)
		return rv;

	if (req.abi_version != TRDMA_ABI_VERSION) {
		ibdev_dbg(ibuctx->device, "provider ABI %u, kernel ABI %u\n",
			  req.abi_version, TRDMA_ABI_VERSION);
		return -EPROTO;
	}
	if (req.reserved ||
	    !ib_is_udata_cleared(udata, sizeof(req),
				 udata->inlen - sizeof(req)))
		return -EINVAL;

	resp.abi_version = TRDMA_ABI_VERSION;
	return ib_copy_to_udata(udata, &resp, sizeof(resp));
}

void trdma_dealloc_ucontext(struct ib_ucontext *ibuctx)
{
}
