// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// On-demand paging MRs (IBV_ACCESS_ON_DEMAND): SEND, WRITE, READ and
// atomics into memory no one has touched, checked byte for byte; the
// process unmapping or remapping the memory under a registered MR and the
// traffic then seeing the new pages; ibv_advise_mr() prefetch; implicit
// ODP refused with EOPNOTSUPP; bad keys and ranges; munmap and
// MADV_DONTNEED racing incoming WRITEs.  (dma-buf MRs: dmabuf_test.cc.)
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "lab_util.h"
#include "qp_fixture.h"

namespace trdma_lab {
namespace {

constexpr int kOdpAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                           IBV_ACCESS_ON_DEMAND;

class OdpTest : public DataPathTest {
 protected:
  static constexpr size_t kOdpLen = 4 << 20;

  void SetUp() override {
    DataPathTest::SetUp();
    if (HasFatalFailure()) return;
    odp_ = Map();
    ASSERT_NE(odp_, nullptr);
    omr_ = ibv_reg_mr(pd_, odp_, kOdpLen, kOdpAccess);
    ASSERT_NE(omr_, nullptr) << "ODP registration: " << strerror(errno);
  }

  void TearDown() override {
    if (omr_) ibv_dereg_mr(omr_);
    if (odp_) munmap(odp_, kOdpLen);
    DataPathTest::TearDown();
  }

  // Fresh anonymous memory at `at` (MAP_FIXED) or anywhere; not touched.
  static uint8_t *Map(void *at = nullptr) {
    void *p = mmap(at, kOdpLen, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<uint8_t *>(p);
  }

  ibv_sge OdpSge(size_t off, uint32_t len) {
    return {reinterpret_cast<uintptr_t>(odp_ + off), len, omr_->lkey};
  }

  // A WRITE of len bytes (pattern key) from a_'s pinned buffer into the
  // ODP region at off; returns the requester's completion status.
  ibv_wc_status WriteOdp(uint64_t id, size_t off, uint32_t len,
                         uint64_t key) {
    Pattern(a_.buf.data(), len, key);
    EXPECT_EQ(PostSend(a_, id, IBV_WR_RDMA_WRITE, Sges(a_, 0, len, 1),
                       reinterpret_cast<uintptr_t>(odp_ + off), omr_->rkey),
              0);
    ibv_wc wc = Wait(a_.cq);
    EXPECT_EQ(wc.wr_id, id);
    return wc.status;
  }

  uint8_t *odp_ = nullptr;
  ibv_mr *omr_ = nullptr;
};

TEST_F(OdpTest, DeviceReportsRcOdp) {
  ibv_device_attr_ex a = {};
  ASSERT_EQ(ibv_query_device_ex(ctx_.get(), nullptr, &a), 0);
  EXPECT_TRUE(a.odp_caps.general_caps & IBV_ODP_SUPPORT);
  EXPECT_FALSE(a.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
  const uint32_t rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
                      IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                      IBV_ODP_SUPPORT_ATOMIC;
  EXPECT_EQ(a.odp_caps.per_transport_caps.rc_odp_caps & rc, rc);
}

// A WRITE over several segments into never-touched memory: the responder
// faults the pages in (RNR meanwhile) and every byte lands.
TEST_F(OdpTest, WriteIntoUntouchedMemory) {
  long faults = Counter("odp_rx_faults");
  const uint32_t len = 3 << 20;
  ASSERT_EQ(WriteOdp(1, 4096 + 100, len, 11), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(odp_ + 4096 + 100, len, 11));
  EXPECT_GT(Counter("odp_rx_faults"), faults);
  // Untouched around it: still zero.
  for (size_t i = 0; i < 4096 + 100; i++) ASSERT_EQ(odp_[i], 0) << i;
}

// A SEND into a receive WQE whose buffers are untouched ODP memory.
TEST_F(OdpTest, SendIntoUntouchedMemory) {
  const uint32_t len = 200000;
  Pattern(a_.buf.data(), len, 12);
  std::vector<ibv_sge> rs = {OdpSge(5, 70000), OdpSge(1 << 20, len - 70000)};
  ASSERT_EQ(PostRecv(b_, 7, rs), 0);
  ASSERT_EQ(PostSend(a_, 7, IBV_WR_SEND, Sges(a_, 0, len, 1)), 0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  ibv_wc r = Wait(b_.cq);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.byte_len, len);
  EXPECT_TRUE(IsPattern(odp_ + 5, 70000, 12));
  EXPECT_TRUE(IsPattern(odp_ + (1 << 20), len - 70000, 12, 70000));
}

// A READ whose local buffer is untouched ODP memory (faulted in when the
// request goes), and a READ from an ODP region the responder's CPU wrote.
TEST_F(OdpTest, ReadIntoAndFromOdpMemory) {
  const uint32_t len = 1 << 20;
  Pattern(b_.buf.data(), len, 13);
  ASSERT_EQ(PostSend(a_, 8, IBV_WR_RDMA_READ, {OdpSge(8192, len)},
                     reinterpret_cast<uintptr_t>(b_.buf.data()), b_.mr->rkey),
            0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(odp_ + 8192, len, 13));

  // Now the ODP memory is the source: the peer READs it into b_'s buffer.
  Pattern(odp_ + (2 << 20), len, 14);
  std::fill(b_.buf.begin(), b_.buf.begin() + len, 0);
  ASSERT_EQ(PostSend(b_, 9, IBV_WR_RDMA_READ, Sges(b_, 0, len, 1),
                     reinterpret_cast<uintptr_t>(odp_ + (2 << 20)),
                     omr_->rkey),
            0);
  EXPECT_EQ(Wait(b_.cq).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(b_.buf.data(), len, 14));
}

// A SEND whose source is ODP memory never touched but by the CPU's write.
TEST_F(OdpTest, SendFromOdpMemory) {
  const uint32_t len = 300000;
  Pattern(odp_ + 3, len, 15);
  ASSERT_EQ(PostRecv(b_, 10, Sges(b_, 0, len, 1)), 0);
  ASSERT_EQ(PostSend(a_, 10, IBV_WR_SEND, {OdpSge(3, len)}), 0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(Wait(b_.cq).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(b_.buf.data(), len, 15));
}

// Fetch-and-add on an untouched ODP page: the original value was 0.
TEST_F(OdpTest, AtomicOnUntouchedMemory) {
  ibv_sge s = {reinterpret_cast<uintptr_t>(a_.buf.data()), 8, a_.mr->lkey};
  ibv_send_wr wr = {}, *bad;
  memset(a_.buf.data(), 0xff, 8);
  wr.wr_id = 11;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = reinterpret_cast<uintptr_t>(odp_ + (3 << 20));
  wr.wr.atomic.rkey = omr_->rkey;
  wr.wr.atomic.compare_add = 5;
  ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  uint64_t orig, now;
  memcpy(&orig, a_.buf.data(), 8);
  memcpy(&now, odp_ + (3 << 20), 8);
  EXPECT_EQ(orig, 0u);
  EXPECT_EQ(now, 5u);
}

// The process replaces the memory under the MR (munmap + mmap at the same
// address, and MADV_DONTNEED): the MR is invalidated and the next WRITE
// lands in the new pages, which the process sees.
TEST_F(OdpTest, RemapThenTrafficSeesNewPages) {
  const uint32_t len = 256 << 10;
  ASSERT_EQ(WriteOdp(1, 0, len, 21), IBV_WC_SUCCESS);
  ASSERT_TRUE(IsPattern(odp_, len, 21));
  long inval = Counter("odp_invalidations");

  ASSERT_EQ(munmap(odp_, kOdpLen), 0);
  ASSERT_EQ(Map(odp_), odp_);
  EXPECT_GT(Counter("odp_invalidations"), inval);
  EXPECT_EQ(odp_[0], 0);  // really new memory
  ASSERT_EQ(WriteOdp(2, 0, len, 22), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(odp_, len, 22));

  ASSERT_EQ(madvise(odp_, kOdpLen, MADV_DONTNEED), 0);
  EXPECT_EQ(odp_[100], 0);
  ASSERT_EQ(WriteOdp(3, 0, len, 23), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(odp_, len, 23));
  // A READ of the new pages returns what the process sees.
  std::fill(b_.buf.begin(), b_.buf.begin() + len, 0);
  Pattern(odp_ + 4096, len, 24);
  ASSERT_EQ(PostSend(b_, 4, IBV_WR_RDMA_READ, Sges(b_, 0, len, 1),
                     reinterpret_cast<uintptr_t>(odp_ + 4096), omr_->rkey),
            0);
  EXPECT_EQ(Wait(b_.cq).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(b_.buf.data(), len, 24));
}

// Memory unmapped under the MR and not replaced: a WRITE there is a remote
// access error, not a write anywhere.
TEST_F(OdpTest, WriteIntoUnmappedMemoryFails) {
  ASSERT_EQ(munmap(odp_ + (1 << 20), 1 << 20), 0);
  EXPECT_EQ(WriteOdp(1, (1 << 20) + 64, 8192, 31), IBV_WC_REM_ACCESS_ERR);
  // Give the hole back so TearDown's munmap covers a mapping again.
  ASSERT_NE(mmap(odp_ + (1 << 20), 1 << 20, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            MAP_FAILED);
}

// ibv_advise_mr(): prefetching faults the range in (the WRITE after it
// needs no fault of the receive path); NO_FAULT, bad keys and ranges are
// refused.
TEST_F(OdpTest, AdvisePrefetch) {
  ibv_sge s = OdpSge(0, 1 << 20);
  ASSERT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                          IBV_ADVISE_MR_FLAG_FLUSH, &s, 1),
            0);
  long faults = Counter("odp_rx_faults");
  ASSERT_EQ(WriteOdp(1, 0, 1 << 20, 41), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(odp_, 1 << 20, 41));
  EXPECT_EQ(Counter("odp_rx_faults"), faults);

  s = OdpSge(2 << 20, 4096);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &s, 1), 0);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &s,
                          1),
            EOPNOTSUPP);
  ibv_sge bad = s;
  bad.lkey ^= 0x80;  // a stale key byte
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &bad, 1),
            EINVAL);
  bad = OdpSge(kOdpLen - 100, 4096);  // past the MR's end
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &bad, 1),
            EINVAL);
  // A pinned MR: nothing to do, no error.
  ibv_sge pinned = Sges(a_, 0, 4096, 1)[0];
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &pinned, 1),
            0);
}

// Implicit ODP (the whole address space) is not offered.
TEST_F(OdpTest, ImplicitOdpRefused) {
  errno = 0;
  ibv_mr *mr = ibv_reg_mr(pd_, nullptr, SIZE_MAX, kOdpAccess);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  if (mr) ibv_dereg_mr(mr);
}

// A WRITE with the ODP MR's rkey past its end, or after its dereg, fails
// with a remote access error.
TEST_F(OdpTest, BadKeyAndRange) {
  Pattern(a_.buf.data(), 8192, 51);
  ASSERT_EQ(PostSend(a_, 1, IBV_WR_RDMA_WRITE, Sges(a_, 0, 8192, 1),
                     reinterpret_cast<uintptr_t>(odp_ + kOdpLen - 4096),
                     omr_->rkey),
            0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(OdpTest, DeregisteredKeyFails) {
  uint32_t rkey = omr_->rkey;
  ASSERT_EQ(ibv_dereg_mr(omr_), 0);
  omr_ = nullptr;
  Pattern(a_.buf.data(), 4096, 52);
  ASSERT_EQ(PostSend(a_, 1, IBV_WR_RDMA_WRITE, Sges(a_, 0, 4096, 1),
                     reinterpret_cast<uintptr_t>(odp_), rkey),
            0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_REM_ACCESS_ERR);
  for (size_t i = 0; i < 4096; i++) ASSERT_EQ(odp_[i], 0) << i;
}

// MADV_DONTNEED racing a stream of WRITEs into the ODP region: every WRITE
// succeeds (the memory stays mapped; dropped pages come back as new ones)
// and the last one's bytes are there.
TEST_F(OdpTest, DontneedRacesWrites) {
  std::atomic<bool> stop{false};
  std::thread t([&] {
    while (!stop) {
      madvise(odp_, kOdpLen, MADV_DONTNEED);
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  const uint32_t len = 64 << 10;
  Pattern(a_.buf.data(), len, 61);
  int ok = 0;
  for (int i = 0; i < 200; i++) {
    ASSERT_EQ(PostSend(a_, i, IBV_WR_RDMA_WRITE, Sges(a_, 0, len, 1),
                       reinterpret_cast<uintptr_t>(odp_ + (i % 8) * len * 4),
                       omr_->rkey),
              0);
    ibv_wc wc = Wait(a_.cq);
    ok += wc.status == IBV_WC_SUCCESS;
    if (wc.status != IBV_WC_SUCCESS) break;
  }
  stop = true;
  t.join();
  EXPECT_EQ(ok, 200);
  ASSERT_EQ(WriteOdp(1000, 0, len, 62), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(odp_, len, 62));
}

// munmap and mmap of the region racing WRITEs into it: each WRITE
// completes exactly once, successfully or (the memory gone at that
// moment) with a remote access error that ends the stream; the kernel
// writes into no freed page (dmesg stays clean: the lab run checks).
TEST_F(OdpTest, MunmapRacesWrites) {
  std::atomic<bool> stop{false};
  std::thread t([&] {
    while (!stop) {
      munmap(odp_, kOdpLen);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      Map(odp_);
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  const uint32_t len = 64 << 10;
  Pattern(a_.buf.data(), len, 71);
  int ok = 0, failed = 0;
  for (int i = 0; i < 200 && !failed; i++) {
    ASSERT_EQ(PostSend(a_, i, IBV_WR_RDMA_WRITE, Sges(a_, 0, len, 1),
                       reinterpret_cast<uintptr_t>(odp_ + (i % 8) * len * 4),
                       omr_->rkey),
              0);
    ibv_wc wc = Wait(a_.cq);
    EXPECT_EQ(wc.wr_id, static_cast<uint64_t>(i));
    if (wc.status == IBV_WC_SUCCESS)
      ok++;
    else if (wc.status == IBV_WC_REM_ACCESS_ERR)
      failed++;
    else
      ADD_FAILURE() << "status " << wc.status;
  }
  stop = true;
  t.join();
  // The region is mapped again (the thread ended with Map).
  EXPECT_GT(ok + failed, 0);
  ibv_wc none;
  EXPECT_EQ(ibv_poll_cq(a_.cq, 1, &none), 0);
}

}  // namespace
}  // namespace trdma_lab
