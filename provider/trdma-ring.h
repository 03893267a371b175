/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The provider's side of a trdma ring (include/uapi/rdma/trdma-abi.h): a
 * struct trdma_ring_ctrl followed by num_slots slots of 1 << slot_shift
 * bytes, mapped from the kernel.
 *
 * Indices are free-running 32-bit counters.  The number of entries in a
 * ring is prod - cons (mod 2^32), so it stays right across the wrap of
 * either index as long as it never exceeds num_slots; slot i lives at
 * TRDMA_RING_SLOTS_OFFSET + (i & (num_slots - 1)) * slot_size.
 *
 * The index arithmetic is pure and plain C/C++ so the host unit tests can
 * exercise it; the accessors of the shared control block at the end use
 * the GCC/Clang __atomic builtins on the plain __u32 fields of the ABI.
 */
#ifndef TRDMA_RING_H
#define TRDMA_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/trdma-abi.h>

/*
 * Bounds the provider accepts for a ring the kernel describes.  The kernel
 * sizes rings far below them (at most 2^22 slots, slots of at most 8 KiB);
 * anything outside is a broken create response.  2^31 slots keeps
 * prod - cons <= num_slots meaningful in 32 bits.
 */
#define TRDMA_RING_MAX_SLOTS		(1U << 31)
#define TRDMA_RING_MAX_SLOT_SHIFT	20

static inline bool trdma_is_pow2(uint32_t n)
{
	return n && !(n & (n - 1));
}

/* Entries between the consumer and the producer index. */
static inline uint32_t trdma_ring_count(uint32_t prod, uint32_t cons)
{
	return prod - cons;
}

/* Whether a producer at prod may write one more slot. */
static inline bool trdma_ring_has_space(uint32_t prod, uint32_t cons,
					uint32_t num_slots)
{
	return trdma_ring_count(prod, cons) < num_slots;
}

/* Free slots; 0 also when the indices claim more entries than slots. */
static inline uint32_t trdma_ring_space(uint32_t prod, uint32_t cons,
					uint32_t num_slots)
{
	uint32_t used = trdma_ring_count(prod, cons);

	return used < num_slots ? num_slots - used : 0;
}

/* Byte offset of the slot index idx lands in, from the start of the map. */
static inline size_t trdma_ring_slot_offset(uint32_t idx, uint32_t num_slots,
					    unsigned int slot_shift)
{
	return TRDMA_RING_SLOTS_OFFSET +
	       ((size_t)(idx & (num_slots - 1)) << slot_shift);
}

/*
 * Whether a ring geometry from a create response is usable: a power of two
 * number of slots, each at least min_slot_size bytes.
 */
static inline bool trdma_ring_geometry_ok(uint32_t num_slots,
					  unsigned int slot_shift,
					  size_t min_slot_size)
{
	if (!trdma_is_pow2(num_slots) || num_slots > TRDMA_RING_MAX_SLOTS)
		return false;
	if (slot_shift > TRDMA_RING_MAX_SLOT_SHIFT)
		return false;
	return ((size_t)1 << slot_shift) >= min_slot_size;
}

/*
 * Length of the mapping of a ring: the control block and the slots,
 * rounded up to whole pages (page_size a power of two), exactly the size
 * of the kernel's mmap entry.  0 if it does not fit in a size_t.
 */
static inline size_t trdma_ring_map_size(uint32_t num_slots,
					 unsigned int slot_shift,
					 size_t page_size)
{
	size_t slots, size;

	if (slot_shift >= sizeof(size_t) * 8 ||
	    num_slots > (SIZE_MAX >> slot_shift))
		return 0;
	slots = (size_t)num_slots << slot_shift;
	if (slots > SIZE_MAX - TRDMA_RING_SLOTS_OFFSET - (page_size - 1))
		return 0;
	size = TRDMA_RING_SLOTS_OFFSET + slots;
	return (size + page_size - 1) & ~(page_size - 1);
}

/*
 * A mapped ring.  idx is the index the provider owns: the producer index of
 * an SQ, RQ or SRQ, the consumer index of a CQ.  The provider keeps it here
 * and only ever stores it to the control block, never reads it back.
 */
struct trdma_uring {
	void *map;			/* mmap() address, NULL when unmapped */
	size_t map_size;
	struct trdma_ring_ctrl *ctrl;	/* == map */
	uint32_t num_slots;
	uint32_t slot_shift;
	uint32_t idx;
};

static inline void *trdma_uring_slot(const struct trdma_uring *r, uint32_t idx)
{
	return (char *)r->map +
	       trdma_ring_slot_offset(idx, r->num_slots, r->slot_shift);
}

/* The other side's index; the slots it covers are ready (acquire). */
static inline uint32_t trdma_uring_load_prod(const struct trdma_uring *r)
{
	return __atomic_load_n(&r->ctrl->prod, __ATOMIC_ACQUIRE);
}

static inline uint32_t trdma_uring_load_cons(const struct trdma_uring *r)
{
	return __atomic_load_n(&r->ctrl->cons, __ATOMIC_ACQUIRE);
}

/* Hands slots back to the kernel producer once read (release). */
static inline void trdma_uring_publish_cons(struct trdma_uring *r,
					    uint32_t cons)
{
	r->idx = cons;
	__atomic_store_n(&r->ctrl->cons, cons, __ATOMIC_RELEASE);
}

/*
 * Publishes newly written slots (release), then, after a full barrier,
 * reads the kernel's flags.  The barrier pairs with the kernel's between
 * setting TRDMA_RING_F_ERROR and reading prod to flush: either the kernel
 * sees the new prod or the caller sees the flag (or both).
 */
static inline uint32_t trdma_uring_publish_prod(struct trdma_uring *r,
						uint32_t prod)
{
	r->idx = prod;
	__atomic_store_n(&r->ctrl->prod, prod, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return __atomic_load_n(&r->ctrl->kflags, __ATOMIC_RELAXED);
}

/*
 * After trdma_uring_publish_prod() on a QP's SQ (its full barrier
 * between): whether the kernel must be told, that is unless a kernel
 * transmitter is active and will read prod again before it stops
 * (trdma_ring_ctrl.tx_active).  A QP in error always gets its doorbell,
 * which flushes.
 */
static inline bool trdma_usq_needs_doorbell(const struct trdma_uring *r,
					    uint32_t kflags)
{
	return (kflags & TRDMA_RING_F_ERROR) ||
	       !__atomic_load_n(&r->ctrl->tx_active, __ATOMIC_RELAXED);
}

#endif /* TRDMA_RING_H */
