/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR BSD-2-Clause */
/*
 * trdma wire format: what one trdma endpoint sends the other inside the TCP
 * byte stream of a QP's connection.  All fields are big-endian.  See
 * docs/wire.md for the byte diagrams and the rules.
 *
 * A connection starts with one struct trdma_hello in each direction (the
 * connecting side's TRDMA_HELLO_REQ, then the accepting side's ACCEPT or
 * REJECT).  After that the stream is a sequence of segments, each a
 * struct trdma_bth, the extension headers its opcode calls for, in the
 * order RETH/AtomicETH, AETH, AtomicAckETH, ImmDt/IETH, then bth.length
 * payload bytes.
 */
#ifndef _UAPI_RDMA_TRDMA_WIRE_H
#define _UAPI_RDMA_TRDMA_WIRE_H

#include <linux/types.h>

#define TRDMA_WIRE_VERSION	4
#define TRDMA_DEFAULT_PORT	4791
#define TRDMA_HELLO_MAGIC	0x5452444dU	/* "TRDM" */

enum trdma_hello_type {
	TRDMA_HELLO_REQ = 1,
	TRDMA_HELLO_ACCEPT = 2,
	TRDMA_HELLO_REJECT = 3,
};

/* trdma_hello.flags */
#define TRDMA_HELLO_SQ_PSN	0x0001	/* REQ: sq_psn is the sender's */
/*
 * The sender's QP is a UC QP (REQ and ACCEPT): a connection binds a UC QP
 * only to a UC QP, an RC QP only to an RC QP.
 */
#define TRDMA_HELLO_UC		0x0002
/*
 * The sender's device encrypts its links (kernel TLS, docs/security.md;
 * REQ and ACCEPT): TRDMA_HELLO_NONCE_LEN fresh random bytes follow the
 * hello, and from the byte after them each direction is a TLS 1.3 record
 * stream with keys derived from the device key, both nonces and the
 * SHA-256 of both hellos as sent (REQ and nonce, then ACCEPT and nonce).
 * Each direction's first record is its sender's 32-byte key confirmation;
 * a connection binds to its QP once the peer's is checked (wire version
 * 4).  A device that encrypts binds only to a peer that does, and the
 * other way round.
 */
#define TRDMA_HELLO_TLS		0x0004
#define TRDMA_HELLO_NONCE_LEN	32

struct trdma_hello {
	__be32 magic;
	__u8 version;
	__u8 type;		/* enum trdma_hello_type */
	__be16 flags;		/* TRDMA_HELLO_* */
	__be32 src_qpn;
	__be32 dst_qpn;
	__be32 start_msn;	/* the MSN the sender expects first: its rq_psn */
	__u8 path_mtu;		/* enum ib_mtu */
	__u8 max_rd_atomic;	/* READs/atomics the sender may have outstanding */
	__u8 max_dest_rd_atomic; /* ... the sender will accept outstanding */
	__u8 reserved1;
	__be32 status;		/* REJECT: a positive errno value */
	__be32 sq_psn;		/* REQ with TRDMA_HELLO_SQ_PSN: the sender's */
	__u8 src_gid[16];
	__u8 dst_gid[16];
};

/*
 * Opcodes: the values of the RoCE (IBA RC and UC) opcodes.  A UC QP's
 * requests are SENDs and WRITEs only, with the UC opcodes: TRDMA_OP_UC
 * plus the RC opcode.  Nothing answers them: no ACK, NAK or response.
 */
#define TRDMA_OP_UC		0x20

enum trdma_opcode {
	TRDMA_OP_SEND_FIRST = 0x00,
	TRDMA_OP_SEND_MIDDLE = 0x01,
	TRDMA_OP_SEND_LAST = 0x02,
	TRDMA_OP_SEND_LAST_IMM = 0x03,
	TRDMA_OP_SEND_ONLY = 0x04,
	TRDMA_OP_SEND_ONLY_IMM = 0x05,
	TRDMA_OP_WRITE_FIRST = 0x06,
	TRDMA_OP_WRITE_MIDDLE = 0x07,
	TRDMA_OP_WRITE_LAST = 0x08,
	TRDMA_OP_WRITE_LAST_IMM = 0x09,
	TRDMA_OP_WRITE_ONLY = 0x0a,
	TRDMA_OP_WRITE_ONLY_IMM = 0x0b,
	TRDMA_OP_READ_REQUEST = 0x0c,
	TRDMA_OP_READ_RESPONSE_FIRST = 0x0d,
	TRDMA_OP_READ_RESPONSE_MIDDLE = 0x0e,
	TRDMA_OP_READ_RESPONSE_LAST = 0x0f,
	TRDMA_OP_READ_RESPONSE_ONLY = 0x10,
	TRDMA_OP_ACK = 0x11,
	TRDMA_OP_ATOMIC_ACK = 0x12,
	TRDMA_OP_COMPARE_SWAP = 0x13,
	TRDMA_OP_FETCH_ADD = 0x14,
	/* The last segment of a SEND_WITH_INV: an IETH follows the BTH. */
	TRDMA_OP_SEND_LAST_INV = 0x16,
	TRDMA_OP_SEND_ONLY_INV = 0x17,
	/*
	 * RC ATOMIC WRITE: a RETH (dma_len 8, va 8-byte aligned), then 8
	 * payload bytes (length 8), which the responder stores at va with
	 * one aligned 64-bit store.  Answered by an ACK, as a WRITE.
	 */
	TRDMA_OP_ATOMIC_WRITE = 0x1d,
	/* UC requests (TRDMA_OP_UC | the RC opcode); never TRDMA_BTH_ACKREQ. */
	TRDMA_OP_UC_SEND_FIRST = 0x20,
	TRDMA_OP_UC_SEND_MIDDLE = 0x21,
	TRDMA_OP_UC_SEND_LAST = 0x22,
	TRDMA_OP_UC_SEND_LAST_IMM = 0x23,
	TRDMA_OP_UC_SEND_ONLY = 0x24,
	TRDMA_OP_UC_SEND_ONLY_IMM = 0x25,
	TRDMA_OP_UC_WRITE_FIRST = 0x26,
	TRDMA_OP_UC_WRITE_MIDDLE = 0x27,
	TRDMA_OP_UC_WRITE_LAST = 0x28,
	TRDMA_OP_UC_WRITE_LAST_IMM = 0x29,
	TRDMA_OP_UC_WRITE_ONLY = 0x2a,
	TRDMA_OP_UC_WRITE_ONLY_IMM = 0x2b,
	/* UD datagrams (struct trdma_bth, struct trdma_deth, [ImmDt]). */
	TRDMA_OP_UD_SEND_ONLY = 0x64,
	TRDMA_OP_UD_SEND_ONLY_IMM = 0x65,
};

/* trdma_bth.flags */
#define TRDMA_BTH_SE		0x80	/* solicited event */
#define TRDMA_BTH_ACKREQ	0x40	/* acknowledge this message promptly */
/*
 * A request segment (SEND, WRITE, READ request, atomic) that carries an
 * AETH, after its RETH or AtomicETH: the sender's acknowledgment of the
 * receiver's requests riding along with a request of its own, as an ACK
 * segment's would (syndrome TRDMA_AETH_ACK only; a NAK always travels in
 * an ACK segment of its own).  Saves a segment when both sides send.
 */
#define TRDMA_BTH_AETH		0x20

/*
 * Base transport header, at the start of every segment.  msn numbers the
 * requester's messages (from the start_msn of its hello, one per SEND,
 * WRITE, READ, atomic or atomic write); responses and ACKs carry the msn
 * of the request they answer.  offset is where this segment's payload sits in the message;
 * length is the payload byte count.
 */
struct trdma_bth {
	__u8 opcode;		/* enum trdma_opcode */
	__u8 flags;		/* TRDMA_BTH_* */
	__be16 reserved;
	__be32 dest_qpn;	/* 24 bits */
	__be32 msn;
	__be32 offset;
	__be32 length;
};

/*
 * RDMA extended transport header: WRITE FIRST/ONLY, READ requests and
 * ATOMIC_WRITE.
 */
struct trdma_reth {
	__be64 va;
	__be32 rkey;
	__be32 dma_len;		/* whole message length */
};

/*
 * ACK extended transport header: ACK, READ response FIRST/LAST/ONLY, and
 * requests with TRDMA_BTH_AETH.
 */
struct trdma_aeth {
	__u8 syndrome;		/* enum trdma_syndrome */
	__u8 reserved[3];
	__be32 msn;		/* last request completed by the responder */
};

enum trdma_syndrome {
	TRDMA_AETH_ACK = 0x00,
	TRDMA_AETH_RNR_NAK = 0x20,	/* low 5 bits: RNR timer code */
	TRDMA_AETH_NAK_INV_REQ = 0x61,
	TRDMA_AETH_NAK_REM_ACCESS = 0x62,
	TRDMA_AETH_NAK_REM_OP = 0x63,
};

/* Atomic extended transport header: COMPARE_SWAP and FETCH_ADD. */
struct trdma_atomic_eth {
	__be64 va;		/* 8-byte aligned */
	__be32 rkey;
	__be32 reserved;
	__be64 swap_add;	/* the value to swap in, or to add */
	__be64 compare;		/* COMPARE_SWAP: the value to compare with */
};

/* Atomic acknowledge extended transport header: ATOMIC_ACK. */
struct trdma_atomic_ack_eth {
	__be64 orig;		/* the target's value before the operation */
};

/*
 * Immediate data (ImmDt) or, on SEND_LAST_INV and SEND_ONLY_INV, the
 * invalidate extended transport header (IETH): the rkey of an MR of the
 * responder that the responder invalidates before it completes the SEND.
 */
struct trdma_immdt {
	__be32 data;
};

/*
 * UD datagrams.
 *
 * A UD or GSI (QP1) send is one UDP datagram to TRDMA_DEFAULT_UD_PORT (the
 * module parameter ud_port) of the IP address the destination GID names,
 * from the address the source GID names: a struct trdma_bth (opcode
 * TRDMA_OP_UD_SEND_ONLY or _IMM, flags TRDMA_BTH_SE at most, msn counting
 * the sender QP's datagrams, offset 0, length the payload bytes), a
 * struct trdma_deth, the ImmDt for _IMM, then the payload: at most the
 * port's active MTU.  Anything else is dropped and counted.  Not the RoCE
 * port (4791), which rdma_rxe and RoCE NICs own.
 */
#define TRDMA_DEFAULT_UD_PORT	4792

/* Datagram extended transport header. */
struct trdma_deth {
	__be32 qkey;
	__be32 src_qpn;		/* 24 bits */
};

/*
 * The trdma TCP option: an RFC 6994 shared experimental option (kind 254,
 * 16-bit ExID) on every TCP segment that carries bytes of a trdma segment
 * (everything after the hellos).  It names the trdma segment the TCP
 * segment's first payload byte belongs to: the opcode, destination QPN and
 * MSN of its BTH, and where that BTH starts in the byte stream, as an
 * offset from the sender's initial sequence number (ISN): the first byte
 * after the SYN has offset 1, like Wireshark's relative sequence numbers.
 * ISN-relative, never absolute, because middleboxes rewrite sequence
 * numbers.  The option is the same on every TCP segment of one trdma
 * segment, and a trdma segment never shares a TCP segment with another, so
 * one packet alone tells which message it carries and where:
 *	payload offset in the trdma segment = relative seq - tcpopt.offset
 * The sender leaves the option off where TCP's own options leave no room.
 */
#define TRDMA_TCPOPT_KIND	254
#define TRDMA_TCPOPT_EXID	0x7464	/* "td"; experimental, not assigned */
#define TRDMA_TCPOPT_LEN	16

struct trdma_tcp_opt {
	__u8 kind;		/* TRDMA_TCPOPT_KIND */
	__u8 len;		/* TRDMA_TCPOPT_LEN */
	__be16 exid;		/* TRDMA_TCPOPT_EXID */
	__be32 op_qpn;		/* BTH opcode << 24 | BTH dest_qpn */
	__be32 msn;		/* BTH msn */
	__be32 offset;		/* first byte of the BTH, from the ISN */
};

#endif /* _UAPI_RDMA_TRDMA_WIRE_H */
