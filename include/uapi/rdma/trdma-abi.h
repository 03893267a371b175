/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR BSD-2-Clause */
/*
 * trdma kernel <-> provider ABI.
 *
 * Shared verbatim by the kernel module (kernel/) and the rdma-core provider
 * (provider/).  Only fixed-width types, explicit padding, no kernel
 * pointers.  Every incompatible change bumps TRDMA_ABI_VERSION, which the
 * kernel publishes as the uverbs ABI version of each trdma device and which
 * the provider checks on device match and again in the ucontext handshake.
 */
#ifndef _UAPI_RDMA_TRDMA_ABI_H
#define _UAPI_RDMA_TRDMA_ABI_H

#include <linux/types.h>

#define TRDMA_ABI_VERSION	3

/* Value of the "hca_type" sysfs attribute of every trdma ib_device. */
#define TRDMA_HCA_TYPE		"trdma"

/* Provider -> kernel: driver data of the GET_CONTEXT command. */
struct trdma_alloc_ucontext_req {
	__u32 abi_version;	/* TRDMA_ABI_VERSION the provider speaks */
	__u32 reserved;		/* must be zero */
};

/* Kernel -> provider: driver data of the GET_CONTEXT response. */
struct trdma_alloc_ucontext_resp {
	__u32 abi_version;	/* TRDMA_ABI_VERSION the kernel speaks */
	__u32 reserved;
};

/*
 * Rings.
 *
 * Every queue (SQ, RQ, SRQ, CQ) is one ring: a control block followed by a
 * power-of-two array of fixed-size slots, mapped into the process with
 * mmap(cmd_fd, key) where key is the mmap key the create response returns
 * (an rdma_user_mmap_entry offset).  Indices are free-running __u32 counters;
 * slot i lives at TRDMA_RING_SLOTS_OFFSET + (i & (num_slots - 1)) * slot_size.
 *
 * The producer and the consumer each own one index, on its own cache line:
 * the producer writes a slot, then publishes prod with a store-release; the
 * consumer reads prod with a load-acquire, reads the slot, then publishes
 * cons with a store-release.
 *
 * The send doorbell is the uverbs POST_SEND command without work requests:
 * the kernel then looks at the SQ ring again.  Receive queues need no
 * doorbell while the QP works: the kernel takes receive WQEs when messages
 * arrive.
 *
 *   ring       producer       consumer
 *   SQ, RQ     provider       kernel
 *   SRQ        provider       kernel
 *   CQ         kernel         provider
 *
 * The kernel never trusts the indices or slots written by user space: it
 * keeps its own copy of the index it owns, treats prod - cons > num_slots as
 * a corrupt ring (the QP or CQ goes to error), and copies each slot once
 * before checking it.
 */
struct trdma_ring_ctrl {
	__u32 prod;		/* written by the producer only */
	__u32 reserved0[15];
	__u32 cons;		/* written by the consumer only */
	__u32 reserved1[15];
	__u32 kflags;		/* TRDMA_RING_F_*, written by the kernel */
	__u32 tx_active;	/* SQ only, written by the kernel: see below */
	__u32 reserved2[14];
};

#define TRDMA_RING_SLOTS_OFFSET	192	/* sizeof(struct trdma_ring_ctrl) */

/*
 * trdma_ring_ctrl.kflags of a QP's SQ and RQ rings.
 *
 * TRDMA_RING_F_ERROR: the QP is in the error state.  Work posted now only
 * flushes, so the provider rings the doorbell after posting to either queue
 * (the uverbs POST_SEND or POST_RECV command without work requests) and the
 * kernel completes what it finds with IBV_WC_WR_FLUSH_ERR.  The provider
 * reads kflags after publishing prod with a full barrier in between; the
 * kernel sets the flag with a full barrier before it reads prod to flush,
 * so no WQE is left behind.
 */
#define TRDMA_RING_F_ERROR	(1U << 0)

/*
 * trdma_ring_ctrl.tx_active of a QP's SQ ring (RC and UC QPs; always 0 on
 * other rings and on kernels before it was defined, where it was
 * reserved).  Nonzero: a kernel transmitter of this QP is running or is
 * queued to run, and before it stops it clears tx_active, issues a full
 * barrier and reads prod again, taking in whatever it finds there as a
 * doorbell would.  So a provider that publishes prod, issues a full
 * barrier and then reads tx_active nonzero (and TRDMA_RING_F_ERROR clear
 * in kflags) needs no doorbell for what it published: either the
 * transmitter's read of prod sees it or the provider's read sees
 * tx_active cleared and rings the doorbell.  A provider may always ring
 * the doorbell regardless.
 */

/* A scatter/gather element of a send or receive WQE. */
struct trdma_sge {
	__aligned_u64 addr;
	__u32 length;
	__u32 lkey;
};

/* trdma_sqe.flags */
enum trdma_wqe_flags {
	TRDMA_WQE_SIGNALED	= 1 << 0,	/* IBV_SEND_SIGNALED */
	TRDMA_WQE_SOLICITED	= 1 << 1,	/* IBV_SEND_SOLICITED */
	TRDMA_WQE_INLINE	= 1 << 2,	/* IBV_SEND_INLINE */
	TRDMA_WQE_FENCE		= 1 << 3,	/* IBV_SEND_FENCE */
};

/* The destination of a UD send WQE (trdma_sqe.ud). */
struct trdma_sqe_ud {
	__u32 remote_qpn;
	__u32 remote_qkey;	/* high bit set: the QP's own Q_Key is used */
};

/*
 * The MR and rights of a BIND_MW send WQE (trdma_sqe.bind, in place of
 * swap).  The rest of the bind: rkey is the window's rkey now, imm_data
 * the rkey it gets (same upper 24 bits, a new key byte), remote_addr and
 * compare_add the address and length of the window.  A type-1 window
 * bound with length 0 is unbound (mr_lkey is then not looked at).
 */
struct trdma_sqe_bind {
	__u32 mr_lkey;		/* the MR the window is bound to */
	__u32 mw_access;	/* IBV_ACCESS_REMOTE_* of the window */
};

/*
 * Send WQE.  opcode is an enum ib_uverbs_wr_opcode value.  With
 * TRDMA_WQE_INLINE the payload (inline_len bytes) is stored in place of the
 * SGE array; otherwise num_sge SGEs follow.  The slot size is
 * 1 << sq_wqe_shift bytes, which bounds both.
 *
 * On a UD QP (SEND and SEND_WITH_IMM only) ah is the number the kernel
 * gave the address handle (struct trdma_create_ah_resp) and ud the
 * destination QP and Q_Key, in place of rkey and remote_addr.
 */
struct trdma_sqe {
	__aligned_u64 wr_id;
	__u8 opcode;
	__u8 flags;
	__u8 num_sge;
	__u8 reserved;
	__u32 inline_len;
	__u32 imm_data;		/* ImmDt (network order) or rkey to invalidate */
	union {
		__u32 rkey;
		__u32 ah;		/* UD */
	};
	union {
		__aligned_u64 remote_addr;
		struct trdma_sqe_ud ud;	/* UD */
	};
	/* atomics: compare or add operand; ATOMIC_WRITE: the 8 bytes */
	__aligned_u64 compare_add;
	union {
		__aligned_u64 swap;	/* atomics: swap operand */
		struct trdma_sqe_bind bind;	/* BIND_MW */
	};
	struct trdma_sge sge[];		/* or the inline payload */
};

/*
 * RDMA ATOMIC WRITE (IBTA 1.5), RC only: trdma_sqe.opcode and the
 * trdma_cqe.opcode of its completion.  The values of IB_UVERBS_WR_ATOMIC_WRITE
 * and IB_UVERBS_WC_ATOMIC_WRITE (Linux 6.2 on; IBV_WR_ATOMIC_WRITE and
 * IBV_WC_ATOMIC_WRITE in rdma-core), which 6.1's headers lack.  The WQE has
 * no SGEs and no inline data: the 8 bytes to write are compare_add's, as the
 * application's buffer held them (no byte order conversion); remote_addr
 * (8-byte aligned) and rkey name the target.
 */
#define TRDMA_WR_ATOMIC_WRITE	15
#define TRDMA_WC_ATOMIC_WRITE	9

/* Receive WQE (RQ and SRQ). */
struct trdma_rqe {
	__aligned_u64 wr_id;
	__u8 num_sge;
	__u8 reserved[7];
	struct trdma_sge sge[];
};

/*
 * Completion.  status and opcode take the values of enum ibv_wc_status and
 * ibv_wc_opcode (identical to the kernel's ib_wc_status and ib_wc_opcode);
 * wc_flags holds TRDMA_CQE_F_* bits, which are those of enum ibv_wc_flags
 * (the kernel's IB_WC_* flags number some of them differently).
 */
#define TRDMA_CQE_F_GRH		(1U << 0)	/* IBV_WC_GRH */
#define TRDMA_CQE_F_WITH_IMM	(1U << 1)	/* IBV_WC_WITH_IMM */
#define TRDMA_CQE_F_WITH_INV	(1U << 3)	/* IBV_WC_WITH_INV */
/*
 * trdma's own, not an ibv_wc_flags bit (the provider drops it): with
 * TRDMA_CQE_F_GRH, the GRH area of the receive buffer holds an IPv6 header
 * (else an IPv4 header in its last 20 bytes), as on a RoCE v2 port.
 */
#define TRDMA_CQE_F_NET_IPV6	(1U << 15)
#define TRDMA_CQE_F_IBV_MASK	(TRDMA_CQE_F_GRH | TRDMA_CQE_F_WITH_IMM | \
				 TRDMA_CQE_F_WITH_INV)

/*
 * The SL a datagram's completion reports: as RoCE NICs (mlx5) do, the L3
 * header type of the packet, 1 for IPv6 and 2 for IPv4, which UCX's UD
 * transport reads to find the destination GID in the GRH area; 0 for a
 * completion without a GRH.
 */
#define TRDMA_WC_SL_IPV6	1
#define TRDMA_WC_SL_IPV4	2

static inline __u8 trdma_cqe_sl(__u16 wc_flags)
{
	if (!(wc_flags & TRDMA_CQE_F_GRH))
		return 0;
	return wc_flags & TRDMA_CQE_F_NET_IPV6 ? TRDMA_WC_SL_IPV6 :
						 TRDMA_WC_SL_IPV4;
}

struct trdma_cqe {
	__aligned_u64 wr_id;
	__u8 status;
	__u8 opcode;
	__u16 wc_flags;
	__u32 vendor_err;
	__u32 byte_len;
	__u32 imm_data;		/* ImmDt (network order) or invalidated rkey */
	__u32 qp_num;
	__u32 src_qp;
};

/* Driver data of CREATE_CQ. */
struct trdma_create_cq_resp {
	__aligned_u64 mmap_key;	/* of the CQ ring */
	__u32 num_slots;	/* power of two; at least the cqe asked for */
	__u32 reserved;
};

/*
 * Driver data of RESIZE_CQ: the new ring, holding the CQEs not consumed
 * yet from slot 0 on (prod = their number, cons = 0).  The provider maps
 * it and unmaps the old ring.
 */
struct trdma_resize_cq_resp {
	__aligned_u64 mmap_key;	/* of the new CQ ring */
	__u32 num_slots;	/* power of two; at least the cqe asked for */
	__u32 reserved;
};

/* Driver data of CREATE_QP. */
struct trdma_create_qp_resp {
	__aligned_u64 sq_mmap_key;
	__aligned_u64 rq_mmap_key;	/* 0 when the QP uses an SRQ */
	__u32 sq_slots;			/* power of two */
	__u32 rq_slots;			/* power of two; 0 with an SRQ */
	__u8 sq_wqe_shift;		/* log2 of the SQ slot size */
	__u8 rq_wqe_shift;		/* log2 of the RQ slot size */
	__u8 reserved[2];
	__u32 max_inline_data;
};

/* Driver data of CREATE_AH. */
struct trdma_create_ah_resp {
	__u32 ah_num;		/* for trdma_sqe.ah; never 0 */
	__u32 reserved;
};

/* Driver data of CREATE_SRQ. */
struct trdma_create_srq_resp {
	__aligned_u64 mmap_key;
	__u32 num_slots;		/* power of two */
	__u8 wqe_shift;			/* log2 of the slot size */
	__u8 reserved[3];
};

#endif /* _UAPI_RDMA_TRDMA_ABI_H */
