// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: the trdma TCP option.
 *
 * Every TCP segment that carries bytes of a trdma segment also carries an
 * RFC 6994 experimental option (struct trdma_tcp_opt) naming that trdma
 * segment: opcode, destination QPN, MSN and where its BTH starts in the
 * byte stream relative to the ISN.  So one packet alone tells its message
 * and offset, and GRO can still merge the packets of one trdma segment
 * (their options are identical).
 *
 * The transmit path records where each trdma segment starts (tx records)
 * and ends each one on an skb boundary (the skb's EOR mark), except where
 * it corks small segments (tx_cork, trdma_tx.c): then several go into one
 * skb of at most one MSS, which GSO leaves whole, and that packet's option
 * names the trdma segment its first byte belongs to.  A segment larger
 * than the MSS is alone in its skbs, so its option is the same on all of
 * its packets.  The connection's MSS
 * is reduced by the option's length (icsk_ext_hdr_len, the way IP options
 * do it), so the option fits the MTU.  A netfilter LOCAL_OUT hook finds the
 * record of each outgoing data skb of a trdma socket and inserts the option
 * into its TCP header; TSO and GSO copy it into every packet.  Where TCP's
 * own options leave no room (or anything else is off) the option is left
 * off and counted.  The receiver checks the option of each skb against the
 * in-band header of the trdma segment it names and counts agreements and
 * disagreements.
 */
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/module.h>
#include <linux/netfilter.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6.h>
#include <linux/tcp.h>
#include <net/ip.h>
#include <net/ip6_checksum.h>
#include <net/tcp.h>

#include "trdma.h"

static bool trdma_tcpopt_enabled = true;
module_param_named(tcp_option, trdma_tcpopt_enabled, bool, 0444);
MODULE_PARM_DESC(tcp_option,
		 "Put the trdma TCP option on data segments (1); read at load");

/* A QP keeps at most this many tx records; beyond it options are left off. */
#define TRDMA_TXOPT_MAX_RECS	65536u
#define TRDMA_TXOPT_MIN_RECS	64u

/* No later byte may join the last skb queued.  Under the socket lock. */
static void trdma_txopt_mark_eor(struct sock *sk)
{
	struct sk_buff *skb = tcp_write_queue_tail(sk);

	if (!skb)
		skb = tcp_rtx_queue_tail(sk);
	if (skb)
		TCP_SKB_CB(skb)->eor = 1;
}

/* Parsed from the trdma_bth the record describes. */
static void trdma_txopt_rec_fill(struct trdma_txopt_rec *r, u32 start,
				 u32 len, const struct trdma_bth *bth)
{
	r->start = start;
	r->len = len;
	r->op_qpn = cpu_to_be32((u32)bth->opcode << 24 |
				(be32_to_cpu(bth->dest_qpn) & 0xffffff));
	r->msn = bth->msn;
}

/*
 * Connection set-up: called by trdma_cm_attach() before the socket's
 * callbacks are the QP's, with the hellos exchanged: the next byte either
 * side sends or reads is at ISN + 1 + sizeof(struct trdma_hello).
 */
void trdma_txopt_init(struct trdma_qp *qp, struct socket *sock)
{
	struct trdma_txopt *o = &qp->txopt;
	struct sock *sk = sock->sk;
	struct inet_connection_sock *icsk = inet_csk(sk);

	o->next = 1 + sizeof(struct trdma_hello);
	qp->tx_cork_len = 0;
	o->head = 0;
	o->tail = 0;
	o->on = false;
	/*
	 * A keyed connection's header is signed as TCP sent it; an encrypted
	 * one's option would tell its message numbers in the clear.
	 */
	if (!trdma_tcpopt_enabled || trdma_key_sock_keyed(sk) || qp->tls)
		return;
	if (!o->recs) {
		o->recs = kvcalloc(TRDMA_TXOPT_MIN_RECS, sizeof(*o->recs),
				   GFP_KERNEL);
		if (!o->recs)
			return;
		o->size = TRDMA_TXOPT_MIN_RECS;
	}

	lock_sock(sk);
	/* All of the hello is queued: write_seq is ISN + 1 + its length. */
	o->iss = tcp_sk(sk)->write_seq - o->next;
	icsk->icsk_ext_hdr_len += TRDMA_TCPOPT_LEN;
	/* tcp_sync_mss(), as IP_OPTIONS does it (not exported in 6.12). */
	icsk->icsk_sync_mss(sk, icsk->icsk_pmtu_cookie);
	/* The first trdma segment does not share the hello's skb. */
	trdma_txopt_mark_eor(sk);
	o->on = true;
	release_sock(sk);
}

/*
 * Teardown of an encrypted connection, which has no option records
 * (trdma_cm_detach_locked()): options are left off from now on.  The
 * caller owns the socket, with the QP's callbacks already taken off: the
 * output hook runs under the socket's lock, so once it lets go no hook
 * still looks at this QP.
 */
void trdma_txopt_stop(struct trdma_qp *qp)
{
	spin_lock_bh(&qp->txopt.lock);
	qp->txopt.on = false;
	spin_unlock_bh(&qp->txopt.lock);
}

/*
 * Connection teardown: the QP's records go to the closing connection
 * (to, in the struct trdma_closing of trdma_cm_detach_locked()), so that
 * what TCP sends again while it closes (bytes the peer had not
 * acknowledged when the QP let go) still carries the option.  The QP's
 * next connection starts a ring of its own (trdma_txopt_init()).  The
 * caller owns the socket and switches its callbacks from the QP's to the
 * closing's before it lets go, so that no output hook finds the records
 * in neither.
 */
void trdma_txopt_handover(struct trdma_qp *qp, struct trdma_txopt *to)
{
	struct trdma_txopt *o = &qp->txopt;

	spin_lock_bh(&o->lock);
	to->recs = o->recs;
	to->size = o->size;
	to->head = o->head;
	to->tail = o->tail;
	to->iss = o->iss;
	to->next = o->next;
	to->on = o->on && o->recs;
	o->recs = NULL;
	o->size = 0;
	o->head = 0;
	o->tail = 0;
	o->on = false;
	spin_unlock_bh(&o->lock);
}

/*
 * The records' memory, where no output hook looks any more: a QP's when it
 * is freed, a closing connection's a grace period after it let go.
 */
void trdma_txopt_release(struct trdma_txopt *o)
{
	kvfree(o->recs);
	o->recs = NULL;
	o->on = false;
}

/* Doubles the record ring.  Process context, by the transmitter. */
static bool trdma_txopt_grow(struct trdma_txopt *o)
{
	u32 size = o->size * 2, i, n;
	struct trdma_txopt_rec *recs, *old;

	if (size > TRDMA_TXOPT_MAX_RECS)
		return false;
	recs = kvcalloc(size, sizeof(*recs), GFP_KERNEL);
	if (!recs)
		return false;
	spin_lock_bh(&o->lock);
	n = o->head - o->tail;
	for (i = 0; i < n; i++)
		recs[i] = o->recs[(o->tail + i) & (o->size - 1)];
	old = o->recs;
	o->recs = recs;
	o->size = size;
	o->tail = 0;
	o->head = n;
	spin_unlock_bh(&o->lock);
	kvfree(old);
	return true;
}

/*
 * A trdma segment of len bytes (header included) is about to be handed to
 * TCP: record where it starts.  By the transmitter, before its first byte.
 * A full ring grows where may_grow (process context); false when the
 * segment is not recorded: with may_grow its option is then left off,
 * without, the caller leaves the segment to process context.
 */
bool trdma_txopt_begin(struct trdma_qp *qp, struct sock *sk, u32 len,
		       const struct trdma_bth *bth, bool may_grow)
{
	struct trdma_txopt *o = &qp->txopt;
	u32 una;

	if (!o->on)
		return true;
	una = READ_ONCE(tcp_sk(sk)->snd_una) - o->iss;

	spin_lock_bh(&o->lock);
	/* Forget segments TCP has delivered completely. */
	while (o->tail != o->head) {
		const struct trdma_txopt_rec *r =
			&o->recs[o->tail & (o->size - 1)];

		if ((s32)(r->start + r->len - una) > 0)
			break;
		o->tail++;
	}
	if (o->head - o->tail == o->size) {
		spin_unlock_bh(&o->lock);
		if (!may_grow || !trdma_txopt_grow(o))
			return false;
		spin_lock_bh(&o->lock);
	}
	trdma_txopt_rec_fill(&o->recs[o->head & (o->size - 1)], o->next, len,
			     bth);
	o->head++;
	spin_unlock_bh(&o->lock);
	return true;
}

/*
 * The send flag that ends a trdma segment on an skb boundary: MSG_EOR
 * where options are put on, so that its last bytes are sent with it.
 */
int trdma_txopt_eor(struct trdma_qp *qp)
{
	return qp->txopt.on ? MSG_EOR : 0;
}

/* trdma_txopt_mark_eor(), taking the socket unless the transmitter owns it. */
static void trdma_txopt_mark_eor_tx(struct trdma_qp *qp, struct sock *sk)
{
	if (qp->tx_sk_held) {
		trdma_txopt_mark_eor(sk);
		return;
	}
	lock_sock(sk);
	trdma_txopt_mark_eor(sk);
	release_sock(sk);
}

/*
 * Ends the skb the last bytes queued went into (its EOR mark), so that
 * the next trdma segment starts a new one: before a segment that would
 * take a corked run past the MSS, and when a corked run ends.  By the
 * transmitter, process context.
 */
void trdma_txopt_boundary(struct trdma_qp *qp, struct socket *sock)
{
	if (qp->txopt.on)
		trdma_txopt_mark_eor_tx(qp, sock->sk);
}

/*
 * The whole trdma segment of len bytes is queued; eor_sent: its last
 * bytes went with trdma_txopt_eor().  By the transmitter; process context
 * unless eor_sent.
 */
void trdma_txopt_end(struct trdma_qp *qp, struct socket *sock, u32 len,
		     bool eor_sent)
{
	qp->txopt.next += len;
	if (qp->txopt.on && !eor_sent)
		trdma_txopt_mark_eor_tx(qp, sock->sk);
}

/*
 * Finds the record of the trdma segment holding stream byte rel, the
 * first of a packet's plen.  Those plen bytes may run on into later
 * trdma segments (a corked run) only where they go as one packet
 * (one_packet: not GSO, which would copy the option into packets that
 * start in other segments).  Returns TRDMA_CNT_TCPOPT_TAGGED with *opt
 * filled in, TRDMA_CNT_TCPOPT_NO_RECORD where no record holds rel, or
 * TRDMA_CNT_TCPOPT_SPAN where the packets would run past its segment.
 */
static enum trdma_counter trdma_txopt_find(struct trdma_txopt *o, u32 rel,
					   u32 plen, bool one_packet,
					   struct trdma_tcp_opt *opt)
{
	enum trdma_counter why = TRDMA_CNT_TCPOPT_NO_RECORD;
	const struct trdma_txopt_rec *r = NULL;
	u32 lo, hi;

	spin_lock_bh(&o->lock);
	lo = o->tail;
	hi = o->head;
	/* The last record starting at or before rel; starts ascend. */
	while (lo != hi) {
		u32 mid = lo + (hi - lo) / 2;
		const struct trdma_txopt_rec *m = &o->recs[mid & (o->size - 1)];

		if ((s32)(rel - m->start) >= 0) {
			r = m;
			lo = mid + 1;
		} else {
			hi = mid;
		}
	}
	if (!r || rel - r->start >= r->len)
		goto out;
	why = TRDMA_CNT_TCPOPT_SPAN;
	if (!one_packet && rel - r->start + plen > r->len)
		goto out;
	opt->kind = TRDMA_TCPOPT_KIND;
	opt->len = TRDMA_TCPOPT_LEN;
	opt->exid = cpu_to_be16(TRDMA_TCPOPT_EXID);
	opt->op_qpn = r->op_qpn;
	opt->msn = r->msn;
	opt->offset = cpu_to_be32(r->start);
	why = TRDMA_CNT_TCPOPT_TAGGED;
out:
	spin_unlock_bh(&o->lock);
	return why;
}

/*
 * Inserts opt after the TCP header's own options.  The IP and TCP headers
 * are in the linear part; the TCP checksum is CHECKSUM_PARTIAL, so only
 * the pseudo-header sum changes.
 */
static int trdma_tcpopt_insert(struct sk_buff *skb, u32 nhlen, u32 thlen,
			       const struct trdma_tcp_opt *opt, bool v6)
{
	struct tcphdr *th;

	if (skb_cow_head(skb, TRDMA_TCPOPT_LEN))
		return -ENOMEM;
	memmove(skb->data - TRDMA_TCPOPT_LEN, skb->data, nhlen + thlen);
	__skb_push(skb, TRDMA_TCPOPT_LEN);
	skb_reset_network_header(skb);
	skb_set_transport_header(skb, nhlen);
	th = tcp_hdr(skb);
	memcpy((u8 *)th + thlen, opt, TRDMA_TCPOPT_LEN);
	th->doff += TRDMA_TCPOPT_LEN / 4;
	skb->csum_start = skb_transport_header(skb) - skb->head;

	if (v6) {
		struct ipv6hdr *ip6h = ipv6_hdr(skb);

		ip6h->payload_len = htons(skb->len - nhlen);
		th->check = ~tcp_v6_check(skb->len - nhlen, &ip6h->saddr,
					  &ip6h->daddr, 0);
	} else {
		struct iphdr *iph = ip_hdr(skb);

		iph->tot_len = htons(skb->len);
		ip_send_check(iph);
		th->check = ~tcp_v4_check(skb->len - nhlen, iph->saddr,
					  iph->daddr, 0);
	}
	return 0;
}

/* A counter of tdev's, where there is one (none while a connection closes). */
static void trdma_tcpopt_count(struct trdma_dev *tdev, enum trdma_counter c)
{
	if (tdev)
		trdma_count(tdev, c, 1);
}

/*
 * NF_INET_LOCAL_OUT, IPv4 and IPv6: tags the data skbs of trdma sockets,
 * a QP's (trdma_cm_sk_txopt()) or, once the QP let go, one that closes.
 */
static unsigned int trdma_tcpopt_out(void *priv, struct sk_buff *skb,
				     const struct nf_hook_state *state)
{
	enum trdma_counter why = TRDMA_CNT_TCPOPT_UNFIT;
	bool v6 = state->pf == NFPROTO_IPV6;
	struct trdma_dev *tdev = NULL;
	struct sock *sk = skb->sk;
	struct trdma_tcp_opt opt;
	const struct tcphdr *th;
	u32 nhlen, thlen, plen, seglen, rel;
	struct trdma_txopt *o;
	u8 proto;

	if (!sk || !sk_fullsock(sk) || sk->sk_protocol != IPPROTO_TCP)
		return NF_ACCEPT;
	/* Under the socket's lock or RCU: see trdma_cm_sk_txopt(). */
	o = trdma_cm_sk_txopt(sk, &tdev);
	if (!o || !READ_ONCE(o->on))
		return NF_ACCEPT;

	if (v6) {
		nhlen = sizeof(struct ipv6hdr);
		proto = ipv6_hdr(skb)->nexthdr;
	} else {
		nhlen = ip_hdrlen(skb);
		proto = ip_hdr(skb)->protocol;
	}
	/* IPsec's packet around one of ours, which passed here before. */
	if (proto == IPPROTO_ESP || proto == IPPROTO_AH)
		return NF_ACCEPT;
	if (proto != IPPROTO_TCP ||
	    skb_headlen(skb) < nhlen + sizeof(struct tcphdr))
		goto left_off;
	th = (const struct tcphdr *)(skb->data + nhlen);
	thlen = th->doff * 4;
	if (thlen < sizeof(*th) || skb_headlen(skb) < nhlen + thlen)
		goto left_off;
	plen = skb->len - nhlen - thlen;
	if (!plen || th->syn)
		return NF_ACCEPT;	/* no trdma bytes */
	rel = ntohl(th->seq) - o->iss;
	if ((s32)(rel - (1 + sizeof(struct trdma_hello))) < 0)
		return NF_ACCEPT;	/* a hello */

	if (skb->ip_summed != CHECKSUM_PARTIAL || !skb_dst(skb))
		goto left_off;
	seglen = nhlen + thlen + TRDMA_TCPOPT_LEN +
		 (skb_is_gso(skb) ? skb_shinfo(skb)->gso_size : plen);
	why = TRDMA_CNT_TCPOPT_NO_ROOM;
	if (thlen + TRDMA_TCPOPT_LEN > MAX_TCP_OPTION_SPACE + sizeof(*th) ||
	    seglen > dst_mtu(skb_dst(skb)))
		goto left_off;
	why = trdma_txopt_find(o, rel, plen, !skb_is_gso(skb), &opt);
	if (why != TRDMA_CNT_TCPOPT_TAGGED)
		goto left_off;
	why = TRDMA_CNT_TCPOPT_UNFIT;
	if (trdma_tcpopt_insert(skb, nhlen, thlen, &opt, v6))
		goto left_off;
	trdma_tcpopt_count(tdev, TRDMA_CNT_TCPOPT_TAGGED);
	return NF_ACCEPT;

left_off:
	/* The total, and why. */
	trdma_tcpopt_count(tdev, TRDMA_CNT_TCPOPT_LEFT_OFF);
	trdma_tcpopt_count(tdev, why);
	return NF_ACCEPT;
}

static const struct nf_hook_ops trdma_tcpopt_ops[] = {
	{
		.hook = trdma_tcpopt_out,
		.pf = NFPROTO_IPV4,
		.hooknum = NF_INET_LOCAL_OUT,
		.priority = NF_IP_PRI_LAST,
	},
	{
		.hook = trdma_tcpopt_out,
		.pf = NFPROTO_IPV6,
		.hooknum = NF_INET_LOCAL_OUT,
		.priority = NF_IP6_PRI_LAST,
	},
};

/*
 * The hook goes where trdma's sockets are: in each network namespace that
 * has a trdma device, from its first device until its last is gone and
 * the last connection closing on after it released (tnet->closings).
 * Under trdma_net_lock.
 */
int trdma_tcpopt_net_up(struct trdma_net *tnet)
{
	int rv;

	if (!trdma_tcpopt_enabled || tnet->hooks)
		return 0;
	rv = nf_register_net_hooks(tnet->net, trdma_tcpopt_ops,
				   ARRAY_SIZE(trdma_tcpopt_ops));
	tnet->hooks = !rv;
	return rv;
}

void trdma_tcpopt_net_down(struct trdma_net *tnet)
{
	if (tnet->hooks)
		nf_unregister_net_hooks(tnet->net, trdma_tcpopt_ops,
					ARRAY_SIZE(trdma_tcpopt_ops));
	tnet->hooks = false;
}

/*
 * Receive side: the trdma option in the TCP header of a received skb, if
 * the header is still there (tcp_collapse() builds skbs without one).
 */
bool trdma_tcpopt_get(const struct sk_buff *skb, struct trdma_tcp_opt *opt)
{
	const struct tcphdr *th;
	const u8 *p;
	int left;

	if (!skb_transport_header_was_set(skb))
		return false;
	th = tcp_hdr(skb);
	/* TCP pulled its header: it sits right before the data. */
	if (skb_transport_offset(skb) > -(int)sizeof(*th) ||
	    -skb_transport_offset(skb) < th->doff * 4)
		return false;
	p = (const u8 *)(th + 1);
	left = th->doff * 4 - (int)sizeof(*th);
	while (left > 0) {
		u8 kind = p[0], len;

		if (kind == TCPOPT_EOL)
			break;
		if (kind == TCPOPT_NOP) {
			p++;
			left--;
			continue;
		}
		if (left < 2)
			break;
		len = p[1];
		if (len < 2 || len > left)
			break;
		if (kind == TRDMA_TCPOPT_KIND && len == TRDMA_TCPOPT_LEN &&
		    get_unaligned_be16(p + 2) == TRDMA_TCPOPT_EXID) {
			memcpy(opt, p, sizeof(*opt));
			return true;
		}
		p += len;
		left -= len;
	}
	return false;
}
