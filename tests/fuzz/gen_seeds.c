// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Writes the seed corpora of the fuzz targets: OUT/wire/ (segment headers:
 * valid ones of every opcode, malformed ones of every kind, and streams of
 * several segments) and OUT/slot/ (limits prefix plus send WQE slot: valid
 * ones of every opcode and refused ones).  Names tell the expected verdict:
 * ok-* is accepted, bad-* refused, stream-* is a valid segment sequence.
 * tests/unit/shared_test.cpp holds every seed to its name.
 *
 *   usage: trdma_fuzz_seeds OUT	(the committed seeds: tests/fuzz/corpus)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model.h"

static const char *out;

static void put_file(const char *dir, const char *name, const void *p,
		     size_t n)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", out, dir);
	if (mkdir(path, 0755) && errno != EEXIST) {
		perror(path);
		exit(1);
	}
	snprintf(path, sizeof(path), "%s/%s/%s", out, dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
		perror(path);
		exit(1);
	}
}

/* A header of op with typical fields for it. */
static struct trdma_wire_hdr hdr(u8 op, u32 off, u32 len)
{
	struct trdma_wire_hdr h = {
		.opcode = op,
		.dest_qpn = 0x000123,
		.msn = 0x00abcdef,
		.offset = off,
		.length = len,
	};
	u32 ext = trdma_wire_ext(op);

	if (ext & (TRDMA_EXT_RETH | TRDMA_EXT_ATOMIC)) {
		h.va = 0x00007f0012345000ull;
		h.rkey = 0x00001a2b;
	}
	if (ext & TRDMA_EXT_RETH)
		h.dma_len = len > 4096 ? 200000 : len;
	if (op == TRDMA_OP_ATOMIC_WRITE)
		h.dma_len = 8;
	if (ext & TRDMA_EXT_ATOMIC) {
		h.swap_add = 0x1111222233334444ull;
		h.compare = 0x5555666677778888ull;
	}
	if (ext & TRDMA_EXT_AETH)
		h.aeth_msn = h.msn;
	if (ext & TRDMA_EXT_ATOMIC_ACK)
		h.orig = 0x0102030405060708ull;
	if (ext & TRDMA_EXT_IMM)
		h.imm = cpu_to_be32(0xcafef00d);
	if (ext & TRDMA_EXT_IETH)
		h.inv_rkey = 0x00012345;
	return h;
}

/* Writes h (with a few payload bytes, at most 64) as wire/NAME. */
static void wire(const char *name, const struct trdma_wire_hdr *h)
{
	u8 buf[TRDMA_MAX_HDR + 64] = { 0 };
	u32 n = trdma_model_build(h, buf);
	u32 pay = h->length < 64 ? h->length : 64;

	put_file("wire", name, buf, n + pay);
}

/* Writes the raw bytes of h changed at byte at to v, as wire/NAME. */
static void wire_poke(const char *name, const struct trdma_wire_hdr *h,
		      u32 at, u8 v)
{
	u8 buf[TRDMA_MAX_HDR];
	u32 n = trdma_model_build(h, buf);

	buf[at] = v;
	put_file("wire", name, buf, n);
}

static void wire_seeds(void)
{
	struct trdma_wire_hdr h;
	u8 stream[1024];
	u32 n = 0;

	h = hdr(TRDMA_OP_SEND_FIRST, 0, 65536);
	wire("ok-send-first", &h);
	h = hdr(TRDMA_OP_SEND_MIDDLE, 65536, 65536);
	wire("ok-send-middle", &h);
	h = hdr(TRDMA_OP_SEND_LAST, 131072, 100);
	h.flags = TRDMA_BTH_SE | TRDMA_BTH_ACKREQ;
	wire("ok-send-last", &h);
	h = hdr(TRDMA_OP_SEND_LAST_IMM, 65536, 10);
	h.flags = TRDMA_BTH_ACKREQ;
	wire("ok-send-last-imm", &h);
	h = hdr(TRDMA_OP_SEND_ONLY, 0, 64);
	h.flags = TRDMA_BTH_ACKREQ;
	wire("ok-send-only", &h);
	h = hdr(TRDMA_OP_SEND_ONLY, 0, 0);
	wire("ok-send-only-empty", &h);
	h = hdr(TRDMA_OP_SEND_ONLY_IMM, 0, 8);
	h.flags = TRDMA_BTH_SE | TRDMA_BTH_ACKREQ;
	wire("ok-send-only-imm", &h);
	h = hdr(TRDMA_OP_SEND_LAST_INV, 65536, 16);
	h.flags = TRDMA_BTH_ACKREQ;
	wire("ok-send-last-inv", &h);
	h = hdr(TRDMA_OP_SEND_ONLY_INV, 0, 16);
	h.flags = TRDMA_BTH_ACKREQ;
	wire("ok-send-only-inv", &h);
	h = hdr(TRDMA_OP_WRITE_FIRST, 0, 65536);
	wire("ok-write-first", &h);
	h = hdr(TRDMA_OP_WRITE_MIDDLE, 65536, 65536);
	wire("ok-write-middle", &h);
	h = hdr(TRDMA_OP_WRITE_LAST, 131072, 3392);
	wire("ok-write-last", &h);
	h = hdr(TRDMA_OP_WRITE_LAST_IMM, 65536, 1);
	wire("ok-write-last-imm", &h);
	h = hdr(TRDMA_OP_WRITE_ONLY, 0, 4096);
	h.flags = TRDMA_BTH_ACKREQ;
	wire("ok-write-only", &h);
	h = hdr(TRDMA_OP_WRITE_ONLY, 0, 0);
	wire("ok-write-only-empty", &h);
	h = hdr(TRDMA_OP_WRITE_ONLY_IMM, 0, 32);
	wire("ok-write-only-imm", &h);
	h = hdr(TRDMA_OP_READ_REQUEST, 0, 0);
	h.dma_len = 1 << 20;
	h.flags = TRDMA_BTH_ACKREQ;
	wire("ok-read-request", &h);
	h = hdr(TRDMA_OP_READ_RESPONSE_FIRST, 0, 65536);
	wire("ok-read-response-first", &h);
	h = hdr(TRDMA_OP_READ_RESPONSE_MIDDLE, 65536, 65536);
	wire("ok-read-response-middle", &h);
	h = hdr(TRDMA_OP_READ_RESPONSE_LAST, 131072, 7);
	wire("ok-read-response-last", &h);
	h = hdr(TRDMA_OP_READ_RESPONSE_ONLY, 0, 48);
	wire("ok-read-response-only", &h);
	h = hdr(TRDMA_OP_ACK, 0, 0);
	wire("ok-ack", &h);
	h.syndrome = TRDMA_AETH_RNR_NAK | 14;
	wire("ok-ack-rnr-nak", &h);
	h.syndrome = TRDMA_AETH_NAK_INV_REQ;
	wire("ok-ack-nak-inv-req", &h);
	h.syndrome = TRDMA_AETH_NAK_REM_ACCESS;
	wire("ok-ack-nak-rem-access", &h);
	h.syndrome = TRDMA_AETH_NAK_REM_OP;
	wire("ok-ack-nak-rem-op", &h);
	h = hdr(TRDMA_OP_ATOMIC_ACK, 0, 0);
	wire("ok-atomic-ack", &h);
	h = hdr(TRDMA_OP_COMPARE_SWAP, 0, 0);
	h.flags = TRDMA_BTH_ACKREQ;
	wire("ok-compare-swap", &h);
	h = hdr(TRDMA_OP_FETCH_ADD, 0, 0);
	h.flags = TRDMA_BTH_ACKREQ;
	wire("ok-fetch-add", &h);
	h = hdr(TRDMA_OP_ATOMIC_WRITE, 0, 8);
	h.flags = TRDMA_BTH_ACKREQ;
	wire("ok-atomic-write", &h);
	h.flags = TRDMA_BTH_ACKREQ | TRDMA_BTH_AETH;
	h.aeth_msn = 0x00abcd00;
	wire("ok-atomic-write-carried-ack", &h);
	h = hdr(TRDMA_OP_ATOMIC_WRITE, 0, 8);
	h.dma_len = 16;
	wire("bad-atomic-write-reth-16", &h);
	h = hdr(TRDMA_OP_ATOMIC_WRITE, 0, 4);
	wire("bad-atomic-write-payload-4", &h);
	/* Requests carrying an ACK (TRDMA_BTH_AETH). */
	h = hdr(TRDMA_OP_SEND_ONLY, 0, 64);
	h.flags = TRDMA_BTH_ACKREQ | TRDMA_BTH_AETH;
	h.aeth_msn = 0x00abcd00;
	wire("ok-send-only-carried-ack", &h);
	h = hdr(TRDMA_OP_WRITE_ONLY_IMM, 0, 32);
	h.flags = TRDMA_BTH_ACKREQ | TRDMA_BTH_AETH;
	h.aeth_msn = 0x00abcd00;
	wire("ok-write-only-imm-carried-ack", &h);
	h = hdr(TRDMA_OP_COMPARE_SWAP, 0, 0);
	h.flags = TRDMA_BTH_ACKREQ | TRDMA_BTH_AETH;
	h.aeth_msn = 0x00abcd00;
	wire("ok-compare-swap-carried-ack", &h);
	h.syndrome = TRDMA_AETH_NAK_REM_ACCESS;
	wire("bad-carried-nak", &h);
	h = hdr(TRDMA_OP_ACK, 0, 0);
	wire_poke("bad-aeth-flag-on-ack", &h, 1, TRDMA_BTH_AETH);

	h = hdr(TRDMA_OP_SEND_ONLY, 0, 64);
	wire_poke("bad-opcode-0x15", &h, 0, 0x15);
	wire_poke("bad-opcode-0x7f", &h, 0, 0x7f);
	wire_poke("bad-opcode-0xff", &h, 0, 0xff);
	wire_poke("bad-flags", &h, 1, TRDMA_BTH_ACKREQ | 0x01);
	wire_poke("bad-bth-reserved", &h, 3, 1);
	wire_poke("bad-qpn-25-bits", &h, 4, 1);
	h.length = TRDMA_MAX_SEG + 1;
	wire("bad-length-over-64k", &h);
	h = hdr(TRDMA_OP_SEND_FIRST, 4096, 65536);
	wire("bad-offset-send-first", &h);
	h = hdr(TRDMA_OP_WRITE_ONLY, 0, 4096);
	h.dma_len = 4095;
	wire("bad-write-past-reth", &h);
	h = hdr(TRDMA_OP_READ_RESPONSE_ONLY, 8, 8);
	wire("bad-offset-read-response-only", &h);
	h = hdr(TRDMA_OP_ACK, 0, 0);
	h.length = 4;
	wire("bad-payload-ack", &h);
	h = hdr(TRDMA_OP_READ_REQUEST, 0, 0);
	h.length = 16;
	h.dma_len = 16;
	wire("bad-payload-read-request", &h);
	h = hdr(TRDMA_OP_FETCH_ADD, 0, 0);
	h.offset = 8;
	wire("bad-offset-fetch-add", &h);
	h.offset = 0;
	wire_poke("bad-atomic-eth-reserved", &h, 20 + 12, 0x80);
	h = hdr(TRDMA_OP_ACK, 0, 0);
	wire_poke("bad-aeth-reserved", &h, 20 + 2, 1);
	h = hdr(TRDMA_OP_WRITE_ONLY_IMM, 0, 8);
	{
		u8 buf[TRDMA_MAX_HDR];
		u32 len = trdma_model_build(&h, buf);

		put_file("wire", "bad-short-write-only-imm", buf, len - 1);
		put_file("wire", "bad-short-bth", buf, 19);
	}

	/* A conversation's worth of segments, as one stream. */
#define ADD(op, off, len, ...)						\
	do {								\
		h = hdr(op, off, len);					\
		__VA_ARGS__;						\
		n += trdma_model_build(&h, stream + n);			\
		memset(stream + n, 0x5a, h.length);			\
		n += h.length;						\
	} while (0)
	ADD(TRDMA_OP_SEND_ONLY, 0, 16, h.flags = TRDMA_BTH_ACKREQ);
	ADD(TRDMA_OP_ACK, 0, 0, (void)0);
	ADD(TRDMA_OP_WRITE_ONLY_IMM, 0, 8, h.msn++);
	ADD(TRDMA_OP_SEND_FIRST, 0, 24, h.msn += 2);
	ADD(TRDMA_OP_READ_RESPONSE_ONLY, 0, 4, (void)0);
	ADD(TRDMA_OP_SEND_LAST_IMM, 24, 8, h.msn += 2);
	ADD(TRDMA_OP_READ_REQUEST, 0, 0, h.msn += 3; h.dma_len = 4);
	ADD(TRDMA_OP_COMPARE_SWAP, 0, 0, h.msn += 4);
	ADD(TRDMA_OP_ATOMIC_ACK, 0, 0, (void)0);
	ADD(TRDMA_OP_ATOMIC_WRITE, 0, 8, h.msn += 5);
	ADD(TRDMA_OP_ACK, 0, 0, (void)0);
#undef ADD
	put_file("wire", "stream-conversation", stream, n);
}

/* A slot input: limits prefix, then the slot's first bytes. */
struct slot_seed {
	u8 prefix[TRDMA_MODEL_SLOT_PREFIX];
	union {
		struct trdma_sqe sqe;
		u8 bytes[48 + 32 * 16];
	};
};

static struct slot_seed slot(u8 shift_byte, u8 max_sge, u16 max_inline,
			     u8 opcode, u8 flags)
{
	struct slot_seed s;

	memset(&s, 0, sizeof(s));
	s.prefix[0] = shift_byte;
	s.prefix[1] = max_sge;
	s.prefix[2] = max_inline & 0xff;
	s.prefix[3] = max_inline >> 8;
	s.sqe.wr_id = 0x1122334455667788ull;
	s.sqe.opcode = opcode;
	s.sqe.flags = flags;
	s.sqe.rkey = 0x1a2b;
	s.sqe.remote_addr = 0x7f0012345000ull;
	return s;
}

static void sges(struct slot_seed *s, u8 n, u32 len)
{
	u8 i;

	s->sqe.num_sge = n;
	for (i = 0; i < n; i++) {
		s->sqe.sge[i].addr = 0x7f0000100000ull + i * 0x10000ull;
		s->sqe.sge[i].length = len;
		s->sqe.sge[i].lkey = 0x300 + i;
	}
}

static void slot_file(const char *name, const struct slot_seed *s)
{
	u8 buf[sizeof(s->prefix) + sizeof(s->bytes)];
	size_t n = 48;

	if (s->sqe.flags & TRDMA_WQE_INLINE)
		n += s->sqe.inline_len < 32 * 16 ? s->sqe.inline_len : 32 * 16;
	else
		n += (s->sqe.num_sge < 32 ? s->sqe.num_sge : 32) * 16;
	memcpy(buf, s->prefix, sizeof(s->prefix));
	memcpy(buf + sizeof(s->prefix), s->bytes, n);
	put_file("slot", name, buf, sizeof(s->prefix) + n);
}

static void slot_seeds(void)
{
	/* 128-byte slots, 4 SGEs, 80 inline bytes: a default QP's SQ. */
	const u8 q = 1, sge = 4;
	const u16 inl = 80;
	struct slot_seed s;

	s = slot(q, sge, inl, IB_UVERBS_WR_SEND, TRDMA_WQE_SIGNALED);
	sges(&s, 1, 4096);
	slot_file("ok-send", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_SEND, 0);
	sges(&s, 0, 0);
	slot_file("ok-send-no-sge", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_SEND_WITH_IMM,
		 TRDMA_WQE_SIGNALED | TRDMA_WQE_SOLICITED);
	s.sqe.imm_data = 0x0df0feca;
	sges(&s, 4, 1000);
	slot_file("ok-send-imm-4-sges", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_RDMA_WRITE, TRDMA_WQE_FENCE);
	sges(&s, 2, 65536);
	slot_file("ok-write", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_RDMA_WRITE_WITH_IMM,
		 TRDMA_WQE_SIGNALED);
	sges(&s, 1, 1);
	slot_file("ok-write-imm", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_RDMA_READ, TRDMA_WQE_SIGNALED);
	sges(&s, 3, 8192);
	slot_file("ok-read", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_ATOMIC_CMP_AND_SWP,
		 TRDMA_WQE_SIGNALED);
	s.sqe.compare_add = 1;
	s.sqe.swap = 2;
	sges(&s, 1, 8);
	slot_file("ok-compare-swap", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD, 0);
	s.sqe.compare_add = 5;
	sges(&s, 1, 8);
	slot_file("ok-fetch-add", &s);
	s = slot(q, sge, inl, TRDMA_WR_ATOMIC_WRITE, TRDMA_WQE_SIGNALED);
	s.sqe.remote_addr = 0x1000;
	s.sqe.compare_add = 0x0123456789abcdefull;
	slot_file("ok-atomic-write", &s);
	s = slot(q, sge, inl, TRDMA_WR_ATOMIC_WRITE, 0);
	sges(&s, 1, 8);
	slot_file("bad-atomic-write-sge", &s);
	s = slot(q, sge, inl, TRDMA_WR_ATOMIC_WRITE, TRDMA_WQE_INLINE);
	s.sqe.inline_len = 8;
	slot_file("bad-atomic-write-inline", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_SEND, TRDMA_WQE_INLINE);
	s.sqe.inline_len = 80;
	memset(s.sqe.sge, 0x42, 80);
	slot_file("ok-send-inline", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_RDMA_WRITE, TRDMA_WQE_INLINE);
	slot_file("ok-write-inline-empty", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_RDMA_WRITE, 0);
	sges(&s, 2, 1u << 30);
	slot_file("ok-write-2gib", &s);
	/* 1 KiB slots, 32 SGEs (the ceiling), 976 inline bytes. */
	s = slot(4, 32, 976, IB_UVERBS_WR_SEND, TRDMA_WQE_SIGNALED);
	sges(&s, 32, 100);
	slot_file("ok-send-32-sges", &s);

	s = slot(q, sge, inl, IB_UVERBS_WR_SEND, 0x10);
	sges(&s, 1, 8);
	slot_file("bad-flags", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_LOCAL_INV, 0);
	s.sqe.imm_data = 0x12345;
	slot_file("ok-local-inv", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_LOCAL_INV, 0);
	sges(&s, 1, 8);
	slot_file("bad-local-inv-sge", &s);
	s = slot(q, sge, inl, 0x20, 0);		/* IB_WR_REG_MR */
	s.sqe.rkey = 0x12345;
	slot_file("ok-reg-mr", &s);
	s = slot(q, sge, inl, 0x20, TRDMA_WQE_INLINE);
	slot_file("bad-reg-mr-inline", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_SEND_WITH_INV, 0);
	s.sqe.imm_data = 0x12345;
	sges(&s, 1, 64);
	slot_file("ok-send-with-inv", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_BIND_MW, TRDMA_WQE_SIGNALED);
	s.sqe.rkey = 0x12345;
	s.sqe.imm_data = 0x12346;
	s.sqe.remote_addr = 0x1000;
	s.sqe.compare_add = 64;
	s.sqe.bind.mr_lkey = 0x200;
	s.sqe.bind.mw_access = 2;
	slot_file("ok-bind-mw", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_BIND_MW, 0);
	sges(&s, 1, 8);
	slot_file("bad-bind-mw-sge", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_RDMA_READ_WITH_INV, 0);
	slot_file("bad-opcode-read-with-inv", &s);
	s = slot(q, sge, inl, 0xff, 0);
	slot_file("bad-opcode-0xff", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_RDMA_READ, TRDMA_WQE_INLINE);
	s.sqe.inline_len = 8;
	slot_file("bad-read-inline", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD, 0);
	sges(&s, 2, 8);
	slot_file("bad-atomic-2-sges", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_ATOMIC_CMP_AND_SWP, 0);
	sges(&s, 1, 16);
	slot_file("bad-atomic-sink-16", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_ATOMIC_CMP_AND_SWP,
		 TRDMA_WQE_INLINE);
	s.sqe.inline_len = 8;
	slot_file("bad-atomic-inline", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_SEND, TRDMA_WQE_INLINE);
	s.sqe.inline_len = 81;
	slot_file("bad-inline-over-max", &s);
	s = slot(q, sge, 4096, IB_UVERBS_WR_SEND, TRDMA_WQE_INLINE);
	s.sqe.inline_len = 81;
	slot_file("bad-inline-past-slot", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_SEND, 0);
	sges(&s, 5, 8);
	slot_file("bad-sges-over-max", &s);
	s = slot(q, 255, inl, IB_UVERBS_WR_SEND, 0);
	sges(&s, 6, 8);
	slot_file("bad-sges-past-slot", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_RDMA_WRITE, 0);
	sges(&s, 2, 1u << 30);
	s.sqe.sge[1].length++;
	slot_file("bad-write-2gib-plus-1", &s);
	s = slot(q, sge, inl, IB_UVERBS_WR_SEND, 0);
	sges(&s, 4, 0xffffffffu);
	slot_file("bad-send-16gib", &s);
	s = slot(0x80 | 40, sge, inl, IB_UVERBS_WR_SEND, 0);
	slot_file("bad-slot-40-bytes", &s);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s OUT\n", argv[0]);
		return 2;
	}
	out = argv[1];
	if (mkdir(out, 0755) && errno != EEXIST) {
		perror(out);
		return 1;
	}
	wire_seeds();
	slot_seeds();
	return 0;
}
