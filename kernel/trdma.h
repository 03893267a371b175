/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * trdma: RDMA verbs over the kernel's TCP stack.
 *
 * Core definitions shared by every file of the module.
 */
#ifndef _TRDMA_H
#define _TRDMA_H

#include <linux/hrtimer.h>
#include <linux/interrupt.h>
#include <linux/kthread.h>
#include <linux/list.h>
#include <linux/netdevice.h>
#include <linux/spinlock.h>
#include <linux/tcp.h>
#include <linux/xarray.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_verbs.h>

#include <rdma/trdma-abi.h>
#include <rdma/trdma-wire.h>

#include "trdma_compat.h"
#include "trdma_slot.h"
#include "trdma_wire.h"

#define TRDMA_NODE_DESC		"trdma"
#define TRDMA_VENDOR_ID		0xffffff	/* no OUI: like rxe, unassigned */
#define TRDMA_VENDOR_PART_ID	0x7464		/* "td" */
#define TRDMA_HW_REV		1
#define TRDMA_PKEY_TBL_LEN	1
#define TRDMA_GID_TBL_LEN	64

/*
 * Bytes a path MTU worth of payload is wrapped in on the wire: IPv6 (the
 * larger of the two IP headers), TCP with timestamps and the trdma TCP
 * option, and the in-band trdma header.  Used to derive the port's
 * active_mtu from the netdev MTU the way a RoCE port does.
 */
#define TRDMA_WIRE_OVERHEAD	(40 + 20 + 12 + 20 + 32)

/* An MR key: the index in trdma_dev.mr_xa above a key byte. */
#define TRDMA_KEY_BITS		8
#define TRDMA_KEY_MASK		((1u << TRDMA_KEY_BITS) - 1)
#define TRDMA_MAX_MR_INDEX	((1u << (32 - TRDMA_KEY_BITS)) - 1)
/* Pages of one fast registration (max_fast_reg_page_list_len). */
#define TRDMA_MAX_FR_PAGES	512
#define TRDMA_MIN_QPN		16
#define TRDMA_MAX_QPN		((1u << 24) - 1)

/*
 * Resource limits, set once at load time through module parameters
 * (trdma_main.c).  query_device reports them and every create verb
 * enforces them.
 */
struct trdma_limits {
	unsigned int max_qp;
	unsigned int max_qp_wr;
	unsigned int max_sge;
	unsigned int max_inline;
	unsigned int max_cq;
	unsigned int max_cqe;
	unsigned int max_mr;
	unsigned int max_pd;
	unsigned int max_srq;
	unsigned int max_srq_wr;
	unsigned int max_ah;
	unsigned int max_qp_rd_atom;
	unsigned long long max_mr_size;
};

extern struct trdma_limits trdma_limits;

/* Port counters, shown by `rdma statistic` (trdma_verbs.c names them). */
enum trdma_counter {
	TRDMA_CNT_TX_SEGMENTS,
	TRDMA_CNT_TX_BYTES,
	TRDMA_CNT_RX_SEGMENTS,
	TRDMA_CNT_RX_BYTES,
	TRDMA_CNT_ACKS_SENT,
	TRDMA_CNT_ACKS_CARRIED,
	TRDMA_CNT_NAKS_SENT,
	TRDMA_CNT_RNR_NAKS_SENT,
	TRDMA_CNT_RNR_RETRIES,
	TRDMA_CNT_REMOTE_ERRORS,
	TRDMA_CNT_MALFORMED,
	TRDMA_CNT_CONNECTIONS,
	TRDMA_CNT_CONNECT_FAILURES,
	TRDMA_CNT_QP_FATAL,
	TRDMA_CNT_TCPOPT_TAGGED,
	TRDMA_CNT_TCPOPT_LEFT_OFF,
	TRDMA_CNT_TCPOPT_NO_RECORD,
	TRDMA_CNT_TCPOPT_SPAN,
	TRDMA_CNT_TCPOPT_NO_ROOM,
	TRDMA_CNT_TCPOPT_UNFIT,
	TRDMA_CNT_TCPOPT_AGREE,
	TRDMA_CNT_TCPOPT_DISAGREE,
	TRDMA_CNT_TX_FROM_RX,
	TRDMA_CNT_TX_CORKED,
	TRDMA_CNT_UD_TX,
	TRDMA_CNT_UD_TX_DROPPED,
	TRDMA_CNT_UD_RX,
	TRDMA_CNT_UD_RX_MALFORMED,
	TRDMA_CNT_UD_RX_NO_QP,
	TRDMA_CNT_UD_RX_QKEY,
	TRDMA_CNT_UD_RX_NO_RQE,
	TRDMA_CNT_UD_RX_TOO_LONG,
	TRDMA_CNT_REFUSED,
	TRDMA_CNT_REFUSED_SOURCE,
	TRDMA_CNT_REFUSED_PSN,
	TRDMA_CNT_REFUSED_UNKEYED,
	TRDMA_CNT_FAST_REG,
	TRDMA_CNT_LOCAL_INV,
	TRDMA_CNT_REMOTE_INV,
	TRDMA_CNT_MW_BIND,
	TRDMA_CNT_MW_INV,
	TRDMA_CNT_UC_RX_DROPPED,
	TRDMA_CNT_FRAGS_RELEASED,
	TRDMA_CNT_REFUSED_TLS,
	TRDMA_CNT_TLS_CONNECTIONS,
	TRDMA_CNT_TLS_RX_ERRORS,
	TRDMA_CNT_REFUSED_TLS_CONFIRM,
	TRDMA_CNT_ODP_RX_FAULTS,
	TRDMA_CNT_ODP_INVAL,
	TRDMA_CNT_ODP_IMR_CHILDREN,
	TRDMA_CNT_DMABUF_MAPS,
	TRDMA_CNT_DMABUF_MOVES,
	TRDMA_CNT_RX_FAULT_STALLS,
	TRDMA_CNT_SQ_DOORBELLS,
	TRDMA_CNT_TX_DEFERRED,
	TRDMA_CNT_TX_FROM_TIMER,
	TRDMA_CNT_ACK_TIMER_ARMED,
	TRDMA_CNT_ACK_TIMER_CANCELLED,
	TRDMA_CNT_TX_BACKLOG_FLUSHES,
	TRDMA_NUM_COUNTERS
};

/* Objects a device has; each bounded by its trdma_limits entry. */
struct trdma_counts {
	atomic_t pd;
	atomic_t mr;
	atomic_t cq;
	atomic_t qp;
	atomic_t srq;
	atomic_t ah;
};

/*
 * What trdma has in one network namespace (net_generic storage of
 * trdma_net_ops, trdma_main.c): the RC listener on TCP port 4791, the
 * UD/QP1 datagram sockets and the netfilter hook of the trdma TCP option.
 * Set up by the first device whose netdev is in the namespace, torn down
 * with the last one (the hook: once the last closing connection is
 * released too, see closings), and by the namespace's exit at the latest:
 * the sockets are kernel sockets, which hold no reference on their
 * namespace.
 * users and the sockets are under trdma_net_lock (trdma_main.c); a device
 * holds one count from newlink to dealloc_driver, so while it lives they
 * stay.
 */
struct trdma_net {
	struct net *net;
	u32 users;			/* devices in the namespace */
	struct socket *listen;		/* RC listener (trdma_cm.c) */
	void (*listen_saved_data_ready)(struct sock *sk);
	struct work_struct accept_work;
	struct socket *ud_sock4;	/* datagrams (trdma_ud.c) */
	struct socket *ud_sock6;	/* NULL without IPv6 */
	bool hooks;			/* option hook registered (tcpopt) */
	/*
	 * Connections of the namespace closing on after their QPs let go
	 * (trdma_cm.c's struct trdma_closing): each keeps the option hook
	 * registered until it is released, after the last device too.  Taken
	 * while a device counts in users; the last put, under trdma_net_lock,
	 * takes the hook away where no device is left.
	 */
	atomic_t closings;
};

/*
 * One trdma device per bound netdev.
 *
 * Lifetime: allocated by trdma_newlink() with ib_alloc_device(), owned by the
 * RDMA core from a successful ib_register_device() on, and freed by the core
 * after ops.dealloc_driver (trdma_dealloc_driver), which drops the netdev
 * reference and removes the device from trdma_dev_list.
 */
struct trdma_dev {
	struct ib_device ibdev;

	/* Held (netdev_hold) from newlink until dealloc_driver. */
	struct net_device *netdev;
	netdevice_tracker netdev_tracker;
	/*
	 * The netdev's namespace at newlink, where the device's connections
	 * and datagrams live; no reference: the namespace's exit removes the
	 * device first (trdma_net_exit()).  A netdev that changes namespace
	 * unregisters, and the device goes with it.
	 */
	struct net *net;
	struct trdma_net *tnet;

	/*
	 * On trdma_dev_list: changed under trdma_dev_lock, walked under it or
	 * under RCU (the datagram receive path).
	 */
	struct list_head list;
	/* Netdev is being unregistered; protected by trdma_dev_lock. */
	bool netdev_gone;

	/*
	 * Port state last reported through an async event.  Written only by
	 * the netdev notifier and by newlink, both under RTNL.
	 */
	enum ib_port_state reported_state;

	/* MR index -> struct trdma_mr; lookups under RCU or the xa lock. */
	struct xarray mr_xa;
	u32 mr_next;		/* xa_alloc_cyclic cursor, under xa lock */
	atomic_t mr_key;	/* source of key bytes */
	atomic64_t qp_uid;	/* source of trdma_qp.uid */

	/*
	 * QPN -> struct trdma_qp.  A BH lock: the datagram receive path looks
	 * QPs up in softirq (trdma_qp_get).
	 */
	struct xarray qp_xa;
	u32 qp_next;		/* xa_alloc_cyclic cursor, under xa lock */

	/*
	 * AH number -> struct trdma_ah, for UD send WQEs.  An IRQ lock:
	 * create_ah and destroy_ah may be called in any context.
	 */
	struct xarray ah_xa;
	u32 ah_next;		/* xa_alloc_cyclic cursor, under xa lock */

	struct trdma_counts counts;
	atomic64_t counters[TRDMA_NUM_COUNTERS];

	/*
	 * TCP settings of this device's connections, set through sysfs and
	 * applied to each new connection; under knob_lock.
	 */
	spinlock_t knob_lock;		/* see above */
	char tcp_cc[16];		/* congestion control; "" = default */
	int tcp_sndbuf;			/* bytes; 0 = autotuning */
	int tcp_rcvbuf;			/* bytes; 0 = autotuning */
	bool tcp_nodelay;
	/*
	 * QPs whose transmitter went idle holding a socket page fragment,
	 * and the work that returns the pages (trdma_idle.c, which has the
	 * locking rules).
	 */
	spinlock_t frag_lock;		/* see trdma_idle.c */
	struct list_head frag_qps;
	struct delayed_work frag_work;

	/* The link key (trdma_key.c); 0 bytes: no key.  Never read back. */
	u8 md5_keylen;
	u8 md5_key[TCP_MD5SIG_MAXKEYLEN];
	/*
	 * Encrypted links (trdma_tls.c): kernel TLS with keys derived from
	 * md5_key, which still signs every segment with TCP-MD5.  Under
	 * knob_lock with the key.
	 */
	bool tls;
};

struct trdma_ucontext {
	struct ib_ucontext ibucontext;
};

struct trdma_pd {
	struct ib_pd ibpd;
};

/*
 * A memory region.  Lookups by key take a reference (trdma_mr_get); dereg
 * removes the key from mr_xa, so no new reference can be taken, then waits
 * until every holder has dropped its own before unpinning the memory.
 */
struct trdma_mr {
	struct ib_mr ibmr;
	struct ib_umem *umem;	/* NULL for the DMA MR (kernel addresses) */
	struct page **pages;	/* of umem, in order */
	u32 npages;
	u32 index;		/* in mr_xa: the key's upper 24 bits */
	/*
	 * The key lookups compare (trdma_mr_get): the MR's lkey/rkey, or, for
	 * a fast-reg MR, the key of its last REG_MR while it is valid and 0
	 * (no key has index 0) while it is not.  Written with release after
	 * the registration it guards, read with acquire after a reference.
	 */
	u32 key;
	/*
	 * Fast registration (IB_MR_TYPE_MEM_REG, the only type alloc_mr
	 * makes).  map_mr_sg fills fr_map (fr_nmap addresses of page_size
	 * blocks: kernel virtual addresses, the DMA addresses of a device
	 * without a DMA device); IB_WR_REG_MR copies them into fr_live,
	 * with ibmr's iova, length and page size into iova, length and
	 * fr_shift, and sets access and key.  REG_MR takes only an invalid
	 * MR that no one holds a reference to, so fr_live, iova, length and
	 * access never change under a reader that found the MR valid.  Both
	 * arrays hold max_pages entries.  REG_MR, LOCAL_INV and remote
	 * invalidation serialize on fr_lock.
	 */
	bool fast;
	u32 max_pages;
	u32 fr_nmap;		/* entries in fr_map; owned by map_mr_sg */
	u32 fr_shift;		/* log2 of the page size of fr_live */
	u32 reg_key;		/* key of the last REG_MR; under fr_lock */
	u64 *fr_map;
	u64 *fr_live;
	spinlock_t fr_lock;	/* REG_MR, LOCAL_INV, remote invalidation */
	u64 iova;
	u64 length;
	int access;		/* IB_ACCESS_* */
	refcount_t ref;
	struct completion released;
	struct rcu_head rcu;
	/*
	 * Memory windows.  A window is a trdma_mr of its own in mr_xa (its
	 * index is its rkey's upper 24 bits) whose key stays 0, so that
	 * trdma_mr_get() never returns it: a window's rkey is no lkey.  Its
	 * state is under fr_lock: mw_key (the rkey in effect, 0 while
	 * unbound: a type-1 window that was never bound or was bound with
	 * length 0, a type-2 window that is free), mw_mr (the MR it is
	 * bound to, whose reference it holds), mw_qp_uid (type 2: the uid of
	 * the QP it is bound to), and iova, length and access of the binding.
	 * trdma_rkey_get() resolves a window's rkey, under the window's
	 * fr_lock, to its MR, taking a reference on that MR.
	 *
	 * On an MR, num_mw counts the windows bound to it and dying is set
	 * by dereg when none is; both under the MR's fr_lock, which is never
	 * taken with a window's fr_lock held (nor the other way round).
	 */
	u8 mw_type;		/* 0: an MR; IB_MW_TYPE_1 or IB_MW_TYPE_2 */
	u32 mw_key;
	u64 mw_qp_uid;
	struct trdma_mr *mw_mr;
	u32 num_mw;
	bool dying;
	/*
	 * On-demand paging (IB_ACCESS_ON_DEMAND; umem is then odp's).  A
	 * page is present while odp->dma_list holds it (set and cleared
	 * under odp->umem_mutex; with no DMA device the entry is the page's
	 * kernel address and its access bits).  Readers in any context look
	 * an entry up and take a reference on its page under odp_lock, and
	 * never a page inside [inv_lo, inv_hi): the range an invalidation is
	 * unmapping (trdma_odp_invalidate() sets it under odp_lock before,
	 * and clears it after).  So a page is referenced before the
	 * invalidation returns or not at all, and no reader uses a page the
	 * process has given back after its last reference goes.  A reader
	 * that writes the page counts in odp_writers from the lookup to
	 * trdma_mr_page_put(), and takes no page at all while an
	 * invalidation is under way; the invalidation waits (odp_wq) until
	 * odp_writers is 0 before it unmaps, so no write lands in a page
	 * after the process gave it back (after a fork's copy-on-write, a
	 * writeback or MADV_DONTNEED).  Readers that only read (transmit)
	 * may still send what a page held when it was unmapped.  The
	 * receive path cannot fault: it asks odp_work for [want_lo,
	 * want_hi) (under odp_lock, the work holds an MR reference) and a
	 * range it failed to fault in is [bad_lo, bad_hi).
	 */
	struct ib_umem_odp *odp;
	spinlock_t odp_lock;	/* dma_list lookups, inv_*, want_*, bad_* */
	unsigned long inv_lo, inv_hi;
	atomic_t odp_writers;
	wait_queue_head_t odp_wq;
	unsigned long want_lo, want_hi;
	unsigned long bad_lo, bad_hi;
	struct work_struct odp_work;
	/*
	 * An implicit ODP MR (the whole user address space, trdma_odp.c):
	 * odp is then the implicit root, which maps nothing, and the pages
	 * are in children, one ib_umem_odp per TRDMA_IMR_CHILD_SIZE chunk,
	 * each made on first use and kept until dereg; iova is 0 and length
	 * the end of the user address space.  NULL for any other MR.
	 */
	struct trdma_imr *imr;
	/* A dma-buf MR's attachment and mapping (trdma_dmabuf.c). */
	struct trdma_dmabuf *dmabuf;
};

/* A memory window: the ib_mw and its trdma_mr in mr_xa (see above). */
struct trdma_mw {
	struct ib_mw ibmw;
	struct trdma_mr *m;
};

/*
 * Ring memory: one zeroed vmalloc area, the control block followed by the
 * slots.  For a user object it is owned by its mmap entry and freed by
 * mmap_free once the object is gone and the last mapping is unmapped; for a
 * kernel object it is freed with the object.
 */
struct trdma_ring {
	struct trdma_ring_ctrl *ctrl;
	void *slots;
	u32 num_slots;		/* power of two */
	u32 slot_shift;		/* log2 of the slot size */
	struct rdma_user_mmap_entry *mmap;	/* user rings only */
};

struct trdma_mmap_entry {
	struct rdma_user_mmap_entry rdma;
	void *vaddr;
	size_t size;
};

static inline void *trdma_ring_slot(struct trdma_ring *r, u32 idx)
{
	return r->slots + ((size_t)(idx & (r->num_slots - 1)) << r->slot_shift);
}

/*
 * A completion queue.  The kernel is the only producer; lock serializes
 * producers (QPs completing work) and, for kernel CQs, the consumer.
 */
struct trdma_cq {
	struct ib_cq ibcq;
	spinlock_t lock;	/* see above */
	struct trdma_ring ring;
	u32 prod;		/* kernel's producer index; under lock */
	u32 kcons;		/* consumer index of a kernel CQ; under lock */
	u8 notify;		/* armed IB_CQ_* flags; under lock */
	bool overflow;		/* IB_EVENT_CQ_ERR raised; under lock */
	bool is_user;
};

/* A shared receive queue.  lock serializes consumers and modify_srq. */
struct trdma_srq {
	struct ib_srq ibsrq;
	spinlock_t lock;	/* see above */
	struct trdma_ring ring;
	u32 cons;		/* kernel's consumer index; under lock */
	u32 limit;		/* armed limit, 0 when not armed; under lock */
	u32 max_sge;
	bool is_user;
	bool corrupt;		/* producer index found corrupt; under lock */
};

/*
 * An address handle.  ah_num names it in UD send WQEs (ah_xa); the
 * destination is kept as the datagram path needs it.
 */
struct trdma_ah {
	struct ib_ah ibah;
	struct rdma_ah_attr attr;
	u32 ah_num;
	union ib_gid sgid;
	union ib_gid dgid;
	int ifindex;		/* of the source GID's netdev: link-local scope */
};

#define TRDMA_MAX_RD_ATOM	16
/* A new QP holds an owed ACK twice this for a request to carry it. */
#define TRDMA_ACK_TURN_INIT_NS	(25 * NSEC_PER_USEC)

/* Per send WQE state of the kernel's copy (indexed like swq). */
struct trdma_swqe_info {
	u8 status;		/* ib_wc_status of the intake check */
	bool done;		/* acknowledged, or READ response placed */
	bool msn_set;		/* msn assigned: transmission started */
	u32 msn;		/* request MSN on the wire */
	u32 len;		/* message length */
	u32 rcvd;		/* READ: response bytes placed */
};

/* A READ or atomic request the responder is answering. */
struct trdma_rd_resp {
	union {
		u64 va;		/* READ: where the response comes from */
		u64 orig;	/* atomic: the value the ATOMIC_ACK returns */
	};
	u32 msn;
	u32 rkey;
	u32 len;
	u32 sent;
	bool atomic;		/* an ATOMIC_ACK with orig */
};

/*
 * The segment the transmitter has on the wire: a header, then payload
 * bytes taken from a send WQE, a READ response or nothing.
 */
/*
 * Payloads up to this many bytes are copied behind the header and go to
 * TCP in one call with it: cheaper than handing over a page for so few.
 */
#define TRDMA_TX_COPY_MAX	1024

/* Bit of trdma_qp.tx_flags: the QP has a transmitter (trdma_tx.c). */
#define TRDMA_TX_OWNED	0
/* Bit of trdma_qp.tx_flags: the QP is on its device's frag_qps list. */
#define TRDMA_TX_FRAG	1

struct trdma_tx_seg {
	/* The headers, then the payload where it is copied. */
	u8 hdr[TRDMA_MAX_HDR + TRDMA_TX_COPY_MAX];
	u32 hdr_len;
	u32 hdr_sent;		/* of hdr_len, plus len if copied */
	u32 len;		/* payload bytes */
	u32 sent;
	bool copied;		/* the payload is in hdr[], after the headers */
	u32 msg_off;		/* offset of the payload in its message */
	enum { TRDMA_SEG_NONE, TRDMA_SEG_WQE, TRDMA_SEG_RDRESP,
	       TRDMA_SEG_CTRL } kind;
	u32 wqe;		/* SEG_WQE: swq index */
	bool last;		/* last segment of its message */
	bool opt_noted;		/* its trdma TCP option record is made */
	bool corked;		/* goes with MSG_MORE, no EOR (tx_cork) */
};

/* Where one trdma segment handed to TCP starts (trdma_tcpopt.c). */
struct trdma_txopt_rec {
	u32 start;		/* stream offset of its BTH, from the ISN */
	u32 len;		/* header and payload bytes */
	__be32 op_qpn;		/* as in struct trdma_tcp_opt */
	__be32 msn;
};

/*
 * The transmit side of the trdma TCP option of a QP's connection.  The
 * QP's transmitter appends records; the netfilter output
 * hook, which runs under the socket's lock, looks them up, also once the
 * QP let go and the connection closes (trdma_txopt_handover()).  lock (a BH
 * lock: the hook may run in softirq) protects recs, size, head and tail.
 */
struct trdma_txopt {
	spinlock_t lock;		/* see above */
	struct trdma_txopt_rec *recs;	/* ring of size entries */
	u32 size;			/* a power of two */
	u32 head;			/* free running; next free entry */
	u32 tail;			/* oldest entry still needed */
	u32 iss;		/* the connection's ISN; set at attach */
	u32 next;		/* offset of the next byte for TCP; transmitter */
	bool on;		/* tag this connection; under lock and sk lock */
};

/* A receive WQE as the receive path took it: the slot is read once. */
struct trdma_rqe_copy {
	u64 wr_id;
	u32 num_sge;
	struct trdma_sge sge[TRDMA_MAX_SGE];
};

/* Receive side state; only the socket's receive path touches it. */
#define TRDMA_RX_OPTS	4

struct trdma_rx_state {
	u8 hdr[TRDMA_MAX_HDR];
	u32 hdr_got;
	u32 hdr_len;
	struct trdma_wire_hdr seg;	/* the current header, host order */
	u32 left;		/* payload bytes of this segment to come */
	/* The inbound request (SEND or WRITE) in progress. */
	bool req_active;
	bool req_is_send;
	u32 req_msn;
	u32 req_placed;
	u32 req_len;		/* WRITE: dma_len from the RETH */
	u64 req_va;
	u32 req_rkey;
	bool req_has_rqe;
	struct trdma_rqe_copy rqe;
	u32 imm;		/* ImmDt, or with has_inv the rkey invalidated */
	bool has_imm;
	bool has_inv;
	/* ATOMIC_WRITE: its 8 bytes as they arrive (req_placed of them). */
	u64 aw_val;
	/*
	 * UC: the message uc_drop_msn is being dropped (it could not be
	 * placed); its later segments are discarded up to its last.
	 */
	bool uc_drop;
	u32 uc_drop_msn;
	/*
	 * Discarding requests until the peer resends this MSN (RNR).
	 * odp_rnr: the last RNR NAK, for rnr_msn, was for an ODP or dma-buf
	 * page not present; where that request's resend misses a page again,
	 * the stream stalls there instead (see stalled below).
	 */
	bool rnr_wait;
	bool odp_rnr;
	u32 rnr_msn;
	bool discard;		/* skip the current segment's payload */
	u32 expected_msn;	/* next request MSN from the peer */
	u32 acked_bytes;	/* of the messages one drain completed */
	/*
	 * The connection's route goes through a loopback device (set at
	 * attach, trdma_cm.c): the peer's transmit runs this receive path,
	 * on the peer's CPU.
	 */
	bool local;
	bool resp_queued;	/* one drain queued READ/atomic responses */
	bool dead;		/* stream refused: read no more */
	/*
	 * A READ response or atomic ACK met its local ODP or dma-buf memory
	 * not present, or a request's resend its target's (odp_rnr), in
	 * trdma_rx.c: the actor takes nothing more (stalled)
	 * until qp->rx_stall_work, in process context, drains the socket
	 * again with may_sleep (it faults or maps there); hdr_redo: the
	 * header in hdr, all of it taken in already, is handled again then.
	 * may_sleep is also set while the encrypted link's reader (process
	 * context) feeds the parser.
	 */
	bool stalled;
	bool hdr_redo;
	bool may_sleep;
	/*
	 * The trdma TCP options (trdma_tcpopt.c) of skbs that began inside a
	 * BTH not yet complete: each is checked once the BTH is.  More than
	 * TRDMA_RX_OPTS such skbs in one BTH (only a peer that cuts its
	 * stream into tiny pieces does that) leave the rest unchecked.
	 */
	u32 pos;		/* stream offset of the next byte, from the ISN */
	u32 seg_start;		/* stream offset of the current BTH */
	u8 opt_n;		/* options pending in opt[] */
	struct trdma_tcp_opt opt[TRDMA_RX_OPTS];
};

struct trdma_closing;

/*
 * A QP: reliable or unreliable connected (RC, UC: both ride a TCP
 * connection), or a datagram QP (UD, GSI: trdma_ud.c).
 *
 * Send queue indices, all free-running: the provider (or post_send for a
 * kernel QP) produces WQEs up to ring.ctrl->prod; the kernel takes each one
 * in once at sq_intake, copying the slot into swq (the kernel's own copy,
 * never read from the shared ring again), and retires it at sq_retire when
 * it completes, publishing sq_retire as ring.ctrl->cons so the slot can be
 * reused.  retire <= intake <= prod and intake - retire <= num_slots.
 *
 * Locking: state_mutex serializes modify_qp and destroy_qp; lock (taken
 * inside state_mutex, outside any CQ lock) protects state and every queue
 * index.
 */
struct trdma_qp {
	struct ib_qp ibqp;
	struct trdma_dev *tdev;
	struct mutex state_mutex;	/* see above */
	spinlock_t lock;		/* see above */
	enum ib_qp_state state;
	struct ib_qp_attr attr;		/* as last modified */
	struct ib_qp_cap cap;		/* granted */
	bool sq_sig_all;
	bool is_user;
	bool corrupt;			/* a ring index was impossible */
	enum ib_qp_type type;		/* RC, UC, UD or GSI */
	/*
	 * Never reused on the device, unlike the QPN (the QPN allocator
	 * wraps): what a type-2 window remembers of the QP it is bound to.
	 */
	u64 uid;

	struct trdma_ring sq;
	void *swq;			/* kernel copies, same slot layout */
	u32 sq_intake;
	u32 sq_retire;

	struct trdma_ring rq;		/* unused with an SRQ */
	u32 rq_cons;

	/* Lifetime: one reference for the verbs object, one per user. */
	refcount_t ref;
	struct completion freed;

	/* Connection (trdma_cm.c); sock is set under lock. */
	struct socket *sock;
	/*
	 * What the connection closes on with once the QP lets go of it
	 * (trdma_cm_detach_locked()), allocated with the binding so that the
	 * closing never lacks it; set with sock, under state_mutex.
	 */
	struct trdma_closing *closing;
	/* An active connect in progress; under state_mutex. */
	struct socket *connecting;
	struct delayed_work connect_work;
	/*
	 * connect_work waits for our RTS: the first dial, for a moment after
	 * RTR (TRDMA_DIAL_RTR_WAIT), or a dial again after a failure in RTR
	 * or after the accepting side could not check our sq_psn while we
	 * were in RTR (for accept_timeout); reaching RTS dials at once.
	 * Under state_mutex.
	 */
	bool dial_parked;
	/*
	 * Which life of the QP a dial belongs to: a reset or error ends the
	 * life (trdma_cm_detach_locked()), and a dial begun before it
	 * neither binds its connection nor fails the QP.  Under state_mutex.
	 */
	u32 dial_gen;
	/* The listener's key for our peer (trdma_key.c); trdma_key_lock. */
	struct trdma_key_peer *key_peer;
	struct work_struct fatal_work;
	/* Resumes a stalled receive path (trdma_rx_state.stalled). */
	struct work_struct rx_stall_work;
	/*
	 * The peer closed in order (trdma_qp_peer_closed()), and since then
	 * the QP has had a request that will not be answered: peer_gone_work
	 * runs after the transport timeout.  Both under lock.
	 */
	bool peer_closed;
	bool peer_req_timed;
	/*
	 * IB_EVENT_QP_LAST_WQE_REACHED was raised (or must not be: the QP is
	 * being destroyed) since the last RESET; under lock.
	 */
	bool last_wqe_done;
	struct delayed_work peer_gone_work;
	void (*saved_data_ready)(struct sock *sk);
	void (*saved_write_space)(struct sock *sk);
	void (*saved_state_change)(struct sock *sk);
	/* peer's max_dest_rd_atomic; beside the bools (4 KiB, trdma_main.c) */
	u8 peer_rd_atomic;
	/*
	 * An encrypted link (trdma_tls.c): set while the QP holds a kTLS
	 * socket, from trdma_cm_attach() to trdma_cm_detach_locked(), under
	 * state_mutex.  Its receive path reads decrypted bytes in tls_rx_work
	 * into tls_rx_skb (the work's own) instead of tcp_read_sock().
	 */
	bool tls;
	bool tls_fin;			/* the peer's FIN read; by tls_rx_work */
	struct work_struct tls_rx_work;
	struct sk_buff *tls_rx_skb;

	/*
	 * Transmit (trdma_tx.c), by the QP's transmitter unless noted: who
	 * holds the TRDMA_TX_OWNED bit of tx_flags.  Process context takes
	 * tx_mutex first, then the bit (trdma_tx_lock()); the receive path
	 * only tries the bit, in softirq with the socket's spinlock held, to
	 * send one ACK (trdma_tx_ack_from_rx()), so a process waits for the
	 * bit a few microseconds at most and never while it holds the socket.
	 * A transmitter that finds tx_mutex taken sets tx_again and leaves:
	 * whoever holds the mutex transmits again (or kicks tx_work) once it
	 * lets go, so no one waits on the mutex to transmit; an ACK owed in
	 * softirq that cannot go from there is left the same way
	 * (trdma_tx_kick_lazy()).  The ACK hold's tasklet sends like the
	 * receive path, trying the socket's spinlock itself.
	 */
	struct mutex tx_mutex;		/* see above */
	unsigned long tx_flags;		/* TRDMA_TX_OWNED, TRDMA_TX_FRAG */
	atomic_t tx_again;		/* lock-free */
	/*
	 * The transmitter's run owns qp->sock's socket (lock_sock(),
	 * trdma_tx_sock_hold()): from a segment's first send until the run
	 * ends or lets go before sleeping on MR memory.  Transmitter only,
	 * process context.
	 */
	bool tx_sk_held;
	/*
	 * The transmitter's work item: on a workqueue (trdma_tx_kick()), or
	 * where one CPU is online, on trdma_tx_kworker, a SCHED_BATCH thread
	 * (tx_batch); which one is decided at load.
	 */
	union {
		struct work_struct tx_work;
		struct kthread_work tx_kwork;
	};
	struct trdma_swqe_info *swi;	/* indexed like swq; under lock */
	u32 sq_tx;			/* next WQE to transmit; under lock */
	u32 tx_msn;			/* MSN of the next request */
	u32 tx_wqe_off;			/* bytes of WQE sq_tx already out */
	u32 rd_outstanding;		/* READs sent, response not complete */
	struct trdma_tx_seg seg;
	/*
	 * Bytes of the corked run (tx_cork): the trdma segments handed to
	 * TCP with MSG_MORE and without the EOR mark since the last skb
	 * boundary the transmitter made, the current one included once it
	 * is corked.  Not 0: TCP may hold them, and the transmitter pushes
	 * them before it lets go (trdma_tx_uncork()).  Transmitter only.
	 */
	u32 tx_cork_len;
	struct trdma_txopt txopt;
	/*
	 * Responder work queued by the receive path; under lock (the
	 * receive path, which alone sets ack_pending, peeks at it without
	 * the lock after a read: trdma_rx_drain()).  ack_req: the ACK owed
	 * was asked for (TRDMA_BTH_ACKREQ) or is a NAK; others may wait to
	 * go with a later one (trdma_tx_ack_soon()).
	 */
	bool ack_pending;
	bool ack_req;
	bool close_after_nak;		/* a NAK goes out, then we close */
	u8 ack_syndrome;
	u32 ack_msn;
	/*
	 * An owed ACK held for a request to carry (trdma_tx_ack_soon): the
	 * running average of the time from when an ACK became owed to the
	 * next request (ns; under lock; the hold is twice that), when the
	 * hold of the ACK now owed ends (0: not held; under lock; reset when
	 * an ACK becomes owed), when the last request went out (jiffies;
	 * lock-free), the timer that sends the ACK alone if none does (a
	 * hard one: it only schedules ack_tasklet, which looks and sends;
	 * pinned and armed under lock; cancelled by a transmitter that sends
	 * the owed ACK on the CPU it is queued on, trdma_tx_ack_went(),
	 * else left running, lazy; cancelled at destroy), when the
	 * ACK now owed became owed (0 if none or not counted; under lock),
	 * and when the queued timer is due (it may run up to ack_slack_us
	 * later; meaningful while it is queued; under lock).  The _at times
	 * are trdma_tx_clock()'s.
	 */
	u32 ack_turn_ns;
	u32 ack_due_at;
	unsigned long last_req_tx;
	struct hrtimer ack_timer;
	struct tasklet_struct ack_tasklet;
	u32 ack_owed_at;
	u32 ack_timer_at;
	/*
	 * When the transmitter last went idle (jiffies; lock-free), and the
	 * QP's place on its device's frag_qps (trdma_idle.c).
	 */
	unsigned long tx_idle_at;
	struct list_head frag_node;
	/*
	 * One slot more than the READs a peer may have outstanding: over
	 * loopback the next request can arrive while the last response is
	 * still being handed to TCP.
	 */
	struct trdma_rd_resp rd_resp[TRDMA_MAX_RD_ATOM + 1];
	u32 rd_head;			/* next READ response to send */
	u32 rd_tail;			/* next free rd_resp slot */

	/* RNR retries of the requester; under lock. */
	u8 rnr_left;			/* retries left, 7: unlimited */
	bool rnr_rewind;		/* resend from rnr_msn on */
	u32 rnr_msn;
	unsigned long rnr_until;	/* no request before (jiffies) */
	struct delayed_work rnr_work;

	struct trdma_rx_state rx;

	/*
	 * UD and GSI QPs (trdma_ud.c), by the holder of tx_mutex: the WQE
	 * being sent (a copy of its slot), the datagram being built, and the
	 * MSN of the next datagram.
	 */
	void *ud_sqe;
	u8 *ud_buf;
	u32 ud_msn;
	/*
	 * Held by the receive path of a UD or GSI QP from its state check
	 * to the receive completion posted (trdma_ud_deliver()), so that
	 * datagrams complete in the order they took their WQEs; taken and
	 * let go by trdma_qp_rx_stopped() to know that none is still being
	 * delivered.  Outside qp->lock and the SRQ's lock.
	 */
	spinlock_t ud_rx_lock;
};

/* Largest datagram header (trdma_ud.c): BTH, DETH and ImmDt. */
#define TRDMA_UD_HDR_MAX	(sizeof(struct trdma_bth) + \
				 sizeof(struct trdma_deth) + \
				 sizeof(struct trdma_immdt))
/* Largest datagram payload: the largest active MTU. */
#define TRDMA_UD_MAX_PAYLOAD	4096

/* Whether a QP sends datagrams (UD or GSI) rather than riding TCP. */
static inline bool trdma_qp_is_ud(const struct trdma_qp *qp)
{
	return qp->type == IB_QPT_UD || qp->type == IB_QPT_GSI;
}

static inline struct trdma_pd *to_tpd(struct ib_pd *ibpd)
{
	return container_of(ibpd, struct trdma_pd, ibpd);
}

static inline struct trdma_mr *to_tmr(struct ib_mr *ibmr)
{
	return container_of(ibmr, struct trdma_mr, ibmr);
}

static inline struct trdma_mw *to_tmw(struct ib_mw *ibmw)
{
	return container_of(ibmw, struct trdma_mw, ibmw);
}

static inline struct trdma_cq *to_tcq(struct ib_cq *ibcq)
{
	return container_of(ibcq, struct trdma_cq, ibcq);
}

static inline struct trdma_srq *to_tsrq(struct ib_srq *ibsrq)
{
	return container_of(ibsrq, struct trdma_srq, ibsrq);
}

static inline struct trdma_qp *to_tqp(struct ib_qp *ibqp)
{
	return container_of(ibqp, struct trdma_qp, ibqp);
}

static inline struct trdma_ah *to_tah(struct ib_ah *ibah)
{
	return container_of(ibah, struct trdma_ah, ibah);
}

static inline struct trdma_mmap_entry *
to_tmmap(struct rdma_user_mmap_entry *e)
{
	return container_of(e, struct trdma_mmap_entry, rdma);
}

static inline struct trdma_dev *to_tdev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct trdma_dev, ibdev);
}

/*
 * Whether a QP is unreliable connected: its requests complete once TCP has
 * them, nothing answers them, and a message it cannot place is dropped.
 */
static inline bool trdma_qp_is_uc(const struct trdma_qp *qp)
{
	return qp->type == IB_QPT_UC;
}

/* The work requests a UC QP sends: SENDs and WRITEs, with immediate or not. */
static inline bool trdma_uc_opcode(u8 wr_opcode)
{
	return wr_opcode == IB_UVERBS_WR_SEND ||
	       wr_opcode == IB_UVERBS_WR_SEND_WITH_IMM ||
	       wr_opcode == IB_UVERBS_WR_RDMA_WRITE ||
	       wr_opcode == IB_UVERBS_WR_RDMA_WRITE_WITH_IMM;
}

/* RTR or RTS: the states in which a QP has (or makes) its connection. */
static inline bool trdma_state_connected(enum ib_qp_state state)
{
	return state == IB_QPS_RTR || state == IB_QPS_RTS;
}

static inline void trdma_count(struct trdma_dev *tdev, enum trdma_counter c,
			       u64 n)
{
	atomic64_add(n, &tdev->counters[c]);
}

static inline struct trdma_ucontext *to_tuctx(struct ib_ucontext *ibuctx)
{
	return container_of(ibuctx, struct trdma_ucontext, ibucontext);
}

/* The port state a netdev implies: ACTIVE when running with carrier. */
static inline enum ib_port_state trdma_netdev_port_state(struct net_device *nd)
{
	return netif_running(nd) && netif_carrier_ok(nd) ? IB_PORT_ACTIVE :
							    IB_PORT_DOWN;
}

/*
 * The active MTU a netdev's MTU allows: a path MTU's worth of payload and
 * the TCP/IP and trdma headers around it, as a RoCE port derives it.
 */
static inline enum ib_mtu trdma_active_mtu(struct net_device *nd)
{
	return min(ib_mtu_int_to_enum(READ_ONCE(nd->mtu) -
				      TRDMA_WIRE_OVERHEAD), IB_MTU_4096);
}

/* trdma_mem.c */
int trdma_ring_alloc(struct trdma_ring *r, struct ib_ucontext *uctx,
		     u32 num_slots, u32 slot_shift, u64 *mmap_key);
void trdma_ring_free(struct trdma_ring *r);
struct trdma_mr *trdma_mr_get(struct trdma_dev *tdev, u32 key);
void trdma_mr_put(struct trdma_mr *mr);
int trdma_mr_check(struct trdma_mr *mr, struct trdma_pd *pd, u64 va,
		   u64 len, int access);
bool trdma_count_get(atomic_t *count, unsigned int max);
struct trdma_mr *trdma_mr_alloc(struct ib_pd *ibpd, u64 iova, u64 length,
				int access);
void trdma_mr_publish(struct trdma_dev *tdev, struct trdma_mr *mr);
void trdma_mr_free(struct trdma_dev *tdev, struct trdma_mr *mr);

/* trdma_dmabuf.c */
int trdma_dmabuf_init(void);
void trdma_dmabuf_exit(void);
struct page *trdma_dmabuf_page_get(struct trdma_mr *mr, u64 va, u32 *pg_off,
				   bool sleep);
void trdma_dmabuf_page_put(struct trdma_mr *mr);
void trdma_dmabuf_prefetch(struct trdma_qp *qp, struct trdma_mr *mr);
void trdma_dmabuf_release(struct trdma_mr *mr);

/* trdma_cq.c */
struct trdma_cqe;
int trdma_cq_post(struct trdma_cq *cq, const struct trdma_cqe *cqe,
		  bool solicited);

/* trdma_qp.c */
void trdma_qp_fatal(struct trdma_qp *qp, enum ib_event_type event);
void trdma_qp_wr_error(struct trdma_qp *qp);
void trdma_qp_rx_stopped(struct trdma_qp *qp);
void trdma_qp_timed_out(struct trdma_qp *qp);
void trdma_qp_retries_exhausted(struct trdma_qp *qp, bool sent_only);
void trdma_qp_peer_closed(struct trdma_qp *qp);
u32 trdma_qp_transport_ms(const struct trdma_qp *qp);
void trdma_qp_error(struct trdma_qp *qp, enum ib_event_type event,
		    bool close);
void trdma_qp_put(struct trdma_qp *qp);
struct trdma_qp *trdma_qp_get(struct trdma_dev *tdev, u32 qpn);
void trdma_complete(struct trdma_qp *qp, struct ib_cq *ibcq, u64 wr_id,
		    enum ib_wc_opcode opcode, enum ib_wc_status status);
void trdma_sq_retire(struct trdma_qp *qp);
void *trdma_swq_slot(struct trdma_qp *qp, u32 idx);
struct trdma_swqe_info *trdma_swi(struct trdma_qp *qp, u32 idx);
void trdma_sq_wqe_done(struct trdma_qp *qp, u32 idx, enum ib_wc_status st);
void trdma_rq_taken_done(struct trdma_qp *qp);
enum ib_wc_opcode trdma_wc_opcode(u8 wr_opcode);

/* trdma_mem.c */
struct page *trdma_mr_page(struct trdma_mr *mr, u64 va, u32 *pg_off);
struct page *trdma_mr_page_get(struct trdma_mr *mr, u64 va, bool write,
			       u32 *pg_off, bool sleep);
void trdma_mr_page_put(struct trdma_mr *mr, struct page *page, bool write);
void trdma_sqe_prefetch(struct trdma_qp *qp, const struct trdma_sqe *sqe);
int trdma_advise_mr(struct ib_pd *ibpd, enum ib_uverbs_advise_mr_advice advice,
		    u32 flags, struct ib_sge *sg_list, u32 num_sge,
		    struct uverbs_attr_bundle *attrs);
enum ib_wc_status trdma_fr_reg(struct trdma_qp *qp, u32 key, int access);
int trdma_fr_inv(struct trdma_qp *qp, u32 key, bool remote);
struct trdma_mr *trdma_rkey_get(struct trdma_qp *qp, u32 key, u64 va,
				u64 len, int access);
enum ib_wc_status trdma_mw_bind(struct trdma_qp *qp,
				const struct trdma_sqe *sqe);

/* trdma_odp.c: implicit ODP MRs */
#define TRDMA_IMR_CHILD_SHIFT	21
#define TRDMA_IMR_CHILD_SIZE	BIT(TRDMA_IMR_CHILD_SHIFT)
#ifdef CONFIG_INFINIBAND_ON_DEMAND_PAGING
struct mmu_interval_notifier_ops;
int trdma_imr_init(struct trdma_mr *mr, struct ib_device *ibdev, int access,
		   const struct mmu_interval_notifier_ops *ops);
void trdma_imr_free(struct trdma_mr *mr);
struct ib_umem_odp *trdma_imr_child(struct trdma_mr *mr, unsigned long uva);
struct ib_umem_odp *trdma_imr_child_make(struct trdma_mr *mr,
					 unsigned long uva);
unsigned long trdma_imr_fault_end(struct trdma_mr *mr, unsigned long uva,
				  unsigned long end);
void trdma_imr_inv_begin(struct trdma_mr *mr);
void trdma_imr_inv_end(struct trdma_mr *mr);
#else
static inline void trdma_imr_free(struct trdma_mr *mr) {}
#endif

/* trdma_cm.c */
int trdma_cm_init(void);
void trdma_cm_exit(void);
int trdma_cm_net_up(struct trdma_net *tnet);
void trdma_cm_net_down(struct trdma_net *tnet);
void trdma_cm_net_flush(struct net *net);
void trdma_cm_qp_rtr(struct trdma_qp *qp);
void trdma_cm_qp_rts(struct trdma_qp *qp);
void trdma_cm_qp_destroy(struct trdma_qp *qp);
void trdma_cm_detach(struct trdma_qp *qp);
void trdma_cm_detach_locked(struct trdma_qp *qp);
void trdma_cm_connect_work(struct work_struct *work);
void trdma_cm_write_space(struct sock *sk);
struct trdma_txopt *trdma_cm_sk_txopt(struct sock *sk,
				      struct trdma_dev **tdev);
void trdma_cm_set_timeout(struct trdma_qp *qp);

/* trdma_key.c */
struct trdma_key_peer;
bool trdma_key_on(struct trdma_dev *tdev);
int trdma_key_dial(struct trdma_dev *tdev, struct socket *sock,
		   const struct in6_addr *dst);
bool trdma_key_sock_keyed(struct sock *sk);
bool trdma_key_may_bind(struct trdma_dev *tdev, struct sock *sk);
void trdma_key_qp_rtr(struct trdma_qp *qp);
void trdma_key_qp_put(struct trdma_qp *qp);
int trdma_key_set(struct trdma_dev *tdev, const u8 *key, size_t len);
u8 trdma_key_read(struct trdma_dev *tdev, u8 *key);
bool trdma_key_present(struct trdma_dev *tdev);

/* trdma_tls.c */
struct trdma_tls_hs {
	bool on;		/* both hellos had TRDMA_HELLO_TLS */
	bool active;		/* we connected */
	bool self;		/* a QP connected to itself */
	u8 nonce_req[TRDMA_HELLO_NONCE_LEN];	/* the connecting side's */
	u8 nonce_acc[TRDMA_HELLO_NONCE_LEN];	/* the accepting side's */
	u8 confirm[32];		/* the peer's key confirmation, as it must be */
};

bool trdma_tls_on(struct trdma_dev *tdev);
int trdma_tls_set(struct trdma_dev *tdev, bool on);
int trdma_tls_install(struct trdma_qp *qp, struct socket *sock,
		      struct trdma_tls_hs *hs, const struct trdma_hello *req,
		      const struct trdma_hello *acc);
bool trdma_tls_confirmed(const struct trdma_tls_hs *hs, const u8 *got);
int trdma_tls_start(struct trdma_qp *qp);
void trdma_tls_stop(struct trdma_qp *qp);
void trdma_tls_rx_kick(struct trdma_qp *qp);
void trdma_tls_rx_work(struct work_struct *work);
int trdma_tls_discard(struct socket *sock);

/* trdma_tcpopt.c */
int trdma_tcpopt_net_up(struct trdma_net *tnet);
void trdma_tcpopt_net_down(struct trdma_net *tnet);
void trdma_txopt_init(struct trdma_qp *qp, struct socket *sock);
void trdma_txopt_stop(struct trdma_qp *qp);
void trdma_txopt_handover(struct trdma_qp *qp, struct trdma_txopt *to);
void trdma_txopt_release(struct trdma_txopt *o);
bool trdma_txopt_begin(struct trdma_qp *qp, struct sock *sk, u32 len,
		       const struct trdma_bth *bth, bool may_grow);
int trdma_txopt_eor(struct trdma_qp *qp);
void trdma_txopt_boundary(struct trdma_qp *qp, struct socket *sock);
void trdma_txopt_end(struct trdma_qp *qp, struct socket *sock, u32 len,
		     bool eor_sent);
bool trdma_tcpopt_get(const struct sk_buff *skb, struct trdma_tcp_opt *opt);

/* trdma_main.c */
struct trdma_dev *trdma_dev_get_by_gid(const struct net *net,
				       const union ib_gid *gid);
void trdma_net_closing_get(struct trdma_net *tnet);
void trdma_net_closing_put(struct trdma_net *tnet);

/* trdma_ud.c */
int trdma_ud_net_up(struct trdma_net *tnet);
void trdma_ud_net_down(struct trdma_net *tnet);
void trdma_ud_tx(struct trdma_qp *qp);
void trdma_ud_tx_work(struct work_struct *work);
u32 trdma_ud_mtu(struct trdma_dev *tdev);
int trdma_ah_init(struct trdma_ah *ah, const struct rdma_ah_attr *attr);

/* trdma_tx.c */
int trdma_sqe_gather(struct trdma_qp *qp, const struct trdma_sqe *sqe,
		     u32 off, u32 len, u8 *dst);
void trdma_tx_spread_init(void);
void trdma_tx_spread_exit(void);
void trdma_tx_work_init(struct trdma_qp *qp);
void trdma_tx_work_cancel(struct trdma_qp *qp);
void trdma_tx_kick(struct trdma_qp *qp);
void trdma_tx_kick_user(struct trdma_qp *qp);
bool trdma_tx_defer(struct trdma_qp *qp, bool outstanding);
void trdma_tx_now(struct trdma_qp *qp);
void trdma_sq_doorbell(struct trdma_qp *qp);
void trdma_tx_answered(struct trdma_qp *qp);
void trdma_tx_ack_soon(struct trdma_qp *qp, struct sock *sk);
void trdma_tx_ack_forget_unasked(struct trdma_qp *qp);
void trdma_tx_resp_soon(struct trdma_qp *qp, struct sock *sk);
enum hrtimer_restart trdma_tx_ack_timer(struct hrtimer *t);
void trdma_tx_ack_tasklet(struct tasklet_struct *t);
void trdma_tx_lock(struct trdma_qp *qp);
void trdma_frag_note(struct trdma_qp *qp, struct sock *sk);
void trdma_frag_forget(struct trdma_qp *qp);
void trdma_frag_work(struct work_struct *work);
void trdma_tx_unlock(struct trdma_qp *qp);
void trdma_tx_sync(struct trdma_qp *qp);
void trdma_tx_rnr_work(struct work_struct *work);
void trdma_tx_work(struct work_struct *work);
void trdma_tx_sock_let_go(struct trdma_qp *qp);

/* trdma_rx.c */
void trdma_rx_data_ready(struct sock *sk);
void trdma_rx_pump(struct trdma_qp *qp);
void trdma_rx_stall_work(struct work_struct *work);
void trdma_rx_drain(struct trdma_qp *qp, struct sock *sk);
bool trdma_rx_feed(struct trdma_qp *qp, struct sk_buff *skb);
void trdma_rx_flush(struct trdma_qp *qp);
int trdma_rqe_take(struct trdma_qp *qp, struct trdma_rqe_copy *rqe,
		   bool *taken);
int trdma_place_sges(struct trdma_qp *qp, const struct trdma_sge *sge,
		     u32 num_sge, u32 msg_off, struct sk_buff *skb, u32 off,
		     u32 n);
int trdma_place_sges_buf(struct trdma_qp *qp, const struct trdma_sge *sge,
			 u32 num_sge, const void *buf, u32 n);

/* trdma_cm.c: the module's workqueues */

extern struct workqueue_struct *trdma_wq;
extern struct workqueue_struct *trdma_tx_wq;

#endif /* _TRDMA_H */
