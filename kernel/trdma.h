/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * trdma: RDMA verbs over the kernel's TCP stack.
 *
 * Core definitions shared by every file of the module.
 */
#ifndef _TRDMA_H
#define _TRDMA_H

#include <linux/list.h>
#include <linux/netdevice.h>
#include <rdma/ib_verbs.h>

#include <rdma/trdma-abi.h>

#define TRDMA_NODE_DESC		"trdma"
#define TRDMA_VENDOR_ID		0xffffff	/* no OUI: like rxe, unassigned */
#define TRDMA_VENDOR_PART_ID	0x7464		/* "td" */
#define TRDMA_HW_REV		1
#define TRDMA_PKEY_TBL_LEN	1
#define TRDMA_GID_TBL_LEN	64
#define TRDMA_MAX_MSG_SZ	0x80000000u	/* 2 GiB */

/*
 * Bytes a path MTU worth of payload is wrapped in on the wire: IPv6 (the
 * larger of the two IP headers), TCP with timestamps and the trdma TCP
 * option, and the in-band trdma header.  Used to derive the port's
 * active_mtu from the netdev MTU the way a RoCE port does.
 */
#define TRDMA_WIRE_OVERHEAD	(40 + 20 + 12 + 20 + 32)

/*
 * One trdma device per bound netdev.
 *
 * Lifetime: allocated by trdma_newlink() with ib_alloc_device(), owned by the
 * RDMA core from a successful ib_register_device() on, and freed by the core
 * after ops.dealloc_driver (trdma_dealloc_driver), which drops the netdev
 * reference and removes the device from trdma_dev_list.
 */
struct trdma_dev {
	struct ib_device ibdev;

	/* Held (netdev_hold) from newlink until dealloc_driver. */
	struct net_device *netdev;
	netdevice_tracker netdev_tracker;

	/* On trdma_dev_list; protected by trdma_dev_lock. */
	struct list_head list;
	/* Netdev is being unregistered; protected by trdma_dev_lock. */
	bool netdev_gone;

	/*
	 * Port state last reported through an async event.  Written only by
	 * the netdev notifier and by newlink, both under RTNL.
	 */
	enum ib_port_state reported_state;
};

struct trdma_ucontext {
	struct ib_ucontext ibucontext;
};

static inline struct trdma_dev *to_tdev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct trdma_dev, ibdev);
}

static inline struct trdma_ucontext *to_tuctx(struct ib_ucontext *ibuctx)
{
	return container_of(ibuctx, struct trdma_ucontext, ibucontext);
}

/* The port state a netdev implies: ACTIVE when running with carrier. */
static inline enum ib_port_state trdma_netdev_port_state(struct net_device *nd)
{
	return netif_running(nd) && netif_carrier_ok(nd) ? IB_PORT_ACTIVE :
							    IB_PORT_DOWN;
}

#endif /* _TRDMA_H */
