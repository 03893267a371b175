// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: segment headers, the part of their parsing that needs no QP.
 *
 * Pure functions of the header bytes, built into the module and into the
 * userspace unit tests and fuzz targets (tests/unit, tests/fuzz).  What
 * depends on the QP (the MSN sequence, the QPN being ours, RNR, keys) is
 * the receive path's (trdma_rx.c).
 */
#ifdef __KERNEL__
#include <linux/string.h>
#include <asm/byteorder.h>
#endif

#include "trdma_wire.h"

/* A UC opcode: TRDMA_OP_UC plus the opcode of an RC SEND or WRITE. */
static bool trdma_wire_is_uc(u8 op)
{
	return op >= TRDMA_OP_UC_SEND_FIRST && op <= TRDMA_OP_UC_WRITE_ONLY_IMM;
}

/* The extension headers an opcode carries (TRDMA_EXT_*), -1 if unknown. */
static int trdma_wire_ext_of(u8 op)
{
	if (trdma_wire_is_uc(op))
		op -= TRDMA_OP_UC;
	switch (op) {
	case TRDMA_OP_SEND_FIRST:
	case TRDMA_OP_SEND_MIDDLE:
	case TRDMA_OP_SEND_LAST:
	case TRDMA_OP_SEND_ONLY:
	case TRDMA_OP_WRITE_MIDDLE:
	case TRDMA_OP_WRITE_LAST:
	case TRDMA_OP_READ_RESPONSE_MIDDLE:
		return 0;
	case TRDMA_OP_SEND_LAST_IMM:
	case TRDMA_OP_SEND_ONLY_IMM:
	case TRDMA_OP_WRITE_LAST_IMM:
		return TRDMA_EXT_IMM;
	case TRDMA_OP_WRITE_FIRST:
	case TRDMA_OP_WRITE_ONLY:
	case TRDMA_OP_READ_REQUEST:
	case TRDMA_OP_ATOMIC_WRITE:
		return TRDMA_EXT_RETH;
	case TRDMA_OP_WRITE_ONLY_IMM:
		return TRDMA_EXT_RETH | TRDMA_EXT_IMM;
	case TRDMA_OP_SEND_LAST_INV:
	case TRDMA_OP_SEND_ONLY_INV:
		return TRDMA_EXT_IETH;
	case TRDMA_OP_READ_RESPONSE_FIRST:
	case TRDMA_OP_READ_RESPONSE_LAST:
	case TRDMA_OP_READ_RESPONSE_ONLY:
	case TRDMA_OP_ACK:
		return TRDMA_EXT_AETH;
	case TRDMA_OP_COMPARE_SWAP:
	case TRDMA_OP_FETCH_ADD:
		return TRDMA_EXT_ATOMIC;
	case TRDMA_OP_ATOMIC_ACK:
		return TRDMA_EXT_AETH | TRDMA_EXT_ATOMIC_ACK;
	default:
		return -1;
	}
}

/* The extension headers an opcode carries; 0 for an unknown opcode too. */
u32 trdma_wire_ext(u8 opcode)
{
	int ext = trdma_wire_ext_of(opcode);

	return ext < 0 ? 0 : ext;
}

/*
 * Whether an opcode is a request's, which may carry TRDMA_BTH_AETH; a UC
 * request never does: UC has no acknowledgments.
 */
static bool trdma_wire_is_request(u8 opcode)
{
	return opcode <= TRDMA_OP_READ_REQUEST ||
	       opcode == TRDMA_OP_COMPARE_SWAP || opcode == TRDMA_OP_FETCH_ADD ||
	       opcode == TRDMA_OP_SEND_LAST_INV ||
	       opcode == TRDMA_OP_SEND_ONLY_INV ||
	       opcode == TRDMA_OP_ATOMIC_WRITE;
}

/*
 * The extension headers of a segment with these BTH opcode and flags, -1
 * if the opcode is unknown or the flags ask for an AETH it cannot carry.
 */
static int trdma_wire_ext_flags(u8 opcode, u8 flags)
{
	int ext = trdma_wire_ext_of(opcode);

	if (ext < 0 || !(flags & TRDMA_BTH_AETH))
		return ext;
	return trdma_wire_is_request(opcode) ? ext | TRDMA_EXT_AETH : -1;
}

/*
 * Header size of a segment by its BTH opcode and flags (the BTH's first two
 * bytes); 0 for a header trdma does not accept.
 */
u32 trdma_hdr_len(u8 opcode, u8 flags)
{
	int ext = trdma_wire_ext_flags(opcode, flags);
	u32 len = sizeof(struct trdma_bth);

	if (ext < 0)
		return 0;
	if (ext & TRDMA_EXT_RETH)
		len += sizeof(struct trdma_reth);
	if (ext & TRDMA_EXT_ATOMIC)
		len += sizeof(struct trdma_atomic_eth);
	if (ext & TRDMA_EXT_AETH)
		len += sizeof(struct trdma_aeth);
	if (ext & TRDMA_EXT_ATOMIC_ACK)
		len += sizeof(struct trdma_atomic_ack_eth);
	if (ext & (TRDMA_EXT_IMM | TRDMA_EXT_IETH))
		len += sizeof(struct trdma_immdt);
	return len;
}

/*
 * SENDs, WRITEs, READ responses and ATOMIC_WRITE carry payload; nothing
 * else does.
 */
bool trdma_wire_has_payload(u8 opcode)
{
	return opcode <= TRDMA_OP_WRITE_ONLY_IMM ||
	       (opcode >= TRDMA_OP_READ_RESPONSE_FIRST &&
		opcode <= TRDMA_OP_READ_RESPONSE_ONLY) ||
	       opcode == TRDMA_OP_SEND_LAST_INV ||
	       opcode == TRDMA_OP_SEND_ONLY_INV ||
	       opcode == TRDMA_OP_ATOMIC_WRITE;
}

/*
 * Whether a segment with this opcode begins its message, so its offset is
 * 0: every opcode but the MIDDLE and LAST ones.
 */
bool trdma_wire_starts_msg(u8 opcode)
{
	switch (opcode) {
	case TRDMA_OP_SEND_MIDDLE:
	case TRDMA_OP_SEND_LAST:
	case TRDMA_OP_SEND_LAST_IMM:
	case TRDMA_OP_SEND_LAST_INV:
	case TRDMA_OP_WRITE_MIDDLE:
	case TRDMA_OP_WRITE_LAST:
	case TRDMA_OP_WRITE_LAST_IMM:
	case TRDMA_OP_READ_RESPONSE_MIDDLE:
	case TRDMA_OP_READ_RESPONSE_LAST:
		return false;
	default:
		return true;
	}
}

/*
 * Decodes the segment header at the start of buf (len bytes, of which only
 * the header's are read) into h, in host order, and checks everything about
 * it that does not depend on the QP.  Returns TRDMA_WIRE_OK or why the
 * header is malformed; h is then only partly filled.
 */
enum trdma_wire_err trdma_wire_parse(const void *buf, u32 len,
				     struct trdma_wire_hdr *h)
{
	const u8 *p = buf;
	struct trdma_bth bth;
	int ext;

	memset(h, 0, sizeof(*h));
	if (len < sizeof(bth))
		return TRDMA_WIRE_SHORT;
	memcpy(&bth, p, sizeof(bth));
	p += sizeof(bth);
	if (trdma_wire_ext_of(bth.opcode) < 0)
		return TRDMA_WIRE_OPCODE;
	ext = trdma_wire_ext_flags(bth.opcode, bth.flags);
	if (ext < 0)
		return TRDMA_WIRE_AETH;
	h->uc = trdma_wire_is_uc(bth.opcode);
	h->opcode = h->uc ? bth.opcode - TRDMA_OP_UC : bth.opcode;
	h->flags = bth.flags;
	h->ext = ext;
	h->hdr_len = trdma_hdr_len(bth.opcode, bth.flags);
	h->dest_qpn = be32_to_cpu(bth.dest_qpn);
	h->msn = be32_to_cpu(bth.msn);
	h->offset = be32_to_cpu(bth.offset);
	h->length = be32_to_cpu(bth.length);
	if (len < h->hdr_len)
		return TRDMA_WIRE_SHORT;

	if (bth.reserved ||
	    bth.flags & ~(TRDMA_BTH_SE | TRDMA_BTH_ACKREQ | TRDMA_BTH_AETH))
		return TRDMA_WIRE_RESERVED;
	/* Nothing acknowledges a UC request: it asks for nothing. */
	if (h->uc && bth.flags & TRDMA_BTH_ACKREQ)
		return TRDMA_WIRE_RESERVED;
	if (h->dest_qpn > 0xffffff)
		return TRDMA_WIRE_QPN;
	if (h->length > TRDMA_MAX_SEG)
		return TRDMA_WIRE_LENGTH;
	if (h->length && !trdma_wire_has_payload(h->opcode))
		return TRDMA_WIRE_PAYLOAD;
	if (h->offset && trdma_wire_starts_msg(h->opcode))
		return TRDMA_WIRE_OFFSET;

	if (ext & TRDMA_EXT_RETH) {
		struct trdma_reth reth;

		memcpy(&reth, p, sizeof(reth));
		p += sizeof(reth);
		h->va = be64_to_cpu(reth.va);
		h->rkey = be32_to_cpu(reth.rkey);
		h->dma_len = be32_to_cpu(reth.dma_len);
		/* A WRITE's first segment is part of what the RETH announces. */
		if (h->length > h->dma_len)
			return TRDMA_WIRE_LENGTH;
		/* An ATOMIC_WRITE is 8 bytes, all in its one segment. */
		if (h->opcode == TRDMA_OP_ATOMIC_WRITE &&
		    (h->dma_len != sizeof(u64) || h->length != sizeof(u64)))
			return TRDMA_WIRE_LENGTH;
	}
	if (ext & TRDMA_EXT_ATOMIC) {
		struct trdma_atomic_eth a;

		memcpy(&a, p, sizeof(a));
		p += sizeof(a);
		if (a.reserved)
			return TRDMA_WIRE_RESERVED;
		h->va = be64_to_cpu(a.va);
		h->rkey = be32_to_cpu(a.rkey);
		h->swap_add = be64_to_cpu(a.swap_add);
		h->compare = be64_to_cpu(a.compare);
	}
	if (ext & TRDMA_EXT_AETH) {
		struct trdma_aeth aeth;

		memcpy(&aeth, p, sizeof(aeth));
		p += sizeof(aeth);
		if (aeth.reserved[0] || aeth.reserved[1] || aeth.reserved[2])
			return TRDMA_WIRE_RESERVED;
		h->syndrome = aeth.syndrome;
		h->aeth_msn = be32_to_cpu(aeth.msn);
		/* A NAK never rides along with a request. */
		if (bth.flags & TRDMA_BTH_AETH && h->syndrome != TRDMA_AETH_ACK)
			return TRDMA_WIRE_AETH;
	}
	if (ext & TRDMA_EXT_ATOMIC_ACK) {
		struct trdma_atomic_ack_eth ack;

		memcpy(&ack, p, sizeof(ack));
		p += sizeof(ack);
		h->orig = be64_to_cpu(ack.orig);
	}
	if (ext & TRDMA_EXT_IMM)
		memcpy(&h->imm, p, sizeof(h->imm));
	if (ext & TRDMA_EXT_IETH) {
		struct trdma_immdt ieth;

		memcpy(&ieth, p, sizeof(ieth));
		h->inv_rkey = be32_to_cpu(ieth.data);
	}
	return TRDMA_WIRE_OK;
}
