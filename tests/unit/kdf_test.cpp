// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The key schedule of encrypted links (kernel/trdma_kdf.h) against RFC
// 5869's HKDF-SHA256 test vectors (cases 1-3), with a small HMAC-SHA256 of
// its own (FIPS 180-4, RFC 2104) in place of the kernel crypto API's; then
// what the construction promises: two directions, two connections and two
// nonces never share key material.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../../kernel/trdma_kdf.h"
#include "sha256.h"

namespace {

using trdma_test::Sha256;

int calls;

int Hmac(void *ctx, const uint8_t *key, size_t keylen,
	 const uint8_t *const *data, const size_t *len, int n, uint8_t *out)
{
	calls++;
	return trdma_test::Sha256Hmac(ctx, key, keylen, data, len, n, out);
}

std::vector<uint8_t> Hex(const std::string &s)
{
	std::vector<uint8_t> v;
	for (size_t i = 0; i + 1 < s.size(); i += 2)
		v.push_back(std::stoi(s.substr(i, 2), nullptr, 16));
	return v;
}

std::vector<uint8_t> Range(uint8_t from, size_t n)
{
	std::vector<uint8_t> v(n);
	for (size_t i = 0; i < n; i++)
		v[i] = from + i;
	return v;
}

void Rfc5869(const std::vector<uint8_t> &ikm, const std::vector<uint8_t> &salt,
	     const std::vector<uint8_t> &info, const char *prk_hex,
	     const char *okm_hex)
{
	std::vector<uint8_t> prk(32), want_okm = Hex(okm_hex);
	std::vector<uint8_t> okm(want_okm.size());

	ASSERT_EQ(trdma_hkdf_extract(Hmac, nullptr, salt.data(), salt.size(),
				     ikm.data(), ikm.size(), prk.data()), 0);
	EXPECT_EQ(prk, Hex(prk_hex));
	ASSERT_EQ(trdma_hkdf_expand(Hmac, nullptr, prk.data(), info.data(),
				    info.size(), okm.data(), okm.size()), 0);
	EXPECT_EQ(okm, want_okm);
}

}  // namespace

TEST(Kdf, Sha256OfAbc)
{
	uint8_t out[32];
	Sha256 s;
	s.Update((const uint8_t *)"abc", 3);
	s.Final(out);
	EXPECT_EQ(std::vector<uint8_t>(out, out + 32),
		  Hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
}

TEST(Kdf, Rfc5869Case1)
{
	Rfc5869(std::vector<uint8_t>(22, 0x0b), Range(0x00, 13), Range(0xf0, 10),
		"077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5",
		"3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
		"34007208d5b887185865");
}

TEST(Kdf, Rfc5869Case2)
{
	Rfc5869(Range(0x00, 80), Range(0x60, 80), Range(0xb0, 80),
		"06a6b88c5853361a06104c9ceb35b45cef760014904671014a193f40c15fc244",
		"b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c"
		"59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71"
		"cc30c58179ec3e87c14c01d5c1f3434f1d87");
}

TEST(Kdf, Rfc5869Case3)
{
	Rfc5869(std::vector<uint8_t>(22, 0x0b), {}, {},
		"19ef24a32c717b167f33a91d6f648bdf96596776afdb6377ac434c1c293ccb04",
		"8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d"
		"9d201395faa4b61a96c8");
}

TEST(Kdf, ExpandRefusesMoreThan255Blocks)
{
	uint8_t prk[32] = {}, out[1];
	EXPECT_EQ(trdma_hkdf_expand(Hmac, nullptr, prk, nullptr, 0, out,
				    255 * 32 + 1), -EINVAL);
}

namespace {

// Two hellos as on the wire (64 bytes each; their content does not matter
// to the schedule, only that every byte counts) and their nonces.
struct Hellos {
	uint8_t req[64], nonce_req[TRDMA_KDF_NONCE_LEN];
	uint8_t acc[64], nonce_acc[TRDMA_KDF_NONCE_LEN];

	Hellos(uint8_t nreq = 1, uint8_t nacc = 2)
	{
		for (size_t i = 0; i < sizeof(req); i++) {
			req[i] = 0x10 + i;
			acc[i] = 0x80 + i;
		}
		memset(nonce_req, nreq, sizeof(nonce_req));
		memset(nonce_acc, nacc, sizeof(nonce_acc));
	}

	std::vector<uint8_t> Th() const
	{
		std::vector<uint8_t> th(32);
		EXPECT_EQ(trdma_kdf_transcript(trdma_test::Sha256Hash, nullptr,
					       req, sizeof(req), nonce_req,
					       acc, sizeof(acc), nonce_acc,
					       th.data()), 0);
		return th;
	}
};

trdma_kdf_ends Ends(uint32_t req_qpn = 17, uint32_t acc_qpn = 18)
{
	trdma_kdf_ends e = {};
	memset(e.req_gid, 0x0a, sizeof(e.req_gid));
	memset(e.acc_gid, 0x0b, sizeof(e.acc_gid));
	e.req_qpn = req_qpn;
	e.acc_qpn = acc_qpn;
	return e;
}

trdma_kdf_out Derive(const std::string &key, const Hellos &h,
		     const trdma_kdf_ends &e = Ends())
{
	trdma_kdf_out o;
	std::vector<uint8_t> th = h.Th();

	memset(&o, 0xcc, sizeof(o));
	EXPECT_EQ(trdma_kdf_keys(Hmac, nullptr, (const uint8_t *)key.data(),
				 key.size(), h.nonce_req, h.nonce_acc, &e,
				 th.data(), &o), 0);
	return o;
}

trdma_kdf_out Derive(const std::string &key, uint8_t nreq, uint8_t nacc,
		     uint32_t req_qpn, uint32_t acc_qpn)
{
	return Derive(key, Hellos(nreq, nacc), Ends(req_qpn, acc_qpn));
}

bool Same(const trdma_kdf_dir &a, const trdma_kdf_dir &b)
{
	return !memcmp(&a, &b, sizeof(a));
}

bool Same(const uint8_t *a, const uint8_t *b)
{
	return !memcmp(a, b, TRDMA_KDF_CONFIRM_LEN);
}

// Nothing of one schedule's output in another's.
void ExpectAllDiffer(const trdma_kdf_out &a, const trdma_kdf_out &b)
{
	EXPECT_FALSE(Same(a.to_acc, b.to_acc));
	EXPECT_FALSE(Same(a.to_req, b.to_req));
	EXPECT_FALSE(Same(a.fin_req, b.fin_req));
	EXPECT_FALSE(Same(a.fin_acc, b.fin_acc));
}

}  // namespace

// The transcript hash is SHA-256 over REQ || nonce_req || ACCEPT ||
// nonce_acc, in that order.
TEST(Kdf, TranscriptIsTheHashOfBothHellosInOrder)
{
	Hellos h;
	Sha256 s;
	uint8_t want[32];

	s.Update(h.req, sizeof(h.req));
	s.Update(h.nonce_req, sizeof(h.nonce_req));
	s.Update(h.acc, sizeof(h.acc));
	s.Update(h.nonce_acc, sizeof(h.nonce_acc));
	s.Final(want);
	EXPECT_EQ(h.Th(), std::vector<uint8_t>(want, want + 32));

	// The accepting side's hello first is another transcript.
	Hellos swapped = h;
	memcpy(swapped.req, h.acc, sizeof(h.acc));
	memcpy(swapped.acc, h.req, sizeof(h.req));
	memcpy(swapped.nonce_req, h.nonce_acc, sizeof(h.nonce_acc));
	memcpy(swapped.nonce_acc, h.nonce_req, sizeof(h.nonce_req));
	EXPECT_NE(swapped.Th(), h.Th());
}

// The construction of docs/security.md, written out with the HKDF steps:
// PRK from (nonce_req || nonce_acc, key); each direction's 28 bytes and
// each side's 32-byte confirmation from label || ends || th.
TEST(Kdf, KeyScheduleIsTheDocumentedOne)
{
	Hellos hs;
	trdma_kdf_out k = Derive("link key", hs);
	uint8_t salt[64], prk[32], info[TRDMA_KDF_INFO_MAX], okm[32];
	trdma_kdf_ends e = Ends();
	std::vector<uint8_t> th = hs.Th();

	memset(salt, 1, 32);
	memset(salt + 32, 2, 32);
	ASSERT_EQ(trdma_hkdf_extract(Hmac, nullptr, salt, 64,
				     (const uint8_t *)"link key", 8, prk), 0);
	size_t n = trdma_kdf_info(info, TRDMA_KDF_TO_ACC, &e, th.data());
	EXPECT_EQ(n, 18u + 16 + 4 + 16 + 4 + 32);
	EXPECT_LE(n, (size_t)TRDMA_KDF_INFO_MAX);
	EXPECT_EQ(std::string((char *)info, 18), "trdma tls2 req>acc");
	EXPECT_EQ(info[18 + 16 + 3], 17);	// QPN big-endian after the GID
	EXPECT_EQ(memcmp(info + 58, th.data(), 32), 0);	// th last
	ASSERT_EQ(trdma_hkdf_expand(Hmac, nullptr, prk, info, n, okm, 28), 0);
	EXPECT_EQ(memcmp(okm, k.to_acc.key, 16), 0);
	EXPECT_EQ(memcmp(okm + 16, k.to_acc.salt, 4), 0);
	EXPECT_EQ(memcmp(okm + 20, k.to_acc.iv, 8), 0);
	n = trdma_kdf_info(info, TRDMA_KDF_TO_REQ, &e, th.data());
	EXPECT_EQ(std::string((char *)info, 18), "trdma tls2 acc>req");
	ASSERT_EQ(trdma_hkdf_expand(Hmac, nullptr, prk, info, n, okm, 28), 0);
	EXPECT_EQ(memcmp(okm, k.to_req.key, 16), 0);
	n = trdma_kdf_info(info, TRDMA_KDF_FIN_REQ, &e, th.data());
	EXPECT_EQ(std::string((char *)info, 18), "trdma tls2 req fin");
	ASSERT_EQ(trdma_hkdf_expand(Hmac, nullptr, prk, info, n, okm, 32), 0);
	EXPECT_TRUE(Same(okm, k.fin_req));
	n = trdma_kdf_info(info, TRDMA_KDF_FIN_ACC, &e, th.data());
	EXPECT_EQ(std::string((char *)info, 18), "trdma tls2 acc fin");
	ASSERT_EQ(trdma_hkdf_expand(Hmac, nullptr, prk, info, n, okm, 32), 0);
	EXPECT_TRUE(Same(okm, k.fin_acc));
}

TEST(Kdf, DirectionsConnectionsAndNoncesGetTheirOwnKeys)
{
	trdma_kdf_out base = Derive("link key", 1, 2, 17, 18);

	EXPECT_FALSE(Same(base.to_acc, base.to_req));
	EXPECT_FALSE(Same(base.fin_req, base.fin_acc));
	// Same on both ends: a deterministic function of what both know.
	EXPECT_TRUE(Same(base.to_acc, Derive("link key", 1, 2, 17, 18).to_acc));
	ExpectAllDiffer(base, Derive("link key", 1, 3, 17, 18));
	ExpectAllDiffer(base, Derive("link key", 4, 2, 17, 18));
	// Swapped nonces are other nonces.
	ExpectAllDiffer(base, Derive("link key", 2, 1, 17, 18));
	ExpectAllDiffer(base, Derive("link key", 1, 2, 19, 18));
	ExpectAllDiffer(base, Derive("link key", 1, 2, 17, 20));
	ExpectAllDiffer(base, Derive("link kez", 1, 2, 17, 18));
}

// Any byte of either hello changed on the path (path_mtu, start_msn,
// max_rd_atomic, flags, a reserved byte, the nonce) gives both directions
// other keys and both sides other confirmations: the first record fails.
TEST(Kdf, AChangedHelloByteChangesBothDirectionsKeys)
{
	const Hellos h;
	const trdma_kdf_out base = Derive("link key", h);
	int changed = 0;

	for (int which = 0; which < 2; which++) {
		for (size_t i = 0; i < 64; i++) {
			Hellos m = h;
			(which ? m.acc : m.req)[i] ^= 0x01;
			trdma_kdf_out k = Derive("link key", m);
			SCOPED_TRACE((which ? "ACCEPT byte " : "REQ byte ") +
				     std::to_string(i));
			ExpectAllDiffer(base, k);
			changed++;
		}
	}
	EXPECT_EQ(changed, 128);
}

// The confirmation is a deterministic function of the key, the nonces, the
// ends and the hellos: both ends compute the same value, and a side
// without the key (another key) does not.
TEST(Kdf, ConfirmationIsDeterministic)
{
	const Hellos h;
	trdma_kdf_out a = Derive("link key", h), b = Derive("link key", h);

	EXPECT_TRUE(Same(a.fin_req, b.fin_req));
	EXPECT_TRUE(Same(a.fin_acc, b.fin_acc));
	EXPECT_TRUE(!memcmp(&a, &b, sizeof(a)));
	trdma_kdf_out other = Derive("another key", h);
	EXPECT_FALSE(Same(a.fin_req, other.fin_req));
	EXPECT_FALSE(Same(a.fin_acc, other.fin_acc));
	// Neither is a key of the links (the outputs are all apart).
	EXPECT_NE(memcmp(a.fin_req, a.to_acc.key, 16), 0);
	EXPECT_NE(memcmp(a.fin_acc, a.to_req.key, 16), 0);
}
