// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: keyed links (TCP-MD5, RFC 2385).
 *
 * A device with a key (sysfs tcp_md5_key, write-only) signs every segment
 * of its connections with it and accepts none that is not signed with it,
 * whatever its tls knob says: an encrypted link (trdma_tls.c) is signed
 * too, so that TCP drops a forged RST or FIN on it as on a clear one.
 * RFC 2385 keys are per peer address, and so are the kernel's: a socket
 * holds keys for the addresses it talks to.
 *
 * - Dialing, the connection's socket gets the key for the peer's address
 *   before connect(): even its SYN is signed.
 * - Accepting, the listener of the device's network namespace (trdma_cm.c,
 *   the listener of every device there) holds a key for each address a
 *   keyed device's QP waits for, from the QP's RTR to its destruction
 *   (refcounted per namespace and address: trdma_key_peer).  TCP drops
 *   any segment from such an address without the right signature, and a
 *   signed one from an address it holds no key for; the kernel counts both
 *   (TcpExtTCPMD5Failure, TCPMD5NotFound, TCPMD5Unexpected).  An accepted
 *   connection inherits the listener's key for its peer.
 * - A connection that is not keyed never binds to a keyed device's QP
 *   (trdma_key_may_bind(); counted as refused_unkeyed): so a peer from an
 *   address no keyed QP waits for gets a TCP connection, as with any
 *   listener, but no QP.
 *
 * A listener can hold one key per peer address: a second keyed device of
 * the same namespace with another key for the same peer address cannot
 * wait for it (its QPs
 * are refused that peer, logged).  Keys change for new connections only;
 * connections up keep the key they were set up with.  The trdma TCP option
 * is left off keyed connections: RFC 2385 signs the TCP header's data
 * offset, which the option hook changes after TCP signed the segment.
 *
 * Locking: trdma_key_lock (a mutex: setsockopt sleeps) protects the peer
 * list, every QP's key_peer and the listeners' keys; the device's key
 * itself is under its knob_lock.  A listener outlives the keys it holds:
 * it stays while its namespace has a device (struct trdma_net), and a
 * device's QPs, which hold the keys, go before the device.
 */
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/tcp.h>
#include <net/ipv6.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "trdma.h"

struct trdma_key_peer {
	struct list_head list;
	struct in6_addr addr;		/* IPv4 as IPv4-mapped */
	struct trdma_dev *tdev;		/* whose key the listener holds */
	u32 users;			/* QPs waiting for this address */
	bool installed;			/* the listener holds a key for it */
};

static DEFINE_MUTEX(trdma_key_lock);		/* see above */
static LIST_HEAD(trdma_key_peers);		/* under trdma_key_lock */

/*
 * Copies the device's key to key (TCP_MD5SIG_MAXKEYLEN bytes); its length,
 * 0 when it has none.  It signs every connection, encrypted or not, and
 * encrypted links derive their TLS keys from it too.
 */
u8 trdma_key_read(struct trdma_dev *tdev, u8 *key)
{
	u8 len;

	spin_lock(&tdev->knob_lock);
	len = tdev->md5_keylen;
	memcpy(key, tdev->md5_key, len);
	spin_unlock(&tdev->knob_lock);
	return len;
}

/* Whether the device has a key (sysfs tcp_md5). */
bool trdma_key_present(struct trdma_dev *tdev)
{
	return READ_ONCE(tdev->md5_keylen) != 0;
}

/*
 * Whether the device signs its connections: whenever it has a key, whether
 * it encrypts or not.  kTLS authenticates the bytes of an encrypted link,
 * but not TCP's own header: without TCP-MD5 under it, a forged RST or FIN
 * from the path would close the connection (docs/security.md).
 */
bool trdma_key_on(struct trdma_dev *tdev)
{
	return trdma_key_present(tdev);
}

/*
 * Gives sock the key (keylen 0: takes it away) for the peer at addr, as
 * the socket's family spells it.  Process context.
 */
static int trdma_key_sockopt(struct socket *sock, const struct in6_addr *addr,
			     const u8 *key, u8 keylen)
{
	struct tcp_md5sig cmd = { .tcpm_keylen = keylen };
	int rv;

	if (sock->sk->sk_family == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&cmd.tcpm_addr;

		if (!ipv6_addr_v4mapped(addr))
			return -EAFNOSUPPORT;
		s4->sin_family = AF_INET;
		s4->sin_addr.s_addr = addr->s6_addr32[3];
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&cmd.tcpm_addr;

		/* A dual-stack socket keys IPv4 peers in the mapped form. */
		s6->sin6_family = AF_INET6;
		s6->sin6_addr = *addr;
	}
	memcpy(cmd.tcpm_key, key, keylen);
	rv = sock->ops->setsockopt(sock, SOL_TCP, TCP_MD5SIG,
				   KERNEL_SOCKPTR(&cmd), sizeof(cmd));
	memzero_explicit(&cmd, sizeof(cmd));
	return rv;
}

/*
 * A dialing socket of a keyed device: signed from its SYN on with the key
 * for dst.  0 also for a device without a key.  Process context.
 */
int trdma_key_dial(struct trdma_dev *tdev, struct socket *sock,
		   const struct in6_addr *dst)
{
	u8 key[TCP_MD5SIG_MAXKEYLEN];
	u8 len = trdma_key_read(tdev, key);
	int rv = 0;

	if (len)
		rv = trdma_key_sockopt(sock, dst, key, len);
	memzero_explicit(key, sizeof(key));
	return rv;
}

/* Whether the socket signs its segments (has an MD5 key). */
bool trdma_key_sock_keyed(struct sock *sk)
{
	return !!rcu_access_pointer(tcp_sk(sk)->md5sig_info);
}

/*
 * Whether an accepted connection may bind to a QP of tdev: a keyed
 * device's QP takes keyed connections only.
 */
bool trdma_key_may_bind(struct trdma_dev *tdev, struct sock *sk)
{
	return !trdma_key_on(tdev) || trdma_key_sock_keyed(sk);
}

static void trdma_key_peer_uninstall(struct trdma_key_peer *kp)
{
	static const u8 none[1];

	if (kp->installed && kp->tdev->tnet->listen)
		trdma_key_sockopt(kp->tdev->tnet->listen, &kp->addr, none, 0);
	kp->installed = false;
}

/* The listener takes tdev's current key for kp's address. */
static int trdma_key_peer_install(struct trdma_key_peer *kp,
				  struct trdma_dev *tdev)
{
	u8 key[TCP_MD5SIG_MAXKEYLEN];
	u8 len = trdma_key_read(tdev, key);
	int rv = 0;

	if (!len) {
		trdma_key_peer_uninstall(kp);
	} else if (tdev->tnet->listen) {
		rv = trdma_key_sockopt(tdev->tnet->listen, &kp->addr, key, len);
		kp->installed = !rv;
	}
	memzero_explicit(key, sizeof(key));
	return rv;
}

static void trdma_key_qp_put_locked(struct trdma_qp *qp)
{
	struct trdma_key_peer *kp = qp->key_peer;

	lockdep_assert_held(&trdma_key_lock);
	if (!kp)
		return;
	qp->key_peer = NULL;
	if (--kp->users)
		return;
	trdma_key_peer_uninstall(kp);
	list_del(&kp->list);
	kfree(kp);
}

/*
 * A QP of a keyed device waits for its peer (RTR, accepting side): the
 * listener holds the device's key for the peer's address until the QP is
 * destroyed.  Process context.
 */
void trdma_key_qp_rtr(struct trdma_qp *qp)
{
	const struct in6_addr *addr =
		(const struct in6_addr *)qp->attr.ah_attr.grh.dgid.raw;
	struct trdma_dev *tdev = qp->tdev;
	struct trdma_key_peer *kp;
	int rv = 0;

	mutex_lock(&trdma_key_lock);
	trdma_key_qp_put_locked(qp);
	/* Tracked while the device has a key (it signs, tls or not). */
	if (!trdma_key_on(tdev))
		goto out;
	list_for_each_entry(kp, &trdma_key_peers, list) {
		if (kp->tdev->tnet != tdev->tnet ||
		    !ipv6_addr_equal(&kp->addr, addr))
			continue;
		if (kp->tdev != tdev) {
			rv = -EBUSY;
			goto out;
		}
		kp->users++;
		qp->key_peer = kp;
		goto out;
	}
	kp = kzalloc(sizeof(*kp), GFP_KERNEL);
	if (!kp) {
		rv = -ENOMEM;
		goto out;
	}
	kp->addr = *addr;
	kp->tdev = tdev;
	kp->users = 1;
	rv = trdma_key_peer_install(kp, tdev);
	if (rv) {
		kfree(kp);
		goto out;
	}
	list_add(&kp->list, &trdma_key_peers);
	qp->key_peer = kp;
out:
	mutex_unlock(&trdma_key_lock);
	if (rv)
		ibdev_warn_ratelimited(&tdev->ibdev,
				       "QP %u: no key for peer %pI6c on the listener: %d%s\n",
				       qp->ibqp.qp_num, addr, rv,
				       rv == -EBUSY ? " (another device keys that address)" : "");
}

/* The QP is destroyed: it waits for nobody.  Process context. */
void trdma_key_qp_put(struct trdma_qp *qp)
{
	mutex_lock(&trdma_key_lock);
	trdma_key_qp_put_locked(qp);
	mutex_unlock(&trdma_key_lock);
}

/* The listener's keys for tdev's peers: tdev's key, or none (no key). */
static void trdma_key_refresh_locked(struct trdma_dev *tdev)
{
	struct trdma_key_peer *kp;

	lockdep_assert_held(&trdma_key_lock);
	list_for_each_entry(kp, &trdma_key_peers, list)
		if (kp->tdev == tdev)
			trdma_key_peer_install(kp, tdev);
}

/*
 * Sets the device's key (len 0: no key).  The listener's keys for the
 * peers its QPs wait for change with it.  Process context.
 */
int trdma_key_set(struct trdma_dev *tdev, const u8 *key, size_t len)
{
	if (len > TCP_MD5SIG_MAXKEYLEN)
		return -EINVAL;
	mutex_lock(&trdma_key_lock);
	spin_lock(&tdev->knob_lock);
	memzero_explicit(tdev->md5_key, sizeof(tdev->md5_key));
	memcpy(tdev->md5_key, key, len);
	WRITE_ONCE(tdev->md5_keylen, len);
	/* No key, nothing to encrypt with: encrypted links are off. */
	if (!len)
		WRITE_ONCE(tdev->tls, false);
	spin_unlock(&tdev->knob_lock);
	trdma_key_refresh_locked(tdev);
	mutex_unlock(&trdma_key_lock);
	return 0;
}
