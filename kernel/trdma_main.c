// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: RDMA verbs over the kernel's TCP stack.
 *
 * Module set-up: the "trdma" rdma link type, one ib_device per bound netdev,
 * the netdev notifier that keeps each port's state in step with its
 * netdev, and what trdma has in each network namespace (struct trdma_net).
 */
#include <linux/ctype.h>
#include <linux/delay.h>
#include <linux/if_arp.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/rtnetlink.h>
#include <net/addrconf.h>
#include <net/net_namespace.h>
#include <net/netns/generic.h>
#include <rdma/ib_cache.h>
#include <rdma/rdma_netlink.h>

#include "trdma.h"
#include "trdma_verbs.h"

MODULE_AUTHOR("trdma developers");
MODULE_DESCRIPTION("RDMA verbs over the kernel's TCP stack");
MODULE_LICENSE("Dual BSD/GPL");

/* Resource limits of every trdma device, fixed at load time. */
struct trdma_limits trdma_limits = {
	.max_qp = 16384,
	.max_qp_wr = 16384,
	.max_sge = 16,
	.max_inline = 256,
	.max_cq = 16384,
	.max_cqe = (1 << 20) - 1,
	.max_mr = 65536,
	.max_pd = 65536,
	.max_srq = 4096,
	.max_srq_wr = 16384,
	.max_ah = 65536,
	.max_qp_rd_atom = 16,
	.max_mr_size = 1ULL << 40,
};

module_param_named(max_qp, trdma_limits.max_qp, uint, 0444);
MODULE_PARM_DESC(max_qp, "QPs per device (default 16384)");
module_param_named(max_qp_wr, trdma_limits.max_qp_wr, uint, 0444);
MODULE_PARM_DESC(max_qp_wr, "Work requests per queue (default 16384)");
module_param_named(max_sge, trdma_limits.max_sge, uint, 0444);
MODULE_PARM_DESC(max_sge, "SGEs per work request (default 16, at most 32)");
module_param_named(max_inline, trdma_limits.max_inline, uint, 0444);
MODULE_PARM_DESC(max_inline, "Inline bytes per send (default 256)");
module_param_named(max_cq, trdma_limits.max_cq, uint, 0444);
MODULE_PARM_DESC(max_cq, "CQs per device (default 16384)");
module_param_named(max_cqe, trdma_limits.max_cqe, uint, 0444);
MODULE_PARM_DESC(max_cqe, "Entries per CQ (default 1048575)");
module_param_named(max_mr, trdma_limits.max_mr, uint, 0444);
MODULE_PARM_DESC(max_mr, "MRs per device (default 65536)");
module_param_named(max_pd, trdma_limits.max_pd, uint, 0444);
MODULE_PARM_DESC(max_pd, "PDs per device (default 65536)");
module_param_named(max_srq, trdma_limits.max_srq, uint, 0444);
MODULE_PARM_DESC(max_srq, "SRQs per device (default 4096)");
module_param_named(max_srq_wr, trdma_limits.max_srq_wr, uint, 0444);
MODULE_PARM_DESC(max_srq_wr, "Work requests per SRQ (default 16384)");
module_param_named(max_ah, trdma_limits.max_ah, uint, 0444);
MODULE_PARM_DESC(max_ah, "Address handles per device (default 65536)");

/* Brings module parameters into the ranges the ABI can carry. */
static void trdma_limits_clamp(void)
{
	struct trdma_limits *l = &trdma_limits;

	l->max_qp = clamp(l->max_qp, 1U, TRDMA_MAX_QPN - TRDMA_MIN_QPN + 1);
	l->max_qp_wr = clamp(l->max_qp_wr, 1U, 1U << 20);
	l->max_sge = clamp(l->max_sge, 1U, TRDMA_MAX_SGE);
	l->max_inline = min(l->max_inline, 4096U);
	l->max_cq = max(l->max_cq, 1U);
	l->max_cqe = clamp(l->max_cqe, 1U, (1U << 22) - 1);
	l->max_mr = clamp(l->max_mr, 1U, TRDMA_MAX_MR_INDEX);
	l->max_pd = max(l->max_pd, 1U);
	l->max_srq = max(l->max_srq, 1U);
	l->max_ah = max(l->max_ah, 1U);
	l->max_srq_wr = clamp(l->max_srq_wr, 1U, 1U << 20);
}

/*
 * All trdma devices, registered or on their way in or out.  A device is
 * added by trdma_newlink() before it is registered and removed by
 * trdma_dealloc_driver(), so a netdev never gets two trdma devices.
 *
 * Lock order: RTNL (netdev notifier) -> trdma_dev_lock.  Nothing that takes
 * RTNL or waits for the RDMA core may be called with trdma_dev_lock held.
 */
static LIST_HEAD(trdma_dev_list);
static DEFINE_MUTEX(trdma_dev_lock);

static struct trdma_dev *trdma_find_dev_locked(struct net_device *ndev)
{
	struct trdma_dev *tdev;

	lockdep_assert_held(&trdma_dev_lock);

	list_for_each_entry(tdev, &trdma_dev_list, list)
		if (tdev->netdev == ndev && !tdev->netdev_gone)
			return tdev;
	return NULL;
}

/*
 * The registered trdma device of network namespace net that has gid in its
 * GID table, with a reference (ib_device_put), or NULL.  A device of
 * another namespace is never found: the same address may be another
 * host's there.  Any context: the datagram receive path (softirq) and the
 * accepting side of connections.
 */
struct trdma_dev *trdma_dev_get_by_gid(const struct net *net,
				       const union ib_gid *gid)
{
	const struct ib_gid_attr *attr;
	struct trdma_dev *tdev, *found = NULL;

	rcu_read_lock();
	list_for_each_entry_rcu(tdev, &trdma_dev_list, list) {
		if (!net_eq(tdev->net, net) || READ_ONCE(tdev->netdev_gone) ||
		    !ib_device_try_get(&tdev->ibdev))
			continue;
		attr = rdma_find_gid_by_port(&tdev->ibdev, gid,
					     IB_GID_TYPE_ROCE_UDP_ENCAP, 1,
					     NULL);
		if (!IS_ERR(attr)) {
			rdma_put_gid_attr(attr);
			found = tdev;
			break;
		}
		ib_device_put(&tdev->ibdev);
	}
	rcu_read_unlock();
	return found;
}

/*
 * Per network namespace state (struct trdma_net, net_generic storage).
 *
 * trdma_net_lock protects every trdma_net's users and what it holds; it
 * is taken by newlink and dealloc_driver, outside trdma_dev_lock, and
 * nothing that waits for the RDMA core is called with it held.
 */
static unsigned int trdma_net_id;
static DEFINE_MUTEX(trdma_net_lock);

static void trdma_net_down_locked(struct trdma_net *tnet)
{
	lockdep_assert_held(&trdma_net_lock);
	if (!atomic_read(&tnet->closings))
		trdma_tcpopt_net_down(tnet);
	trdma_ud_net_down(tnet);
	trdma_cm_net_down(tnet);
}

/*
 * A device's netdev is in net: the device takes a count on its namespace's
 * state, which the first one sets up.  Process context.
 */
static int trdma_net_get(struct trdma_dev *tdev, struct net *net)
{
	struct trdma_net *tnet = net_generic(net, trdma_net_id);
	int rv = 0;

	mutex_lock(&trdma_net_lock);
	if (!tnet->users++) {
		tnet->net = net;
		rv = trdma_cm_net_up(tnet);
		if (!rv)
			rv = trdma_ud_net_up(tnet);
		if (!rv)
			rv = trdma_tcpopt_net_up(tnet);
		if (rv) {
			trdma_net_down_locked(tnet);
			tnet->users--;
		}
	}
	mutex_unlock(&trdma_net_lock);
	if (rv)
		return rv;
	tdev->net = net;
	tdev->tnet = tnet;
	return 0;
}

/*
 * A connection its QP let go of closes on (trdma_cm.c) and keeps the
 * option hook of its namespace until it is released.  Taken while the
 * QP's device is still there (a device counts in users from newlink to
 * dealloc_driver, after its QPs are gone), so the hook is registered.
 */
void trdma_net_closing_get(struct trdma_net *tnet)
{
	atomic_inc(&tnet->closings);
}

/*
 * The closing connection is released.  Only the last one of the
 * namespace takes trdma_net_lock (its count read there by
 * trdma_net_down_locked()).  Process context.
 */
void trdma_net_closing_put(struct trdma_net *tnet)
{
	if (atomic_add_unless(&tnet->closings, -1, 1))
		return;
	mutex_lock(&trdma_net_lock);
	if (atomic_dec_and_test(&tnet->closings) && !tnet->users)
		trdma_tcpopt_net_down(tnet);
	mutex_unlock(&trdma_net_lock);
}

/* The device is gone; the last one of its namespace tears its state down. */
static void trdma_net_put(struct trdma_dev *tdev)
{
	struct trdma_net *tnet = tdev->tnet;

	if (!tnet)
		return;
	mutex_lock(&trdma_net_lock);
	if (!--tnet->users)
		trdma_net_down_locked(tnet);
	mutex_unlock(&trdma_net_lock);
}

static ssize_t hca_type_show(struct device *device,
			     struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%s\n", TRDMA_HCA_TYPE);
}
static DEVICE_ATTR_RO(hca_type);

static ssize_t parent_show(struct device *device,
			   struct device_attribute *attr, char *buf)
{
	struct trdma_dev *tdev =
		rdma_device_to_drv_device(device, struct trdma_dev, ibdev);

	return sysfs_emit(buf, "%s\n", netdev_name(tdev->netdev));
}
static DEVICE_ATTR_RO(parent);

static struct trdma_dev *trdma_attr_dev(struct device *device)
{
	return rdma_device_to_drv_device(device, struct trdma_dev, ibdev);
}

static ssize_t tcp_congestion_show(struct device *device,
				   struct device_attribute *attr, char *buf)
{
	struct trdma_dev *tdev = trdma_attr_dev(device);
	ssize_t n;

	spin_lock(&tdev->knob_lock);
	n = sysfs_emit(buf, "%s\n", tdev->tcp_cc);
	spin_unlock(&tdev->knob_lock);
	return n;
}

static ssize_t tcp_congestion_store(struct device *device,
				    struct device_attribute *attr,
				    const char *buf, size_t count)
{
	struct trdma_dev *tdev = trdma_attr_dev(device);
	char name[sizeof(tdev->tcp_cc)];
	size_t len = strcspn(buf, "\n");
	size_t i;

	if (len >= sizeof(name))
		return -EINVAL;
	for (i = 0; i < len; i++)
		if (!isalnum(buf[i]) && buf[i] != '_' && buf[i] != '-')
			return -EINVAL;
	memcpy(name, buf, len);
	name[len] = 0;
	spin_lock(&tdev->knob_lock);
	strscpy(tdev->tcp_cc, name, sizeof(tdev->tcp_cc));
	spin_unlock(&tdev->knob_lock);
	return count;
}
static DEVICE_ATTR_RW(tcp_congestion);

static ssize_t trdma_int_store(struct device *device, const char *buf,
			       int *field, int min, int max)
{
	struct trdma_dev *tdev = trdma_attr_dev(device);
	int val, rv;

	rv = kstrtoint(buf, 0, &val);
	if (rv)
		return rv;
	if (val < min || val > max)
		return -EINVAL;
	spin_lock(&tdev->knob_lock);
	*field = val;
	spin_unlock(&tdev->knob_lock);
	return 0;
}

static ssize_t tcp_sndbuf_show(struct device *device,
			       struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n",
			  READ_ONCE(trdma_attr_dev(device)->tcp_sndbuf));
}

static ssize_t tcp_sndbuf_store(struct device *device,
				struct device_attribute *attr,
				const char *buf, size_t count)
{
	return trdma_int_store(device, buf,
			       &trdma_attr_dev(device)->tcp_sndbuf, 0,
			       INT_MAX / 2) ?: count;
}
static DEVICE_ATTR_RW(tcp_sndbuf);

static ssize_t tcp_rcvbuf_show(struct device *device,
			       struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n",
			  READ_ONCE(trdma_attr_dev(device)->tcp_rcvbuf));
}

static ssize_t tcp_rcvbuf_store(struct device *device,
				struct device_attribute *attr,
				const char *buf, size_t count)
{
	return trdma_int_store(device, buf,
			       &trdma_attr_dev(device)->tcp_rcvbuf, 0,
			       INT_MAX / 2) ?: count;
}
static DEVICE_ATTR_RW(tcp_rcvbuf);

static ssize_t tcp_nodelay_show(struct device *device,
				struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n",
			  READ_ONCE(trdma_attr_dev(device)->tcp_nodelay));
}

static ssize_t tcp_nodelay_store(struct device *device,
				 struct device_attribute *attr,
				 const char *buf, size_t count)
{
	bool on;
	int rv = kstrtobool(buf, &on);

	if (rv)
		return rv;
	WRITE_ONCE(trdma_attr_dev(device)->tcp_nodelay, on);
	return count;
}
static DEVICE_ATTR_RW(tcp_nodelay);

/*
 * The link key (trdma_key.c): write-only.  What is written, less one
 * trailing newline, is the key (1 to 80 bytes); an empty line removes it.
 * It applies to connections set up from then on.
 */
static ssize_t tcp_md5_key_store(struct device *device,
				 struct device_attribute *attr,
				 const char *buf, size_t count)
{
	size_t len = count;
	int rv;

	if (len && buf[len - 1] == '\n')
		len--;
	rv = trdma_key_set(trdma_attr_dev(device), buf, len);
	return rv ?: count;
}
static DEVICE_ATTR_WO(tcp_md5_key);

/* Whether the device has a link key: 1 or 0. */
static ssize_t tcp_md5_show(struct device *device,
			    struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n",
			  trdma_key_present(trdma_attr_dev(device)));
}
static DEVICE_ATTR_RO(tcp_md5);

/*
 * Encrypted links (trdma_tls.c): 1 or 0.  Writing 1 needs the link key
 * (tcp_md5_key) first: ENOKEY without it.  Applies to connections set up
 * from then on.
 */
static ssize_t tls_show(struct device *device, struct device_attribute *attr,
			char *buf)
{
	return sysfs_emit(buf, "%d\n", trdma_tls_on(trdma_attr_dev(device)));
}

static ssize_t tls_store(struct device *device, struct device_attribute *attr,
			 const char *buf, size_t count)
{
	bool on;
	int rv = kstrtobool(buf, &on);

	if (!rv)
		rv = trdma_tls_set(trdma_attr_dev(device), on);
	return rv ?: count;
}
static DEVICE_ATTR_RW(tls);

static struct attribute *trdma_dev_attributes[] = {
	&dev_attr_hca_type.attr,
	&dev_attr_parent.attr,
	&dev_attr_tcp_congestion.attr,
	&dev_attr_tcp_sndbuf.attr,
	&dev_attr_tcp_rcvbuf.attr,
	&dev_attr_tcp_nodelay.attr,
	&dev_attr_tcp_md5_key.attr,
	&dev_attr_tcp_md5.attr,
	&dev_attr_tls.attr,
	NULL,
};

static const struct attribute_group trdma_attr_group = {
	.attrs = trdma_dev_attributes,
};

/*
 * The device goes away (rdma link delete, the netdev unregistering, rmmod)
 * while processes still use it.  Offering this op lets the core destroy
 * their objects now (each QP flushes its work into its CQ first), raise
 * IB_EVENT_DEVICE_FATAL and fail their later commands with EIO, instead of
 * waiting for them to close the device.  Nothing is left to undo here: the
 * rings stay mapped in the process (the pages live until it unmaps them),
 * so the flush completions can still be polled, and the kernel no longer
 * looks at them.
 */
static void trdma_disassociate_ucontext(struct ib_ucontext *uctx)
{
}

static void trdma_dealloc_driver(struct ib_device *ibdev)
{
	struct trdma_dev *tdev = to_tdev(ibdev);

	mutex_lock(&trdma_dev_lock);
	list_del_rcu(&tdev->list);
	mutex_unlock(&trdma_dev_lock);
	/* No lookup still looks at it (trdma_dev_get_by_gid). */
	synchronize_rcu();

	/* Its QPs, and with them their connections, are gone. */
	cancel_delayed_work_sync(&tdev->frag_work);
	trdma_net_put(tdev);
	netdev_put(tdev->netdev, &tdev->netdev_tracker);
	WARN_ON(!xa_empty(&tdev->mr_xa) || !xa_empty(&tdev->qp_xa) ||
		!xa_empty(&tdev->ah_xa));
	xa_destroy(&tdev->ah_xa);
	memzero_explicit(tdev->md5_key, sizeof(tdev->md5_key));
	xa_destroy(&tdev->mr_xa);
	xa_destroy(&tdev->qp_xa);
}

/*
 * The core allocates a QP (INIT_RDMA_OBJ_SIZE below) with kzalloc(): one
 * byte over 4 KiB and it comes from kmalloc-8k, 4 KiB more kernel memory
 * for each of ten thousand QPs (docs/performance.md, memory per QP).
 * Kernels with lock debugging grow the locks inside and may pass it.
 */
#if !defined(CONFIG_DEBUG_SPINLOCK) && !defined(CONFIG_DEBUG_LOCK_ALLOC) && \
	!defined(CONFIG_DEBUG_MUTEXES) && !defined(CONFIG_PREEMPT_RT)
static_assert(sizeof(struct trdma_qp) <= 4096);
#endif

static const struct ib_device_ops trdma_dev_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver = TRDMA_ABI_VERSION,

	.alloc_hw_port_stats = trdma_alloc_hw_port_stats,
	.alloc_mr = trdma_alloc_mr,
	.alloc_pd = trdma_alloc_pd,
	.alloc_ucontext = trdma_alloc_ucontext,
	.create_ah = trdma_create_ah,
	.create_cq = trdma_create_cq,
	.create_qp = trdma_create_qp,
	.create_srq = trdma_create_srq,
	.create_user_ah = trdma_create_ah,
	.dealloc_driver = trdma_dealloc_driver,
	.alloc_mw = trdma_alloc_mw,
	.dealloc_mw = trdma_dealloc_mw,
	.dealloc_pd = trdma_dealloc_pd,
	.dealloc_ucontext = trdma_dealloc_ucontext,
	.dereg_mr = trdma_dereg_mr,
	.advise_mr = trdma_advise_mr,
	.disassociate_ucontext = trdma_disassociate_ucontext,
	.destroy_ah = trdma_destroy_ah,
	.destroy_cq = trdma_destroy_cq,
	.destroy_qp = trdma_destroy_qp,
	.destroy_srq = trdma_destroy_srq,
	.device_group = &trdma_attr_group,
	.get_dev_fw_str = trdma_get_dev_fw_str,
	.get_dma_mr = trdma_get_dma_mr,
	.get_hw_stats = trdma_get_hw_stats,
	.get_link_layer = trdma_get_link_layer,
	.get_port_immutable = trdma_get_port_immutable,
	.map_mr_sg = trdma_map_mr_sg,
	.mmap = trdma_mmap,
	.mmap_free = trdma_mmap_free,
	.modify_qp = trdma_modify_qp,
	.modify_srq = trdma_modify_srq,
	.poll_cq = trdma_poll_cq,
	.post_recv = trdma_post_recv,
	.post_send = trdma_post_send,
	.post_srq_recv = trdma_post_srq_recv,
	.query_ah = trdma_query_ah,
	.query_device = trdma_query_device,
	.query_pkey = trdma_query_pkey,
	.query_port = trdma_query_port,
	.query_qp = trdma_query_qp,
	.query_srq = trdma_query_srq,
	.reg_user_mr = trdma_reg_user_mr,
	.reg_user_mr_dmabuf = trdma_reg_user_mr_dmabuf,
	.rereg_user_mr = trdma_rereg_user_mr,
	.req_notify_cq = trdma_req_notify_cq,
	.resize_cq = trdma_resize_cq,

	INIT_RDMA_OBJ_SIZE(ib_ah, trdma_ah, ibah),
	INIT_RDMA_OBJ_SIZE(ib_cq, trdma_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_mw, trdma_mw, ibmw),
	INIT_RDMA_OBJ_SIZE(ib_pd, trdma_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_qp, trdma_qp, ibqp),
	INIT_RDMA_OBJ_SIZE(ib_srq, trdma_srq, ibsrq),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, trdma_ucontext, ibucontext),
};

/* Report a port state change with its async event; called under RTNL. */
static void trdma_port_sync(struct trdma_dev *tdev)
{
	enum ib_port_state state = trdma_netdev_port_state(tdev->netdev);
	struct ib_event event = {
		.device = &tdev->ibdev,
		.element.port_num = 1,
	};

	ASSERT_RTNL();

	if (state == tdev->reported_state)
		return;

	tdev->reported_state = state;
	event.event = state == IB_PORT_ACTIVE ? IB_EVENT_PORT_ACTIVE :
						IB_EVENT_PORT_ERR;
	ib_dispatch_event(&event);
	ibdev_info(&tdev->ibdev, "port %s\n",
		   state == IB_PORT_ACTIVE ? "active" : "down");
}

static int trdma_newlink(const char *ibdev_name, struct net_device *ndev)
{
	struct trdma_dev *tdev;
	struct ib_device *ibdev;
	bool gone;
	int rv;

	if (ndev->type != ARPHRD_ETHER) {
		pr_err("trdma: %s is not an Ethernet device\n", ndev->name);
		return -EINVAL;
	}

	tdev = ib_alloc_device(trdma_dev, ibdev);
	if (!tdev)
		return -ENOMEM;
	ibdev = &tdev->ibdev;

	netdev_hold(ndev, &tdev->netdev_tracker, GFP_KERNEL);
	tdev->netdev = ndev;
	spin_lock_init(&tdev->knob_lock);
	spin_lock_init(&tdev->frag_lock);
	INIT_LIST_HEAD(&tdev->frag_qps);
	INIT_DELAYED_WORK(&tdev->frag_work, trdma_frag_work);
	tdev->tcp_nodelay = true;
	xa_init_flags(&tdev->mr_xa, XA_FLAGS_ALLOC1);
	xa_init_flags(&tdev->qp_xa, XA_FLAGS_ALLOC | XA_FLAGS_LOCK_BH);
	xa_init_flags(&tdev->ah_xa, XA_FLAGS_ALLOC1 | XA_FLAGS_LOCK_IRQ);

	/*
	 * The netdev's namespace: the caller's, where the RDMA core looked
	 * it up.  Its listener and datagram sockets are up from here on.
	 */
	rv = trdma_net_get(tdev, dev_net(ndev));
	if (rv)
		goto err_put;

	mutex_lock(&trdma_dev_lock);
	/*
	 * An unregistering netdev has had (or is having) its
	 * NETDEV_UNREGISTER, which could not find us.
	 */
	rv = READ_ONCE(ndev->reg_state) != NETREG_REGISTERED ? -ENODEV :
	     trdma_find_dev_locked(ndev) ? -EEXIST : 0;
	if (rv) {
		mutex_unlock(&trdma_dev_lock);
		if (rv == -EEXIST)
			pr_err("trdma: %s already has a trdma device\n",
			       ndev->name);
		trdma_net_put(tdev);
		goto err_put;
	}
	list_add_tail_rcu(&tdev->list, &trdma_dev_list);
	mutex_unlock(&trdma_dev_lock);

	/* From here on, ib_dealloc_device() unwinds through dealloc_driver. */
	strscpy(ibdev->node_desc, TRDMA_NODE_DESC, sizeof(ibdev->node_desc));
	ibdev->node_type = RDMA_NODE_IB_CA;
	ibdev->phys_port_cnt = 1;
	ibdev->num_comp_vectors = num_possible_cpus();
	ibdev->dev.parent = ndev->dev.parent;
	if (ndev->addr_len >= ETH_ALEN)
		addrconf_addr_eui48((u8 *)&ibdev->node_guid, ndev->dev_addr);
	else
		get_random_bytes(&ibdev->node_guid, sizeof(ibdev->node_guid));

	/*
	 * The uverbs write commands the provider uses as doorbells: POST_SEND
	 * and POST_RECV without WRs, and REQ_NOTIFY_CQ.
	 */
	ibdev->uverbs_cmd_mask |= BIT_ULL(IB_USER_VERBS_CMD_POST_SEND) |
				  BIT_ULL(IB_USER_VERBS_CMD_POST_RECV) |
				  BIT_ULL(IB_USER_VERBS_CMD_REQ_NOTIFY_CQ);
	ib_set_device_ops(ibdev, &trdma_dev_ops);

	rv = ib_device_set_netdev(ibdev, ndev, 1);
	if (rv)
		goto err_dealloc;

	rtnl_lock();
	tdev->reported_state = trdma_netdev_port_state(ndev);
	rtnl_unlock();

	rv = ib_register_device(ibdev, ibdev_name, NULL);
	if (rv)
		goto err_dealloc;

	/*
	 * The netdev may have started to unregister while the device was
	 * being registered; the notifier then could not queue our removal.
	 */
	mutex_lock(&trdma_dev_lock);
	gone = tdev->netdev_gone;
	mutex_unlock(&trdma_dev_lock);
	if (gone) {
		ib_unregister_device(ibdev);
		return -ENODEV;
	}

	/* Catch a carrier change that raced with registration. */
	rtnl_lock();
	trdma_port_sync(tdev);
	rtnl_unlock();

	ibdev_info(ibdev, "bound to %s\n", netdev_name(ndev));
	return 0;

err_dealloc:
	ib_dealloc_device(ibdev);
	return rv;

err_put:
	netdev_put(ndev, &tdev->netdev_tracker);
	ib_dealloc_device(ibdev);
	return rv;
}

static struct rdma_link_ops trdma_link_ops = {
	.type = "trdma",
	.newlink = trdma_newlink,
};

static int trdma_netdev_event(struct notifier_block *nb, unsigned long event,
			      void *arg)
{
	struct net_device *ndev = netdev_notifier_info_to_dev(arg);
	struct trdma_dev *tdev;

	mutex_lock(&trdma_dev_lock);
	tdev = trdma_find_dev_locked(ndev);
	if (!tdev || !ib_device_try_get(&tdev->ibdev)) {
		/* Not ours, or not registered (yet or any more). */
		if (tdev && event == NETDEV_UNREGISTER)
			tdev->netdev_gone = true;
		mutex_unlock(&trdma_dev_lock);
		return NOTIFY_DONE;
	}
	if (event == NETDEV_UNREGISTER)
		tdev->netdev_gone = true;
	mutex_unlock(&trdma_dev_lock);

	switch (event) {
	case NETDEV_UNREGISTER:
		ibdev_info(&tdev->ibdev, "%s unregistering, removing device\n",
			   netdev_name(ndev));
		ib_unregister_device_queued(&tdev->ibdev);
		break;
	case NETDEV_UP:
	case NETDEV_DOWN:
	case NETDEV_CHANGE:
		trdma_port_sync(tdev);
		break;
	case NETDEV_CHANGEMTU:
		ibdev_dbg(&tdev->ibdev, "%s mtu now %u\n", netdev_name(ndev),
			  ndev->mtu);
		break;
	default:
		break;
	}
	ib_device_put(&tdev->ibdev);
	return NOTIFY_OK;
}

static struct notifier_block trdma_netdev_nb = {
	.notifier_call = trdma_netdev_event,
};

/*
 * Unregister every device of net (NULL: every device; the caller has
 * stopped new links).  A device still being registered is not yet
 * unregistered by ib_unregister_device(): its newlink removes it, for its
 * netdev is gone (netdev_gone); it is waited for.
 */
static void trdma_remove_all(const struct net *net)
{
	struct trdma_dev *tdev, *last = NULL;

	mutex_lock(&trdma_dev_lock);
	for (;;) {
		list_for_each_entry(tdev, &trdma_dev_list, list)
			if (!net || net_eq(tdev->net, net))
				break;
		if (list_entry_is_head(tdev, &trdma_dev_list, list))
			break;
		/* Keep the memory while unregistering unlocked. */
		get_device(&tdev->ibdev.dev);
		mutex_unlock(&trdma_dev_lock);
		if (tdev == last)
			msleep(20);
		ib_unregister_device(&tdev->ibdev);
		put_device(&tdev->ibdev.dev);
		last = tdev;
		mutex_lock(&trdma_dev_lock);
	}
	mutex_unlock(&trdma_dev_lock);
}

/*
 * A network namespace goes away.  Its netdevs are gone or left for
 * init_net (the device exits ran first), so each of its trdma devices
 * is being removed (trdma_netdev_event()); this waits for them, which
 * destroys their QPs, then releases what their connections left behind.
 * Nothing of trdma may outlive the namespace: its sockets hold no
 * reference on it.
 */
static void __net_exit trdma_net_exit(struct net *net)
{
	struct trdma_net *tnet = net_generic(net, trdma_net_id);

	trdma_remove_all(net);
	trdma_cm_net_flush(net);
	mutex_lock(&trdma_net_lock);
	WARN_ON(tnet->users || tnet->listen || tnet->ud_sock4 || tnet->hooks ||
		atomic_read(&tnet->closings));
	mutex_unlock(&trdma_net_lock);
}

static struct pernet_operations trdma_net_ops = {
	.exit = trdma_net_exit,
	.id = &trdma_net_id,
	.size = sizeof(struct trdma_net),
};

static int __init trdma_init(void)
{
	int rv;

	trdma_limits_clamp();
	rv = trdma_dmabuf_init();
	if (rv)
		return rv;
	rv = trdma_cm_init();
	if (rv)
		goto err_dmabuf;
	rv = register_pernet_subsys(&trdma_net_ops);
	if (rv)
		goto err_cm;
	rv = register_netdevice_notifier(&trdma_netdev_nb);
	if (rv)
		goto err_pernet;

	rdma_link_register(&trdma_link_ops);
	pr_info("trdma: loaded, ABI %u\n", TRDMA_ABI_VERSION);
	return 0;

err_pernet:
	unregister_pernet_subsys(&trdma_net_ops);
err_cm:
	trdma_cm_exit();
err_dmabuf:
	trdma_dmabuf_exit();
	return rv;
}

static void __exit trdma_exit(void)
{
	rdma_link_unregister(&trdma_link_ops);
	trdma_remove_all(NULL);
	unregister_netdevice_notifier(&trdma_netdev_nb);
	unregister_pernet_subsys(&trdma_net_ops);
	trdma_cm_exit();
	trdma_dmabuf_exit();
	pr_info("trdma: unloaded\n");
}

module_init(trdma_init);
module_exit(trdma_exit);
MODULE_ALIAS_RDMA_LINK("trdma");
