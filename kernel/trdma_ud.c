// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: UD and GSI (QP1) datagrams, and the address handles they use.
 *
 * A UD send is one UDP datagram (docs/wire.md): from the address of the
 * AH's source GID to port ud_port of the address its destination GID
 * names, through one kernel UDP socket per address family shared by every
 * trdma device of a network namespace (struct trdma_net).  UDP rather
 * than a stream per pair of hosts: UD is unreliable and unordered, so a
 * datagram lost or queued never holds up another, and none of it shares a
 * socket, a lock or a queue with the RC connections.  Not UDP port 4791,
 * which rdma_rxe and RoCE NICs own.
 *
 * The sending side runs in process context, as the holder of the QP's
 * tx_mutex: the poster's doorbell for a user QP, the QP's tx_work for a
 * kernel one (the MAD layer posts with a spinlock held).  A datagram the
 * network stack does not take (no route, no buffer) is lost as it would be
 * on a wire: its WQE still completes successfully, and it is counted.
 *
 * The receiving side runs in softirq as the socket's encap_rcv: it finds
 * the device by the destination address, the QP by the BTH's QPN, checks
 * the header and the Q_Key, takes a receive WQE and places the GRH area
 * (the IP header, as a RoCE v2 port does) and the payload.  A datagram that
 * fails a check is dropped and counted; none changes a QP's state.
 */
#include <linux/highmem.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <net/ip.h>
#include <net/ipv6.h>
#include <net/udp_tunnel.h>
#include <rdma/ib_addr.h>
#include <rdma/uverbs_ioctl.h>

#include "trdma.h"
#include "trdma_verbs.h"

/* The GRH area in front of a UD receive buffer's payload. */
#define TRDMA_GRH_LEN		40
/* Q_Keys with this bit are privileged; in a WQE: use the QP's own. */
#define TRDMA_QKEY_PRIV		0x80000000U

static ushort trdma_ud_port = TRDMA_DEFAULT_UD_PORT;
module_param_named(ud_port, trdma_ud_port, ushort, 0444);
MODULE_PARM_DESC(ud_port, "UDP port of UD and QP1 datagrams (4792)");

/* Largest UD payload on the device's port: its active MTU. */
u32 trdma_ud_mtu(struct trdma_dev *tdev)
{
	return ib_mtu_enum_to_int(trdma_active_mtu(tdev->netdev));
}

/*
 * Address handles.  Each has a number in the device's ah_xa, which the
 * provider writes into UD send WQEs (struct trdma_create_ah_resp); the
 * kernel's own WQEs carry it too.  May be called in atomic context.
 */
int trdma_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init,
		    struct ib_udata *udata)
{
	struct trdma_dev *tdev = to_tdev(ibah->device);
	const struct rdma_ah_attr *attr = init->ah_attr;
	const struct ib_global_route *grh = rdma_ah_read_grh(attr);
	gfp_t gfp = init->flags & RDMA_CREATE_AH_SLEEPABLE ? GFP_KERNEL :
							     GFP_ATOMIC;
	struct trdma_create_ah_resp resp = {};
	struct trdma_ah *ah = to_tah(ibah);
	unsigned long flags;
	int rv;

	if (!(rdma_ah_get_ah_flags(attr) & IB_AH_GRH) || !grh->sgid_attr)
		return -EINVAL;
	if (udata && udata->outlen < sizeof(resp))
		return -EINVAL;
	/* Multicast is not offered (no attach_mcast). */
	if (rdma_is_multicast_addr((struct in6_addr *)grh->dgid.raw))
		return -EOPNOTSUPP;
	/* Both ends IPv4, or both IPv6. */
	if (ipv6_addr_v4mapped((struct in6_addr *)grh->dgid.raw) !=
	    ipv6_addr_v4mapped((struct in6_addr *)grh->sgid_attr->gid.raw))
		return -EINVAL;
	if (!trdma_count_get(&tdev->counts.ah, trdma_limits.max_ah))
		return -ENOMEM;

	ah->attr = *attr;
	/* The core holds the GID attribute reference for the AH. */
	ah->attr.grh.sgid_attr = NULL;
	ah->sgid = grh->sgid_attr->gid;
	ah->dgid = grh->dgid;
	ah->ifindex = tdev->netdev->ifindex;

	xa_lock_irqsave(&tdev->ah_xa, flags);
	rv = __xa_alloc_cyclic(&tdev->ah_xa, &ah->ah_num, ah, xa_limit_32b,
			       &tdev->ah_next, gfp);
	xa_unlock_irqrestore(&tdev->ah_xa, flags);
	if (rv < 0)
		goto err_count;

	if (udata) {
		resp.ah_num = ah->ah_num;
		rv = ib_copy_to_udata(udata, &resp, sizeof(resp));
		if (rv)
			goto err_xa;
	}
	return 0;

err_xa:
	xa_lock_irqsave(&tdev->ah_xa, flags);
	__xa_erase(&tdev->ah_xa, ah->ah_num);
	xa_unlock_irqrestore(&tdev->ah_xa, flags);
err_count:
	atomic_dec(&tdev->counts.ah);
	return rv;
}

int trdma_query_ah(struct ib_ah *ibah, struct rdma_ah_attr *attr)
{
	*attr = to_tah(ibah)->attr;
	return 0;
}

int trdma_destroy_ah(struct ib_ah *ibah, u32 flags)
{
	struct trdma_dev *tdev = to_tdev(ibah->device);
	unsigned long irqf;

	/* After this no sender finds it (trdma_ud_dest, under the lock). */
	xa_lock_irqsave(&tdev->ah_xa, irqf);
	__xa_erase(&tdev->ah_xa, to_tah(ibah)->ah_num);
	xa_unlock_irqrestore(&tdev->ah_xa, irqf);
	atomic_dec(&tdev->counts.ah);
	return 0;
}

/* Where a datagram goes, copied from its AH. */
struct trdma_ud_dest {
	struct in6_addr saddr;
	struct in6_addr daddr;
	int ifindex;
};

/*
 * Looks up the AH a WQE names: it must exist and belong to the QP's PD.
 * Copied under the xarray's lock, which destroy_ah takes to remove it.
 */
static bool trdma_ud_dest(struct trdma_qp *qp, u32 ah_num,
			  struct trdma_ud_dest *d)
{
	struct trdma_dev *tdev = qp->tdev;
	struct trdma_ah *ah;
	unsigned long flags;
	bool ok = false;

	xa_lock_irqsave(&tdev->ah_xa, flags);
	ah = xa_load(&tdev->ah_xa, ah_num);
	if (ah && ah->ibah.pd == qp->ibqp.pd) {
		memcpy(&d->saddr, ah->sgid.raw, sizeof(d->saddr));
		memcpy(&d->daddr, ah->dgid.raw, sizeof(d->daddr));
		d->ifindex = ah->ifindex;
		ok = true;
	}
	xa_unlock_irqrestore(&tdev->ah_xa, flags);
	return ok;
}

/*
 * Sends one datagram of len bytes from buf, from d->saddr (IP_PKTINFO /
 * IPV6_PKTINFO) to port ud_port of d->daddr.  Never blocks.
 */
static int trdma_ud_xmit(struct trdma_net *tnet, const struct trdma_ud_dest *d,
			 void *buf, u32 len)
{
	struct kvec iov = { .iov_base = buf, .iov_len = len };
	union {
		struct sockaddr_in v4;
		struct sockaddr_in6 v6;
	} to = {};
	union {
		struct cmsghdr hdr;
		u8 buf[CMSG_SPACE(sizeof(struct in6_pktinfo))];
	} ctl = {};
	struct msghdr msg = {
		.msg_flags = MSG_DONTWAIT | MSG_NOSIGNAL,
		.msg_name = &to,
		.msg_control = &ctl,
	};
	struct socket *sock;

	if (ipv6_addr_v4mapped(&d->daddr)) {
		struct in_pktinfo *pi = CMSG_DATA(&ctl.hdr);

		sock = tnet->ud_sock4;
		to.v4.sin_family = AF_INET;
		to.v4.sin_port = htons(trdma_ud_port);
		to.v4.sin_addr.s_addr = d->daddr.s6_addr32[3];
		msg.msg_namelen = sizeof(to.v4);
		ctl.hdr.cmsg_level = SOL_IP;
		ctl.hdr.cmsg_type = IP_PKTINFO;
		ctl.hdr.cmsg_len = CMSG_LEN(sizeof(*pi));
		pi->ipi_spec_dst.s_addr = d->saddr.s6_addr32[3];
		msg.msg_controllen = CMSG_SPACE(sizeof(*pi));
	} else {
		struct in6_pktinfo *pi = CMSG_DATA(&ctl.hdr);
		bool ll = ipv6_addr_type(&d->daddr) & IPV6_ADDR_LINKLOCAL;

		sock = tnet->ud_sock6;
		if (!sock)
			return -EAFNOSUPPORT;
		to.v6.sin6_family = AF_INET6;
		to.v6.sin6_port = htons(trdma_ud_port);
		to.v6.sin6_addr = d->daddr;
		to.v6.sin6_scope_id = ll ? d->ifindex : 0;
		msg.msg_namelen = sizeof(to.v6);
		ctl.hdr.cmsg_level = SOL_IPV6;
		ctl.hdr.cmsg_type = IPV6_PKTINFO;
		ctl.hdr.cmsg_len = CMSG_LEN(sizeof(*pi));
		pi->ipi6_addr = d->saddr;
		pi->ipi6_ifindex = ll ? d->ifindex : 0;
		msg.msg_controllen = CMSG_SPACE(sizeof(*pi));
	}
	return kernel_sendmsg(sock, &msg, &iov, 1, len);
}

/*
 * Sends the datagram of one checked send WQE of len payload bytes.
 * Returns the status the WQE completes with.
 */
static enum ib_wc_status trdma_ud_send(struct trdma_qp *qp,
				       const struct trdma_sqe *sqe, u32 len)
{
	bool imm = sqe->opcode == IB_UVERBS_WR_SEND_WITH_IMM;
	struct trdma_bth *bth = (struct trdma_bth *)qp->ud_buf;
	struct trdma_deth *deth = (struct trdma_deth *)(bth + 1);
	u32 hlen = sizeof(*bth) + sizeof(*deth);
	struct trdma_ud_dest d;
	u32 qkey;
	int rv;

	if (!trdma_ud_dest(qp, sqe->ah, &d))
		return IB_WC_LOC_QP_OP_ERR;

	/* IBA: a privileged Q_Key in the WR means the QP's own. */
	qkey = sqe->ud.remote_qkey;
	if (qkey & TRDMA_QKEY_PRIV)
		qkey = READ_ONCE(qp->attr.qkey);

	memset(bth, 0, sizeof(*bth));
	bth->opcode = imm ? TRDMA_OP_UD_SEND_ONLY_IMM : TRDMA_OP_UD_SEND_ONLY;
	bth->flags = sqe->flags & TRDMA_WQE_SOLICITED ? TRDMA_BTH_SE : 0;
	bth->dest_qpn = cpu_to_be32(sqe->ud.remote_qpn & TRDMA_MAX_QPN);
	bth->msn = cpu_to_be32(qp->ud_msn++);
	bth->length = cpu_to_be32(len);
	deth->qkey = cpu_to_be32(qkey);
	deth->src_qpn = cpu_to_be32(qp->ibqp.qp_num);
	if (imm) {
		struct trdma_immdt *i = (struct trdma_immdt *)(deth + 1);

		i->data = (__force __be32)sqe->imm_data;
		hlen += sizeof(*i);
	}
	rv = trdma_sqe_gather(qp, sqe, 0, len, qp->ud_buf + hlen);
	if (rv)
		return IB_WC_LOC_PROT_ERR;

	rv = trdma_ud_xmit(qp->tdev->tnet, &d, qp->ud_buf, hlen + len);
	if (rv < 0) {
		trdma_count(qp->tdev, TRDMA_CNT_UD_TX_DROPPED, 1);
		ibdev_dbg_ratelimited(&qp->tdev->ibdev,
				      "QP %u: datagram to %pI6c lost: %d\n",
				      qp->ibqp.qp_num, &d.daddr, rv);
	} else {
		trdma_count(qp->tdev, TRDMA_CNT_UD_TX, 1);
	}
	return IB_WC_SUCCESS;
}

/*
 * Sends every WQE taken in and not yet sent, each completing in order.
 * Process context, no locks held.
 */
void trdma_ud_tx(struct trdma_qp *qp)
{
	size_t size = 1UL << qp->sq.slot_shift;
	enum ib_wc_status st;
	unsigned long flags;
	u32 idx, len;
	bool more;

	mutex_lock(&qp->tx_mutex);
	for (;;) {
		spin_lock_irqsave(&qp->lock, flags);
		idx = qp->sq_tx;
		more = qp->state == IB_QPS_RTS && idx != qp->sq_intake;
		if (more) {
			/* A RESET may reuse the slot while we send. */
			memcpy(qp->ud_sqe, trdma_swq_slot(qp, idx), size);
			len = trdma_swi(qp, idx)->len;
		}
		spin_unlock_irqrestore(&qp->lock, flags);
		if (!more)
			break;
		st = trdma_ud_send(qp, qp->ud_sqe, len);
		trdma_sq_wqe_done(qp, idx, st);
		cond_resched();
	}
	mutex_unlock(&qp->tx_mutex);
}

void trdma_ud_tx_work(struct work_struct *work)
{
	trdma_ud_tx(container_of(work, struct trdma_qp, tx_work));
}

/* Why a datagram was dropped: the counter it goes to. */
static void trdma_ud_drop(struct trdma_dev *tdev, enum trdma_counter c)
{
	trdma_count(tdev, c, 1);
}

/*
 * Builds the 40-byte GRH area a RoCE v2 port writes in front of a UD
 * payload from the datagram's IP header: an IPv6 header whole, an IPv4
 * header (without options, checksum recomputed) in the last 20 bytes.
 * Returns whether it is IPv6; *dgid is the destination address as a GID.
 */
static bool trdma_ud_grh(struct sk_buff *skb, u8 *grh, union ib_gid *dgid)
{
	struct iphdr *ip4;

	if (skb->protocol == htons(ETH_P_IPV6)) {
		const struct ipv6hdr *ip6 = ipv6_hdr(skb);

		memcpy(grh, ip6, sizeof(*ip6));
		memcpy(dgid->raw, &ip6->daddr, sizeof(dgid->raw));
		return true;
	}
	ip4 = (struct iphdr *)(grh + TRDMA_GRH_LEN - sizeof(*ip4));
	memset(grh, 0, TRDMA_GRH_LEN);
	memcpy(ip4, ip_hdr(skb), sizeof(*ip4));
	ip4->ihl = 5;
	ip4->check = 0;
	ip4->check = ip_fast_csum(ip4, 5);
	ipv6_addr_set_v4mapped(ip4->daddr, (struct in6_addr *)dgid->raw);
	return false;
}

/* Checks a datagram's BTH; returns the header length or 0 if malformed. */
static u32 trdma_ud_hdr_check(const struct trdma_bth *bth, u32 dlen)
{
	u32 hlen = sizeof(*bth) + sizeof(struct trdma_deth);

	if (bth->opcode == TRDMA_OP_UD_SEND_ONLY_IMM)
		hlen += sizeof(struct trdma_immdt);
	else if (bth->opcode != TRDMA_OP_UD_SEND_ONLY)
		return 0;
	if (bth->flags & ~TRDMA_BTH_SE || bth->reserved || bth->offset ||
	    be32_to_cpu(bth->dest_qpn) > TRDMA_MAX_QPN ||
	    dlen < hlen || be32_to_cpu(bth->length) != dlen - hlen)
		return 0;
	return hlen;
}

/*
 * Delivers a checked datagram to a UD QP; counts what it drops.  Under
 * ud_rx_lock from the state check to the completion: datagrams complete in
 * the order they took their WQEs, none is in progress across a move of
 * trdma_modify_qp(), and none once trdma_qp_rx_stopped() has seen the QP
 * in ERR.  An error of another path takes the QP to ERR without this lock:
 * trdma_rqe_take() checks the state again under the ring's lock.
 */
static void trdma_ud_deliver(struct trdma_qp *qp, struct sk_buff *skb,
			     u32 off, const struct trdma_bth *bth,
			     const struct trdma_deth *deth, __be32 imm,
			     const u8 *grh, bool ipv6)
{
	struct trdma_dev *tdev = qp->tdev;
	u32 len = be32_to_cpu(bth->length), room = 0, i;
	struct trdma_rqe_copy rqe;
	struct trdma_cqe cqe = {
		.status = IB_WC_SUCCESS,
		.opcode = IB_WC_RECV,
		.wc_flags = TRDMA_CQE_F_GRH | (ipv6 ? TRDMA_CQE_F_NET_IPV6 : 0),
		.byte_len = TRDMA_GRH_LEN + len,
		.qp_num = qp->ibqp.qp_num,
		.src_qp = be32_to_cpu(deth->src_qpn) & TRDMA_MAX_QPN,
	};
	unsigned long flags;
	int rv;

	spin_lock_irqsave(&qp->ud_rx_lock, flags);
	if (!trdma_state_connected(READ_ONCE(qp->state))) {
		trdma_ud_drop(tdev, TRDMA_CNT_UD_RX_NO_QP);
		goto unlock;
	}
	if (be32_to_cpu(deth->qkey) != READ_ONCE(qp->attr.qkey)) {
		trdma_ud_drop(tdev, TRDMA_CNT_UD_RX_QKEY);
		goto unlock;
	}
	/* Taken: a flush meanwhile leaves the RQ behind it (below). */
	rv = trdma_rqe_take(qp, &rqe, &qp->rx.req_has_rqe);
	if (rv <= 0) {
		/* A corrupt ring (rv < 0) took the QP to ERR. */
		if (!rv)
			trdma_ud_drop(tdev, TRDMA_CNT_UD_RX_NO_RQE);
		goto unlock;
	}
	cqe.wr_id = rqe.wr_id;
	for (i = 0; i < rqe.num_sge; i++)
		room += min_t(u32, rqe.sge[i].length, U32_MAX - room);
	if (room < TRDMA_GRH_LEN + len) {
		/* The WQE ends with the error; the QP goes on. */
		trdma_ud_drop(tdev, TRDMA_CNT_UD_RX_TOO_LONG);
		cqe.status = IB_WC_LOC_LEN_ERR;
		cqe.wc_flags = 0;
		cqe.byte_len = 0;
		goto complete;
	}
	rv = trdma_place_sges_buf(qp, rqe.sge, rqe.num_sge, grh,
				  TRDMA_GRH_LEN);
	if (!rv)
		rv = trdma_place_sges(qp, rqe.sge, rqe.num_sge, TRDMA_GRH_LEN,
				      skb, off, len);
	if (rv) {
		cqe.status = IB_WC_LOC_PROT_ERR;
		cqe.wc_flags = 0;
		cqe.byte_len = 0;
		goto complete;
	}
	if (bth->opcode == TRDMA_OP_UD_SEND_ONLY_IMM) {
		cqe.wc_flags |= TRDMA_CQE_F_WITH_IMM;
		cqe.imm_data = (__force u32)imm;
	}
	trdma_count(tdev, TRDMA_CNT_UD_RX, 1);
complete:
	trdma_cq_post(to_tcq(qp->ibqp.recv_cq), &cqe,
		      bth->flags & TRDMA_BTH_SE);
	trdma_rq_taken_done(qp);
unlock:
	spin_unlock_irqrestore(&qp->ud_rx_lock, flags);
}

/*
 * encap_rcv of the datagram sockets, in softirq: skb->data is at the UDP
 * header.  Always consumes the skb.
 */
static int trdma_ud_recv(struct sock *sk, struct sk_buff *skb)
{
	u32 off = sizeof(struct udphdr), dlen, hlen;
	u8 grh[TRDMA_GRH_LEN];
	struct trdma_bth bth;
	struct trdma_deth deth;
	struct trdma_dev *tdev;
	struct trdma_qp *qp;
	union ib_gid dgid;
	__be32 imm = 0;
	bool ipv6;

	ipv6 = trdma_ud_grh(skb, grh, &dgid);
	/* Only a device of the socket's namespace. */
	tdev = trdma_dev_get_by_gid(sock_net(sk), &dgid);
	if (!tdev)
		goto out;

	dlen = skb->len - off;
	hlen = 0;
	if (skb->len >= off + sizeof(bth) &&
	    !skb_copy_bits(skb, off, &bth, sizeof(bth)))
		hlen = trdma_ud_hdr_check(&bth, dlen);
	if (!hlen ||
	    skb_copy_bits(skb, off + sizeof(bth), &deth, sizeof(deth)) ||
	    (hlen > sizeof(bth) + sizeof(deth) &&
	     skb_copy_bits(skb, off + sizeof(bth) + sizeof(deth), &imm,
			   sizeof(imm)))) {
		trdma_ud_drop(tdev, TRDMA_CNT_UD_RX_MALFORMED);
		goto put_dev;
	}
	if (dlen - hlen > trdma_ud_mtu(tdev)) {
		trdma_ud_drop(tdev, TRDMA_CNT_UD_RX_TOO_LONG);
		goto put_dev;
	}

	qp = trdma_qp_get(tdev, be32_to_cpu(bth.dest_qpn));
	if (!qp || !trdma_qp_is_ud(qp)) {
		trdma_ud_drop(tdev, TRDMA_CNT_UD_RX_NO_QP);
	} else {
		trdma_ud_deliver(qp, skb, off + hlen, &bth, &deth, imm, grh,
				 ipv6);
	}
	if (qp)
		trdma_qp_put(qp);
put_dev:
	ib_device_put(&tdev->ibdev);
out:
	consume_skb(skb);
	return 0;
}

static struct socket *trdma_ud_sock_create(struct net *net, bool ipv6)
{
	struct udp_tunnel_sock_cfg tcfg = {
		.encap_type = 1,
		.encap_rcv = trdma_ud_recv,
	};
	struct udp_port_cfg cfg = {
		.local_udp_port = htons(trdma_ud_port),
	};
	struct socket *sock;
	int rv;

	if (ipv6) {
		cfg.family = AF_INET6;
		cfg.local_ip6 = in6addr_any;
		cfg.ipv6_v6only = 1;
		cfg.use_udp6_tx_checksums = 1;
		cfg.use_udp6_rx_checksums = 1;
	} else {
		cfg.family = AF_INET;
		cfg.local_ip.s_addr = htonl(INADDR_ANY);
		cfg.use_udp_checksums = 1;
	}
	rv = udp_sock_create(net, &cfg, &sock);
	if (rv)
		return ERR_PTR(rv);
	setup_udp_tunnel_sock(net, sock, &tcfg);
	return sock;
}

/* The first device of a namespace: its sockets.  Under trdma_net_lock. */
int trdma_ud_net_up(struct trdma_net *tnet)
{
	struct socket *sock;

	sock = trdma_ud_sock_create(tnet->net, false);
	if (IS_ERR(sock)) {
		pr_err("trdma: no UDP port %u for datagrams (%ld); set ud_port\n",
		       trdma_ud_port, PTR_ERR(sock));
		return PTR_ERR(sock);
	}
	tnet->ud_sock4 = sock;

	sock = trdma_ud_sock_create(tnet->net, true);
	if (IS_ERR(sock)) {
		/* Without IPv6 in the kernel, IPv4 datagrams still work. */
		pr_warn("trdma: no IPv6 UDP port %u for datagrams (%ld)\n",
			trdma_ud_port, PTR_ERR(sock));
		sock = NULL;
	}
	tnet->ud_sock6 = sock;
	return 0;
}

/*
 * The last device of the namespace is gone, and with it every QP that
 * could send.  Under trdma_net_lock.
 */
void trdma_ud_net_down(struct trdma_net *tnet)
{
	if (tnet->ud_sock6)
		udp_tunnel_sock_release(tnet->ud_sock6);
	if (tnet->ud_sock4)
		udp_tunnel_sock_release(tnet->ud_sock4);
	tnet->ud_sock4 = NULL;
	tnet->ud_sock6 = NULL;
	/* A receive that found a socket before its release has returned. */
	synchronize_rcu();
}
