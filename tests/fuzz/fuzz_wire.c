// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libFuzzer target: the segment header parser (kernel/trdma_wire.c).
 *
 * The input is taken as one header (a segment's first bytes) and as a
 * stream of segments (header, payload, header, ...).  Every verdict must be
 * the reference model's (tests/fuzz/model.c); a header judged valid must
 * satisfy every rule of docs/wire.md, decode to fields that build back into
 * the same bytes, and decode the same from a copy of exactly its own bytes
 * (so nothing past the header is read: AddressSanitizer checks that the
 * parser stays inside the exact-size copies).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#define CHECK(c)							\
	do {								\
		if (!(c)) {						\
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n",	\
				__FILE__, __LINE__, #c);		\
			abort();					\
		}							\
	} while (0)

static u8 *dup_exact(const u8 *p, size_t n)
{
	u8 *q = malloc(n ? n : 1);

	CHECK(q);
	memcpy(q, p, n);
	return q;
}

/* Parses the header at buf (len bytes) and checks all there is to check. */
static enum trdma_wire_err check_one(const u8 *buf, size_t len,
				     struct trdma_wire_hdr *h)
{
	enum trdma_wire_err e = trdma_wire_parse(buf, len, h);
	struct trdma_wire_hdr again;
	u8 out[TRDMA_MAX_HDR];
	u32 hl;
	u8 *exact;

	CHECK(e == trdma_model_hdr_verdict(buf, len));
	if (len < sizeof(struct trdma_bth)) {
		CHECK(e == TRDMA_WIRE_SHORT);
		return e;
	}
	hl = trdma_hdr_len(buf[0], buf[1]);
	CHECK(hl == 0 || (hl >= sizeof(struct trdma_bth) &&
			  hl <= TRDMA_MAX_HDR));
	/* No length: an unknown opcode, or an AETH flag off a request. */
	if (hl == 0)
		CHECK(e == TRDMA_WIRE_OPCODE || e == TRDMA_WIRE_AETH);
	if (e == TRDMA_WIRE_OPCODE)
		CHECK(hl == 0);
	if (hl && len < hl)
		CHECK(e == TRDMA_WIRE_SHORT);
	if (e != TRDMA_WIRE_OK)
		return e;

	/* A UC opcode decodes to its RC counterpart. */
	CHECK(h->opcode == (h->uc ? buf[0] - TRDMA_OP_UC : buf[0]));
	CHECK(h->uc == (buf[0] >= TRDMA_OP_UC_SEND_FIRST &&
			buf[0] <= TRDMA_OP_UC_WRITE_ONLY_IMM));
	if (h->uc)
		CHECK(!(h->flags & (TRDMA_BTH_ACKREQ | TRDMA_BTH_AETH)));
	CHECK(h->hdr_len == hl);
	CHECK(h->ext == (trdma_wire_ext(h->opcode) |
			 (h->flags & TRDMA_BTH_AETH ? TRDMA_EXT_AETH : 0)));
	CHECK(!(h->flags &
		~(TRDMA_BTH_SE | TRDMA_BTH_ACKREQ | TRDMA_BTH_AETH)));
	/* A request carries a plain ACK only. */
	if (h->flags & TRDMA_BTH_AETH)
		CHECK(h->syndrome == TRDMA_AETH_ACK);
	CHECK(h->dest_qpn <= 0xffffff);
	CHECK(h->length <= TRDMA_MAX_SEG);
	CHECK(!h->length || trdma_wire_has_payload(h->opcode));
	CHECK(!h->offset || !trdma_wire_starts_msg(h->opcode));
	if (h->ext & TRDMA_EXT_RETH)
		CHECK(h->length <= h->dma_len);
	else
		CHECK(!h->dma_len);
	if (!(h->ext & (TRDMA_EXT_RETH | TRDMA_EXT_ATOMIC)))
		CHECK(!h->va && !h->rkey);
	if (!(h->ext & TRDMA_EXT_ATOMIC))
		CHECK(!h->swap_add && !h->compare);
	if (!(h->ext & TRDMA_EXT_AETH))
		CHECK(!h->syndrome && !h->aeth_msn);
	if (!(h->ext & TRDMA_EXT_ATOMIC_ACK))
		CHECK(!h->orig);
	if (!(h->ext & TRDMA_EXT_IMM))
		CHECK(!h->imm);
	if (!(h->ext & TRDMA_EXT_IETH))
		CHECK(!h->inv_rkey);

	/* Round trip: the decoded fields build exactly the header's bytes. */
	CHECK(trdma_model_build(h, out) == hl);
	CHECK(!memcmp(out, buf, hl));

	/* Only the header's own bytes count. */
	exact = dup_exact(buf, hl);
	CHECK(trdma_wire_parse(exact, hl, &again) == TRDMA_WIRE_OK);
	CHECK(trdma_model_hdr_equal(h, &again));
	free(exact);
	return e;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct trdma_wire_hdr h;
	size_t pos = 0;
	u8 *buf;

	if (size > 1 << 20)
		return -1;
	buf = dup_exact(data, size);

	/* The whole input as the start of one segment. */
	check_one(buf, size, &h);

	/* Every prefix shorter than the header: never valid, never read past. */
	if (size >= sizeof(struct trdma_bth) && trdma_hdr_len(buf[0], buf[1])) {
		size_t n, hl = trdma_hdr_len(buf[0], buf[1]);

		for (n = 0; n < hl && n <= size; n++) {
			u8 *pre = dup_exact(buf, n);

			CHECK(trdma_wire_parse(pre, n, &h) == TRDMA_WIRE_SHORT);
			free(pre);
		}
	}

	/* The input as a stream of segments, as the receive path walks it. */
	while (pos < size) {
		if (check_one(buf + pos, size - pos, &h) != TRDMA_WIRE_OK)
			break;
		pos += h.hdr_len;
		pos += h.length < size - pos ? h.length : size - pos;
	}
	free(buf);
	return 0;
}
