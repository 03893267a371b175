// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: RDMA verbs over the kernel's TCP stack.
 *
 * Module set-up: the "trdma" rdma link type, one ib_device per bound netdev,
 * and the netdev notifier that keeps each port's state in step with its
 * netdev.
 */
#include <linux/if_arp.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/rtnetlink.h>
#include <net/addrconf.h>
#include <rdma/rdma_netlink.h>

#include "trdma.h"
#include "trdma_verbs.h"

MODULE_AUTHOR("trdma developers");
MODULE_DESCRIPTION("RDMA verbs over the kernel's TCP stack");
MODULE_LICENSE("Dual BSD/GPL");

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

static struct attribute *trdma_dev_attributes[] = {
	&dev_attr_hca_type.attr,
	&dev_attr_parent.attr,
	NULL,
};

static const struct attribute_group trdma_attr_group = {
	.attrs = trdma_dev_attributes,
};

static void trdma_dealloc_driver(struct ib_device *ibdev)
{
	struct trdma_dev *tdev = to_tdev(ibdev);

	mutex_lock(&trdma_dev_lock);
	list_del(&tdev->list);
	mutex_unlock(&trdma_dev_lock);

	netdev_put(tdev->netdev, &tdev->netdev_tracker);
}

static const struct ib_device_ops trdma_dev_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver = TRDMA_ABI_VERSION,

	.alloc_ucontext = trdma_alloc_ucontext,
	.dealloc_driver = trdma_dealloc_driver,
	.dealloc_ucontext = trdma_dealloc_ucontext,
	.device_group = &trdma_attr_group,
	.get_dev_fw_str = trdma_get_dev_fw_str,
	.get_link_layer = trdma_get_link_layer,
	.get_port_immutable = trdma_get_port_immutable,
	.query_device = trdma_query_device,
	.query_pkey = trdma_query_pkey,
	.query_port = trdma_query_port,

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

	mutex_lock(&trdma_dev_lock);
	if (trdma_find_dev_locked(ndev)) {
		mutex_unlock(&trdma_dev_lock);
		pr_err("trdma: %s already has a trdma device\n", ndev->name);
		netdev_put(ndev, &tdev->netdev_tracker);
		ib_dealloc_device(ibdev);
		return -EEXIST;
	}
	list_add_tail(&tdev->list, &trdma_dev_list);
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

/* Unregister every device; the caller has stopped new links. */
static void trdma_remove_all(void)
{
	struct trdma_dev *tdev;

	mutex_lock(&trdma_dev_lock);
	while ((tdev = list_first_entry_or_null(&trdma_dev_list,
						struct trdma_dev, list))) {
		/* Keep the memory while unregistering unlocked. */
		get_device(&tdev->ibdev.dev);
		mutex_unlock(&trdma_dev_lock);
		ib_unregister_device(&tdev->ibdev);
		put_device(&tdev->ibdev.dev);
		mutex_lock(&trdma_dev_lock);
	}
	mutex_unlock(&trdma_dev_lock);
}

static int __init trdma_init(void)
{
	int rv;

	rv = register_netdevice_notifier(&trdma_netdev_nb);
	if (rv)
		return rv;

	rdma_link_register(&trdma_link_ops);
	pr_info("trdma: loaded, ABI %u\n", TRDMA_ABI_VERSION);
	return 0;
}

static void __exit trdma_exit(void)
{
	rdma_link_unregister(&trdma_link_ops);
	trdma_remove_all();
	unregister_netdevice_notifier(&trdma_netdev_nb);
	pr_info("trdma: unloaded\n");
}

module_init(trdma_init);
module_exit(trdma_exit);
MODULE_ALIAS_RDMA_LINK("trdma");
