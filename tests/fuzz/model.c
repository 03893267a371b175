// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The reference model of tests/fuzz/model.h: the header rules of
 * docs/wire.md as a table by opcode, the slot rules from trdma-abi.h as
 * byte offsets.  Deliberately shares no code with kernel/trdma_wire.c and
 * kernel/trdma_slot.c.
 */
#include "model.h"

#include <string.h>

/* One row of the opcode table of docs/wire.md. */
struct op_info {
	bool known;
	bool payload;		/* SEND, WRITE, READ response, ATOMIC_WRITE */
	bool first;		/* not a MIDDLE or LAST segment */
	u8 reth, atomic, aeth, ack, imm, ieth;	/* bytes of each header */
	bool bad_aeth;		/* flag 0x20 on an opcode that is no request */
};

/*
 * A request opcode: SEND, WRITE, READ request, atomics, SEND with IETH,
 * ATOMIC_WRITE.
 */
static bool op_request(u8 op)
{
	return op <= 0x0c || op == 0x13 || op == 0x14 || op == 0x16 ||
	       op == 0x17 || op == 0x1d;
}

/* A UC opcode: 0x20 plus an RC SEND or WRITE opcode (0x00 to 0x0b). */
static bool op_uc(u8 op)
{
	return op >= 0x20 && op <= 0x2b;
}

static struct op_info op_info(u8 op, u8 flags)
{
	bool uc = op_uc(op);
	struct op_info i;

	if (uc)
		op -= 0x20;
	i = (struct op_info){ .known = op <= 0x14 || op == 0x16 ||
					op == 0x17 || op == 0x1d };

	if (!i.known)
		return i;
	i.payload = op <= 0x0b || (op >= 0x0d && op <= 0x10) || op == 0x16 ||
		    op == 0x17 || op == 0x1d;
	i.first = !(op == 0x01 || op == 0x02 || op == 0x03 || op == 0x07 ||
		    op == 0x08 || op == 0x09 || op == 0x0e || op == 0x0f ||
		    op == 0x16);
	if (op == 0x16 || op == 0x17)
		i.ieth = 4;
	if (op == 0x06 || op == 0x0a || op == 0x0b || op == 0x0c ||
	    op == 0x1d)
		i.reth = 16;
	if (op == 0x13 || op == 0x14)
		i.atomic = 32;
	if ((op >= 0x0d && op <= 0x12) && op != 0x0e)
		i.aeth = 8;
	if (op == 0x12)
		i.ack = 8;
	if (op == 0x03 || op == 0x05 || op == 0x09 || op == 0x0b)
		i.imm = 4;
	/* Flag 0x20: a request carrying an AETH after its RETH/AtomicETH. */
	if (flags & 0x20) {
		if (op_request(op) && !uc)
			i.aeth = 8;
		else
			i.bad_aeth = true;
	}
	return i;
}

static u32 info_len(const struct op_info *i)
{
	return 20 + i->reth + i->atomic + i->aeth + i->ack + i->imm + i->ieth;
}

static u32 get32(const u8 *p)
{
	return (u32)p[0] << 24 | (u32)p[1] << 16 | (u32)p[2] << 8 | p[3];
}

static void put32(u8 *p, u32 v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static void put64(u8 *p, u64 v)
{
	put32(p, v >> 32);
	put32(p + 4, (u32)v);
}

u32 trdma_model_build(const struct trdma_wire_hdr *h, u8 *buf)
{
	u8 op = h->uc ? h->opcode + 0x20 : h->opcode;
	struct op_info i = op_info(op, h->flags);
	u8 *p = buf + 20;

	if (!i.known || i.bad_aeth || (h->uc && !op_uc(op)))
		return 0;
	memset(buf, 0, TRDMA_MAX_HDR);
	buf[0] = op;
	buf[1] = h->flags;
	put32(buf + 4, h->dest_qpn);
	put32(buf + 8, h->msn);
	put32(buf + 12, h->offset);
	put32(buf + 16, h->length);
	if (i.reth) {
		put64(p, h->va);
		put32(p + 8, h->rkey);
		put32(p + 12, h->dma_len);
		p += i.reth;
	}
	if (i.atomic) {
		put64(p, h->va);
		put32(p + 8, h->rkey);
		put64(p + 16, h->swap_add);
		put64(p + 24, h->compare);
		p += i.atomic;
	}
	if (i.aeth) {
		p[0] = h->syndrome;
		put32(p + 4, h->aeth_msn);
		p += i.aeth;
	}
	if (i.ack) {
		put64(p, h->orig);
		p += i.ack;
	}
	if (i.imm) {
		memcpy(p, &h->imm, 4);
		p += i.imm;
	}
	if (i.ieth) {
		put32(p, h->inv_rkey);
		p += i.ieth;
	}
	return p - buf;
}

static bool all_zero(const u8 *p, size_t n)
{
	while (n--)
		if (*p++)
			return false;
	return true;
}

enum trdma_wire_err trdma_model_hdr_verdict(const u8 *buf, size_t len)
{
	struct op_info i;
	const u8 *ext;
	u32 length;

	if (len < 20)
		return TRDMA_WIRE_SHORT;
	i = op_info(buf[0], buf[1]);
	if (!i.known)
		return TRDMA_WIRE_OPCODE;
	if (i.bad_aeth)
		return TRDMA_WIRE_AETH;
	if (len < info_len(&i))
		return TRDMA_WIRE_SHORT;
	if ((buf[1] & 0x1f) || buf[2] || buf[3])
		return TRDMA_WIRE_RESERVED;
	/* A UC request asks for no ACK. */
	if (op_uc(buf[0]) && (buf[1] & 0x40))
		return TRDMA_WIRE_RESERVED;
	if (buf[4])
		return TRDMA_WIRE_QPN;
	length = get32(buf + 16);
	if (length > 65536)
		return TRDMA_WIRE_LENGTH;
	if (length && !i.payload)
		return TRDMA_WIRE_PAYLOAD;
	if (get32(buf + 12) && i.first)
		return TRDMA_WIRE_OFFSET;
	ext = buf + 20;
	if (i.reth && length > get32(ext + 12))
		return TRDMA_WIRE_LENGTH;
	/* ATOMIC_WRITE: exactly 8 bytes, announced and carried. */
	if (buf[0] == 0x1d && (length != 8 || get32(ext + 12) != 8))
		return TRDMA_WIRE_LENGTH;
	if (i.atomic && !all_zero(ext + 12, 4))
		return TRDMA_WIRE_RESERVED;
	ext += i.reth + i.atomic;
	if (i.aeth && !all_zero(ext + 1, 3))
		return TRDMA_WIRE_RESERVED;
	/* A request carries a plain ACK only. */
	if ((buf[1] & 0x20) && ext[0])
		return TRDMA_WIRE_AETH;
	return TRDMA_WIRE_OK;
}

/* Offsets in struct trdma_sqe and struct trdma_rqe (trdma-abi.h). */
#define SQE_OPCODE	8
#define SQE_FLAGS	9
#define SQE_NUM_SGE	10
#define SQE_INLINE_LEN	12
#define SQE_SGE		48
#define SGE_SIZE	16
#define SGE_LENGTH	8

static u32 host32(const u8 *p)
{
	u32 v;

	memcpy(&v, p, sizeof(v));
	return v;
}

enum ib_wc_status trdma_model_sqe_verdict(const u8 *slot,
					  const struct trdma_slot_limits *lim,
					  u32 *len)
{
	u64 size = lim->slot_size, total = 0, inl;
	u8 op, flags, n;
	bool inline_;
	u32 k;

	if (size < SQE_SGE)
		return IB_WC_LOC_QP_OP_ERR;
	op = slot[SQE_OPCODE];
	flags = slot[SQE_FLAGS];
	n = slot[SQE_NUM_SGE];
	inline_ = flags & 0x04;
	if (flags & 0xf0)
		return IB_WC_LOC_QP_OP_ERR;
	switch (op) {
	case IB_UVERBS_WR_RDMA_WRITE:
	case IB_UVERBS_WR_RDMA_WRITE_WITH_IMM:
	case IB_UVERBS_WR_SEND:
	case IB_UVERBS_WR_SEND_WITH_IMM:
	case IB_UVERBS_WR_SEND_WITH_INV:
		break;
	case IB_UVERBS_WR_LOCAL_INV:
	case IB_UVERBS_WR_BIND_MW:
	case 0x20:	/* the kernel's IB_WR_REG_MR */
		if (inline_ || n)
			return IB_WC_LOC_QP_OP_ERR;
		*len = 0;
		return IB_WC_SUCCESS;
	case IB_UVERBS_WR_RDMA_READ:
		if (inline_)
			return IB_WC_LOC_QP_OP_ERR;
		break;
	case 15:	/* atomic write: its 8 bytes in the WQE */
		if (inline_ || n)
			return IB_WC_LOC_QP_OP_ERR;
		*len = 8;
		return IB_WC_SUCCESS;
	case IB_UVERBS_WR_ATOMIC_CMP_AND_SWP:
	case IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD:
		if (inline_ || n != 1 || size < SQE_SGE + SGE_SIZE ||
		    host32(slot + SQE_SGE + SGE_LENGTH) != 8)
			return IB_WC_LOC_QP_OP_ERR;
		break;
	default:
		return IB_WC_LOC_QP_OP_ERR;
	}
	if (inline_) {
		inl = host32(slot + SQE_INLINE_LEN);
		if (inl > lim->max_inline || SQE_SGE + inl > size)
			return IB_WC_LOC_LEN_ERR;
		*len = (u32)inl;
		return IB_WC_SUCCESS;
	}
	if (n > lim->max_sge || SQE_SGE + (u64)n * SGE_SIZE > size)
		return IB_WC_LOC_QP_OP_ERR;
	for (k = 0; k < n; k++)
		total += host32(slot + SQE_SGE + k * SGE_SIZE + SGE_LENGTH);
	if (total > (1ull << 31))
		return IB_WC_LOC_LEN_ERR;
	*len = (u32)total;
	return IB_WC_SUCCESS;
}

u32 trdma_model_rqe_num_sge(u8 num_sge, const struct trdma_slot_limits *lim)
{
	u64 fit = lim->slot_size < 16 ? 0 : (lim->slot_size - 16) / 16;
	u64 n = num_sge;

	if (n > lim->max_sge)
		n = lim->max_sge;
	if (n > fit)
		n = fit;
	return n > 32 ? 32 : (u32)n;
}

bool trdma_model_hdr_equal(const struct trdma_wire_hdr *a,
			   const struct trdma_wire_hdr *b)
{
	return a->opcode == b->opcode && a->uc == b->uc &&
	       a->flags == b->flags &&
	       a->ext == b->ext && a->syndrome == b->syndrome &&
	       a->hdr_len == b->hdr_len && a->dest_qpn == b->dest_qpn &&
	       a->msn == b->msn && a->offset == b->offset &&
	       a->length == b->length && a->va == b->va &&
	       a->rkey == b->rkey && a->dma_len == b->dma_len &&
	       a->aeth_msn == b->aeth_msn && a->swap_add == b->swap_add &&
	       a->compare == b->compare && a->orig == b->orig &&
	       a->imm == b->imm && a->inv_rkey == b->inv_rkey;
}

void trdma_model_slot_limits(const u8 prefix[TRDMA_MODEL_SLOT_PREFIX],
			     struct trdma_slot_limits *lim)
{
	lim->slot_size = prefix[0] & 0x80 ? prefix[0] & 0x7fu :
					    64u << (prefix[0] & 7);
	lim->max_sge = prefix[1];
	lim->max_inline = prefix[2] | (u32)prefix[3] << 8;
}
