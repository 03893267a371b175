// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), small and slow, for
// tests that compute what kernel/trdma_kdf.h computes with the kernel's
// crypto API: the unit tests of the key schedule (tests/unit/kdf_test.cpp,
// checked there against FIPS's and RFC 5869's vectors) and the lab's
// client that speaks an encrypted link's hello (tests/lab/tls_rearm.cc).
// Sha256Hmac() and Sha256Hash() have the signatures trdma_kdf.h's
// callbacks take.
#ifndef TRDMA_TESTS_SHA256_H
#define TRDMA_TESTS_SHA256_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace trdma_test {

struct Sha256 {
	uint32_t h[8];
	uint8_t buf[64];
	uint64_t total = 0;
	size_t n = 0;

	static uint32_t Rotr(uint32_t x, int r) { return (x >> r) | (x << (32 - r)); }

	Sha256()
	{
		static const uint32_t init[8] = {
			0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
			0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
		memcpy(h, init, sizeof(h));
	}

	void Block(const uint8_t *p)
	{
		static const uint32_t k[64] = {
			0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b,
			0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
			0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7,
			0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
			0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152,
			0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
			0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
			0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
			0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
			0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
			0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
			0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
			0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
		uint32_t w[64], a[8];

		for (int i = 0; i < 16; i++)
			w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
			       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
		for (int i = 16; i < 64; i++) {
			uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
			uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
			w[i] = w[i - 16] + s0 + w[i - 7] + s1;
		}
		memcpy(a, h, sizeof(a));
		for (int i = 0; i < 64; i++) {
			uint32_t S1 = Rotr(a[4], 6) ^ Rotr(a[4], 11) ^ Rotr(a[4], 25);
			uint32_t ch = (a[4] & a[5]) ^ (~a[4] & a[6]);
			uint32_t t1 = a[7] + S1 + ch + k[i] + w[i];
			uint32_t S0 = Rotr(a[0], 2) ^ Rotr(a[0], 13) ^ Rotr(a[0], 22);
			uint32_t maj = (a[0] & a[1]) ^ (a[0] & a[2]) ^ (a[1] & a[2]);
			uint32_t t2 = S0 + maj;
			memmove(a + 1, a, 7 * sizeof(a[0]));
			a[4] += t1;
			a[0] = t1 + t2;
		}
		for (int i = 0; i < 8; i++)
			h[i] += a[i];
	}

	void Update(const uint8_t *p, size_t len)
	{
		total += len;
		while (len) {
			size_t c = std::min(len, sizeof(buf) - n);
			memcpy(buf + n, p, c);
			n += c;
			p += c;
			len -= c;
			if (n == sizeof(buf)) {
				Block(buf);
				n = 0;
			}
		}
	}

	void Final(uint8_t *out)
	{
		uint64_t bits = total * 8;
		uint8_t pad = 0x80, zero = 0, len[8];

		Update(&pad, 1);
		while (n != 56)
			Update(&zero, 1);
		for (int i = 0; i < 8; i++)
			len[i] = bits >> (56 - 8 * i);
		Update(len, 8);
		for (int i = 0; i < 8; i++)
			for (int j = 0; j < 4; j++)
				out[4 * i + j] = h[i] >> (24 - 8 * j);
	}
};

inline int Sha256Hmac(void *, const uint8_t *key, size_t keylen, const uint8_t *const *data,
		      const size_t *len, int n, uint8_t *out)
{
	uint8_t k[64] = {}, ipad[64], opad[64], inner[32];

	if (keylen > 64) {
		Sha256 s;
		s.Update(key, keylen);
		s.Final(k);
	} else {
		memcpy(k, key, keylen);
	}
	for (int i = 0; i < 64; i++) {
		ipad[i] = k[i] ^ 0x36;
		opad[i] = k[i] ^ 0x5c;
	}
	Sha256 in;
	in.Update(ipad, 64);
	for (int i = 0; i < n; i++)
		in.Update(data[i], len[i]);
	in.Final(inner);
	Sha256 o;
	o.Update(opad, 64);
	o.Update(inner, 32);
	o.Final(out);
	return 0;
}

inline int Sha256Hash(void *, const uint8_t *const *data, const size_t *len, int n,
		      uint8_t *out)
{
	Sha256 s;

	for (int i = 0; i < n; i++)
		s.Update(data[i], len[i]);
	s.Final(out);
	return 0;
}

}  // namespace trdma_test

#endif
