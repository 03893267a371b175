/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * trdma: the key schedule of encrypted links (docs/security.md), pure:
 * HKDF (RFC 5869) over an HMAC-SHA256 the caller provides, and the
 * per-direction TLS 1.3 AES-128-GCM key material of a connection.  The
 * kernel gives it the crypto API's "hmac(sha256)" (trdma_tls.c); the host
 * unit tests (tests/unit/kdf_test.cpp) a small userspace HMAC, and check it
 * against RFC 5869's test vectors.
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
#define TRDMA_KDF_INFO_MAX	96

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

static inline size_t trdma_kdf_put32(u8 *p, u32 v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
	return 4;
}

/*
 * The HKDF info of a direction: "trdma tls1 req>acc" or "trdma tls1
 * acc>req", then the connecting side's GID and QPN and the accepting
 * side's (QPNs big-endian): two connections, and the two directions of
 * one, never share a key even under one pair of nonces.
 */
static inline size_t trdma_kdf_info(u8 *info, int from_req,
				    const struct trdma_kdf_ends *e)
{
	static const char req[] = "trdma tls1 req>acc";
	static const char acc[] = "trdma tls1 acc>req";
	size_t n = sizeof(req) - 1;

	memcpy(info, from_req ? req : acc, n);
	memcpy(info + n, e->req_gid, 16);
	n += 16;
	n += trdma_kdf_put32(info + n, e->req_qpn);
	memcpy(info + n, e->acc_gid, 16);
	n += 16;
	n += trdma_kdf_put32(info + n, e->acc_qpn);
	return n;
}

/*
 * One direction's key, salt and IV: HKDF-Expand(PRK, info of the
 * direction, 28) = key (16) || salt (4) || iv (8).
 */
static inline int trdma_kdf_expand_dir(trdma_hmac_fn hmac, void *ctx,
				       const u8 *prk, int from_req,
				       const struct trdma_kdf_ends *e,
				       struct trdma_kdf_dir *out)
{
	u8 info[TRDMA_KDF_INFO_MAX], okm[sizeof(*out)];
	size_t n = trdma_kdf_info(info, from_req, e);
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
 * The key schedule of a connection: PRK = HKDF-Extract(salt = nonce_req ||
 * nonce_acc, IKM = the device key), then for each direction HKDF-Expand(PRK,
 * info, 28) = key (16) || salt (4) || iv (8).  to_acc: what the connecting
 * side sends; to_req: what the accepting side sends.
 */
static inline int trdma_kdf_keys(trdma_hmac_fn hmac, void *ctx,
				 const u8 *ikm, size_t ikmlen,
				 const u8 *nonce_req,
				 const u8 *nonce_acc,
				 const struct trdma_kdf_ends *e,
				 struct trdma_kdf_dir *to_acc,
				 struct trdma_kdf_dir *to_req)
{
	u8 salt[2 * TRDMA_KDF_NONCE_LEN], prk[TRDMA_KDF_HASH_LEN];
	int rv;

	memcpy(salt, nonce_req, TRDMA_KDF_NONCE_LEN);
	memcpy(salt + TRDMA_KDF_NONCE_LEN, nonce_acc, TRDMA_KDF_NONCE_LEN);
	rv = trdma_hkdf_extract(hmac, ctx, salt, sizeof(salt), ikm, ikmlen,
				prk);
	if (rv)
		goto out;
	rv = trdma_kdf_expand_dir(hmac, ctx, prk, 1, e, to_acc);
	if (!rv)
		rv = trdma_kdf_expand_dir(hmac, ctx, prk, 0, e, to_req);
out:
	trdma_kdf_wipe(prk, sizeof(prk));
	trdma_kdf_wipe(salt, sizeof(salt));
	return rv;
}

#endif /* _TRDMA_KDF_H */
