// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The provider's ring index arithmetic (provider/trdma-ring.h): free-running
// 32-bit indices, fullness, slot addressing, mapping lengths, and the
// producer/consumer protocol on a control block in ordinary memory.

#include "trdma-ring.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace {

constexpr std::uint32_t kMax = UINT32_MAX;

TEST(RingIndex, CountIsProdMinusConsModulo2To32)
{
	EXPECT_EQ(trdma_ring_count(0, 0), 0u);
	EXPECT_EQ(trdma_ring_count(5, 2), 3u);
	// The producer has wrapped, the consumer not yet.
	EXPECT_EQ(trdma_ring_count(2, kMax - 1), 4u);
	EXPECT_EQ(trdma_ring_count(0, kMax), 1u);
	// Both wrapped.
	EXPECT_EQ(trdma_ring_count(10, 3), 7u);
	// Equal indices anywhere: empty.
	EXPECT_EQ(trdma_ring_count(kMax, kMax), 0u);
	EXPECT_EQ(trdma_ring_count(0x80000000u, 0x80000000u), 0u);
}

TEST(RingIndex, SpaceAndFullness)
{
	const std::uint32_t n = 8;

	EXPECT_TRUE(trdma_ring_has_space(0, 0, n));
	EXPECT_EQ(trdma_ring_space(0, 0, n), n);
	EXPECT_TRUE(trdma_ring_has_space(7, 0, n));
	EXPECT_EQ(trdma_ring_space(7, 0, n), 1u);
	// All num_slots slots are usable: full at prod - cons == num_slots.
	EXPECT_FALSE(trdma_ring_has_space(8, 0, n));
	EXPECT_EQ(trdma_ring_space(8, 0, n), 0u);
	// Across the wrap of the producer index.
	EXPECT_TRUE(trdma_ring_has_space(3, kMax - 3, n));	// 7 used
	EXPECT_FALSE(trdma_ring_has_space(4, kMax - 3, n));	// 8 used
	EXPECT_FALSE(trdma_ring_has_space(4, kMax - 4, n));	// 9: corrupt
	EXPECT_EQ(trdma_ring_space(4, kMax - 4, n), 0u);
	// A consumer index ahead of the producer is corrupt, never space.
	EXPECT_FALSE(trdma_ring_has_space(0, 1, n));
	EXPECT_EQ(trdma_ring_space(0, 1, n), 0u);
	// One slot.
	EXPECT_TRUE(trdma_ring_has_space(kMax, kMax, 1));
	EXPECT_FALSE(trdma_ring_has_space(0, kMax, 1));
}

TEST(RingIndex, FillAndDrainAcrossTheWrap)
{
	const std::uint32_t n = 16;
	std::uint32_t prod = kMax - 20, cons = prod;

	for (int round = 0; round < 5; round++) {
		std::uint32_t written = 0;

		while (trdma_ring_has_space(prod, cons, n)) {
			prod++;
			written++;
		}
		EXPECT_EQ(written, n);
		EXPECT_EQ(trdma_ring_count(prod, cons), n);
		cons += 5;
		EXPECT_EQ(trdma_ring_space(prod, cons, n), 5u);
		cons = prod;
		EXPECT_EQ(trdma_ring_count(prod, cons), 0u);
	}
	// The indices went past 2^32 on the way.
	EXPECT_LT(prod, 100u);
}

TEST(RingSlot, OffsetsForDifferentSlotSizes)
{
	const unsigned shifts[] = { 4, 5, 6, 7, 13 };

	for (unsigned shift : shifts) {
		const std::size_t size = std::size_t{ 1 } << shift;
		SCOPED_TRACE(shift);

		EXPECT_EQ(trdma_ring_slot_offset(0, 64, shift),
			  TRDMA_RING_SLOTS_OFFSET);
		EXPECT_EQ(trdma_ring_slot_offset(1, 64, shift),
			  TRDMA_RING_SLOTS_OFFSET + size);
		EXPECT_EQ(trdma_ring_slot_offset(63, 64, shift),
			  TRDMA_RING_SLOTS_OFFSET + 63 * size);
		// Index num_slots is slot 0 again.
		EXPECT_EQ(trdma_ring_slot_offset(64, 64, shift),
			  TRDMA_RING_SLOTS_OFFSET);
		EXPECT_EQ(trdma_ring_slot_offset(130, 64, shift),
			  TRDMA_RING_SLOTS_OFFSET + 2 * size);
		// The wrap at 2^32 continues the sequence of slots.
		EXPECT_EQ(trdma_ring_slot_offset(kMax, 64, shift),
			  TRDMA_RING_SLOTS_OFFSET + 63 * size);
		EXPECT_EQ(trdma_ring_slot_offset(kMax + 1u, 64, shift),
			  TRDMA_RING_SLOTS_OFFSET);
		// A one-slot ring always uses slot 0.
		EXPECT_EQ(trdma_ring_slot_offset(12345, 1, shift),
			  TRDMA_RING_SLOTS_OFFSET);
	}
}

TEST(RingSlot, LargeRingsDoNotOverflow32Bits)
{
	// 2^22 slots of 8 KiB: slot offsets beyond 4 GiB.
	const std::uint32_t n = 1u << 22;
	const std::size_t off = trdma_ring_slot_offset(n - 1, n, 13);

	if (sizeof(std::size_t) < 8)
		GTEST_SKIP() << "32-bit size_t";
	EXPECT_EQ(off, TRDMA_RING_SLOTS_OFFSET +
			       (static_cast<std::uint64_t>(n - 1) << 13));
}

TEST(RingGeometry, AcceptsPowersOfTwoWithBigEnoughSlots)
{
	EXPECT_TRUE(trdma_ring_geometry_ok(1, 5, 32));
	EXPECT_TRUE(trdma_ring_geometry_ok(1u << 22, 5, 32));
	EXPECT_TRUE(trdma_ring_geometry_ok(TRDMA_RING_MAX_SLOTS, 4, 16));
	EXPECT_TRUE(trdma_ring_geometry_ok(64, 6, 48));
	EXPECT_TRUE(trdma_ring_geometry_ok(64, TRDMA_RING_MAX_SLOT_SHIFT, 48));

	EXPECT_FALSE(trdma_ring_geometry_ok(0, 5, 32));
	EXPECT_FALSE(trdma_ring_geometry_ok(3, 5, 32));
	EXPECT_FALSE(trdma_ring_geometry_ok(96, 5, 32));
	EXPECT_FALSE(trdma_ring_geometry_ok(kMax, 5, 32));
	// Slots smaller than the entry they hold.
	EXPECT_FALSE(trdma_ring_geometry_ok(64, 5, 48));
	EXPECT_FALSE(trdma_ring_geometry_ok(64, 0, 16));
	EXPECT_FALSE(trdma_ring_geometry_ok(64, TRDMA_RING_MAX_SLOT_SHIFT + 1,
					    48));
	EXPECT_FALSE(trdma_ring_geometry_ok(64, 200, 48));
}

TEST(RingGeometry, MapSizeIsControlBlockPlusSlotsInWholePages)
{
	// 1 CQE: 192 + 32 bytes, one page.
	EXPECT_EQ(trdma_ring_map_size(1, 5, 4096), 4096u);
	// 121 CQEs: 192 + 3872 = 4064, still one page; 122: 4096 + 0.
	EXPECT_EQ(trdma_ring_map_size(121, 5, 4096), 4096u);
	// 128 CQEs: 192 + 4096 bytes, two pages.
	EXPECT_EQ(trdma_ring_map_size(128, 5, 4096), 8192u);
	// 64 SQEs of 128 bytes: 192 + 8192.
	EXPECT_EQ(trdma_ring_map_size(64, 7, 4096), 3u * 4096);
	// 64 KiB pages (arm64, ppc64).
	EXPECT_EQ(trdma_ring_map_size(128, 5, 65536), 65536u);
	EXPECT_EQ(trdma_ring_map_size(2048, 5, 65536), 2u * 65536);
	// Too large for a size_t.
	EXPECT_EQ(trdma_ring_map_size(1, 64, 4096), 0u);
	if (sizeof(std::size_t) == 8) {
		EXPECT_EQ(trdma_ring_map_size(TRDMA_RING_MAX_SLOTS, 20, 4096),
			  (std::size_t{ 1 } << 51) + 4096);
		EXPECT_EQ(trdma_ring_map_size(kMax, 63, 4096), 0u);
	}
}

// Zeroed, cache-line aligned memory.
class AlignedBuf {
public:
	explicit AlignedBuf(std::size_t n)
		: n_(n), p_(static_cast<char *>(
				 std::aligned_alloc(64, (n + 63) / 64 * 64)))
	{
		std::memset(p_, 0, n_);
	}
	~AlignedBuf() { std::free(p_); }
	AlignedBuf(const AlignedBuf &) = delete;
	AlignedBuf &operator=(const AlignedBuf &) = delete;
	char *data() { return p_; }
	std::size_t size() const { return n_; }

private:
	std::size_t n_;
	char *p_;
};

// A ring in ordinary memory, laid out like a mapped one.
struct FakeRing {
	FakeRing(std::uint32_t slots, unsigned shift)
		: mem(TRDMA_RING_SLOTS_OFFSET + (std::size_t{ slots } << shift))
	{
		r.map = mem.data();
		r.map_size = mem.size();
		r.ctrl = reinterpret_cast<trdma_ring_ctrl *>(r.map);
		r.num_slots = slots;
		r.slot_shift = shift;
		r.idx = 0;
	}

	AlignedBuf mem;
	trdma_uring r;
};

TEST(RingAccess, SlotAddressesInsideTheMap)
{
	FakeRing f(8, 6);

	EXPECT_EQ(static_cast<char *>(trdma_uring_slot(&f.r, 0)),
		  f.mem.data() + TRDMA_RING_SLOTS_OFFSET);
	EXPECT_EQ(static_cast<char *>(trdma_uring_slot(&f.r, 9)),
		  f.mem.data() + TRDMA_RING_SLOTS_OFFSET + 64);
	EXPECT_EQ(static_cast<char *>(trdma_uring_slot(&f.r, kMax)),
		  f.mem.data() + TRDMA_RING_SLOTS_OFFSET + 7 * 64);
}

TEST(RingAccess, PublishWritesTheOwnIndexAndReadsKflags)
{
	FakeRing f(8, 6);

	EXPECT_EQ(trdma_uring_publish_prod(&f.r, 3), 0u);
	EXPECT_EQ(f.r.ctrl->prod, 3u);
	EXPECT_EQ(f.r.idx, 3u);
	EXPECT_EQ(f.r.ctrl->cons, 0u);

	f.r.ctrl->kflags = TRDMA_RING_F_ERROR;
	EXPECT_EQ(trdma_uring_publish_prod(&f.r, 4), TRDMA_RING_F_ERROR);
	EXPECT_EQ(f.r.ctrl->prod, 4u);

	trdma_uring_publish_cons(&f.r, 2);
	EXPECT_EQ(f.r.ctrl->cons, 2u);
	EXPECT_EQ(f.r.idx, 2u);
	EXPECT_EQ(trdma_uring_load_prod(&f.r), 4u);
	EXPECT_EQ(trdma_uring_load_cons(&f.r), 2u);
}

// One producer and one consumer thread following the ring protocol, with
// the indices starting just below 2^32: every entry arrives once, in
// order, intact.
TEST(RingAccess, ProducerConsumerAcrossTheWrap)
{
	constexpr std::uint32_t kSlots = 16;
	constexpr std::uint32_t kCount = 200000;
	constexpr std::uint32_t kStart = UINT32_MAX - 1000;
	FakeRing f(kSlots, 4);
	trdma_uring prod_view = f.r, cons_view = f.r;

	f.r.ctrl->prod = kStart;
	f.r.ctrl->cons = kStart;
	prod_view.idx = kStart;
	cons_view.idx = kStart;

	std::thread producer([&] {
		for (std::uint32_t i = 0; i < kCount; i++) {
			std::uint32_t p = prod_view.idx;

			while (!trdma_ring_has_space(
				p, trdma_uring_load_cons(&prod_view), kSlots))
				std::this_thread::yield();
			auto *slot = static_cast<std::uint64_t *>(
				trdma_uring_slot(&prod_view, p));
			slot[0] = i;
			slot[1] = ~static_cast<std::uint64_t>(i);
			trdma_uring_publish_prod(&prod_view, p + 1);
		}
	});

	std::uint32_t next = 0;
	bool intact = true;

	while (next < kCount) {
		std::uint32_t c = cons_view.idx;
		std::uint32_t avail =
			trdma_ring_count(trdma_uring_load_prod(&cons_view), c);

		if (!avail) {
			std::this_thread::yield();
			continue;
		}
		ASSERT_LE(avail, kSlots);
		for (std::uint32_t k = 0; k < avail; k++) {
			auto *slot = static_cast<std::uint64_t *>(
				trdma_uring_slot(&cons_view, c + k));
			intact &= slot[0] == next &&
				  slot[1] == ~static_cast<std::uint64_t>(next);
			next++;
		}
		trdma_uring_publish_cons(&cons_view, c + avail);
	}
	producer.join();

	EXPECT_TRUE(intact);
	EXPECT_EQ(f.r.ctrl->prod, kStart + kCount);
	EXPECT_EQ(f.r.ctrl->cons, kStart + kCount);
}

} // namespace
