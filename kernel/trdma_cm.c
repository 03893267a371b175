// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: connections.
 *
 * Each RC QP rides one TCP connection.  When a QP reaches RTR, the side
 * whose (GID, QPN) is the smaller connects to the peer's trdma port (once
 * in RTS, or TRDMA_DIAL_RTR_WAIT after RTR, whichever comes first); the
 * other side's listener accepts, reads the connecting side's hello and
 * binds the connection to the QP the hello names once that QP is in RTR
 * with a matching remote GID and QPN, if the connection comes from the
 * address of the GID the hello claims as its source and the hello proves
 * the PSN the applications exchanged (trdma_hello_proof(); docs/wire.md).
 * An accepted connection waits at most accept_timeout seconds for that.
 */
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/module.h>
#include <linux/tcp.h>
#include <net/ipv6.h>
#include <net/sock.h>
#include <net/tcp.h>
#include <rdma/ib_cache.h>

#include "trdma.h"
#include "trdma_verbs.h"

static ushort trdma_port = TRDMA_DEFAULT_PORT;
module_param_named(port, trdma_port, ushort, 0444);
MODULE_PARM_DESC(port, "TCP port trdma listens on and connects to (4791)");

static uint trdma_accept_timeout = 10;
module_param_named(accept_timeout, trdma_accept_timeout, uint, 0644);
MODULE_PARM_DESC(accept_timeout,
		 "Seconds an accepted connection waits for its QP (10)");

struct workqueue_struct *trdma_wq;

/*
 * The QPs' transmit work (trdma_tx_kick()): per CPU, so that it runs on
 * the CPU trdma_tx_cpu() picks, and high priority, so that it does not
 * wait behind a process that polls there (perftest, a polling ULP); with a
 * rescuer, as kernel ULPs' sends may be what frees memory.
 */
struct workqueue_struct *trdma_tx_wq;

/*
 * Connection set-up has workqueues of its own.  An active side's dial
 * blocks until the peer answers (trdma_cm_dial(), up to accept_timeout + 5
 * seconds), and the answer may need this host's own accept and pending
 * work (a QP connected to one of the same host, or of the same guest in
 * the lab).  On one workqueue the dials could hold back the work they wait
 * for: behind max_active blocked dials (1,024 QPs connecting at once), or
 * behind the one dial trdma_wq's rescuer runs when workers are slow to
 * start (WQ_MEM_RECLAIM) -- seen as every dial of a burst failing at once
 * after 15 s.  So dials go on trdma_dial_wq (no rescuer: set-up is not
 * reclaim's business) and accepting on the ordered trdma_accept_wq, whose
 * work never waits for a peer.
 */
static struct workqueue_struct *trdma_dial_wq;
static struct workqueue_struct *trdma_accept_wq;

/*
 * Accepted connections whose hello is incomplete or whose QP is not ready
 * yet, of every namespace's listener (struct trdma_net).
 * trdma_pending_work reads hellos, binds and expires them; each is looked
 * at in the namespace of its socket.
 */
struct trdma_pending {
	struct list_head list;
	struct socket *sock;
	void (*saved_data_ready)(struct sock *sk);
	struct trdma_hello hello;
	u8 nonce[TRDMA_HELLO_NONCE_LEN];	/* with TRDMA_HELLO_TLS */
	u32 got;
	bool unproven;		/* waits for its QP's RTS to check the PSN */
	/*
	 * An encrypted link, ACCEPTed, keys installed and our confirmation
	 * sent: waits for the peer's (confirm, confirm_got bytes read so
	 * far) before it binds.  sk_user_data is p, its data_ready
	 * trdma_pending_tls_data_ready().
	 */
	bool confirming;
	struct sockaddr_storage peer;	/* confirming: for the log */
	struct trdma_tls_hs hs;
	u8 confirm[sizeof_field(struct trdma_tls_hs, confirm)];
	u32 confirm_got;
	unsigned long deadline;
};

static LIST_HEAD(trdma_pending_list);
static DEFINE_MUTEX(trdma_pending_lock);	/* protects trdma_pending_list */
static struct delayed_work trdma_pending_work;
static bool trdma_cm_stopping;		/* under trdma_pending_lock */

static void trdma_hello_init(struct trdma_hello *h, struct trdma_qp *qp,
			     u8 type)
{
	const struct ib_global_route *grh = &qp->attr.ah_attr.grh;

	memset(h, 0, sizeof(*h));
	h->magic = cpu_to_be32(TRDMA_HELLO_MAGIC);
	h->version = TRDMA_WIRE_VERSION;
	h->type = type;
	if (trdma_qp_is_uc(qp))
		h->flags = cpu_to_be16(TRDMA_HELLO_UC);
	h->src_qpn = cpu_to_be32(qp->ibqp.qp_num);
	h->dst_qpn = cpu_to_be32(qp->attr.dest_qp_num);
	h->path_mtu = qp->attr.path_mtu;
	h->max_rd_atomic = qp->attr.max_rd_atomic;
	h->max_dest_rd_atomic = qp->attr.max_dest_rd_atomic;
	if (grh->sgid_attr)
		memcpy(h->src_gid, grh->sgid_attr->gid.raw, 16);
	memcpy(h->dst_gid, grh->dgid.raw, 16);
}

/* Whether a hello comes from a UC QP (TRDMA_HELLO_UC). */
static bool trdma_hello_uc(const struct trdma_hello *h)
{
	return h->flags & cpu_to_be16(TRDMA_HELLO_UC);
}

/* Whether a hello asks for an encrypted link (a nonce follows it). */
static bool trdma_hello_tls(const struct trdma_hello *h)
{
	return h->flags & cpu_to_be16(TRDMA_HELLO_TLS);
}

/* The bytes of a hello on the wire: itself, and its nonce if it has one. */
static u32 trdma_hello_len(const struct trdma_hello *h)
{
	return sizeof(*h) + (trdma_hello_tls(h) ? TRDMA_HELLO_NONCE_LEN : 0);
}

static int trdma_send_all(struct socket *sock, void *buf, size_t len)
{
	struct kvec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr msg = { .msg_flags = MSG_NOSIGNAL };
	int rv = kernel_sendmsg(sock, &msg, &iov, 1, len);

	return rv == len ? 0 : (rv < 0 ? rv : -EIO);
}

/* Sends a hello, with nonce behind it when it asks for encryption. */
static int trdma_send_hello(struct socket *sock, const struct trdma_hello *h,
			    const u8 *nonce)
{
	u8 buf[sizeof(*h) + TRDMA_HELLO_NONCE_LEN];

	memcpy(buf, h, sizeof(*h));
	if (trdma_hello_tls(h))
		memcpy(buf + sizeof(*h), nonce, TRDMA_HELLO_NONCE_LEN);
	return trdma_send_all(sock, buf, trdma_hello_len(h));
}

/*
 * Whether the connection's route goes through a loopback device (the peer
 * is an address of this host's, in this namespace).  Then each segment's
 * receive processing runs inside the sender's transmit, in softirq on the
 * sender's CPU.  (A veth pair between two namespaces does the same, but is
 * not told apart from a NIC here.)  A dst already invalidated points at
 * blackhole_netdev, itself flagged loopback: a connection that dies soon
 * anyway.  The device under RCU: a dst's reference does not hold it.
 * Process context.
 */
static bool trdma_cm_route_local(struct sock *sk)
{
	struct dst_entry *dst;
	bool local;

	rcu_read_lock();
	dst = __sk_dst_get(sk);
	local = dst && (READ_ONCE(dst->dev)->flags & IFF_LOOPBACK);
	rcu_read_unlock();
	return local;
}

/*
 * Applies the device's TCP settings to a connection's socket.  Buffer sizes
 * are forced (not capped by net.core.wmem_max/rmem_max: the administrator
 * set them for this device); given before connect() they also size the
 * window scale.
 */
static void trdma_cm_tune(struct trdma_dev *tdev, struct socket *sock)
{
	char cc[sizeof(tdev->tcp_cc)];
	int sndbuf, rcvbuf, rv;

	/*
	 * The receive path sends ACKs in softirq (trdma_tx_push_from_rx()),
	 * where current's task_frag is the interrupted task's, which may be
	 * appending to it itself: TCP copies into the socket's own page
	 * frag instead (under the socket lock), on every kernel.
	 */
	trdma_sk_no_task_frag(sock->sk);

	spin_lock(&tdev->knob_lock);
	memcpy(cc, tdev->tcp_cc, sizeof(cc));
	sndbuf = tdev->tcp_sndbuf;
	rcvbuf = tdev->tcp_rcvbuf;
	spin_unlock(&tdev->knob_lock);

	if (cc[0]) {
		rv = sock->ops->setsockopt(sock, SOL_TCP, TCP_CONGESTION,
					   KERNEL_SOCKPTR(cc), strlen(cc));
		if (rv)
			ibdev_warn_ratelimited(&tdev->ibdev,
					       "congestion control %s: %d\n",
					       cc, rv);
	}
	if (sndbuf)
		sock_setsockopt(sock, SOL_SOCKET, SO_SNDBUFFORCE,
				KERNEL_SOCKPTR(&sndbuf), sizeof(sndbuf));
	if (rcvbuf)
		sock_set_rcvbuf(sock->sk, rcvbuf);
	if (READ_ONCE(tdev->tcp_nodelay)) {
		tcp_sock_set_nodelay(sock->sk);
	} else {
		int off = 0;

		sock->ops->setsockopt(sock, SOL_TCP, TCP_NODELAY,
				      KERNEL_SOCKPTR(&off), sizeof(off));
	}
}

/*
 * How long sent bytes may stay unacknowledged before the connection, and
 * the QP with it, fails: the QP's local ACK timeout (4.096 us * 2^timeout)
 * times its retry count plus one, as TCP_USER_TIMEOUT.  timeout 0 means
 * infinite, as in IB: TCP's own retries (net.ipv4.tcp_retries2) decide.
 */
static void trdma_cm_apply_timeout(struct trdma_qp *qp, struct socket *sock)
{
	tcp_sock_set_user_timeout(sock->sk, trdma_qp_transport_ms(qp));
}

/* The QP's timeout or retry count changed.  Under state_mutex. */
void trdma_cm_set_timeout(struct trdma_qp *qp)
{
	trdma_tx_lock(qp);
	if (qp->sock)
		trdma_cm_apply_timeout(qp, qp->sock);
	trdma_tx_unlock(qp);
}

/*
 * The side with the smaller (GID, QPN) connects.  A QP connected to itself
 * (its own GID and QPN) connects too: to itself.
 */
static bool trdma_cm_is_active(struct trdma_qp *qp)
{
	const struct ib_global_route *grh = &qp->attr.ah_attr.grh;
	int c = memcmp(grh->sgid_attr->gid.raw, grh->dgid.raw, 16);

	return c < 0 || (c == 0 && qp->ibqp.qp_num <= qp->attr.dest_qp_num);
}

static bool trdma_cm_is_self(struct trdma_qp *qp)
{
	const struct ib_global_route *grh = &qp->attr.ah_attr.grh;

	return !memcmp(grh->sgid_attr->gid.raw, grh->dgid.raw, 16) &&
	       qp->ibqp.qp_num == qp->attr.dest_qp_num;
}

/*
 * A QP connected to itself rides a TCP connection connected to itself: a
 * simultaneous open from the port the socket is bound to, to that same
 * port.  What the QP sends, it reads back; its hello comes back as the
 * reply.  Points dst at the bound port.
 */
static int trdma_cm_self_port(struct socket *sock,
			      struct sockaddr_storage *dst)
{
	struct sockaddr_storage me;
	int rv = kernel_getsockname(sock, (struct sockaddr *)&me);

	if (rv < 0)
		return rv;
	if (dst->ss_family == AF_INET)
		((struct sockaddr_in *)dst)->sin_port =
			((struct sockaddr_in *)&me)->sin_port;
	else
		((struct sockaddr_in6 *)dst)->sin6_port =
			((struct sockaddr_in6 *)&me)->sin6_port;
	return 0;
}

/*
 * The peer's FIN.  TCP reports it before it wakes the reader for the bytes
 * that came with it: take those in first (an ACK may be among them).
 */
static void trdma_cm_peer_fin(struct trdma_qp *qp, struct sock *sk)
{
	trdma_rx_drain(qp, sk);
	trdma_tx_ack_forget_unasked(qp);
	trdma_qp_peer_closed(qp);
}

static void trdma_cm_state_change(struct sock *sk)
{
	void (*saved)(struct sock *sk) = NULL;
	struct trdma_qp *qp;

	read_lock_bh(&sk->sk_callback_lock);
	qp = sk->sk_user_data;
	if (qp) {
		int err = READ_ONCE(sk->sk_err);

		saved = qp->saved_state_change;
		if (sk->sk_state != TCP_ESTABLISHED) {
			if (err == ETIMEDOUT)
				trdma_qp_timed_out(qp);
			else if (!err && sk->sk_state == TCP_CLOSE_WAIT &&
				 qp->tls)
				trdma_tls_rx_kick(qp);	/* reads up to the FIN */
			else if (!err && sk->sk_state == TCP_CLOSE_WAIT)
				trdma_cm_peer_fin(qp, sk);
			else
				trdma_qp_fatal(qp, IB_EVENT_QP_FATAL);
		}
	}
	read_unlock_bh(&sk->sk_callback_lock);
	if (saved)
		saved(sk);
}

void trdma_cm_write_space(struct sock *sk)
{
	struct trdma_qp *qp;

	read_lock_bh(&sk->sk_callback_lock);
	qp = sk->sk_user_data;
	/* kTLS's own first: it pushes a record TCP took only part of. */
	if (qp && qp->tls)
		qp->saved_write_space(sk);
	if (qp && sk_stream_is_writeable(sk)) {
		clear_bit(SOCK_NOSPACE, &sk->sk_socket->flags);
		trdma_tx_kick(qp);
	}
	read_unlock_bh(&sk->sk_callback_lock);
}

static struct trdma_closing *trdma_closing_alloc(void);

/*
 * Binds an established, greeted connection to the QP.  Called with
 * qp->state_mutex held and the QP in RTR or RTS.
 */
static void trdma_cm_attach(struct trdma_qp *qp, struct socket *sock,
			    const struct trdma_hello *peer,
			    const struct trdma_tls_hs *hs)
{
	struct sock *sk = sock->sk;
	struct trdma_closing *c;
	unsigned long flags;
	int rv;

	lockdep_assert_held(&qp->state_mutex);
	/* What it will close with, so that the closing never lacks memory. */
	c = trdma_closing_alloc();
	if (!c) {
		rv = -ENOMEM;
		goto err;
	}
	/*
	 * An encrypted link: the TLS ULP went on right after the hellos and
	 * the peer's key confirmation is checked (trdma_tls_install()); its
	 * callbacks run before the QP's (trdma_rx_data_ready(),
	 * trdma_cm_write_space()).
	 */
	if (hs->on) {
		rv = trdma_tls_start(qp);
		if (rv)
			goto err_closing;
	}
	trdma_cm_tune(qp->tdev, sock);
	trdma_cm_apply_timeout(qp, sock);
	qp->peer_rd_atomic = min_t(u8, peer->max_dest_rd_atomic,
				   TRDMA_MAX_RD_ATOM);
	memset(&qp->rx, 0, sizeof(qp->rx));
	qp->rx.expected_msn = qp->attr.rq_psn;
	qp->rx.local = trdma_cm_route_local(sk);
	/*
	 * Both hellos are through: the next byte is ISN + 1 + a hello (the
	 * TCP option's offsets; an encrypted link has none).
	 */
	qp->rx.pos = 1 + sizeof(struct trdma_hello);
	trdma_txopt_init(qp, sock);

	write_lock_bh(&sk->sk_callback_lock);
	qp->saved_data_ready = sk->sk_data_ready;
	qp->saved_write_space = sk->sk_write_space;
	qp->saved_state_change = sk->sk_state_change;
	sk->sk_user_data = qp;
	sk->sk_data_ready = trdma_rx_data_ready;
	sk->sk_write_space = trdma_cm_write_space;
	sk->sk_state_change = trdma_cm_state_change;
	write_unlock_bh(&sk->sk_callback_lock);

	qp->closing = c;
	trdma_tx_lock(qp);
	spin_lock_irqsave(&qp->lock, flags);
	qp->sock = sock;
	spin_unlock_irqrestore(&qp->lock, flags);
	trdma_tx_unlock(qp);

	trdma_count(qp->tdev, TRDMA_CNT_CONNECTIONS, 1);
	ibdev_dbg(qp->ibqp.device, "QP %u connected to QP %u\n",
		  qp->ibqp.qp_num, qp->attr.dest_qp_num);
	/* Data may have arrived before the callbacks were ours. */
	trdma_rx_pump(qp);
	trdma_tx_kick(qp);
	if (sk->sk_state != TCP_ESTABLISHED)
		trdma_qp_fatal(qp, IB_EVENT_QP_FATAL);
	return;

err_closing:
	kfree(c);
err:
	ibdev_info_ratelimited(qp->ibqp.device,
			       "QP %u: connection to QP %u not bound: %d\n",
			       qp->ibqp.qp_num, qp->attr.dest_qp_num, rv);
	trdma_count(qp->tdev, TRDMA_CNT_CONNECT_FAILURES, 1);
	kernel_sock_shutdown(sock, SHUT_RDWR);
	sock_release(sock);
	trdma_qp_fatal(qp, IB_EVENT_QP_FATAL);
}

/* ---- closing ---------------------------------------------------------- */

/*
 * A connection its QP let go of (destroyed, reset, in error) may still
 * have bytes on the way from the peer: an ACK the peer held back
 * (trdma_tx_ack_soon()) can cross our FIN.  Bytes for a socket closed for
 * reading make TCP reset the connection (RFC 1122 4.2.2.13), and a reset
 * fails the peer's QP at once, where our FIN alone lets it finish its
 * peer_close_grace.  So the socket sends its FIN (SHUT_WR), stays open and
 * discards what still comes until the peer's FIN is in and ours is
 * acknowledged (an encrypted one: until the peer's FIN is read), or the
 * connection is gone, for at most TRDMA_CLOSE_LINGER_MS; then it is
 * released, aborted where TCP would still send.  Meanwhile what TCP sends
 * again still carries the trdma TCP option (struct trdma_closing's txopt;
 * not an encrypted connection's), also after the namespace's last device
 * is gone: the closing keeps the hook (trdma_net_closing_get()).  Its
 * memory comes with the binding (trdma_cm_attach()), so none is lacking
 * at the close.
 */
#define TRDMA_CLOSE_LINGER_MS	5000

struct trdma_closing {
	struct list_head list;		/* in trdma_closing_list once armed */
	struct socket *sock;
	struct delayed_work work;	/* trdma_closing_work() releases */
	bool armed;			/* work queued; under sk_callback_lock */
	/*
	 * An encrypted connection: kTLS keeps the callbacks and decrypts for
	 * recvmsg only, so the work polls (trdma_tls_discard()) until the
	 * peer's FIN or until (jiffies; trdma_closing_flush() moves it).
	 */
	bool tls;
	unsigned long until;
	void (*saved_data_ready)(struct sock *sk);
	void (*saved_state_change)(struct sock *sk);
	/*
	 * The QP's trdma TCP option records (trdma_txopt_handover()), for
	 * what TCP sends again meanwhile; freed with the closing.
	 */
	struct trdma_txopt txopt;
	struct trdma_net *tnet;		/* keeps its option hook (closings) */
	struct rcu_head rcu;		/* freed after the output hook's readers */
};

static LIST_HEAD(trdma_closing_list);
/* Protects trdma_closing_list; nests inside sk_callback_lock. */
static DEFINE_SPINLOCK(trdma_closing_lock);

static int trdma_closing_discard(read_descriptor_t *rd, struct sk_buff *skb,
				 unsigned int off, size_t len)
{
	return len;
}

/* Discards what the socket holds.  Socket lock held. */
static void trdma_closing_drain(struct sock *sk)
{
	read_descriptor_t rd = { .count = 1 };

	tcp_read_sock(sk, &rd, trdma_closing_discard);
}

/*
 * Nothing more can come, and nothing more goes: the peer's FIN is in and
 * ours acknowledged (TCP_CLOSE, through TIME_WAIT or LAST_ACK), or the
 * connection is gone.  Not at the peer's FIN alone: bytes of ours the
 * peer has not acknowledged may still go again, and only while the
 * closing holds the socket do they carry the trdma TCP option.
 */
static bool trdma_closing_done(const struct sock *sk)
{
	return READ_ONCE(sk->sk_state) == TCP_CLOSE;
}

static void trdma_closing_data_ready(struct sock *sk)
{
	read_lock_bh(&sk->sk_callback_lock);
	if (sk->sk_user_data)
		trdma_closing_drain(sk);
	read_unlock_bh(&sk->sk_callback_lock);
}

static void trdma_closing_state_change(struct sock *sk)
{
	struct trdma_closing *c;

	read_lock_bh(&sk->sk_callback_lock);
	c = sk->sk_user_data;
	if (c && c->armed && trdma_closing_done(sk))
		mod_delayed_work(trdma_wq, &c->work, 0);
	read_unlock_bh(&sk->sk_callback_lock);
}

/*
 * The trdma TCP option records of sk: its QP's, with that QP's device in
 * *tdev, or, once the QP let go, those of its closing (no device: the
 * closing outlives it); NULL for any other socket.  For the output hook,
 * which holds the socket's lock where TCP sends (detach and the closing's
 * end each take it after the callbacks changed) and rcu_read_lock()
 * everywhere: a packet that comes back to LOCAL_OUT later without that
 * lock (asynchronous IPsec, a verdict from NFQUEUE) still finds the
 * closing, which is freed a grace period after its callbacks are gone
 * (trdma_closing_free()).
 */
struct trdma_txopt *trdma_cm_sk_txopt(struct sock *sk,
				      struct trdma_dev **tdev)
{
	if (READ_ONCE(sk->sk_write_space) == trdma_cm_write_space) {
		struct trdma_qp *qp = READ_ONCE(sk->sk_user_data);

		if (!qp)
			return NULL;
		*tdev = qp->tdev;
		return &qp->txopt;
	}
	if (READ_ONCE(sk->sk_data_ready) == trdma_closing_data_ready) {
		struct trdma_closing *c = READ_ONCE(sk->sk_user_data);

		return c ? &c->txopt : NULL;
	}
	return NULL;
}

/* A grace period after the closing's callbacks were taken off its socket. */
static void trdma_closing_free(struct rcu_head *rcu)
{
	struct trdma_closing *c = container_of(rcu, struct trdma_closing, rcu);

	trdma_txopt_release(&c->txopt);
	kfree(c);
}

/*
 * Out of trdma_closing_list first (trdma_closing_flush() requeues only
 * what is listed), then the callbacks are the socket's own again: after
 * that nothing requeues the work, and a requeue from before is cancelled.
 */
static void trdma_closing_work(struct work_struct *work)
{
	struct trdma_closing *c = container_of(to_delayed_work(work),
					       struct trdma_closing, work);
	struct sock *sk = c->sock->sk;

	if (c->tls) {
		int rv = trdma_tls_discard(c->sock);

		/* More than a budget's worth, or none for now, or no page. */
		if ((rv > 0 || rv == -EAGAIN || rv == -ENOMEM) &&
		    !trdma_closing_done(sk) &&
		    time_before(jiffies, READ_ONCE(c->until))) {
			queue_delayed_work(trdma_wq, &c->work,
					   rv > 0 ? 0 : HZ / 10);
			return;
		}
		spin_lock_bh(&trdma_closing_lock);
		list_del(&c->list);
		spin_unlock_bh(&trdma_closing_lock);
		/* A requeue by trdma_closing_flush() while this ran. */
		cancel_delayed_work(&c->work);
		goto release;
	}

	spin_lock_bh(&trdma_closing_lock);
	list_del(&c->list);
	spin_unlock_bh(&trdma_closing_lock);

	write_lock_bh(&sk->sk_callback_lock);
	sk->sk_user_data = NULL;
	sk->sk_data_ready = c->saved_data_ready;
	sk->sk_state_change = c->saved_state_change;
	write_unlock_bh(&sk->sk_callback_lock);
	cancel_delayed_work(&c->work);

	/*
	 * Unread bytes would make the close a reset.  Once the socket's lock
	 * was held, no output hook under it looks at c's records any more;
	 * one under RCU alone is waited out (trdma_closing_free()).
	 */
	lock_sock(sk);
	trdma_closing_drain(sk);
	/*
	 * Bytes or our FIN still unacknowledged (a peer silent for
	 * TRDMA_CLOSE_LINGER_MS, or the namespace or the module going):
	 * aborted (a reset where TCP still owes the peer something) rather
	 * than left to TCP as an orphan, whose tries would go without the
	 * option.  In FIN_WAIT2 TCP has nothing left to send.
	 */
	if ((1 << sk->sk_state) &
	    (TCPF_FIN_WAIT1 | TCPF_CLOSING | TCPF_LAST_ACK))
		tcp_disconnect(sk, 0);
	release_sock(sk);
release:
	kernel_sock_shutdown(c->sock, SHUT_RDWR);
	sock_release(c->sock);
	/* Nothing of it sends any more: the hook may go with the devices. */
	trdma_net_closing_put(c->tnet);
	call_rcu(&c->rcu, trdma_closing_free);
}

/* Allocated with the binding (trdma_cm_attach()). */
static struct trdma_closing *trdma_closing_alloc(void)
{
	struct trdma_closing *c = kzalloc(sizeof(*c), GFP_KERNEL);

	if (c) {
		INIT_DELAYED_WORK(&c->work, trdma_closing_work);
		spin_lock_init(&c->txopt.lock);
	}
	return c;
}

/*
 * The closing's callbacks instead of the QP's, which the caller took off
 * while it owns the socket (trdma_cm_detach_locked()).  Process context.
 */
static void trdma_closing_install(struct trdma_closing *c)
{
	struct sock *sk = c->sock->sk;

	write_lock_bh(&sk->sk_callback_lock);
	c->saved_data_ready = sk->sk_data_ready;
	c->saved_state_change = sk->sk_state_change;
	sk->sk_user_data = c;
	sk->sk_data_ready = trdma_closing_data_ready;
	sk->sk_state_change = trdma_closing_state_change;
	write_unlock_bh(&sk->sk_callback_lock);
}

/*
 * Closes a connection no QP holds any more, with c, its callbacks
 * installed unless tls.  Until the closing is armed (its work queued)
 * nothing else releases the socket; once it is, this touches neither the
 * socket nor c again.  Process context.
 */
static void trdma_cm_close(struct socket *sock, struct trdma_closing *c,
			   bool tls)
{
	struct sock *sk = sock->sk;

	if (tls) {
		c->tls = true;
		c->until = jiffies + msecs_to_jiffies(TRDMA_CLOSE_LINGER_MS);
		kernel_sock_shutdown(sock, SHUT_WR);
		spin_lock_bh(&trdma_closing_lock);
		list_add_tail(&c->list, &trdma_closing_list);
		queue_delayed_work(trdma_wq, &c->work, 0);
		spin_unlock_bh(&trdma_closing_lock);
		return;
	}

	kernel_sock_shutdown(sock, SHUT_WR);
	lock_sock(sk);
	trdma_closing_drain(sk);	/* what came before the callbacks */
	release_sock(sk);

	/* A state change from here on finds the closing armed. */
	write_lock_bh(&sk->sk_callback_lock);
	c->armed = true;
	spin_lock(&trdma_closing_lock);
	list_add_tail(&c->list, &trdma_closing_list);
	spin_unlock(&trdma_closing_lock);
	queue_delayed_work(trdma_wq, &c->work, trdma_closing_done(sk) ? 0 :
			   msecs_to_jiffies(TRDMA_CLOSE_LINGER_MS));
	write_unlock_bh(&sk->sk_callback_lock);
}

/*
 * Every closing connection of net is released now: its namespace is going
 * away (trdma_net_exit(), also at module unload), and a kernel socket does
 * not keep it.  Each release drops its count on the namespace's state
 * (trdma_net_closing_put()) before this returns.
 */
static void trdma_closing_flush(const struct net *net)
{
	struct trdma_closing *c;

	spin_lock_bh(&trdma_closing_lock);
	list_for_each_entry(c, &trdma_closing_list, list)
		if (net_eq(sock_net(c->sock->sk), net)) {
			WRITE_ONCE(c->until, jiffies);
			mod_delayed_work(trdma_wq, &c->work, 0);
		}
	spin_unlock_bh(&trdma_closing_lock);
	flush_workqueue(trdma_wq);
}

/*
 * Ends the QP's life for its dial: a dial on its way is shut down, and
 * neither binds its connection nor fails the QP (qp->dial_gen).  Under
 * state_mutex.
 */
static void trdma_cm_end_dial(struct trdma_qp *qp)
{
	lockdep_assert_held(&qp->state_mutex);
	qp->dial_gen++;
	if (qp->connecting)
		kernel_sock_shutdown(qp->connecting, SHUT_RDWR);
}

/*
 * Unbinds and closes the QP's connection, if any, then lets the QP settle
 * what its receive path left (trdma_qp_rx_stopped).  Under state_mutex,
 * which also keeps trdma_cm_attach() out.  Process context.
 */
void trdma_cm_detach_locked(struct trdma_qp *qp)
{
	struct trdma_closing *c;
	struct socket *sock;
	unsigned long flags;
	struct sock *sk;
	bool tls;

	lockdep_assert_held(&qp->state_mutex);
	trdma_cm_end_dial(qp);
	trdma_tx_lock(qp);
	spin_lock_irqsave(&qp->lock, flags);
	sock = qp->sock;
	qp->sock = NULL;
	/* A segment half sent on this connection is not for the next. */
	qp->seg.kind = TRDMA_SEG_NONE;
	spin_unlock_irqrestore(&qp->lock, flags);
	trdma_tx_unlock(qp);
	if (!sock)
		goto out;

	sk = sock->sk;
	tls = qp->tls;
	c = qp->closing;
	qp->closing = NULL;
	c->sock = sock;
	c->tnet = qp->tdev->tnet;
	trdma_net_closing_get(c->tnet);
	/*
	 * Owned from the QP's callbacks to the closing's, so that no output
	 * hook (which runs under the socket's lock) finds the option's
	 * records in neither.
	 */
	lock_sock(sk);
	write_lock_bh(&sk->sk_callback_lock);
	sk->sk_user_data = NULL;
	sk->sk_data_ready = qp->saved_data_ready;
	sk->sk_write_space = qp->saved_write_space;
	sk->sk_state_change = qp->saved_state_change;
	write_unlock_bh(&sk->sk_callback_lock);
	if (!tls) {
		trdma_txopt_handover(qp, &c->txopt);
		trdma_closing_install(c);
	} else {
		trdma_txopt_stop(qp);
	}
	release_sock(sk);
	trdma_tls_stop(qp);
	trdma_cm_close(sock, c, tls);
out:
	/* No callback of the socket runs any more: the receive path is idle. */
	trdma_qp_rx_stopped(qp);
}

void trdma_cm_detach(struct trdma_qp *qp)
{
	mutex_lock(&qp->state_mutex);
	trdma_cm_detach_locked(qp);
	mutex_unlock(&qp->state_mutex);
}

#define TRDMA_SELF_ATTEMPTS 3

/*
 * The connecting side of an encrypted link, its hellos exchanged: keys on,
 * our key confirmation out, then the peer's read (within the socket's
 * receive timeout) and checked before the connection may bind.  A peer that
 * does not prove the key is refused and counted (refused_tls_confirm).
 */
static int trdma_cm_dial_confirm(struct trdma_qp *qp, struct socket *sock,
				 const struct trdma_hello *hello,
				 const struct trdma_hello *reply,
				 struct trdma_tls_hs *hs, const char **step)
{
	u8 got[sizeof(hs->confirm)];
	struct msghdr msg = {};
	struct kvec iov = { .iov_base = got, .iov_len = sizeof(got) };
	int rv;

	*step = "tls";
	/* Connected to itself: its own REQ came back as the answer. */
	rv = trdma_tls_install(qp, sock, hs, hello, reply);
	if (rv)
		return rv;
	*step = "tls confirm";
	rv = kernel_recvmsg(sock, &msg, &iov, 1, sizeof(got), MSG_WAITALL);
	if (rv == sizeof(got))
		rv = trdma_tls_confirmed(hs, got) ? 0 : -EKEYREJECTED;
	else if (rv >= 0)
		rv = -ECONNRESET;
	if (rv == -EKEYREJECTED || rv == -EBADMSG) {
		trdma_count(qp->tdev, TRDMA_CNT_REFUSED_TLS_CONFIRM, 1);
		ibdev_info_ratelimited(qp->ibqp.device,
				       "QP %u: the peer of QP %u failed key confirmation (%d): refused\n",
				       qp->ibqp.qp_num, qp->attr.dest_qp_num,
				       rv);
	}
	memzero_explicit(hs->confirm, sizeof(hs->confirm));
	return rv;
}

/*
 * One attempt of the active side: a socket from src to dst, the hellos
 * exchanged.  On success *sockp is the connected socket; on failure it is
 * released and *step names what failed.  -ECANCELED when the QP's life
 * gen (qp->dial_gen, as the run began) ended, the QP left RTR/RTS, or an
 * earlier run connected it.
 */
static int trdma_cm_dial(struct trdma_qp *qp, int family,
			 struct sockaddr_storage *src,
			 struct sockaddr_storage *dst, int len, bool self,
			 struct trdma_hello *hello, struct trdma_hello *reply,
			 struct trdma_tls_hs *hs, struct socket **sockp,
			 const char **step, u32 gen)
{
	struct msghdr msg = {};
	struct socket *sock;
	struct kvec iov;
	int rv;

	*sockp = NULL;
	memset(reply, 0, sizeof(*reply));
	memset(hs, 0, sizeof(*hs));
	hs->active = true;
	hs->self = self;
	*step = "socket";
	/* In the namespace of the device's netdev, as its listener. */
	rv = sock_create_kern(qp->tdev->net, family, SOCK_STREAM, IPPROTO_TCP,
			      &sock);
	if (rv)
		return rv;
	trdma_cm_tune(qp->tdev, sock);
	*step = "key";
	rv = trdma_key_dial(qp->tdev, sock,
			    (struct in6_addr *)qp->attr.ah_attr.grh.dgid.raw);
	if (rv)
		goto out;
	sock->sk->sk_sndtimeo = trdma_accept_timeout * HZ;
	sock->sk->sk_rcvtimeo = (trdma_accept_timeout + 5) * HZ;

	/*
	 * From here on reaching RTS does not dial: this dial's hello says
	 * whether the QP is in RTS when it goes.  A run of an ended life
	 * (trdma_cm_end_dial()) leaves the park to the next life's run.
	 * Only this work binds an active QP's connection, so one found
	 * connected at the run's start stays found (trdma_cm_connect_work()).
	 */
	mutex_lock(&qp->state_mutex);
	if (gen != qp->dial_gen) {
		rv = -ECANCELED;
	} else {
		qp->dial_parked = false;
		if (!trdma_state_connected(qp->state))
			rv = -ECANCELED;
		else
			qp->connecting = sock;
	}
	mutex_unlock(&qp->state_mutex);
	if (rv)
		goto out;

	*step = "bind";
	rv = kernel_bind(sock, (struct sockaddr *)src, len);
	if (!rv && self)
		rv = trdma_cm_self_port(sock, dst);
	if (!rv) {
		*step = "connect";
		rv = kernel_connect(sock, (struct sockaddr *)dst, len, 0);
	}
	if (!rv) {
		*step = "hello";
		trdma_hello_init(hello, qp, TRDMA_HELLO_REQ);
		hello->start_msn = cpu_to_be32(qp->attr.rq_psn);
		/* The proof of the PSN exchanged out of band: docs/wire.md */
		mutex_lock(&qp->state_mutex);
		if (qp->state == IB_QPS_RTS) {
			hello->flags |= cpu_to_be16(TRDMA_HELLO_SQ_PSN);
			hello->sq_psn = cpu_to_be32(qp->attr.sq_psn);
		}
		mutex_unlock(&qp->state_mutex);
		/* An encrypted link: a fresh nonce of ours behind the hello. */
		if (trdma_tls_on(qp->tdev)) {
			hello->flags |= cpu_to_be16(TRDMA_HELLO_TLS);
			get_random_bytes(hs->nonce_req, sizeof(hs->nonce_req));
		}
		rv = trdma_send_hello(sock, hello, hs->nonce_req);
	}
	if (!rv) {
		*step = "reply";
		iov.iov_base = reply;
		iov.iov_len = sizeof(*reply);
		rv = kernel_recvmsg(sock, &msg, &iov, 1, sizeof(*reply),
				    MSG_WAITALL);
		rv = rv == sizeof(*reply) ? 0 : (rv < 0 ? rv : -ECONNRESET);
	}
	if (!rv && reply->magic == cpu_to_be32(TRDMA_HELLO_MAGIC) &&
	    reply->version != TRDMA_WIRE_VERSION) {
		ibdev_info_ratelimited(qp->ibqp.device,
				       "QP %u: the peer of QP %u answers in wire version %u, this host speaks %u\n",
				       qp->ibqp.qp_num, qp->attr.dest_qp_num,
				       reply->version, TRDMA_WIRE_VERSION);
		*step = "version";
		rv = -EPROTO;
	}
	if (!rv && reply->type != TRDMA_HELLO_REJECT && trdma_hello_tls(reply)) {
		/* The accepting side's nonce (our own, connected to ourself). */
		iov.iov_base = hs->nonce_acc;
		iov.iov_len = sizeof(hs->nonce_acc);
		rv = kernel_recvmsg(sock, &msg, &iov, 1, iov.iov_len,
				    MSG_WAITALL);
		rv = rv == iov.iov_len ? 0 : (rv < 0 ? rv : -ECONNRESET);
	}
	if (!rv && (reply->magic != cpu_to_be32(TRDMA_HELLO_MAGIC) ||
		    reply->type != (self ? TRDMA_HELLO_REQ :
					   TRDMA_HELLO_ACCEPT) ||
		    reply->src_qpn != hello->dst_qpn ||
		    trdma_hello_uc(reply) != trdma_qp_is_uc(qp)))
		rv = reply->type == TRDMA_HELLO_REJECT ? -ECONNREFUSED :
							 -EPROTO;
	if (!rv && trdma_hello_tls(reply) != trdma_hello_tls(hello)) {
		/* The accepting side refuses that; one that does not is wrong. */
		trdma_count(qp->tdev, TRDMA_CNT_REFUSED_TLS, 1);
		*step = "tls";
		rv = -EPROTO;
	}
	hs->on = !rv && trdma_hello_tls(hello);
	if (hs->on)
		rv = trdma_cm_dial_confirm(qp, sock, hello, reply, hs, step);
	if (rv) {
		mutex_lock(&qp->state_mutex);
		qp->connecting = NULL;
		mutex_unlock(&qp->state_mutex);
	}
out:
	if (rv)
		sock_release(sock);
	else
		*sockp = sock;
	return rv;
}

/*
 * A dial of the QP's life gen failed with err.  It dials again later
 * instead of failing the QP when the accepting side asked for it (again: a
 * REJECT with EAGAIN, it cannot check our PSN before one of the QPs is in
 * RTS), and after any failure while the QP is in RTR, where nothing is
 * lost yet and RoCE would not notice a missing peer either (an application
 * accepting through rdma_cm moves its QP to RTS right after RTR and must
 * not find it in ERR).  In RTR the QP dials again on reaching RTS
 * (trdma_cm_qp_rts()), or after accept_timeout; in RTS, asked again, at
 * once.  Nothing is left to do where a reset ended that life, or a run
 * queued meanwhile (reaching RTS queued it) dials instead.  Else the QP
 * fails, under state_mutex with its life checked, so that the failure
 * never lands in a later life.  Returns whether the work was queued again
 * with the caller's reference.
 */
static bool trdma_cm_dial_failed(struct trdma_qp *qp, bool again,
				 const char *step, int err, u32 gen)
{
	unsigned long delay = trdma_accept_timeout * HZ;
	bool later = false, queued = false;

	mutex_lock(&qp->state_mutex);
	if (gen != qp->dial_gen) {
		mutex_unlock(&qp->state_mutex);
		ibdev_dbg(qp->ibqp.device, "QP %u: a dial of its life before: %d\n",
			  qp->ibqp.qp_num, err);
		return false;
	}
	if (qp->state == IB_QPS_RTS)
		delay = 0;
	/*
	 * queue_delayed_work() fails while trdma_cm_qp_destroy() cancels
	 * (the QP is in ERR then), or where a run is queued already.
	 */
	if (qp->state == IB_QPS_RTR || (qp->state == IB_QPS_RTS && again)) {
		later = true;
		queued = queue_delayed_work(trdma_dial_wq, &qp->connect_work,
					    delay);
		if (queued)
			qp->dial_parked = delay;
	} else {
		trdma_qp_fatal(qp, IB_EVENT_QP_FATAL);
	}
	mutex_unlock(&qp->state_mutex);
	if (later && !queued)
		return false;	/* the run queued meanwhile dials instead */
	if (later && again) {
		ibdev_dbg(qp->ibqp.device, "QP %u: peer cannot check our PSN yet, dial %s\n",
			  qp->ibqp.qp_num, delay ? "later" : "again");
		return true;
	}
	/* Why a QP went to error, or waits: worth a line in the log. */
	if (later)
		ibdev_info_ratelimited(qp->ibqp.device,
				       "QP %u: connect to QP %u failed (%s): %d; again in RTS or in %u s\n",
				       qp->ibqp.qp_num, qp->attr.dest_qp_num,
				       step, err, trdma_accept_timeout);
	else
		ibdev_info_ratelimited(qp->ibqp.device,
				       "QP %u: connect to QP %u failed (%s): %d\n",
				       qp->ibqp.qp_num, qp->attr.dest_qp_num,
				       step, err);
	trdma_count(qp->tdev, TRDMA_CNT_CONNECT_FAILURES, 1);
	return later;
}

void trdma_cm_connect_work(struct work_struct *work)
{
	struct trdma_qp *qp = container_of(to_delayed_work(work),
					   struct trdma_qp, connect_work);
	const struct ib_global_route *grh = &qp->attr.ah_attr.grh;
	struct sockaddr_storage src = {}, dst = {};
	struct trdma_hello hello, reply;
	struct trdma_tls_hs hs;
	const char *step = "";
	int family, len, attempt, rv = 0;
	struct socket *sock;
	bool self;
	u32 gen;

	/*
	 * The life this run dials for, with its addresses: a reset and a
	 * new RTR meanwhile make another life, whose own run dials.
	 * Connected by an earlier run, or no longer in RTR/RTS: no socket.
	 */
	mutex_lock(&qp->state_mutex);
	gen = qp->dial_gen;
	if (qp->sock || !trdma_state_connected(qp->state)) {
		rv = -ECANCELED;
		goto unlock;
	}
	self = trdma_cm_is_self(qp);
	if (ipv6_addr_v4mapped((struct in6_addr *)grh->dgid.raw)) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&src;
		struct sockaddr_in *d4 = (struct sockaddr_in *)&dst;

		family = AF_INET;
		len = sizeof(*s4);
		s4->sin_family = AF_INET;
		memcpy(&s4->sin_addr, &grh->sgid_attr->gid.raw[12], 4);
		d4->sin_family = AF_INET;
		d4->sin_port = htons(trdma_port);
		memcpy(&d4->sin_addr, &grh->dgid.raw[12], 4);
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&src;
		struct sockaddr_in6 *d6 = (struct sockaddr_in6 *)&dst;

		family = AF_INET6;
		len = sizeof(*s6);
		s6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, grh->sgid_attr->gid.raw, 16);
		d6->sin6_family = AF_INET6;
		d6->sin6_port = htons(trdma_port);
		memcpy(&d6->sin6_addr, grh->dgid.raw, 16);
		if (ipv6_addr_type(&d6->sin6_addr) & IPV6_ADDR_LINKLOCAL) {
			d6->sin6_scope_id = qp->tdev->netdev->ifindex;
			s6->sin6_scope_id = qp->tdev->netdev->ifindex;
		}
	}
unlock:
	mutex_unlock(&qp->state_mutex);
	if (rv)
		goto cancelled;

	/*
	 * A connection to itself can lose its simultaneous open to a SYN
	 * still in flight from an earlier socket on the same port (a QP
	 * destroyed while connecting to itself): that attempt ends with
	 * the socket closed; a fresh socket gets another port.
	 */
	for (attempt = 0;; attempt++) {
		rv = trdma_cm_dial(qp, family, &src, &dst, len, self, &hello,
				   &reply, &hs, &sock, &step, gen);
		if (!rv || rv == -ECANCELED || !self ||
		    attempt + 1 >= TRDMA_SELF_ATTEMPTS)
			break;
		ibdev_dbg(qp->ibqp.device, "QP %u: connect to itself: %d, again\n",
			  qp->ibqp.qp_num, rv);
	}
	if (rv == -ECANCELED)
		goto cancelled;
	if (rv) {
		if (trdma_cm_dial_failed(qp, rv == -ECONNREFUSED &&
					 reply.status == cpu_to_be32(EAGAIN),
					 step, rv, gen))
			return;	/* the queued work has our reference */
		goto out;
	}

	mutex_lock(&qp->state_mutex);
	qp->connecting = NULL;
	if (gen == qp->dial_gen && trdma_state_connected(qp->state)) {
		trdma_cm_attach(qp, sock, &reply, &hs);
		sock = NULL;
	} else {
		rv = -ECANCELED;
	}
	mutex_unlock(&qp->state_mutex);
	if (sock)
		sock_release(sock);
	if (!rv)
		goto out;
cancelled:
	ibdev_dbg(qp->ibqp.device, "QP %u: connect to QP %u: %d\n",
		  qp->ibqp.qp_num, qp->attr.dest_qp_num, rv);
out:
	trdma_qp_put(qp);
}

/*
 * How long a connecting QP that reached RTR waits for its RTS before it
 * dials.  A hello sent in RTS carries the sq_psn that proves it at once; a
 * hello sent in RTR cannot be checked by an accepting QP that stays in RTR
 * (one that only receives, as perftest's bandwidth servers do), which
 * holds it for a second (TRDMA_UNPROVEN_HOLD) and then refuses it, and the
 * connecting side dials again: a second of a new QP's first messages.
 * Most applications move their QP to RTS right after RTR, and reaching RTS
 * dials at once.
 */
#define TRDMA_DIAL_RTR_WAIT	(HZ / 20)

/*
 * Queues the QP's connect_work in delay jiffies, queued or not, parked or
 * not; parked (with a delay), reaching RTS runs it at once.  Under
 * state_mutex.
 */
static void trdma_cm_dial_in(struct trdma_qp *qp, unsigned long delay)
{
	lockdep_assert_held(&qp->state_mutex);
	qp->dial_parked = delay;
	refcount_inc(&qp->ref);
	/* true: it was queued already, with a reference of its own */
	if (mod_delayed_work(trdma_dial_wq, &qp->connect_work, delay))
		trdma_qp_put(qp);
}

/*
 * The QP reached RTR: connect (parked for its RTS a moment; a QP connected
 * to itself proves nothing to itself and goes at once), or look for its
 * accepted connection.
 */
void trdma_cm_qp_rtr(struct trdma_qp *qp)
{
	if (!qp->attr.ah_attr.grh.sgid_attr)
		return;
	qp->dial_parked = false;
	if (trdma_cm_is_active(qp)) {
		trdma_cm_dial_in(qp, trdma_cm_is_self(qp) ? 0 :
				 TRDMA_DIAL_RTR_WAIT);
	} else {
		trdma_key_qp_rtr(qp);
		mod_delayed_work(trdma_accept_wq, &trdma_pending_work, 0);
	}
}

/*
 * The QP reached RTS: its sq_psn is known now.  A connecting side whose
 * dial waits for it (parked: the first dial after RTR, or a dial again the
 * peer asked for) dials at once; on an accepting side, a connection that
 * waited for that can be checked.  Called with qp->state_mutex held.
 */
void trdma_cm_qp_rts(struct trdma_qp *qp)
{
	lockdep_assert_held(&qp->state_mutex);
	if (!qp->attr.ah_attr.grh.sgid_attr || qp->sock)
		return;
	if (qp->dial_parked)
		trdma_cm_dial_in(qp, 0);
	else if (!trdma_cm_is_active(qp))
		mod_delayed_work(trdma_accept_wq, &trdma_pending_work, 0);
}

void trdma_cm_qp_destroy(struct trdma_qp *qp)
{
	/* Before the work is waited for: a dial could wait for its answer. */
	mutex_lock(&qp->state_mutex);
	trdma_cm_end_dial(qp);
	mutex_unlock(&qp->state_mutex);
	if (cancel_delayed_work_sync(&qp->connect_work))
		trdma_qp_put(qp);
	flush_work(&qp->fatal_work);
	trdma_cm_detach(qp);
	WARN_ON_ONCE(qp->closing);	/* only with a connection */
	trdma_key_qp_put(qp);
}

/* ---- passive side --------------------------------------------------- */

static void trdma_pending_data_ready(struct sock *sk)
{
	mod_delayed_work(trdma_accept_wq, &trdma_pending_work, 0);
}

/* A confirming connection's: kTLS's own first (it parses the records). */
static void trdma_pending_tls_data_ready(struct sock *sk)
{
	struct trdma_pending *p;

	read_lock_bh(&sk->sk_callback_lock);
	p = sk->sk_user_data;
	if (p) {
		p->saved_data_ready(sk);
		mod_delayed_work(trdma_accept_wq, &trdma_pending_work, 0);
	}
	read_unlock_bh(&sk->sk_callback_lock);
}

/* The socket's callbacks are its own again (kTLS's, if it has them). */
static void trdma_pending_unhook(struct trdma_pending *p)
{
	struct sock *sk = p->sock->sk;

	write_lock_bh(&sk->sk_callback_lock);
	sk->sk_data_ready = p->saved_data_ready;
	sk->sk_user_data = NULL;
	write_unlock_bh(&sk->sk_callback_lock);
}

static void trdma_pending_close(struct trdma_pending *p)
{
	trdma_pending_unhook(p);
	list_del(&p->list);
	kernel_sock_shutdown(p->sock, SHUT_RDWR);
	sock_release(p->sock);
	kfree(p);
}

static void trdma_pending_reject(struct trdma_pending *p, int err)
{
	struct trdma_hello r = {
		.magic = cpu_to_be32(TRDMA_HELLO_MAGIC),
		.version = TRDMA_WIRE_VERSION,
		.type = TRDMA_HELLO_REJECT,
		.src_qpn = p->hello.dst_qpn,
		.dst_qpn = p->hello.src_qpn,
		.status = cpu_to_be32(-err),
	};

	/* Not into an encrypted stream: the peer reads records by now. */
	if (!p->confirming)
		trdma_send_all(p->sock, &r, sizeof(r));
	trdma_pending_close(p);
}

/*
 * Whether the connection comes from the address of the GID its hello
 * claims as source.  The connecting side binds its socket to that address
 * (trdma_cm_connect_work()), so a hello from anywhere else is someone
 * posing as the QP's peer.  The listener is dual-stack: an IPv4 peer shows
 * as an IPv4-mapped address, which is the form of an IPv4 RoCE v2 GID.
 */
static bool trdma_pending_from_gid(struct trdma_pending *p, const u8 *gid,
				   struct sockaddr_storage *ss)
{
	struct in6_addr a;

	if (kernel_getpeername(p->sock, (struct sockaddr *)ss) < 0)
		return false;
	if (ss->ss_family == AF_INET)
		ipv6_addr_set_v4mapped(((struct sockaddr_in *)ss)->sin_addr.s_addr,
				       &a);
	else if (ss->ss_family == AF_INET6)
		a = ((struct sockaddr_in6 *)ss)->sin6_addr;
	else
		return false;
	return !memcmp(&a, gid, sizeof(a));
}

/* How long a hello that cannot prove the PSN yet waits for our RTS. */
#define TRDMA_UNPROVEN_HOLD	HZ

/*
 * Whether the hello proves the PSN the two applications exchanged out of
 * band: 1 yes, -1 it proves another, 0 it cannot be checked yet.  The
 * connecting side sends its sq_psn (our rq_psn) when it dialed in RTS;
 * its start_msn is its rq_psn, our sq_psn, known once we are in RTS.
 * Called with qp->state_mutex held; meaningful for a QP in RTR or RTS.
 */
static int trdma_hello_proof(struct trdma_qp *qp, const struct trdma_hello *h)
{
	if (h->flags & cpu_to_be16(TRDMA_HELLO_SQ_PSN))
		return be32_to_cpu(h->sq_psn) == qp->attr.rq_psn ? 1 : -1;
	if (qp->state == IB_QPS_RTS)
		return be32_to_cpu(h->start_msn) == qp->attr.sq_psn ? 1 : -1;
	return 0;
}

/*
 * Whether the QP, in RTR or RTS, waits for the peer the hello names and
 * not connected yet.  Under qp->state_mutex.
 */
static bool trdma_pending_qp_waits(struct trdma_qp *qp,
				   const struct trdma_hello *h)
{
	return qp->state <= IB_QPS_RTS && !qp->sock && !trdma_qp_is_ud(qp) &&
	       trdma_hello_uc(h) == trdma_qp_is_uc(qp) &&
	       qp->attr.ah_attr.grh.sgid_attr && !trdma_cm_is_active(qp) &&
	       qp->attr.dest_qp_num == be32_to_cpu(h->src_qpn) &&
	       !memcmp(qp->attr.ah_attr.grh.dgid.raw, h->src_gid, 16);
}

/* Binds the pending connection to the QP; p is gone.  Under state_mutex. */
static void trdma_pending_attach(struct trdma_pending *p, struct trdma_qp *qp)
{
	trdma_pending_unhook(p);
	list_del(&p->list);
	trdma_cm_attach(qp, p->sock, &p->hello, &p->hs);
	memzero_explicit(&p->hs, sizeof(p->hs));
	kfree(p);
}

/*
 * An encrypted link the QP accepted (its ACCEPT, with our nonce, is sent):
 * the keys go on, our confirmation goes out, and the connection waits
 * pending for the peer's (trdma_pending_confirm()), not yet the QP's.  The
 * data_ready callback kTLS puts on the socket is wrapped as the QP wraps
 * it once attached.  Under qp->state_mutex and trdma_pending_lock.
 */
static int trdma_pending_tls(struct trdma_pending *p, struct trdma_qp *qp,
			     const struct trdma_hello *reply)
{
	struct sock *sk = p->sock->sk;
	int rv;

	/* From here the stream is records: no clear REJECT after this. */
	p->confirming = true;
	p->confirm_got = 0;
	p->deadline = jiffies + trdma_accept_timeout * HZ;
	kernel_getpeername(p->sock, (struct sockaddr *)&p->peer);
	write_lock_bh(&sk->sk_callback_lock);
	sk->sk_data_ready = p->saved_data_ready;
	write_unlock_bh(&sk->sk_callback_lock);
	rv = trdma_tls_install(qp, p->sock, &p->hs, &p->hello, reply);
	write_lock_bh(&sk->sk_callback_lock);
	p->saved_data_ready = sk->sk_data_ready;
	sk->sk_user_data = p;
	sk->sk_data_ready = trdma_pending_tls_data_ready;
	write_unlock_bh(&sk->sk_callback_lock);
	if (rv)
		ibdev_info_ratelimited(qp->ibqp.device,
				       "QP %u: TLS for the connection from QP %u: %d\n",
				       qp->ibqp.qp_num, qp->attr.dest_qp_num,
				       rv);
	return rv;
}

/*
 * Tries to bind a pending connection whose hello is complete.  Returns 0
 * when bound (p is gone), -EAGAIN while its QP is not ready or cannot
 * check the PSN yet, or another error for a connection to refuse.
 */
static int trdma_pending_bind(struct trdma_pending *p)
{
	const struct trdma_hello *h = &p->hello;
	u32 qpn = be32_to_cpu(h->dst_qpn);
	struct sockaddr_storage peer = {};
	struct trdma_hello reply;
	struct trdma_dev *tdev;
	struct trdma_qp *qp = NULL;
	const char *why = "";
	union ib_gid gid;
	int proof, rv = 0;

	if (h->magic == cpu_to_be32(TRDMA_HELLO_MAGIC) &&
	    h->version != TRDMA_WIRE_VERSION) {
		kernel_getpeername(p->sock, (struct sockaddr *)&peer);
		pr_info_ratelimited("trdma: connection for QP %u from %pISc refused: its hello is of wire version %u, this host speaks %u\n",
				    qpn, &peer, h->version, TRDMA_WIRE_VERSION);
		return -EPROTO;
	}
	if (h->magic != cpu_to_be32(TRDMA_HELLO_MAGIC) ||
	    h->type != TRDMA_HELLO_REQ)
		return -EPROTO;

	memcpy(gid.raw, h->dst_gid, 16);
	/* Only a device of the namespace the connection came in. */
	tdev = trdma_dev_get_by_gid(sock_net(p->sock->sk), &gid);
	if (!tdev)
		return -ENODEV;
	if (!trdma_pending_from_gid(p, h->src_gid, &peer)) {
		trdma_count(tdev, TRDMA_CNT_REFUSED_SOURCE, 1);
		why = "not from the address of the GID it claims";
		rv = -EACCES;
		goto refused;
	}
	qp = trdma_qp_get(tdev, qpn);
	if (!qp) {
		why = "no such QP";
		rv = -ENOENT;
		goto refused;
	}
	if (!trdma_key_may_bind(tdev, p->sock->sk)) {
		trdma_count(tdev, TRDMA_CNT_REFUSED_UNKEYED, 1);
		why = "the device is keyed, the connection is not";
		rv = -EACCES;
		trdma_qp_put(qp);
		goto refused;
	}
	/* Encrypted links bind only to encrypted links, and clear to clear. */
	if (trdma_hello_tls(h) != trdma_tls_on(tdev)) {
		trdma_count(tdev, TRDMA_CNT_REFUSED_TLS, 1);
		why = trdma_hello_tls(h) ?
		      "it asks for TLS, the device does not encrypt" :
		      "the device encrypts (tls), the connection does not";
		rv = -EACCES;
		trdma_qp_put(qp);
		goto refused;
	}

	mutex_lock(&qp->state_mutex);
	proof = trdma_hello_proof(qp, h);
	if (qp->state < IB_QPS_RTR || qp->state == IB_QPS_ERR) {
		/*
		 * Not ready for its peer yet, or in error: its owner may
		 * reset it and connect it again (pyverbs' tests do, one side
		 * after the other).  The connection waits, as for a QP not
		 * in RTR yet, as a RoCE requester retries while the peer
		 * drops its packets.
		 */
		rv = -EAGAIN;
	} else if (!trdma_pending_qp_waits(qp, h)) {
		why = "the QP does not wait for that peer";
		rv = -ECONNREFUSED;
	} else if (proof < 0) {
		trdma_count(tdev, TRDMA_CNT_REFUSED_PSN, 1);
		why = "it does not know the PSN";
		rv = -EACCES;
	} else if (!proof) {
		/*
		 * Held for our RTS, at most a second: then the peer dials
		 * again, with its sq_psn once it is in RTS.
		 */
		if (!p->unproven &&
		    time_before(jiffies + TRDMA_UNPROVEN_HOLD, p->deadline))
			p->deadline = jiffies + TRDMA_UNPROVEN_HOLD;
		p->unproven = true;
		rv = -EAGAIN;
	} else {
		struct trdma_tls_hs *hs = &p->hs;

		trdma_hello_init(&reply, qp, TRDMA_HELLO_ACCEPT);
		reply.start_msn = cpu_to_be32(qp->attr.rq_psn);
		memset(hs, 0, sizeof(*hs));
		hs->on = trdma_hello_tls(h);
		if (hs->on) {
			reply.flags |= cpu_to_be16(TRDMA_HELLO_TLS);
			memcpy(hs->nonce_req, p->nonce, sizeof(hs->nonce_req));
			get_random_bytes(hs->nonce_acc, sizeof(hs->nonce_acc));
		}
		rv = trdma_send_hello(p->sock, &reply, hs->nonce_acc);
		/*
		 * An encrypted link binds once the peer has proven it holds
		 * the key and saw the same hellos (trdma_pending_confirm()).
		 */
		if (!rv && hs->on)
			rv = trdma_pending_tls(p, qp, &reply) ?: -EAGAIN;
		else if (!rv)
			trdma_pending_attach(p, qp);
	}
	mutex_unlock(&qp->state_mutex);
	trdma_qp_put(qp);
	if (rv != -ECONNREFUSED && rv != -EACCES)
		goto out;
refused:
	/*
	 * Refused: the caller answers with a REJECT and closes; the QP, if
	 * any, keeps waiting for its real peer.
	 */
	trdma_count(tdev, TRDMA_CNT_REFUSED, 1);
	ibdev_info_ratelimited(&tdev->ibdev,
			       "connection for QP %u from %pISc (hello from GID %pI6c QP %u) refused: %s\n",
			       qpn, &peer, h->src_gid,
			       be32_to_cpu(h->src_qpn), why);
out:
	ib_device_put(&tdev->ibdev);
	return rv;
}

/*
 * A confirming connection that does not prove the key: refused, counted
 * (refused_tls_confirm), logged, closed without a word (the stream is
 * records); the QP goes on waiting for its real peer.
 */
static void trdma_pending_unconfirmed(struct trdma_pending *p, const char *why,
				      int err)
{
	const struct trdma_hello *h = &p->hello;
	struct trdma_dev *tdev;
	union ib_gid gid;

	memcpy(gid.raw, h->dst_gid, 16);
	tdev = trdma_dev_get_by_gid(sock_net(p->sock->sk), &gid);
	if (tdev) {
		trdma_count(tdev, TRDMA_CNT_REFUSED_TLS_CONFIRM, 1);
		trdma_count(tdev, TRDMA_CNT_REFUSED, 1);
	}
	pr_info_ratelimited("trdma: connection for QP %u from %pISc (hello from GID %pI6c QP %u) refused: key confirmation %s (%d)\n",
			    be32_to_cpu(h->dst_qpn), &p->peer, h->src_gid,
			    be32_to_cpu(h->src_qpn), why, err);
	if (tdev)
		ib_device_put(&tdev->ibdev);
	trdma_pending_close(p);
}

/*
 * A confirming connection: reads the peer's key confirmation, the first
 * record of its stream, without waiting.  Right: the connection binds to
 * its QP if that still waits for that peer and the hello's PSN proof still
 * holds; else (another connection took the QP meanwhile, or it was reset
 * and set up again for another peer or PSN) it is refused, counted in
 * connections_refused (refused_bad_psn too for a stale proof) and closed.
 * Wrong, a record that fails
 * authentication (a peer without the key, a hello changed on the path),
 * or none within accept_timeout: refused.  Returns -EAGAIN while it waits,
 * else 0 (p is gone).  Under trdma_pending_lock.
 */
static int trdma_pending_confirm(struct trdma_pending *p)
{
	const struct trdma_hello *h = &p->hello;
	const char *why = "no such QP";
	struct trdma_dev *tdev;
	struct trdma_qp *qp;
	union ib_gid gid;
	int rv = 0;

	while (p->confirm_got < sizeof(p->confirm)) {
		struct kvec iov = {
			.iov_base = p->confirm + p->confirm_got,
			.iov_len = sizeof(p->confirm) - p->confirm_got,
		};
		struct msghdr msg = { .msg_flags = MSG_DONTWAIT };

		rv = kernel_recvmsg(p->sock, &msg, &iov, 1, iov.iov_len,
				    MSG_DONTWAIT);
		if (rv <= 0)
			break;
		p->confirm_got += rv;
	}
	if (p->confirm_got < sizeof(p->confirm)) {
		if (rv == -EAGAIN && time_before(jiffies, p->deadline))
			return -EAGAIN;
		if (!rv) {
			/* Closed by the peer before it confirmed. */
			pr_debug("trdma: connection to QP %u closed before its key confirmation\n",
				 be32_to_cpu(h->dst_qpn));
			trdma_pending_close(p);
		} else {
			trdma_pending_unconfirmed(p, rv == -EAGAIN ? "missing" :
						  rv == -EBADMSG ?
						  "failed authentication" :
						  "unreadable", rv);
		}
		return 0;
	}
	if (!trdma_tls_confirmed(&p->hs, p->confirm)) {
		trdma_pending_unconfirmed(p, "wrong", -EKEYREJECTED);
		return 0;
	}

	memcpy(gid.raw, h->dst_gid, 16);
	tdev = trdma_dev_get_by_gid(sock_net(p->sock->sk), &gid);
	qp = tdev ? trdma_qp_get(tdev, be32_to_cpu(h->dst_qpn)) : NULL;
	rv = -ENOENT;
	if (qp) {
		mutex_lock(&qp->state_mutex);
		/*
		 * The QP may have been reset and set up again (or destroyed
		 * and its number reused) since the ACCEPT: the peer's PSN
		 * proof must hold for it as it is now.
		 */
		rv = -ECONNREFUSED;
		if (qp->state < IB_QPS_RTR || !trdma_pending_qp_waits(qp, h)) {
			why = "the QP no longer waits for that peer";
		} else if (trdma_hello_proof(qp, h) <= 0) {
			why = "its PSN proof no longer holds";
			rv = -EACCES;
		} else {
			trdma_pending_attach(p, qp);
			rv = 0;
		}
		mutex_unlock(&qp->state_mutex);
		trdma_qp_put(qp);
	}
	if (rv) {
		/*
		 * Refused as a hello would be now: counted (a stale PSN
		 * proof also in refused_bad_psn), logged, closed.
		 */
		if (tdev) {
			trdma_count(tdev, TRDMA_CNT_REFUSED, 1);
			if (rv == -EACCES)
				trdma_count(tdev, TRDMA_CNT_REFUSED_PSN, 1);
		}
		pr_info_ratelimited("trdma: confirmed connection for QP %u from %pISc (hello from GID %pI6c QP %u) refused: %s (%d)\n",
				    be32_to_cpu(h->dst_qpn), &p->peer,
				    h->src_gid, be32_to_cpu(h->src_qpn), why,
				    rv);
		trdma_pending_close(p);
	}
	if (tdev)
		ib_device_put(&tdev->ibdev);
	return 0;
}

/*
 * The bytes of the hello to read: the hello, then its nonce if it has the
 * flag (a fixed length, whatever the peer sends).
 */
static u32 trdma_pending_want(const struct trdma_pending *p)
{
	return p->got < sizeof(p->hello) ? sizeof(p->hello) :
					   trdma_hello_len(&p->hello);
}

static void trdma_pending_scan(struct work_struct *work)
{
	struct trdma_pending *p, *next;
	bool again = false;

	mutex_lock(&trdma_pending_lock);
	list_for_each_entry_safe(p, next, &trdma_pending_list, list) {
		int rv;

		if (p->confirming) {
			if (trdma_pending_confirm(p) == -EAGAIN)
				again = true;
			continue;
		}
		while (p->got < trdma_pending_want(p)) {
			bool in_hello = p->got < sizeof(p->hello);
			struct kvec iov = {
				.iov_base = in_hello ?
					    (u8 *)&p->hello + p->got :
					    p->nonce + p->got -
					    sizeof(p->hello),
				.iov_len = trdma_pending_want(p) - p->got,
			};
			struct msghdr msg = { .msg_flags = MSG_DONTWAIT };

			rv = kernel_recvmsg(p->sock, &msg, &iov, 1, iov.iov_len,
					    MSG_DONTWAIT);
			if (rv <= 0)
				break;
			p->got += rv;
		}
		if (p->got < trdma_pending_want(p) &&
		    (rv == 0 || (rv < 0 && rv != -EAGAIN))) {
			trdma_pending_close(p);	/* closed before its hello */
			continue;
		}
		rv = p->got == trdma_pending_want(p) ? trdma_pending_bind(p) :
						       -EAGAIN;
		if (!rv)
			continue;
		/* ACCEPTed, encrypted: its confirmation may be in already. */
		if (rv == -EAGAIN && p->confirming) {
			if (trdma_pending_confirm(p) == -EAGAIN)
				again = true;
			continue;
		}
		if (rv != -EAGAIN) {
			pr_debug("trdma: refusing connection: %d\n", rv);
			trdma_pending_reject(p, rv);
		} else if (time_after(jiffies, p->deadline) && p->unproven) {
			/* Both QPs in RTR: the peer dials again later. */
			pr_debug("trdma: connection to QP %u: PSN not provable in RTR\n",
				 be32_to_cpu(p->hello.dst_qpn));
			trdma_pending_reject(p, -EAGAIN);
		} else if (time_after(jiffies, p->deadline)) {
			pr_info_ratelimited("trdma: connection to QP %u: %s in %u s, refused\n",
					    be32_to_cpu(p->hello.dst_qpn),
					    p->got < trdma_pending_want(p) ?
					    "no hello" : "QP not ready",
					    trdma_accept_timeout);
			trdma_pending_reject(p, -ETIMEDOUT);
		} else {
			again = true;
		}
	}
	if (again && !trdma_cm_stopping)
		queue_delayed_work(trdma_accept_wq, &trdma_pending_work,
				   HZ / 10);
	mutex_unlock(&trdma_pending_lock);
}

/* tnet->listen stays while this runs: trdma_cm_net_down() cancels it. */
static void trdma_accept(struct work_struct *work)
{
	struct trdma_net *tnet = container_of(work, struct trdma_net,
					      accept_work);
	struct trdma_pending *p;
	struct socket *sock;

	while (kernel_accept(tnet->listen, &sock, O_NONBLOCK) == 0) {
		p = kzalloc(sizeof(*p), GFP_KERNEL);
		if (!p) {
			sock_release(sock);
			continue;
		}
		p->sock = sock;
		p->deadline = jiffies + trdma_accept_timeout * HZ;

		mutex_lock(&trdma_pending_lock);
		if (trdma_cm_stopping) {
			mutex_unlock(&trdma_pending_lock);
			sock_release(sock);
			kfree(p);
			break;
		}
		/*
		 * It was cloned from the listener, callbacks and user data
		 * alike: it gets TCP's own back, and no pointer to tnet.
		 */
		write_lock_bh(&sock->sk->sk_callback_lock);
		p->saved_data_ready = tnet->listen_saved_data_ready;
		sock->sk->sk_user_data = NULL;
		sock->sk->sk_data_ready = trdma_pending_data_ready;
		write_unlock_bh(&sock->sk->sk_callback_lock);
		list_add_tail(&p->list, &trdma_pending_list);
		mutex_unlock(&trdma_pending_lock);
	}
	mod_delayed_work(trdma_accept_wq, &trdma_pending_work, 0);
}

/*
 * A connection to accept.  A child not accepted yet has this callback and
 * the listener's user data too (cloned): only the listener queues.
 */
static void trdma_listen_data_ready(struct sock *sk)
{
	struct trdma_net *tnet;

	read_lock_bh(&sk->sk_callback_lock);
	tnet = sk->sk_user_data;
	if (tnet && sk->sk_state == TCP_LISTEN)
		queue_work(trdma_accept_wq, &tnet->accept_work);
	read_unlock_bh(&sk->sk_callback_lock);
}

/* Closes the pending connections of net (NULL: all).  Process context. */
static void trdma_pending_close_net(const struct net *net)
{
	struct trdma_pending *p, *next;

	mutex_lock(&trdma_pending_lock);
	list_for_each_entry_safe(p, next, &trdma_pending_list, list)
		if (!net || net_eq(sock_net(p->sock->sk), net))
			trdma_pending_close(p);
	mutex_unlock(&trdma_pending_lock);
}

/*
 * The first device of a namespace: its listener, on TCP port 4791 of every
 * address of the namespace.  Under trdma_net_lock.
 */
int trdma_cm_net_up(struct trdma_net *tnet)
{
	struct sockaddr_in6 a = {
		.sin6_family = AF_INET6,
		.sin6_addr = IN6ADDR_ANY_INIT,
		.sin6_port = htons(trdma_port),
	};
	struct socket *sock;
	int rv;

	INIT_WORK(&tnet->accept_work, trdma_accept);
	rv = sock_create_kern(tnet->net, AF_INET6, SOCK_STREAM, IPPROTO_TCP,
			      &sock);
	if (rv)
		goto err;
	sock_set_reuseaddr(sock->sk);
	rv = kernel_bind(sock, (struct sockaddr *)&a, sizeof(a));
	if (rv)
		goto err_sock;

	tnet->listen = sock;
	write_lock_bh(&sock->sk->sk_callback_lock);
	tnet->listen_saved_data_ready = sock->sk->sk_data_ready;
	sock->sk->sk_user_data = tnet;
	sock->sk->sk_data_ready = trdma_listen_data_ready;
	write_unlock_bh(&sock->sk->sk_callback_lock);

	/*
	 * Every QP pair that reaches RTR at once connects at once (an MPI
	 * job, a test with 1,024 QPs): a full accept queue makes the kernel
	 * drop the handshake's last ACK, the connecting side sends its hello
	 * into a connection the listener has not accepted yet, and times out
	 * waiting for the answer.  As deep as net.core.somaxconn allows.
	 */
	rv = kernel_listen(sock, SOMAXCONN);
	if (rv)
		goto err_listen;
	return 0;

err_listen:
	trdma_cm_net_down(tnet);
	goto err;
err_sock:
	sock_release(sock);
err:
	pr_err("trdma: cannot listen on TCP port %u: %d\n", trdma_port, rv);
	return rv;
}

/*
 * The last device of the namespace is gone: the listener and the
 * connections it accepted that no QP took are closed.  Under
 * trdma_net_lock.
 */
void trdma_cm_net_down(struct trdma_net *tnet)
{
	struct socket *sock = tnet->listen;

	if (!sock)
		return;
	write_lock_bh(&sock->sk->sk_callback_lock);
	sock->sk->sk_data_ready = tnet->listen_saved_data_ready;
	sock->sk->sk_user_data = NULL;
	write_unlock_bh(&sock->sk->sk_callback_lock);
	cancel_work_sync(&tnet->accept_work);
	kernel_sock_shutdown(sock, SHUT_RDWR);
	sock_release(sock);
	tnet->listen = NULL;
	trdma_pending_close_net(tnet->net);
}

/*
 * The namespace goes away, its devices are gone: what is left of their
 * connections (closing, or accepted and never taken) is released now.
 */
void trdma_cm_net_flush(struct net *net)
{
	trdma_pending_close_net(net);
	trdma_closing_flush(net);
}

int trdma_cm_init(void)
{
	int rv;

	trdma_wq = alloc_workqueue("trdma", WQ_UNBOUND | WQ_MEM_RECLAIM, 0);
	if (!trdma_wq)
		return -ENOMEM;
	rv = -ENOMEM;
	trdma_dial_wq = alloc_workqueue("trdma_dial", WQ_UNBOUND, 0);
	if (!trdma_dial_wq)
		goto err_wq;
	trdma_accept_wq = alloc_ordered_workqueue("trdma_accept", 0);
	if (!trdma_accept_wq)
		goto err_dial_wq;
	trdma_tx_wq = alloc_workqueue("trdma_tx", WQ_HIGHPRI | WQ_MEM_RECLAIM,
				      0);
	if (!trdma_tx_wq)
		goto err_accept_wq;
	trdma_tx_spread_init();
	INIT_DELAYED_WORK(&trdma_pending_work, trdma_pending_scan);
	return 0;

err_accept_wq:
	destroy_workqueue(trdma_accept_wq);
err_dial_wq:
	destroy_workqueue(trdma_dial_wq);
err_wq:
	destroy_workqueue(trdma_wq);
	return rv;
}

/*
 * Every namespace's exit has run (trdma_net_exit()): its listener is gone
 * and its closings were released, each with its count on the namespace's
 * state, which is freed by now.
 */
void trdma_cm_exit(void)
{
	mutex_lock(&trdma_pending_lock);
	trdma_cm_stopping = true;
	mutex_unlock(&trdma_pending_lock);
	cancel_delayed_work_sync(&trdma_pending_work);
	trdma_pending_close_net(NULL);
	WARN_ON(!list_empty(&trdma_closing_list));
	/* The closings' frees (trdma_closing_free()) run before the module goes. */
	rcu_barrier();
	trdma_tx_spread_exit();
	destroy_workqueue(trdma_tx_wq);
	destroy_workqueue(trdma_accept_wq);
	destroy_workqueue(trdma_dial_wq);
	destroy_workqueue(trdma_wq);
}
