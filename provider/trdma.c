// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: rdma-core userspace provider for RDMA verbs over Linux TCP.
 *
 * Binds libibverbs to the ib_devices of the out-of-tree trdma.ko, opens
 * user contexts with the trdma ABI handshake, forwards the device and port
 * queries to the kernel and installs the verbs of the other files: PDs and
 * MRs (mem.c), CQs polled from a mapped ring, also through ibv_cq_ex
 * (cq.c), RC and UD QPs posting into mapped rings, also through the
 * ibv_wr_* API of ibv_qp_ex (qp.c), SRQs and AHs (srq.c).
 *
 * Every other verb is left unset in trdma_ctx_ops.  verbs_init_context()
 * (reached through _verbs_init_and_alloc_context()) first installs
 * libibverbs' own defaults (libibverbs/dummy_ops.c) and verbs_set_ops()
 * then replaces only the members we set, so an unset verb fails with
 * EOPNOTSUPP: returned directly by the int verbs, as errno with a NULL
 * result by the object-creating ones (ibv_create_wq(), ibv_open_xrcd(),
 * ...).  The few defaults that are not errors are harmless here: the void
 * hooks (async_event, cq_event) do nothing and query_qp_data_in_order
 * reports 0.  This is the behaviour of rdma-core v36 through v56,
 * checked in v44.0's libibverbs/dummy_ops.c and device.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trdma.h"

static void trdma_free_context(struct ibv_context *ibctx);

/*
 * The kernel fills the firmware version string of the ib_device (sysfs
 * fw_ver, from get_dev_fw_str); report the same string through
 * ibv_query_device().  Left empty when sysfs cannot be read.
 */
static void trdma_read_fw_ver(struct ibv_context *ibctx, char *buf,
			      size_t size)
{
	struct verbs_device *vdev =
		trdma_container_of(ibctx->device, struct verbs_device, device);

	if (!vdev->sysfs ||
	    ibv_read_ibdev_sysfs_file(buf, size, vdev->sysfs, "fw_ver") < 0)
		memset(buf, 0, size);
}

static int trdma_query_device_ex(struct ibv_context *ibctx,
				 const struct ibv_query_device_ex_input *input,
				 struct ibv_device_attr_ex *attr,
				 size_t attr_size)
{
	int ret;

	ret = ibv_cmd_query_device_any(ibctx, input, attr, attr_size, NULL,
				       NULL);
	if (ret)
		return ret;

	trdma_read_fw_ver(ibctx, attr->orig_attr.fw_ver,
			  sizeof(attr->orig_attr.fw_ver));
	return 0;
}

static int trdma_query_port(struct ibv_context *ibctx, uint8_t port,
			    struct ibv_port_attr *attr)
{
	struct ibv_query_port cmd;

	memset(&cmd, 0, sizeof(cmd));
	return ibv_cmd_query_port(ibctx, port, attr, &cmd, sizeof(cmd));
}

static const struct verbs_context_ops trdma_ctx_ops = {
	.advise_mr = trdma_advise_mr,
	.alloc_mw = trdma_alloc_mw,
	.alloc_pd = trdma_alloc_pd,
	.bind_mw = trdma_bind_mw,
	.create_ah = trdma_create_ah,
	.create_cq = trdma_create_cq,
	.create_cq_ex = trdma_create_cq_ex,
	.create_qp = trdma_create_qp,
	.create_qp_ex = trdma_create_qp_ex,
	.create_srq = trdma_create_srq,
	.dealloc_mw = trdma_dealloc_mw,
	.dealloc_pd = trdma_dealloc_pd,
	.dereg_mr = trdma_dereg_mr,
	.destroy_ah = trdma_destroy_ah,
	.destroy_cq = trdma_destroy_cq,
	.destroy_qp = trdma_destroy_qp,
	.destroy_srq = trdma_destroy_srq,
	.free_context = trdma_free_context,
	.modify_qp = trdma_modify_qp,
	.modify_srq = trdma_modify_srq,
	.poll_cq = trdma_poll_cq,
	.post_recv = trdma_post_recv,
	.post_send = trdma_post_send,
	.post_srq_recv = trdma_post_srq_recv,
	.query_device_ex = trdma_query_device_ex,
	.query_port = trdma_query_port,
	.query_qp = trdma_query_qp,
	.query_srq = trdma_query_srq,
	.reg_dmabuf_mr = trdma_reg_dmabuf_mr,
	.reg_mr = trdma_reg_mr,
	.rereg_mr = trdma_rereg_mr,
	.req_notify_cq = trdma_req_notify_cq,
	.resize_cq = trdma_resize_cq,
};

static struct verbs_context *trdma_alloc_context(struct ibv_device *ibdev,
						 int cmd_fd,
						 void *private_data)
{
	struct trdma_get_context_cmd cmd;
	struct trdma_get_context_resp resp;
	struct trdma_context *ctx;
	int ret;

	(void)private_data;

	/* On failure this has closed cmd_fd and set errno. */
	ctx = _verbs_init_and_alloc_context(
		ibdev, cmd_fd, sizeof(*ctx),
		(struct verbs_context *)(uintptr_t)offsetof(struct trdma_context,
							    ibv_ctx),
		RDMA_DRIVER_UNKNOWN);
	if (!ctx)
		return NULL;

	memset(&cmd, 0, sizeof(cmd));
	memset(&resp, 0, sizeof(resp));
	cmd.drv_payload.abi_version = TRDMA_ABI_VERSION;

	ret = ibv_cmd_get_context(&ctx->ibv_ctx, &cmd.ibv_cmd, sizeof(cmd),
				  &resp.ibv_resp, sizeof(resp));
	if (ret) {
		if (ret == EPROTO)
			fprintf(stderr,
				"trdma: %s: kernel refused provider ABI %u\n",
				ibdev->name, (unsigned int)TRDMA_ABI_VERSION);
		goto err;
	}

	if (resp.drv_payload.abi_version != TRDMA_ABI_VERSION) {
		fprintf(stderr,
			"trdma: %s: kernel speaks ABI %u, provider speaks ABI %u\n",
			ibdev->name, resp.drv_payload.abi_version,
			(unsigned int)TRDMA_ABI_VERSION);
		ret = EPROTO;
		goto err;
	}

	ctx->page_size = (size_t)sysconf(_SC_PAGESIZE);
	ctx->poll_yield = trdma_poll_yield_default(getenv("TRDMA_POLL_YIELD"),
						   sysconf(_SC_NPROCESSORS_ONLN));
	verbs_set_ops(&ctx->ibv_ctx, &trdma_ctx_ops);
	return &ctx->ibv_ctx;

err:
	/* Closes cmd_fd, which releases the kernel's ucontext if any. */
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
	errno = ret;
	return NULL;
}

static void trdma_free_context(struct ibv_context *ibctx)
{
	struct trdma_context *ctx = to_tctx(ibctx);

	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
}

static struct verbs_device *trdma_alloc_device(struct verbs_sysfs_dev *sysfs_dev)
{
	struct trdma_device *dev;

	(void)sysfs_dev;

	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return NULL;
	return &dev->ibv_dev;
}

static void trdma_uninit_device(struct verbs_device *vdev)
{
	free(trdma_container_of(vdev, struct trdma_device, ibv_dev));
}

/*
 * trdma.ko is out of tree, so its devices report RDMA_DRIVER_UNKNOWN and
 * cannot be matched by driver id.  They are recognised by the hca_type
 * attribute the module publishes for every trdma ib_device.  libibverbs
 * calls this for every device not claimed by a provider tried before this
 * one, so it must reject anything else quietly; the uverbs ABI version is
 * checked by libibverbs afterwards against match_{min,max}_abi_version.
 */
static bool trdma_match_device(struct verbs_sysfs_dev *sysfs_dev)
{
	char hca_type[TRDMA_HCA_TYPE_BUFSZ];
	int len;

	len = ibv_read_ibdev_sysfs_file(hca_type, sizeof(hca_type), sysfs_dev,
					"hca_type");
	return trdma_hca_type_matches(hca_type, len);
}

/*
 * No table entry matches anything, but libibverbs requires a table: when
 * any device in the system has a known driver id it walks every
 * provider's match_table without a NULL check (match_driver_id() in
 * libibverbs/init.c, v36 through v56).  An empty table makes it fall
 * through to trdma_match_device().
 */
static const struct verbs_match_ent trdma_match_table[] = {
	{ .kind = VERBS_MATCH_SENTINEL },
};

static const struct verbs_device_ops trdma_dev_ops = {
	.name = "trdma",
	.match_min_abi_version = TRDMA_ABI_VERSION,
	.match_max_abi_version = TRDMA_ABI_VERSION,
	.match_table = trdma_match_table,
	.match_device = trdma_match_device,
	.alloc_device = trdma_alloc_device,
	.uninit_device = trdma_uninit_device,
	.alloc_context = trdma_alloc_context,
};

/*
 * Pin the supported rdma-core range in the dynamic linker.  The upper end
 * is verbs_register_driver_34: rdma-core v57 moved to IBVERBS_PRIVATE_57.
 * The lower end: v34 and v35 also export IBVERBS_PRIVATE_34 but have a
 * shorter struct verbs_context_ops.  v36 added query_qp_data_in_order to
 * it together with the public ibv_query_qp_data_in_order() in the new
 * symbol version IBVERBS_1.14, so referencing that function makes the
 * provider fail to load on v34/v35 instead of handing them ops at the
 * wrong offsets.
 */
__attribute__((used)) static int (*const trdma_needs_ibverbs_1_14)(
	struct ibv_qp *, enum ibv_wr_opcode, uint32_t) =
	ibv_query_qp_data_in_order;

static __attribute__((constructor)) void trdma_register_driver(void)
{
	verbs_register_driver_34(&trdma_dev_ops);
}
