/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * trdma: segment headers, the part of their parsing that needs no QP.
 *
 * Shared by the module and the userspace harness (tests/unit, tests/fuzz),
 * where tests/fuzz/kcompat.h stands in for the kernel's types and byte
 * order helpers: nothing here may need more than that.
 */
#ifndef _TRDMA_WIRE_H
#define _TRDMA_WIRE_H

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include "kcompat.h"
#endif
#include <rdma/trdma-wire.h>

/* Largest segment payload a sender puts behind one trdma_bth. */
#define TRDMA_MAX_SEG		(64 * 1024)
/* Largest header of a segment: bth + atomic_eth. */
#define TRDMA_MAX_HDR		64

/* The extension headers an opcode carries (trdma_wire_ext). */
#define TRDMA_EXT_RETH		0x01
#define TRDMA_EXT_AETH		0x02
#define TRDMA_EXT_ATOMIC	0x04	/* AtomicETH */
#define TRDMA_EXT_ATOMIC_ACK	0x08	/* AtomicAckETH */
#define TRDMA_EXT_IMM		0x10	/* ImmDt */
#define TRDMA_EXT_IETH		0x20	/* IETH: the rkey to invalidate */

/* Why trdma_wire_parse refused a header. */
enum trdma_wire_err {
	TRDMA_WIRE_OK,
	TRDMA_WIRE_SHORT,	/* fewer bytes than the header */
	TRDMA_WIRE_OPCODE,	/* unknown opcode */
	TRDMA_WIRE_RESERVED,	/* a reserved field or flag is not zero */
	TRDMA_WIRE_QPN,		/* dest_qpn wider than 24 bits */
	/*
	 * Over TRDMA_MAX_SEG, past a RETH's length, or an ATOMIC_WRITE not
	 * of exactly 8 bytes.
	 */
	TRDMA_WIRE_LENGTH,
	TRDMA_WIRE_PAYLOAD,	/* payload on an opcode that carries none */
	TRDMA_WIRE_OFFSET,	/* a message's first segment not at offset 0 */
	TRDMA_WIRE_AETH,	/* TRDMA_BTH_AETH off a request, or not an ACK */
};

/*
 * A segment header in host byte order.  Only the fields of the extension
 * headers in ext are set; the others are zero.
 */
struct trdma_wire_hdr {
	u8 opcode;		/* enum trdma_opcode; of a UC one, the RC one */
	bool uc;		/* the BTH had a UC opcode (TRDMA_OP_UC) */
	u8 flags;		/* TRDMA_BTH_* */
	u8 ext;			/* TRDMA_EXT_* */
	u8 syndrome;		/* AETH */
	u32 hdr_len;		/* BTH and extension headers, in bytes */
	u32 dest_qpn;
	u32 msn;
	u32 offset;
	u32 length;		/* payload bytes after the header */
	u64 va;			/* RETH, AtomicETH */
	u32 rkey;		/* RETH, AtomicETH */
	u32 dma_len;		/* RETH */
	u32 aeth_msn;		/* AETH */
	u64 swap_add;		/* AtomicETH */
	u64 compare;		/* AtomicETH */
	u64 orig;		/* AtomicAckETH */
	__be32 imm;		/* ImmDt, in network order as a CQE has it */
	u32 inv_rkey;		/* IETH */
};

u32 trdma_wire_ext(u8 opcode);
u32 trdma_hdr_len(u8 opcode, u8 flags);
bool trdma_wire_has_payload(u8 opcode);
bool trdma_wire_starts_msg(u8 opcode);
enum trdma_wire_err trdma_wire_parse(const void *buf, u32 len,
				     struct trdma_wire_hdr *h);

#endif /* _TRDMA_WIRE_H */
