// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: encrypted links (kernel TLS).
 *
 * A device with tls=1 (sysfs; it needs the link key of trdma_key.c) runs
 * each RC/UC connection as a TLS 1.3 record stream, AES-128-GCM, through
 * the kernel's TLS ULP (tls.ko), over TCP still signed with TCP-MD5 by
 * the same key (trdma_key.c: kTLS does not cover TCP's header).  There is
 * no TLS handshake: both ends hold the device key, and the hellos carry a
 * fresh 32-byte nonce from each side (TRDMA_HELLO_TLS, docs/wire.md).
 * The key schedule (trdma_kdf.h, HKDF with the crypto API's hmac(sha256),
 * the transcript with its sha256):
 *
 *   th  = SHA-256(REQ || nonce_req || ACCEPT || nonce_acc), as on the wire
 *   PRK = HKDF-Extract(salt = nonce_req || nonce_acc, IKM = device key)
 *   each direction: HKDF-Expand(PRK, "trdma tls2 req>acc" or "... acc>req"
 *                   || GID and QPN of both ends || th, 28) = key || salt || iv
 *   each side's confirmation: HKDF-Expand(PRK, "trdma tls2 req fin" or
 *                   "... acc fin" || the same, 32)
 *
 * The ULP is installed right after the hellos, before either side sends a
 * segment, on both sides alike (trdma_tls_install()); each side's first
 * record is its confirmation, and a connection binds to its QP only once
 * the peer's is read and right (trdma_cm.c).  Transmit goes through
 * the socket as on a clear link (pages by reference: kTLS encrypts from
 * them into its record, no copy first).  Receive cannot use tcp_read_sock()
 * under kTLS: tls_rx_work reads decrypted bytes with recvmsg into a buffer
 * of its own, wrapped in an skb, and hands them to the receive path's
 * parser (trdma_rx_feed()).  A record that fails authentication (EBADMSG:
 * a byte changed on the wire) fails that QP, counted in tls_rx_errors.
 *
 * Locking: qp->tls and tls_rx_skb change under state_mutex while the QP has
 * no socket; tls_rx_work is the only reader of the socket and of qp->rx
 * while the link is encrypted, and is cancelled before the socket goes.
 */
#include <crypto/algapi.h>
#include <crypto/hash.h>
#include <linux/kmod.h>
#include <linux/net.h>
#include <linux/skbuff.h>
#include <linux/tls.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "trdma.h"
#include "trdma_kdf.h"

/* Decrypted bytes read at a time: one TLS record's worth. */
#define TRDMA_TLS_RX_BUF	(16 * 1024)
/* Reads before the work lets others run (it queues itself again). */
#define TRDMA_TLS_RX_BUDGET	64

bool trdma_tls_on(struct trdma_dev *tdev)
{
	return READ_ONCE(tdev->tls);
}

/*
 * Turns encrypted links on or off for connections set up from now on.  On
 * needs the link key: -ENOKEY without one.  Process context.
 */
int trdma_tls_set(struct trdma_dev *tdev, bool on)
{
	int rv = 0;

	/*
	 * tls.ko is a module in every kernel trdma supports; without it
	 * every connection would fail at TCP_ULP.
	 */
	if (on && request_module("tls"))
		return -ENOPROTOOPT;
	spin_lock(&tdev->knob_lock);
	if (on && !tdev->md5_keylen)
		rv = -ENOKEY;
	else
		WRITE_ONCE(tdev->tls, on);
	spin_unlock(&tdev->knob_lock);
	/* TCP-MD5 signs either way (trdma_key.c): nothing else changes. */
	return rv;
}

/* data[0] || ... || data[n - 1] through the (keyed) transform. */
static int trdma_tls_shash(struct crypto_shash *tfm, const u8 *const *data,
			   const size_t *len, int n, u8 *out)
{
	SHASH_DESC_ON_STACK(desc, tfm);
	int i, rv;

	desc->tfm = tfm;
	rv = crypto_shash_init(desc);
	for (i = 0; !rv && i < n; i++)
		if (len[i])
			rv = crypto_shash_update(desc, data[i], len[i]);
	if (!rv)
		rv = crypto_shash_final(desc, out);
	shash_desc_zero(desc);
	return rv;
}

/* trdma_hmac_fn of the crypto API: ctx is an hmac(sha256) transform. */
static int trdma_tls_hmac(void *ctx, const u8 *key, size_t keylen,
			  const u8 *const *data, const size_t *len, int n,
			  u8 *out)
{
	int rv = crypto_shash_setkey(ctx, key, keylen);

	return rv ? rv : trdma_tls_shash(ctx, data, len, n, out);
}

/* trdma_hash_fn of the crypto API: ctx is a sha256 transform. */
static int trdma_tls_sha256(void *ctx, const u8 *const *data,
			    const size_t *len, int n, u8 *out)
{
	return trdma_tls_shash(ctx, data, len, n, out);
}

/*
 * The transcript hash of the connection's hellos: the REQ req and the
 * ACCEPT acc (for a QP connected to itself, its own REQ twice), each with
 * its nonce, as they went on the wire.
 */
static int trdma_tls_transcript(const struct trdma_tls_hs *hs,
				const struct trdma_hello *req,
				const struct trdma_hello *acc, u8 *th)
{
	struct crypto_shash *tfm = crypto_alloc_shash("sha256", 0, 0);
	int rv;

	if (IS_ERR(tfm))
		return PTR_ERR(tfm);
	rv = trdma_kdf_transcript(trdma_tls_sha256, tfm, (const u8 *)req,
				  sizeof(*req), hs->nonce_req,
				  (const u8 *)acc, sizeof(*acc),
				  hs->nonce_acc, th);
	crypto_free_shash(tfm);
	return rv;
}

/*
 * The key material of both directions of the QP's connection, our key
 * confirmation (mine) and the peer's as it must be (hs->confirm).
 */
static int trdma_tls_derive(struct trdma_qp *qp, struct trdma_tls_hs *hs,
			    const struct trdma_hello *req, const u8 *th,
			    struct trdma_kdf_dir *tx, struct trdma_kdf_dir *rx,
			    u8 *mine)
{
	struct trdma_kdf_out o;
	struct trdma_kdf_ends e;
	u8 key[TCP_MD5SIG_MAXKEYLEN];
	struct crypto_shash *tfm;
	u8 keylen;
	int rv;

	BUILD_BUG_ON(sizeof(hs->confirm) != TRDMA_KDF_CONFIRM_LEN);
	/*
	 * Both ends as the REQ names them: the connecting side made it from
	 * its QP's attributes under state_mutex, the accepting side checked
	 * them against its QP's; neither reads attributes that a modify_qp
	 * racing this (unlocked) work could change.
	 */
	memcpy(e.req_gid, req->src_gid, 16);
	e.req_qpn = be32_to_cpu(req->src_qpn);
	memcpy(e.acc_gid, req->dst_gid, 16);
	e.acc_qpn = be32_to_cpu(req->dst_qpn);
	keylen = trdma_key_read(qp->tdev, key);
	if (!keylen)
		return -ENOKEY;
	tfm = crypto_alloc_shash("hmac(sha256)", 0, 0);
	if (IS_ERR(tfm)) {
		rv = PTR_ERR(tfm);
		goto out;
	}
	rv = trdma_kdf_keys(trdma_tls_hmac, tfm, key, keylen, hs->nonce_req,
			    hs->nonce_acc, &e, th, &o);
	crypto_free_shash(tfm);
	if (rv)
		goto out;
	/* A QP connected to itself reads back what it sends. */
	*tx = hs->active ? o.to_acc : o.to_req;
	*rx = hs->self ? *tx : hs->active ? o.to_req : o.to_acc;
	memcpy(mine, hs->active ? o.fin_req : o.fin_acc,
	       TRDMA_KDF_CONFIRM_LEN);
	memcpy(hs->confirm, hs->self ? mine :
	       hs->active ? o.fin_acc : o.fin_req, TRDMA_KDF_CONFIRM_LEN);
out:
	memzero_explicit(key, sizeof(key));
	memzero_explicit(&o, sizeof(o));
	return rv;
}

static int trdma_tls_setkey(struct socket *sock, int dir,
			    const struct trdma_kdf_dir *k)
{
	struct tls12_crypto_info_aes_gcm_128 ci = {
		.info.version = TLS_1_3_VERSION,
		.info.cipher_type = TLS_CIPHER_AES_GCM_128,
	};
	int rv;

	BUILD_BUG_ON(sizeof(ci.key) != sizeof(k->key) ||
		     sizeof(ci.salt) != sizeof(k->salt) ||
		     sizeof(ci.iv) != sizeof(k->iv));
	memcpy(ci.key, k->key, sizeof(ci.key));
	memcpy(ci.salt, k->salt, sizeof(ci.salt));
	memcpy(ci.iv, k->iv, sizeof(ci.iv));
	/* rec_seq 0: each direction's first record. */
	rv = sock->ops->setsockopt(sock, SOL_TLS, dir, KERNEL_SOCKPTR(&ci),
				   sizeof(ci));
	memzero_explicit(&ci, sizeof(ci));
	return rv;
}

/*
 * Makes a greeted connection an encrypted one, right after the hellos
 * (req, the connecting side's, and acc, the accepting side's, both as on
 * the wire, with the nonces in hs): the transcript hash, the keys, the TLS
 * ULP installed with them both ways, and our key confirmation sent as the
 * first record.  What the peer's confirmation must be is left in
 * hs->confirm; it is read and checked by the caller before the connection
 * binds to the QP (trdma_tls_confirmed()).  Sends without waiting: the
 * accepting side runs this on its accept work.  Process context.
 */
int trdma_tls_install(struct trdma_qp *qp, struct socket *sock,
		      struct trdma_tls_hs *hs, const struct trdma_hello *req,
		      const struct trdma_hello *acc)
{
	u8 th[TRDMA_KDF_HASH_LEN], mine[TRDMA_KDF_CONFIRM_LEN];
	struct msghdr msg = { .msg_flags = MSG_NOSIGNAL | MSG_DONTWAIT };
	struct kvec iov = { .iov_base = mine, .iov_len = sizeof(mine) };
	char ulp[] = "tls";
	struct trdma_kdf_dir tx, rx;
	int rv;

	rv = trdma_tls_transcript(hs, req, acc, th);
	if (rv)
		return rv;
	rv = trdma_tls_derive(qp, hs, req, th, &tx, &rx, mine);
	if (rv)
		return rv;
	rv = sock->ops->setsockopt(sock, SOL_TCP, TCP_ULP,
				   KERNEL_SOCKPTR(ulp), strlen(ulp));
	if (!rv)
		rv = trdma_tls_setkey(sock, TLS_TX, &tx);
	if (!rv)
		rv = trdma_tls_setkey(sock, TLS_RX, &rx);
	memzero_explicit(&tx, sizeof(tx));
	memzero_explicit(&rx, sizeof(rx));
	/* One record of its own: the peer reads exactly these bytes first. */
	if (!rv) {
		rv = kernel_sendmsg(sock, &msg, &iov, 1, sizeof(mine));
		rv = rv == sizeof(mine) ? 0 : (rv < 0 ? rv : -EIO);
	}
	memzero_explicit(mine, sizeof(mine));
	return rv;
}

/* Whether got is the peer's key confirmation hs->confirm (constant time). */
bool trdma_tls_confirmed(const struct trdma_tls_hs *hs, const u8 *got)
{
	return !crypto_memneq(hs->confirm, got, sizeof(hs->confirm));
}

/*
 * The QP takes the encrypted connection (trdma_tls_install()ed, confirmed):
 * its receive path reads through kTLS from now on.  Before the socket's
 * callbacks are the QP's (trdma_cm_attach()).  Under state_mutex; process
 * context.
 */
int trdma_tls_start(struct trdma_qp *qp)
{
	lockdep_assert_held(&qp->state_mutex);
	qp->tls_rx_skb = alloc_skb(TRDMA_TLS_RX_BUF, GFP_KERNEL);
	if (!qp->tls_rx_skb)
		return -ENOMEM;
	INIT_WORK(&qp->tls_rx_work, trdma_tls_rx_work);
	qp->tls_fin = false;
	qp->tls = true;
	trdma_count(qp->tdev, TRDMA_CNT_TLS_CONNECTIONS, 1);
	return 0;
}

/*
 * The QP lets go of its encrypted connection: no callback of the socket
 * reaches the QP any more (trdma_cm_detach_locked()); the receive work is
 * waited for.  Under state_mutex.
 */
void trdma_tls_stop(struct trdma_qp *qp)
{
	lockdep_assert_held(&qp->state_mutex);
	if (!qp->tls)
		return;
	cancel_work_sync(&qp->tls_rx_work);
	consume_skb(qp->tls_rx_skb);
	qp->tls_rx_skb = NULL;
	qp->tls = false;
}

/* Bytes (or the peer's FIN) to read.  Any context. */
void trdma_tls_rx_kick(struct trdma_qp *qp)
{
	queue_work(trdma_wq, &qp->tls_rx_work);
}

/*
 * The receive path of an encrypted link: decrypted bytes, read in process
 * context, handed to the parser as the clear path hands it skbs.
 */
void trdma_tls_rx_work(struct work_struct *work)
{
	struct trdma_qp *qp = container_of(work, struct trdma_qp,
					   tls_rx_work);
	struct sk_buff *skb = qp->tls_rx_skb;
	struct socket *sock;
	unsigned long flags;
	int i, rv = 0;

	spin_lock_irqsave(&qp->lock, flags);
	sock = qp->sock;
	spin_unlock_irqrestore(&qp->lock, flags);
	/* Not attached yet: trdma_cm_attach() kicks again once it is. */
	if (!sock || !skb || qp->rx.dead || qp->tls_fin)
		return;
	for (i = 0; i < TRDMA_TLS_RX_BUDGET; i++) {
		struct msghdr msg = {};
		struct kvec iov;

		__skb_trim(skb, 0);
		iov.iov_base = skb->data;
		iov.iov_len = min_t(u32, skb_tailroom(skb), TRDMA_TLS_RX_BUF);
		rv = kernel_recvmsg(sock, &msg, &iov, 1, iov.iov_len,
				    MSG_DONTWAIT);
		if (rv <= 0)
			break;
		skb_put(skb, rv);
		if (!trdma_rx_feed(qp, skb))
			return;		/* the stream was refused */
	}
	if (rv > 0) {
		trdma_tls_rx_kick(qp);
		return;
	}
	if (rv == -EAGAIN)
		return;
	if (!rv) {
		/* The peer's FIN, after everything it sent. */
		qp->tls_fin = true;
		trdma_tx_ack_forget_unasked(qp);
		trdma_qp_peer_closed(qp);
		return;
	}
	/*
	 * A record that fails authentication (-EBADMSG), or whose header
	 * was changed (-EINVAL, -EMSGSIZE), or any other failure: counted.
	 */
	trdma_count(qp->tdev, TRDMA_CNT_TLS_RX_ERRORS, 1);
	ibdev_info_ratelimited(qp->ibqp.device,
			       "QP %u: TLS receive from QP %u failed (%d%s); QP to error\n",
			       qp->ibqp.qp_num, qp->attr.dest_qp_num, rv,
			       rv == -EBADMSG ? ": a record failed authentication" : "");
	qp->rx.dead = true;
	trdma_qp_fatal(qp, IB_EVENT_QP_FATAL);
}

/*
 * A closing encrypted connection (trdma_cm.c): reads and drops what came.
 * The last recvmsg's result: -EAGAIN when there is no more for now, 0 after
 * the peer's FIN.  Process context.
 */
int trdma_tls_discard(struct socket *sock)
{
	struct page *page = alloc_page(GFP_KERNEL);
	int rv, n = 0;

	if (!page)
		return -ENOMEM;
	do {
		struct msghdr msg = {};
		struct kvec iov = {
			.iov_base = page_address(page),
			.iov_len = PAGE_SIZE,
		};

		rv = kernel_recvmsg(sock, &msg, &iov, 1, PAGE_SIZE,
				    MSG_DONTWAIT);
	} while (rv > 0 && ++n < 256);
	__free_page(page);
	return rv;
}
