/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * trdma: the key schedule of encrypted links (docs/security.md), pure:
 * HKDF (RFC 5869) over an HMAC-SHA256 the caller provides, the transcript
 * hash of both hellos over a SHA-256 the caller provides, and from them the
 * per-direction TLS 1.3 AES-128-GCM key material and each side's key
 * confirmation.  The kernel gives it the crypto API's "hmac(sha256)" and
 * "sha256" (trdma_tls.c); the host unit tests (tests/unit/kdf_test.cpp) a
 * small userspace SHA-256 and HMAC, checked against RFC 5869's vectors.
 */
#ifndef _TRDMA_KDF_H
#define _TRDMA_KDF_H

#ifdef __KERNEL__
#include <linux/errno.h>
#include <linux/string.h>
#include <linux/types.h>
#else
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#endif

#ifdef __KERNEL__
#define trdma_kdf_wipe(p, n)	memzero_explicit(p, n)
#else
/* The kernel's names, for the host unit tests. */
#define u8	unsigned char
#define u32	unsigned int

/* memzero_explicit(): a memset the compiler may not drop. */
static inline void trdma_kdf_wipe(void *p, size_t n)
{
	memset(p, 0, n);
	__asm__ __volatile__("" : : "r"(p) : "memory");
}
#endif

#define TRDMA_KDF_HASH_LEN	32	/* SHA-256 */
#define TRDMA_KDF_NONCE_LEN	32	/* each side's, in the hello */
#define TRDMA_KDF_INFO_MAX	96	/* label, ends, transcript hash: 90 */

/*
 * HMAC-SHA256(key, data[0] || ... || data[n - 1]) into out.  0 or -errno.
 */
typedef int (*trdma_hmac_fn)(void *ctx, const u8 *key, size_t keylen,
			     const u8 *const *data, const size_t *len,
			     int n, u8 *out);

/* HKDF-Extract: PRK = HMAC(salt, IKM); a salt of 0 bytes is 32 zeros. */
static inline int trdma_hkdf_extract(trdma_hmac_fn hmac, void *ctx,
				     const u8 *salt, size_t saltlen,
				     const u8 *ikm, size_t ikmlen,
				     u8 *prk)
{
	static const u8 zeros[TRDMA_KDF_HASH_LEN] = { 0 };
	const u8 *data[1] = { ikm };
	size_t len[1] = { ikmlen };

	if (!saltlen) {
		salt = zeros;
		saltlen = sizeof(zeros);
	}
	return hmac(ctx, salt, saltlen, data, len, 1, prk);
}

/*
 * HKDF-Expand: outlen (at most 255 * 32) bytes of
 * T(1) || T(2) || ..., T(i) = HMAC(PRK, T(i - 1) || info || i).
 */
static inline int trdma_hkdf_expand(trdma_hmac_fn hmac, void *ctx,
				    const u8 *prk, const u8 *info,
				    size_t infolen, u8 *out,
				    size_t outlen)
{
	u8 t[TRDMA_KDF_HASH_LEN];
	size_t tlen = 0, done = 0;
	u8 i = 0;
	int rv = 0;

	if (outlen > 255 * TRDMA_KDF_HASH_LEN)
		return -EINVAL;
	while (done < outlen) {
		const u8 *data[3];
		size_t len[3], n;

		i++;
		data[0] = t;
		len[0] = tlen;
		data[1] = info;
		len[1] = infolen;
		data[2] = &i;
		len[2] = 1;
		rv = hmac(ctx, prk, TRDMA_KDF_HASH_LEN, data, len, 3, t);
		if (rv)
			break;
		tlen = TRDMA_KDF_HASH_LEN;
		n = outlen - done < tlen ? outlen - done : tlen;
		memcpy(out + done, t, n);
		done += n;
	}
	trdma_kdf_wipe(t, sizeof(t));
	return rv;
}

/*
 * SHA-256(data[0] || ... || data[n - 1]) into out.  0 or -errno.
 */
typedef int (*trdma_hash_fn)(void *ctx, const u8 *const *data,
			     const size_t *len, int n, u8 *out);

/*
 * The transcript hash of a connection: SHA-256 over both hellos exactly as
 * they went on the wire, the connecting side's first: its REQ (req_len
 * bytes) and nonce_req, then the accepting side's ACCEPT (acc_len bytes)
 * and nonce_acc.  Every key and confirmation of the connection depends on
 * it, so a byte of either hello changed on the path gives the two ends
 * different keys.
 */
static inline int trdma_kdf_transcript(trdma_hash_fn sha256, void *ctx,
				       const u8 *req, size_t req_len,
				       const u8 *nonce_req,
				       const u8 *acc, size_t acc_len,
				       const u8 *nonce_acc, u8 *th)
{
	const u8 *data[4] = { req, nonce_req, acc, nonce_acc };
	size_t len[4] = { req_len, TRDMA_KDF_NONCE_LEN, acc_len,
			  TRDMA_KDF_NONCE_LEN };

	return sha256(ctx, data, len, 4, th);
}

/* The key material of one direction: TLS 1.3, AES-128-GCM. */
struct trdma_kdf_dir {
	u8 key[16];
	u8 salt[4];
	u8 iv[8];
};

/* The two ends of a connection: the one that connected, the one that accepted. */
struct trdma_kdf_ends {
	u8 req_gid[16];
	u32 req_qpn;
	u8 acc_gid[16];
	u32 acc_qpn;
};

/* What a connection's schedule gives. */
#define TRDMA_KDF_CONFIRM_LEN	32
struct trdma_kdf_out {
	struct trdma_kdf_dir to_acc;	/* what the connecting side sends */
	struct trdma_kdf_dir to_req;	/* what the accepting side sends */
	u8 fin_req[TRDMA_KDF_CONFIRM_LEN]; /* the connecting side's confirmation */
	u8 fin_acc[TRDMA_KDF_CONFIRM_LEN]; /* the accepting side's */
};

/* The labels of the schedule's outputs (18 bytes each). */
#define TRDMA_KDF_LABEL_LEN	18
enum trdma_kdf_label {
	TRDMA_KDF_TO_ACC,
	TRDMA_KDF_TO_REQ,
	TRDMA_KDF_FIN_REQ,
	TRDMA_KDF_FIN_ACC,
};

static inline size_t trdma_kdf_put32(u8 *p, u32 v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
	return 4;
}

/*
 * The HKDF info of one output: its label ("trdma tls2 req>acc", "trdma
 * tls2 acc>req", "trdma tls2 req fin", "trdma tls2 acc fin"), the
 * connecting side's GID and QPN and the accepting side's (QPNs
 * big-endian), then the transcript hash th: two connections, the two
 * directions of one and its keys and confirmations never share an output,
 * and every output depends on both hellos.
 */
static inline size_t trdma_kdf_info(u8 *info, enum trdma_kdf_label label,
				    const struct trdma_kdf_ends *e,
				    const u8 *th)
{
	static const char labels[][TRDMA_KDF_LABEL_LEN + 1] = {
		[TRDMA_KDF_TO_ACC] = "trdma tls2 req>acc",
		[TRDMA_KDF_TO_REQ] = "trdma tls2 acc>req",
		[TRDMA_KDF_FIN_REQ] = "trdma tls2 req fin",
		[TRDMA_KDF_FIN_ACC] = "trdma tls2 acc fin",
	};
	size_t n = TRDMA_KDF_LABEL_LEN;

	memcpy(info, labels[label], n);
	memcpy(info + n, e->req_gid, 16);
	n += 16;
	n += trdma_kdf_put32(info + n, e->req_qpn);
	memcpy(info + n, e->acc_gid, 16);
	n += 16;
	n += trdma_kdf_put32(info + n, e->acc_qpn);
	memcpy(info + n, th, TRDMA_KDF_HASH_LEN);
	return n + TRDMA_KDF_HASH_LEN;
}

/*
 * One direction's key, salt and IV: HKDF-Expand(PRK, info of the
 * direction, 28) = key (16) || salt (4) || iv (8).
 */
static inline int trdma_kdf_expand_dir(trdma_hmac_fn hmac, void *ctx,
				       const u8 *prk, int from_req,
				       const struct trdma_kdf_ends *e,
				       const u8 *th,
				       struct trdma_kdf_dir *out)
{
	u8 info[TRDMA_KDF_INFO_MAX], okm[sizeof(*out)];
	size_t n = trdma_kdf_info(info, from_req ? TRDMA_KDF_TO_ACC :
					   TRDMA_KDF_TO_REQ, e, th);
	int rv;

	rv = trdma_hkdf_expand(hmac, ctx, prk, info, n, okm, sizeof(okm));
	if (!rv) {
		memcpy(out->key, okm, 16);
		memcpy(out->salt, okm + 16, 4);
		memcpy(out->iv, okm + 20, 8);
	}
	trdma_kdf_wipe(okm, sizeof(okm));
	return rv;
}

/*
 * One side's key confirmation: HKDF-Expand(PRK, info of "... fin", 32),
 * that is HMAC-SHA256(PRK, label || ends || th || 0x01): only who holds
 * the device key and saw the same hellos computes it.
 */
static inline int trdma_kdf_confirm(trdma_hmac_fn hmac, void *ctx,
				    const u8 *prk, int from_req,
				    const struct trdma_kdf_ends *e,
				    const u8 *th, u8 *out)
{
	u8 info[TRDMA_KDF_INFO_MAX];
	size_t n = trdma_kdf_info(info, from_req ? TRDMA_KDF_FIN_REQ :
					   TRDMA_KDF_FIN_ACC, e, th);

	return trdma_hkdf_expand(hmac, ctx, prk, info, n, out,
				 TRDMA_KDF_CONFIRM_LEN);
}

/*
 * The key schedule of a connection: PRK = HKDF-Extract(salt = nonce_req ||
 * nonce_acc, IKM = the device key); each direction's key || salt || iv and
 * each side's confirmation are HKDF-Expand(PRK, label || ends || th).
 */
static inline int trdma_kdf_keys(trdma_hmac_fn hmac, void *ctx,
				 const u8 *ikm, size_t ikmlen,
				 const u8 *nonce_req,
				 const u8 *nonce_acc,
				 const struct trdma_kdf_ends *e,
				 const u8 *th, struct trdma_kdf_out *out)
{
	u8 salt[2 * TRDMA_KDF_NONCE_LEN], prk[TRDMA_KDF_HASH_LEN];
	int rv;

	memcpy(salt, nonce_req, TRDMA_KDF_NONCE_LEN);
	memcpy(salt + TRDMA_KDF_NONCE_LEN, nonce_acc, TRDMA_KDF_NONCE_LEN);
	rv = trdma_hkdf_extract(hmac, ctx, salt, sizeof(salt), ikm, ikmlen,
				prk);
	if (!rv)
		rv = trdma_kdf_expand_dir(hmac, ctx, prk, 1, e, th,
					  &out->to_acc);
	if (!rv)
		rv = trdma_kdf_expand_dir(hmac, ctx, prk, 0, e, th,
					  &out->to_req);
	if (!rv)
		rv = trdma_kdf_confirm(hmac, ctx, prk, 1, e, th, out->fin_req);
	if (!rv)
		rv = trdma_kdf_confirm(hmac, ctx, prk, 0, e, th, out->fin_acc);
	if (rv)
		trdma_kdf_wipe(out, sizeof(*out));
	trdma_kdf_wipe(prk, sizeof(prk));
	trdma_kdf_wipe(salt, sizeof(salt));
	return rv;
}

#endif /* _TRDMA_KDF_H */
