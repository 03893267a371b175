// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// On-demand paging MRs (IBV_ACCESS_ON_DEMAND): SEND, WRITE, READ and
// atomics into memory no one has touched, checked byte for byte; the
// process unmapping or remapping the memory under a registered MR and the
// traffic then seeing the new pages; ibv_advise_mr() prefetch; bad keys
// and ranges; munmap and MADV_DONTNEED racing incoming WRITEs, and READ
// responses and atomic results coming back into pages MADV_DONTNEED keeps
// taking away (the receive path stalls, faults them in, reads on).  Implicit
// ODP MRs (the whole address space, ImplicitOdpTest): the same on memory
// at unrelated addresses, memory mapped after the registration and
// buffers that span the kernel's 2 MiB chunks; dereg and process exit
// with chunks in use.  A transmitter that sleeps in a fault lets go of its
// socket, so the peer's segments are placed meanwhile (OdpSleepTest, over
// a FUSE file whose reads the test holds back).  (dma-buf MRs:
// dmabuf_test.cc.)
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lab_util.h"
#include "qp_fixture.h"

namespace trdma_lab {
namespace {

constexpr int kOdpAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                           IBV_ACCESS_ON_DEMAND;

// How often the DontneedRaces tests take the pages away.  A page the
// receive path misses costs an RNR round trip (the requester resends the
// message from its start after the RNR timer, the fault work runs
// meanwhile); where the resend misses a page again, the receive path
// stalls and places it in process context (docs/architecture.md).  Before
// that stall, pages taken away much more often than the round trip, which
// a loaded TCG guest stretches to milliseconds, left a WRITE little chance
// to find all of them in (seen with 300 us: a WRITE not done in 10 s; with
// 5 ms, once in a full run).
constexpr auto kDontneedEvery = std::chrono::milliseconds(5);

// Shared anonymous memory, not touched: MADV_DONTNEED there takes the pages
// out of the process's page tables, and so out of an ODP MR (an
// invalidation), but keeps their bytes, which the next fault maps again.
// A READ's bytes placed before a MADV_DONTNEED are still there after it.
uint8_t *MapShared(size_t len) {
  void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t *>(p);
}

// A thread that takes the pages of [p, p + len) away (MADV_DONTNEED) every
// `every` from its start to its end.
class Dropper {
 public:
  Dropper(void *p, size_t len, std::chrono::microseconds every)
      : t_([this, p, len, every] {
          while (!stop_) {
            madvise(p, len, MADV_DONTNEED);
            drops_++;
            std::this_thread::sleep_for(every);
          }
        }) {}
  ~Dropper() {
    stop_ = true;
    t_.join();
  }
  int Drops() const { return drops_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> drops_{0};
  std::thread t_;
};

// How often a Dropper takes the pages of a READ's buffer away: well inside
// the time a round's large READ keeps the responses for that buffer back.
constexpr auto kDropEvery = std::chrono::microseconds(200);

// READs and atomics whose local buffers are ODP memory taken away between
// the request (which faults the buffer in) and the response.
class OdpRaceBase : public DataPathTest {
 protected:
  static constexpr uint32_t kBig = 2 << 20;
  static constexpr uint32_t kSlot = 256 << 10;

  // rounds rounds, each a READ of kBig bytes into a_'s pinned buffer and
  // then three READs of kSlot bytes from b_'s pinned buffer into dst (of
  // the MR lkey names; dst_len bytes, the slots going round): the three
  // responses come after the large one, long after their requests faulted
  // dst in.  Every READ completes successfully, in order; every byte is
  // checked.
  void ReadRounds(uint8_t *dst, uint32_t lkey, size_t dst_len, int rounds) {
    const size_t slots = dst_len / kSlot;
    uint8_t *src = b_.buf.data() + kBig;
    Pattern(b_.buf.data(), kBig, 500);
    for (int r = 0; r < rounds; r++) {
      size_t at[3];
      ASSERT_EQ(PostSend(a_, 4 * r, IBV_WR_RDMA_READ, Sges(a_, 0, kBig, 1),
                         Addr(b_.buf.data()), b_.mr->rkey),
                0);
      for (int k = 0; k < 3; k++) {
        int n = 3 * r + k;
        at[k] = (n % slots) * kSlot;
        Pattern(src + k * kSlot, kSlot, 1000 + n);
        ASSERT_EQ(PostSend(a_, 4 * r + 1 + k, IBV_WR_RDMA_READ,
                           {{Addr(dst + at[k]), kSlot, lkey}},
                           Addr(src + k * kSlot), b_.mr->rkey),
                  0);
      }
      for (int k = 0; k < 4; k++) {
        ibv_wc wc = Wait(a_.cq);
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS)
            << "round " << r << ", WR " << wc.wr_id << ": "
            << ibv_wc_status_str(wc.status);
        ASSERT_EQ(wc.wr_id, 4u * r + k);
      }
      for (int k = 0; k < 3; k++)
        ASSERT_TRUE(IsPattern(dst + at[k], kSlot, 1000 + 3 * r + k))
            << "round " << r << ", READ " << k;
    }
  }

  // As ReadRounds, with three atomics on a word of b_'s pinned buffer
  // behind each large READ (fetch-and-add and compare-and-swap, each
  // adding 1), their original values returned into dst (a page each): each
  // completes successfully and returns the value the ones before it left.
  void AtomicRounds(uint8_t *dst, uint32_t lkey, size_t dst_len,
                    int rounds) {
    const size_t pages = dst_len / 4096;
    uint8_t *target = b_.buf.data() + kBig + 3 * kSlot;
    memset(target, 0, 8);
    uint64_t want = 0;
    for (int r = 0; r < rounds; r++) {
      size_t at[3];
      ASSERT_EQ(PostSend(a_, 4 * r, IBV_WR_RDMA_READ, Sges(a_, 0, kBig, 1),
                         Addr(b_.buf.data()), b_.mr->rkey),
                0);
      for (int k = 0; k < 3; k++) {
        int n = 3 * r + k;
        at[k] = (n % pages) * 4096 + 8 * (n % 8);
        memset(dst + at[k], 0xee, 8);
        ibv_sge s = {Addr(dst + at[k]), 8, lkey};
        ibv_send_wr wr = {}, *bad;
        wr.wr_id = 4 * r + 1 + k;
        wr.opcode = k == 1 ? IBV_WR_ATOMIC_CMP_AND_SWP
                           : IBV_WR_ATOMIC_FETCH_AND_ADD;
        wr.sg_list = &s;
        wr.num_sge = 1;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.atomic.remote_addr = Addr(target);
        wr.wr.atomic.rkey = b_.mr->rkey;
        wr.wr.atomic.compare_add = k == 1 ? want + 1 : 1;
        wr.wr.atomic.swap = want + 2;
        ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
      }
      for (int k = 0; k < 4; k++) {
        ibv_wc wc = Wait(a_.cq);
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS)
            << "round " << r << ", WR " << wc.wr_id << ": "
            << ibv_wc_status_str(wc.status);
        ASSERT_EQ(wc.wr_id, 4u * r + k);
      }
      for (int k = 0; k < 3; k++) {
        uint64_t v;
        memcpy(&v, dst + at[k], 8);
        ASSERT_EQ(v, want + k) << "round " << r << ", atomic " << k;
      }
      want += 3;
    }
    uint64_t v;
    memcpy(&v, target, 8);
    EXPECT_EQ(v, want);
  }
};

class OdpTest : public OdpRaceBase {
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
  EXPECT_TRUE(a.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
  const uint32_t rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
                      IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                      IBV_ODP_SUPPORT_ATOMIC;
  EXPECT_EQ(a.odp_caps.per_transport_caps.rc_odp_caps & rc, rc);
}

// A WRITE over several segments into never-touched memory: the responder
// faults the pages in (RNR meanwhile) and every byte lands.
TEST_F(OdpTest, WriteIntoUntouchedMemory) {
  long faults = Counter("odp_rx_faults");
  long naks_sent = Counter("rnr_naks_sent");
  long retries = Counter("rnr_retries");
  const uint32_t len = 3 << 20;
  ASSERT_EQ(WriteOdp(1, 4096 + 100, len, 11), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(odp_ + 4096 + 100, len, 11));
  EXPECT_GT(Counter("odp_rx_faults"), faults);
  // The responder's RNR NAKs, after each of which the requester went back
  // once (both QPs are trdma0's).
  naks_sent = Counter("rnr_naks_sent") - naks_sent;
  EXPECT_GT(naks_sent, 0);
  EXPECT_EQ(Counter("rnr_retries") - retries, naks_sent);
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

// Sending from memory unmapped under the MR: the WQE completes with a
// local protection error (the transmitter cannot fault the page in), the
// QP goes to error, and nothing arrives at the peer.  A small payload
// fails before its segment goes out, a large one after its header did.
class OdpSendFromHoleTest : public OdpTest,
                           public ::testing::WithParamInterface<uint32_t> {};

TEST_P(OdpSendFromHoleTest, IsALocalProtectionError) {
  const uint32_t len = GetParam();
  ASSERT_EQ(munmap(odp_ + (1 << 20), 1 << 20), 0);
  memset(b_.buf.data(), 0, len);
  ibv_sge s = OdpSge((1 << 20) + 64, len);
  ASSERT_EQ(PostSend(a_, 5, IBV_WR_RDMA_WRITE, {s},
                     reinterpret_cast<uintptr_t>(b_.buf.data()), b_.mr->rkey),
            0);
  ibv_wc c = Wait(a_.cq);
  EXPECT_EQ(c.wr_id, 5u);
  EXPECT_EQ(c.status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(c.status);
  ibv_qp_attr at;
  ibv_qp_init_attr ia;
  ASSERT_EQ(ibv_query_qp(a_.qp, &at, IBV_QP_STATE, &ia), 0);
  EXPECT_EQ(at.qp_state, IBV_QPS_ERR);
  for (uint32_t i = 0; i < len; i++) ASSERT_EQ(b_.buf[i], 0) << i;
  ASSERT_NE(mmap(odp_ + (1 << 20), 1 << 20, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            MAP_FAILED);
}

INSTANTIATE_TEST_SUITE_P(Sizes, OdpSendFromHoleTest,
                         ::testing::Values(512u, 64u << 10));

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

// A file system served over /dev/fuse by a child process of the test:
// files f0, f1, ... of kFileLen bytes each (file k holds the pattern named
// kFileKey + k), whose reads wait until Open() (or kGateMax, so that a
// test that fails does not hang).  A page of one of its files mapped into
// an ODP MR is faulted in by a FUSE read: the kernel sleeps, holding the
// test's mmap_lock for reading, as long as the gate is shut.  The server
// is another process so that nothing it does waits for that lock.
// Mounted under a fresh directory; root only.
class GatedFuse {
 public:
  static constexpr uint32_t kFileLen = 64 << 10;
  static constexpr uint64_t kFileKey = 7000;
  static constexpr auto kGateMax = std::chrono::seconds(30);

  explicit GatedFuse(int files) : files_(files) {
    for (int k = 0; k < files; k++) {
      data_.emplace_back(kFileLen);
      Pattern(data_.back().data(), kFileLen, kFileKey + k);
    }
    buf_.assign(FUSE_MIN_READ_BUFFER + (1 << 20), 0);
    uint8_t *m = MapShared(sizeof(Shared));
    if (!m) return;
    sh_ = new (m) Shared();
    char tmpl[] = "/tmp/trdma-fuse-XXXXXX";
    if (!mkdtemp(tmpl)) return;
    dir_ = tmpl;
    fd_ = open("/dev/fuse", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) return;
    const std::string opts = "fd=" + std::to_string(fd_) +
                             ",rootmode=40000,user_id=0,group_id=0";
    if (mount("trdma-gated", dir_.c_str(), "fuse", MS_NOSUID | MS_NODEV,
              opts.c_str()))
      return;
    mounted_ = true;
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      Serve();
      _exit(0);
    }
  }

  ~GatedFuse() {
    if (sh_) Open();
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
    if (pid_ > 0) {
      sh_->stop = true;
      int st;
      for (int i = 0; i < 200 && waitpid(pid_, &st, WNOHANG) == 0; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (waitpid(pid_, &st, WNOHANG) == 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
      }
    }
    if (fd_ >= 0) close(fd_);
    if (!dir_.empty()) rmdir(dir_.c_str());
    if (sh_) munmap(sh_, sizeof(Shared));
  }

  bool ok() const { return mounted_ && pid_ > 0; }
  std::string Path(int k) const { return dir_ + "/f" + std::to_string(k); }

  // READ requests that came in so far (each waits for the gate).
  int Reads() const { return sh_->reads.load(); }

  // Waits up to `limit` for more than `before` READs.
  bool WaitReads(int before, std::chrono::seconds limit) const {
    auto end = std::chrono::steady_clock::now() + limit;
    while (Reads() <= before) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

  // Whether the gate is still shut (the server opens it after kGateMax).
  bool Shut() const { return !sh_->open.load(); }
  void Open() { sh_->open = true; }
  void Close() { sh_->open = false; }

 private:
  // What the test and the server share.
  struct Shared {
    std::atomic<int> reads{0};
    std::atomic<bool> open{true};
    std::atomic<bool> stop{false};
  };

  // Inode 1 is the root, 2 + k file k.
  static void Attr(fuse_attr *a, uint64_t ino) {
    *a = {};
    a->ino = ino;
    a->nlink = 1;
    a->blksize = 4096;
    if (ino == FUSE_ROOT_ID) {
      a->mode = S_IFDIR | 0755;
    } else {
      a->mode = S_IFREG | 0644;
      a->size = kFileLen;
      a->blocks = kFileLen / 512;
    }
  }

  void Reply(const fuse_in_header &in, int error, const void *p,
             size_t len) {
    fuse_out_header out = {};
    out.len = sizeof(out) + (error ? 0 : len);
    out.error = error;
    out.unique = in.unique;
    iovec iov[2] = {{&out, sizeof(out)}, {const_cast<void *>(p), len}};
    (void)!writev(fd_, iov, error || !len ? 1 : 2);
  }

  // The child: allocates nothing (its buffers were made before the fork).
  void Serve() {
    while (!sh_->stop) {
      pollfd p = {fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      ssize_t n = read(fd_, buf_.data(), buf_.size());
      if (n < 0 && errno == ENODEV) return;  // unmounted
      if (n < static_cast<ssize_t>(sizeof(fuse_in_header))) continue;
      Handle(*reinterpret_cast<const fuse_in_header *>(buf_.data()),
             buf_.data() + sizeof(fuse_in_header));
    }
  }

  void Handle(const fuse_in_header &in, const uint8_t *arg) {
    switch (in.opcode) {
      case FUSE_INIT: {
        const auto *i = reinterpret_cast<const fuse_init_in *>(arg);
        fuse_init_out o = {};
        o.major = FUSE_KERNEL_VERSION;
        o.minor = std::min<uint32_t>(i->minor, FUSE_KERNEL_MINOR_VERSION);
        o.max_readahead = i->max_readahead;
        o.max_background = 16;
        o.congestion_threshold = 12;
        o.max_write = 4096;
        o.time_gran = 1;
        Reply(in, 0, &o, sizeof(o));
        return;
      }
      case FUSE_LOOKUP: {
        const char *name = reinterpret_cast<const char *>(arg);
        int k = -1;
        if (in.nodeid == FUSE_ROOT_ID && name[0] == 'f' &&
            name[1] >= '0' && name[1] <= '9')
          k = atoi(name + 1);
        if (k < 0 || k >= files_) {
          Reply(in, -ENOENT, nullptr, 0);
          return;
        }
        fuse_entry_out e = {};
        e.nodeid = 2 + k;
        e.generation = 1;
        e.entry_valid = e.attr_valid = 3600;
        Attr(&e.attr, e.nodeid);
        Reply(in, 0, &e, sizeof(e));
        return;
      }
      case FUSE_GETATTR: {
        fuse_attr_out a = {};
        a.attr_valid = 3600;
        Attr(&a.attr, in.nodeid);
        Reply(in, 0, &a, sizeof(a));
        return;
      }
      case FUSE_OPEN:
      case FUSE_OPENDIR: {
        fuse_open_out o = {};
        o.fh = in.nodeid;
        Reply(in, 0, &o, sizeof(o));
        return;
      }
      case FUSE_READ: {
        const auto *r = reinterpret_cast<const fuse_read_in *>(arg);
        sh_->reads++;
        const auto end = std::chrono::steady_clock::now() + kGateMax;
        while (!sh_->open && !sh_->stop &&
               std::chrono::steady_clock::now() < end)
          usleep(1000);
        sh_->open = true;
        const uint64_t k = in.nodeid - 2;
        if (k >= static_cast<uint64_t>(files_) || r->offset >= kFileLen) {
          Reply(in, 0, nullptr, 0);
          return;
        }
        const size_t len = std::min<uint64_t>(r->size, kFileLen - r->offset);
        Reply(in, 0, data_[k].data() + r->offset, len);
        return;
      }
      case FUSE_FORGET:
      case FUSE_BATCH_FORGET:
      case FUSE_INTERRUPT:
        return;  // no reply
      case FUSE_FLUSH:
      case FUSE_RELEASE:
      case FUSE_RELEASEDIR:
        Reply(in, 0, nullptr, 0);
        return;
      default:
        Reply(in, -ENOSYS, nullptr, 0);
    }
  }

  const int files_;
  std::vector<std::vector<uint8_t>> data_;
  std::vector<uint8_t> buf_;
  Shared *sh_ = nullptr;
  std::string dir_;
  int fd_ = -1;
  bool mounted_ = false;
  pid_t pid_ = -1;
};

// While the transmitter sleeps on MR memory, the QP's socket is not owned:
// the peer's segments are placed and complete meanwhile.  a_ sends or
// READs into a file mapping (MAP_PRIVATE) of a GatedFuse file registered
// as ODP, right behind a small SEND in the same post (so the run owns the
// socket when it gets there): the fault in of the file's page waits for a
// FUSE read the test holds back.  b_'s SEND to a_ meanwhile must be
// received.  Then the gate opens and everything completes, with the
// file's bytes sent and the READ's bytes placed.
class OdpSleepTest : public DataPathTest {};

TEST_F(OdpSleepTest, PeerSegmentsArePlacedWhileTransmitterFaults) {
  ASSERT_EQ(system("modprobe fuse"), 0);
  GatedFuse fs(2);
  ASSERT_TRUE(fs.ok()) << "FUSE mount: " << strerror(errno);
  const uint32_t len = GatedFuse::kFileLen;
  for (int k = 0; k < 2; k++) {
    SCOPED_TRACE(k == 0 ? "SEND from the file" : "READ into the file");
    int fd = open(fs.Path(k).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << fs.Path(k) << ": " << strerror(errno);
    void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    ASSERT_NE(m, MAP_FAILED);
    auto *file = static_cast<uint8_t *>(m);
    std::unique_ptr<void, std::function<void(void *)>> unmap(
        m, [len](void *p) { munmap(p, len); });
    ibv_mr *mr = ibv_reg_mr(pd_, file, len, kOdpAccess);
    ASSERT_NE(mr, nullptr) << strerror(errno);
    std::unique_ptr<ibv_mr, int (*)(ibv_mr *)> dereg(mr, ibv_dereg_mr);
    const uint64_t base = 100 * k;

    // b_ takes the small SEND (and the file's); a_ takes b_'s.
    ASSERT_EQ(PostRecv(b_, base, Sges(b_, 0, 4096, 1)), 0);
    if (k == 0) {
      ASSERT_EQ(PostRecv(b_, base + 1, Sges(b_, 8192, len, 1)), 0);
    }
    ASSERT_EQ(PostRecv(a_, base + 2, Sges(a_, 8192, 4096, 1)), 0);
    Pattern(b_.buf.data() + (1 << 20), len, 8000 + k);
    Pattern(b_.buf.data() + 4096, 300, 9000 + k);

    ibv_sge small = {Addr(a_.buf.data()), 512, a_.mr->lkey};
    ibv_sge big = {Addr(file), len, mr->lkey};
    ibv_send_wr wr[2] = {}, *bad;
    wr[0].wr_id = base + 3;
    wr[0].opcode = IBV_WR_SEND;
    wr[0].sg_list = &small;
    wr[0].num_sge = 1;
    wr[0].next = &wr[1];
    wr[1].wr_id = base + 4;
    wr[1].opcode = k == 0 ? IBV_WR_SEND : IBV_WR_RDMA_READ;
    wr[1].sg_list = &big;
    wr[1].num_sge = 1;
    wr[1].send_flags = IBV_SEND_SIGNALED;
    wr[1].wr.rdma.remote_addr = Addr(b_.buf.data() + (1 << 20));
    wr[1].wr.rdma.rkey = b_.mr->rkey;
    // b_'s SEND, made now: nothing in the window below allocates (a brk
    // would wait for the mmap_lock the fault holds).
    ibv_sge bs = {Addr(b_.buf.data() + 4096), 300, b_.mr->lkey};
    ibv_send_wr bw = {}, *bbad;
    bw.wr_id = base + 5;
    bw.opcode = IBV_WR_SEND;
    bw.sg_list = &bs;
    bw.num_sge = 1;
    bw.send_flags = IBV_SEND_SIGNALED;

    // The post may transmit itself, from this context, where the socket
    // is free: it posts from a thread of its own, which may sleep there.
    const int reads = fs.Reads();
    fs.Close();
    int posted = -1;
    std::thread poster([&] { posted = ibv_post_send(a_.qp, wr, &bad); });
    const bool faulting = fs.WaitReads(reads, std::chrono::seconds(10));
    bool placed = false;
    ibv_wc wc = {};
    if (faulting) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      EXPECT_EQ(ibv_post_send(b_.qp, &bw, &bbad), 0);
      wc = Wait(a_.cq);
      placed = fs.Shut();
    }
    fs.Open();
    poster.join();
    ASSERT_EQ(posted, 0);
    ASSERT_TRUE(faulting) << "the file's page was not faulted in";
    EXPECT_TRUE(placed) << "b_'s SEND was placed only after the fault";
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.wr_id, base + 2);
    EXPECT_TRUE(IsPattern(a_.buf.data() + 8192, 300, 9000 + k));

    wc = Wait(a_.cq);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.wr_id, base + 4);
    // The small SEND, the file's SEND (k == 0), and b_'s SEND.
    for (int i = 0; i < (k == 0 ? 3 : 2); i++) {
      wc = Wait(b_.cq);
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    }
    if (k == 0)
      EXPECT_TRUE(IsPattern(b_.buf.data() + 8192, len,
                            GatedFuse::kFileKey + k));
    else
      EXPECT_TRUE(IsPattern(file, len, 8000 + k));
    ASSERT_EQ(ibv_dereg_mr(dereg.release()), 0);
  }
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
      std::this_thread::sleep_for(kDontneedEvery);
    }
  });
  const uint32_t len = 64 << 10;
  Pattern(a_.buf.data(), len, 61);
  const long stalls = Counter("rx_fault_stalls");
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
  // Resends that missed a page again were placed through the stall (one
  // per WRITE in the lab, 2026-12-07), not NAKed again.
  EXPECT_GT(Counter("rx_fault_stalls"), stalls);
  ASSERT_EQ(WriteOdp(1000, 0, len, 62), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(odp_, len, 62));
}

// Invalidations of other pages of the MR while WRITEs fault theirs in: the
// kernel's invalidations come for the MR's whole range (its interval
// notifier), so each one makes a fault anywhere in the MR start over, and
// holds every write into the MR off while it runs.  A thread takes the
// last 64 KiB away every millisecond (as malloc returning memory, or the
// kernel compacting or collapsing pages, would); each WRITE goes to pages
// the test took away just before, so every one faults.  Each completes, in
// its 10 s, and its bytes land.
TEST_F(OdpTest, WritesFaultWhileOtherPagesAreInvalidated) {
  const uint32_t len = 256 << 10;
  Dropper other(odp_ + kOdpLen - (64 << 10), 64 << 10,
                std::chrono::milliseconds(1));
  long faults = Counter("odp_rx_faults");
  auto t0 = std::chrono::steady_clock::now();
  long worst = 0;
  for (int i = 0; i < 60; i++) {
    const size_t off = (i % 12) * size_t{len};
    ASSERT_EQ(madvise(odp_ + off, len, MADV_DONTNEED), 0);
    auto t = std::chrono::steady_clock::now();
    ASSERT_EQ(WriteOdp(i, off, len, 700 + i), IBV_WC_SUCCESS) << "WRITE " << i;
    worst = std::max(worst, MsSince(t));
    ASSERT_TRUE(IsPattern(odp_ + off, len, 700 + i)) << "WRITE " << i;
  }
  EXPECT_GT(Counter("odp_rx_faults"), faults);
  std::cout << "60 WRITEs of 256 KiB into pages just taken away, other pages "
            << "invalidated every 1 ms (" << other.Drops() << " times): "
            << MsSince(t0) << " ms, the slowest " << worst << " ms, "
            << Counter("odp_rx_faults") - faults << " faults\n";
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

// READs into ODP memory (shared, so that its bytes outlive MADV_DONTNEED)
// whose pages a second thread keeps taking away while the responses are
// on their way: a response that meets a page not present stops the
// receive path (rx_fault_stalls) until a work item has faulted the page
// in; every READ completes successfully and every byte is in place.
TEST_F(OdpTest, ReadsRaceDontneed) {
  uint8_t *sh = MapShared(kOdpLen);
  ASSERT_NE(sh, nullptr);
  ibv_mr *mr = ibv_reg_mr(pd_, sh, kOdpLen, kOdpAccess);
  ASSERT_NE(mr, nullptr) << strerror(errno);
  long stalls = Counter("rx_fault_stalls");
  {
    Dropper d(sh, kOdpLen, kDropEvery);
    ReadRounds(sh, mr->lkey, kOdpLen, 30);
    EXPECT_GT(d.Drops(), 10);
  }
  EXPECT_GT(Counter("rx_fault_stalls"), stalls);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(sh, kOdpLen);
}

// The same for atomics' original values coming back into ODP memory whose
// pages are being taken away.
TEST_F(OdpTest, AtomicResultsRaceDontneed) {
  uint8_t *sh = MapShared(kOdpLen);
  ASSERT_NE(sh, nullptr);
  ibv_mr *mr = ibv_reg_mr(pd_, sh, kOdpLen, kOdpAccess);
  ASSERT_NE(mr, nullptr) << strerror(errno);
  long stalls = Counter("rx_fault_stalls");
  {
    Dropper d(sh, kOdpLen, kDropEvery);
    AtomicRounds(sh, mr->lkey, kOdpLen, 30);
  }
  EXPECT_GT(Counter("rx_fault_stalls"), stalls);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(sh, kOdpLen);
}

// A READ response about to stall, or stalled, on ODP pages taken away
// after the request (its stall work queued or faulting), and then its MR
// deregistered, or its QP destroyed, or the QP reset, sooner or later:
// every call succeeds and the kernel stays clean (the lab checks dmesg);
// the stall work finds the QP detached or the MR gone.
TEST_F(OdpTest, DeregDestroyResetWhileResponseStalls) {
  const uint32_t big = 2 << 20, len = 256 << 10;
  long stalls = Counter("rx_fault_stalls");
  Pattern(b_.buf.data(), big, 77);
  for (int i = 0; i < 24; i++) {
    SCOPED_TRACE(i);
    uint8_t *sh = MapShared(len);
    ASSERT_NE(sh, nullptr);
    ibv_mr *mr = ibv_reg_mr(pd_, sh, len, kOdpAccess);
    ASSERT_NE(mr, nullptr);
    ibv_cq *cq = ibv_create_cq(ctx_.get(), 16, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    ibv_qp *q = NewQp(cq, {16, 16, 1, 1, 0});
    ibv_qp *p = NewQp(cq, {16, 16, 1, 1, 0});
    ASSERT_TRUE(q && p);
    ASSERT_EQ(Connect(q, p), 0);
    ASSERT_EQ(Connect(p, q), 0);
    // Connected (a first READ answered): the requests below go, and fault
    // sh in, as they are posted, before the MADV_DONTNEED.
    ibv_sge s0 = {Addr(a_.buf.data()), 64, a_.mr->lkey};
    ibv_send_wr w0 = {}, *bad0;
    w0.opcode = IBV_WR_RDMA_READ;
    w0.sg_list = &s0;
    w0.num_sge = 1;
    w0.send_flags = IBV_SEND_SIGNALED;
    w0.wr.rdma.remote_addr = Addr(b_.buf.data());
    w0.wr.rdma.rkey = b_.mr->rkey;
    ASSERT_EQ(ibv_post_send(q, &w0, &bad0), 0);
    ASSERT_EQ(Wait(cq).status, IBV_WC_SUCCESS);
    ibv_sge s1 = {Addr(a_.buf.data()), big, a_.mr->lkey};
    ibv_sge s2 = {Addr(sh), len, mr->lkey};
    ibv_send_wr w2 = {}, w1 = {}, *bad;
    w1.wr_id = 1;
    w1.opcode = IBV_WR_RDMA_READ;
    w1.sg_list = &s1;
    w1.num_sge = 1;
    w1.send_flags = IBV_SEND_SIGNALED;
    w1.wr.rdma.remote_addr = Addr(b_.buf.data());
    w1.wr.rdma.rkey = b_.mr->rkey;
    w1.next = &w2;
    w2 = w1;
    w2.wr_id = 2;
    w2.sg_list = &s2;
    w2.next = nullptr;
    ASSERT_EQ(ibv_post_send(q, &w1, &bad), 0);
    ASSERT_EQ(madvise(sh, len, MADV_DONTNEED), 0);
    // The large READ's completion: the small one's response is next.
    ibv_wc wc = Wait(cq);
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    // Then, later and later, into the stall and its work's faults.
    usleep(500 * i);
    switch (i % 3) {
      case 0:
        EXPECT_EQ(ibv_dereg_mr(mr), 0);
        mr = nullptr;
        break;
      case 1:
        EXPECT_EQ(ibv_destroy_qp(q), 0);
        q = nullptr;
        break;
      case 2: {
        ibv_qp_attr a = {};
        a.qp_state = IBV_QPS_RESET;
        EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE), 0);
        break;
      }
    }
    if (q) {
      EXPECT_EQ(ibv_destroy_qp(q), 0);
    }
    if (mr) {
      EXPECT_EQ(ibv_dereg_mr(mr), 0);
    }
    EXPECT_EQ(ibv_destroy_qp(p), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    munmap(sh, len);
  }
  EXPECT_GT(Counter("rx_fault_stalls"), stalls);
}

// Memory really gone (PROT_NONE over it) under a READ's or an atomic's
// local buffer, whose response comes after a large READ's: the response
// cannot be placed, that WQE completes with IBV_WC_LOC_PROT_ERR and the one
// after it is flushed; the large READ before it succeeds.
class OdpGoneTest : public OdpTest,
                    public ::testing::WithParamInterface<bool> {};

TEST_P(OdpGoneTest, ResponseIsLocalProtectionError) {
  const bool atomic = GetParam();
  const uint32_t big = 8 << 20, len = 64 << 10;
  uint8_t *gone = odp_ + (2 << 20);
  ASSERT_EQ(PostSend(a_, 1, IBV_WR_RDMA_READ, Sges(a_, 0, big, 1),
                     Addr(b_.buf.data()), b_.mr->rkey),
            0);
  // Gone before the request, so surely before its response: the request
  // goes (its buffer is checked against the MR only), the fault when it
  // goes fails, and so does the one for the response.
  ASSERT_EQ(mmap(gone, len, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            gone);
  if (atomic) {
    ibv_sge s = OdpSge(2 << 20, 8);
    ibv_send_wr wr = {}, *bad;
    wr.wr_id = 2;
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.atomic.remote_addr = Addr(b_.buf.data() + big);
    wr.wr.atomic.rkey = b_.mr->rkey;
    wr.wr.atomic.compare_add = 1;
    ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
  } else {
    ASSERT_EQ(PostSend(a_, 2, IBV_WR_RDMA_READ, {OdpSge(2 << 20, len)},
                       Addr(b_.buf.data()), b_.mr->rkey),
              0);
  }
  ASSERT_EQ(PostSend(a_, 3, IBV_WR_RDMA_READ, Sges(a_, 0, 4096, 1),
                     Addr(b_.buf.data()), b_.mr->rkey),
            0);
  ibv_wc wc = Wait(a_.cq);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  wc = Wait(a_.cq);
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(wc.status);
  wc = Wait(a_.cq);
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(wc.status);
  ibv_wc none;
  EXPECT_EQ(ibv_poll_cq(a_.cq, 1, &none), 0);
}

INSTANTIATE_TEST_SUITE_P(Odp, OdpGoneTest, ::testing::Bool(),
                         [](const auto &info) {
                           return info.param ? "Atomic" : "Read";
                         });

// Implicit ODP: one MR for the whole address space of the process.  The
// kernel keeps the pages of each 2 MiB-aligned chunk of addresses in a
// child made on first touch (odp_implicit_children counts them).
class ImplicitOdpTest : public OdpRaceBase {
 protected:
  static constexpr size_t kChunk = 2 << 20;

  void SetUp() override {
    DataPathTest::SetUp();
    if (HasFatalFailure()) return;
    imr_ = ibv_reg_mr(pd_, nullptr, SIZE_MAX, kOdpAccess);
    ASSERT_NE(imr_, nullptr) << "implicit ODP: " << strerror(errno);
  }

  void TearDown() override {
    if (imr_) ibv_dereg_mr(imr_);
    for (auto &m : maps_) munmap(m.first, m.second);
    DataPathTest::TearDown();
  }

  // Fresh anonymous memory mapped now (after the registration), at `at`
  // (MAP_FIXED) or anywhere; unmapped at TearDown.
  uint8_t *Map(size_t len, void *at = nullptr) {
    void *p = mmap(at, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
    if (p == MAP_FAILED) return nullptr;
    maps_.emplace_back(p, len);
    return static_cast<uint8_t *>(p);
  }

  // len bytes of fresh memory starting kChunk-aligned.
  uint8_t *MapAligned(size_t len) {
    void *p = mmap(nullptr, len + kChunk, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    uintptr_t a = (Addr(p) + kChunk - 1) & ~(kChunk - 1);
    if (a > Addr(p)) munmap(p, a - Addr(p));
    uintptr_t end = Addr(p) + len + kChunk;
    if (end > a + len) munmap(reinterpret_cast<void *>(a + len), end - a - len);
    maps_.emplace_back(reinterpret_cast<void *>(a), len);
    return reinterpret_cast<uint8_t *>(a);
  }

  ibv_sge ISge(const void *p, uint32_t len) {
    return {Addr(p), len, imr_->lkey};
  }

  // A WRITE of len bytes (pattern key) from a_'s pinned buffer to dst
  // through the implicit MR's rkey; the requester's completion status.
  ibv_wc_status WriteTo(uint64_t id, const void *dst, uint32_t len,
                        uint64_t key) {
    Pattern(a_.buf.data(), len, key);
    EXPECT_EQ(PostSend(a_, id, IBV_WR_RDMA_WRITE, Sges(a_, 0, len, 1),
                       Addr(dst), imr_->rkey),
              0);
    ibv_wc wc = Wait(a_.cq);
    EXPECT_EQ(wc.wr_id, id);
    return wc.status;
  }

  // A READ by b_ of len bytes at src through the implicit MR's rkey into
  // b_'s pinned buffer; the requester's completion status.
  ibv_wc_status ReadFrom(uint64_t id, const void *src, uint32_t len) {
    std::fill(b_.buf.begin(), b_.buf.begin() + len, 0);
    EXPECT_EQ(PostSend(b_, id, IBV_WR_RDMA_READ, Sges(b_, 0, len, 1),
                       Addr(src), imr_->rkey),
              0);
    ibv_wc wc = Wait(b_.cq);
    EXPECT_EQ(wc.wr_id, id);
    return wc.status;
  }

  ibv_mr *imr_ = nullptr;
  std::vector<std::pair<void *, size_t>> maps_;
};

// The implicit MR covers everything from address 0; a nonzero iova and an
// implicit range without IBV_ACCESS_ON_DEMAND are refused.
TEST_F(ImplicitOdpTest, Registration) {
  EXPECT_EQ(imr_->addr, nullptr);
  EXPECT_EQ(imr_->length, SIZE_MAX);
  errno = 0;
  ibv_mr *mr = ibv_reg_mr_iova(pd_, nullptr, SIZE_MAX, 4096, kOdpAccess);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(errno, EINVAL);
  if (mr) ibv_dereg_mr(mr);
  mr = ibv_reg_mr(pd_, nullptr, SIZE_MAX,
                  kOdpAccess & ~IBV_ACCESS_ON_DEMAND);
  EXPECT_EQ(mr, nullptr);
  if (mr) ibv_dereg_mr(mr);
}

// WRITEs through the one rkey into memory at unrelated addresses: the heap,
// the stack, and memory mapped after the registration; each lands byte
// for byte and nothing around it changes.
TEST_F(ImplicitOdpTest, WriteAtUnrelatedAddresses) {
  long children = Counter("odp_implicit_children");
  long faults = Counter("odp_rx_faults");
  std::unique_ptr<uint8_t[]> heap(new uint8_t[100000 + 200]());
  uint8_t stack[8192 + 200] = {};
  uint8_t *map = Map(3 << 20);
  ASSERT_NE(map, nullptr);
  ASSERT_EQ(WriteTo(1, heap.get() + 100, 100000, 81), IBV_WC_SUCCESS);
  ASSERT_EQ(WriteTo(2, stack + 100, 8192, 82), IBV_WC_SUCCESS);
  ASSERT_EQ(WriteTo(3, map + 5000, (2 << 20) + 12345, 83), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(heap.get() + 100, 100000, 81));
  EXPECT_TRUE(IsPattern(stack + 100, 8192, 82));
  EXPECT_TRUE(IsPattern(map + 5000, (2 << 20) + 12345, 83));
  for (int i = 0; i < 100; i++) {
    ASSERT_EQ(heap[i], 0) << i;
    ASSERT_EQ(heap[100100 + i], 0) << i;
    ASSERT_EQ(stack[i], 0) << i;
    ASSERT_EQ(stack[8292 + i], 0) << i;
  }
  for (size_t i = 0; i < 5000; i++) ASSERT_EQ(map[i], 0) << i;
  // The stack and the heap were touched, the map was not: faults, and
  // children for the chunks (heap, stack and mmap area are apart).
  EXPECT_GT(Counter("odp_rx_faults"), faults);
  EXPECT_GE(Counter("odp_implicit_children") - children, 3);
}

// A buffer across chunk boundaries: a WRITE into it, a READ of it, and a
// SEND out of it; every byte where it belongs.
TEST_F(ImplicitOdpTest, BufferSpanningChunks) {
  uint8_t *m = MapAligned(3 * kChunk);
  ASSERT_NE(m, nullptr);
  long children = Counter("odp_implicit_children");
  uint8_t *p = m + kChunk - 300000;
  const uint32_t len = kChunk + 600000;  // over two boundaries
  ASSERT_EQ(WriteTo(1, p, len, 91), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(p, len, 91));
  for (uint8_t *q = m; q < p; q++) ASSERT_EQ(*q, 0) << q - m;
  for (uint8_t *q = p + len; q < m + 3 * kChunk; q++)
    ASSERT_EQ(*q, 0) << q - m;
  EXPECT_EQ(Counter("odp_implicit_children") - children, 3);

  Pattern(p + 7, len - 14, 92);
  ASSERT_EQ(ReadFrom(2, p + 7, len - 14), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(b_.buf.data(), len - 14, 92));

  ASSERT_EQ(PostRecv(b_, 3, Sges(b_, 0, len, 1)), 0);
  ASSERT_EQ(PostSend(a_, 3, IBV_WR_SEND, {ISge(p + 7, len - 14)}), 0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  ibv_wc r = Wait(b_.cq);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.byte_len, len - 14);
  EXPECT_TRUE(IsPattern(b_.buf.data(), len - 14, 92));
}

// A SEND into receive buffers at unrelated addresses (heap and a new
// mapping) through the implicit lkey.
TEST_F(ImplicitOdpTest, SendIntoUnrelatedBuffers) {
  std::unique_ptr<uint8_t[]> heap(new uint8_t[70000]());
  uint8_t *map = Map(1 << 20);
  ASSERT_NE(map, nullptr);
  const uint32_t len = 200000;
  Pattern(a_.buf.data(), len, 93);
  ASSERT_EQ(PostRecv(b_, 4, {ISge(heap.get(), 70000),
                             ISge(map + 99, len - 70000)}),
            0);
  ASSERT_EQ(PostSend(a_, 4, IBV_WR_SEND, Sges(a_, 0, len, 1)), 0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  ibv_wc r = Wait(b_.cq);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.byte_len, len);
  EXPECT_TRUE(IsPattern(heap.get(), 70000, 93));
  EXPECT_TRUE(IsPattern(map + 99, len - 70000, 93, 70000));
  for (int i = 0; i < 99; i++) ASSERT_EQ(map[i], 0) << i;
}

// A READ whose local buffer is untouched memory mapped after the
// registration (faulted in when the request goes).
TEST_F(ImplicitOdpTest, ReadIntoNewMemory) {
  uint8_t *map = Map(2 << 20);
  ASSERT_NE(map, nullptr);
  const uint32_t len = 1 << 20;
  Pattern(b_.buf.data(), len, 94);
  ASSERT_EQ(PostSend(a_, 5, IBV_WR_RDMA_READ, {ISge(map + 4096 + 1, len)},
                     Addr(b_.buf.data()), b_.mr->rkey),
            0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(map + 4096 + 1, len, 94));
}

// Fetch-and-add and compare-and-swap on untouched memory, the original
// values returned into untouched memory too.
TEST_F(ImplicitOdpTest, AtomicsOnNewMemory) {
  uint8_t *target = Map(1 << 20);
  uint8_t *result = Map(4096);
  ASSERT_NE(target, nullptr);
  ASSERT_NE(result, nullptr);
  ibv_sge s = ISge(result, 8);
  ibv_send_wr wr = {}, *bad;
  wr.wr_id = 6;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = Addr(target + (512 << 10));
  wr.wr.atomic.rkey = imr_->rkey;
  wr.wr.atomic.compare_add = 7;
  ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  uint64_t v;
  memcpy(&v, result, 8);
  EXPECT_EQ(v, 0u);
  memcpy(&v, target + (512 << 10), 8);
  EXPECT_EQ(v, 7u);

  memset(result, 0xee, 16);
  s = ISge(result + 8, 8);
  wr.wr_id = 7;
  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.compare_add = 7;
  wr.wr.atomic.swap = 0x1122334455667788ull;
  ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  memcpy(&v, result + 8, 8);
  EXPECT_EQ(v, 7u);
  memcpy(&v, target + (512 << 10), 8);
  EXPECT_EQ(v, 0x1122334455667788ull);
  EXPECT_EQ(result[0], 0xee);  // the first result's place: untouched
}

// READs into memory mapped after the registration and never touched
// (shared; four chunks), while a second thread takes its pages away:
// the chunks' children are made, every READ completes successfully and
// every byte is in place, responses that found a page gone stalled the
// receive path until it was faulted in.  Then atomics' results the same
// way.
TEST_F(ImplicitOdpTest, ReadsIntoFreshMemoryRaceDontneed) {
  const size_t len = 4 * kChunk;
  uint8_t *sh = MapShared(len);
  ASSERT_NE(sh, nullptr);
  maps_.emplace_back(sh, len);
  long children = Counter("odp_implicit_children");
  long stalls = Counter("rx_fault_stalls");
  {
    Dropper d(sh, len, kDropEvery);
    ReadRounds(sh, imr_->lkey, len, 30);
    if (HasFatalFailure()) return;
    AtomicRounds(sh, imr_->lkey, len, 10);
  }
  EXPECT_GE(Counter("odp_implicit_children") - children, 4);
  EXPECT_GT(Counter("rx_fault_stalls"), stalls);
}

// Memory the process unmapped: a WRITE there is a remote access error.
TEST_F(ImplicitOdpTest, WriteIntoUnmappedMemoryFails) {
  uint8_t *map = Map(2 << 20);
  ASSERT_NE(map, nullptr);
  ASSERT_EQ(WriteTo(1, map + (1 << 20), 8192, 95), IBV_WC_SUCCESS);
  ASSERT_EQ(munmap(map + (1 << 20), 1 << 20), 0);
  EXPECT_EQ(WriteTo(2, map + (1 << 20) + 64, 8192, 96),
            IBV_WC_REM_ACCESS_ERR);
  for (size_t i = 0; i < (1 << 20); i++) ASSERT_EQ(map[i], 0) << i;
}

// Addresses where the process never had memory: the first page, and
// kernel addresses past the user address space (outside the MR).
TEST_F(ImplicitOdpTest, WriteOutsideUserMemoryFails) {
  EXPECT_EQ(WriteTo(1, reinterpret_cast<void *>(64), 4096, 97),
            IBV_WC_REM_ACCESS_ERR);
}

TEST_F(ImplicitOdpTest, WriteToKernelAddressFails) {
  long children = Counter("odp_implicit_children");
  EXPECT_EQ(WriteTo(1, reinterpret_cast<void *>(0xffff888000000000ull), 4096,
                    98),
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(Counter("odp_implicit_children"), children);
}

// A SEND whose gather list points at unmapped memory through the implicit
// lkey: as with an explicit ODP MR, the transmitter cannot read it, the WQE
// completes with a local protection error and the QP goes to error;
// nothing reaches the receiver.
TEST_F(ImplicitOdpTest, SendFromUnmappedMemoryFails) {
  uint8_t *map = Map(1 << 20);
  ASSERT_NE(map, nullptr);
  ASSERT_EQ(munmap(map, 1 << 20), 0);
  ASSERT_EQ(PostRecv(b_, 8, Sges(b_, 0, 4096, 1)), 0);
  ASSERT_EQ(PostSend(a_, 8, IBV_WR_SEND, {ISge(map + 100, 4096)}), 0);
  ibv_wc wc = Wait(a_.cq);
  EXPECT_EQ(wc.wr_id, 8u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(wc.status);
  ibv_qp_attr qa = {};
  ibv_qp_init_attr qi = {};
  ASSERT_EQ(ibv_query_qp(a_.qp, &qa, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
  ibv_wc r;
  int n = ibv_poll_cq(b_.cq, 1, &r);
  EXPECT_TRUE(n == 0 || r.status != IBV_WC_SUCCESS);
}

// munmap + mmap at the same address, and MADV_DONTNEED: the next WRITE
// lands in the new pages the process sees, and a READ returns them.
TEST_F(ImplicitOdpTest, RemapThenTrafficSeesNewPages) {
  const size_t mlen = 3 << 20;
  uint8_t *map = Map(mlen);
  ASSERT_NE(map, nullptr);
  const uint32_t len = 256 << 10;
  ASSERT_EQ(WriteTo(1, map + (2 << 20) - 1000, len, 101), IBV_WC_SUCCESS);
  ASSERT_TRUE(IsPattern(map + (2 << 20) - 1000, len, 101));
  long inval = Counter("odp_invalidations");

  ASSERT_EQ(munmap(map, mlen), 0);
  ASSERT_EQ(mmap(map, mlen, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            map);
  EXPECT_GT(Counter("odp_invalidations"), inval);
  EXPECT_EQ(map[(2 << 20) - 1000], 0);  // really new memory
  ASSERT_EQ(WriteTo(2, map + (2 << 20) - 1000, len, 102), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(map + (2 << 20) - 1000, len, 102));

  ASSERT_EQ(madvise(map, mlen, MADV_DONTNEED), 0);
  EXPECT_EQ(map[(2 << 20) - 1000], 0);
  ASSERT_EQ(WriteTo(3, map + (2 << 20) - 1000, len, 103), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(map + (2 << 20) - 1000, len, 103));
  Pattern(map + 4096, len, 104);
  ASSERT_EQ(ReadFrom(4, map + 4096, len), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(b_.buf.data(), len, 104));
}

// MADV_DONTNEED racing a stream of WRITEs into two chunks: every WRITE
// succeeds and the last one's bytes are there.
TEST_F(ImplicitOdpTest, DontneedRacesWrites) {
  const size_t mlen = 4 << 20;
  uint8_t *map = MapAligned(mlen);
  ASSERT_NE(map, nullptr);
  std::atomic<bool> stop{false};
  std::thread t([&] {
    while (!stop) {
      madvise(map, mlen, MADV_DONTNEED);
      std::this_thread::sleep_for(kDontneedEvery);
    }
  });
  const uint32_t len = 64 << 10;
  Pattern(a_.buf.data(), len, 105);
  int ok = 0;
  for (int i = 0; i < 200; i++) {
    ASSERT_EQ(PostSend(a_, i, IBV_WR_RDMA_WRITE, Sges(a_, 0, len, 1),
                       Addr(map + (i % 8) * len * 8 + (i % 2) * 3000),
                       imr_->rkey),
              0);
    ibv_wc wc = Wait(a_.cq);
    ok += wc.status == IBV_WC_SUCCESS;
    if (wc.status != IBV_WC_SUCCESS) break;
  }
  stop = true;
  t.join();
  EXPECT_EQ(ok, 200);
  ASSERT_EQ(WriteTo(1000, map + kChunk - 5000, len, 106), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(map + kChunk - 5000, len, 106));
}

// Invalidations of two chunks at once (munmap + mmap of one, MADV_DONTNEED
// of the other, from two threads) racing WRITEs into both: each WRITE
// completes once, successfully or (its memory gone at that moment) with a
// remote access error that ends the stream.
TEST_F(ImplicitOdpTest, MunmapRacesWrites) {
  uint8_t *map = MapAligned(2 * kChunk);
  ASSERT_NE(map, nullptr);
  std::atomic<bool> stop{false};
  std::thread t1([&] {
    while (!stop) {
      munmap(map, kChunk);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      mmap(map, kChunk, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  std::thread t2([&] {
    while (!stop) {
      madvise(map + kChunk, kChunk, MADV_DONTNEED);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  const uint32_t len = 64 << 10;
  Pattern(a_.buf.data(), len, 116);
  int ok = 0, failed = 0;
  for (int i = 0; i < 200 && !failed; i++) {
    // Alternately into each chunk, and across the boundary.
    size_t off = i % 3 == 2 ? kChunk - len / 2
                            : (i % 3) * kChunk + (i % 7) * len;
    ASSERT_EQ(PostSend(a_, i, IBV_WR_RDMA_WRITE, Sges(a_, 0, len, 1),
                       Addr(map + off), imr_->rkey),
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
  t1.join();
  t2.join();
  EXPECT_GT(ok + failed, 0);
  ibv_wc none;
  EXPECT_EQ(ibv_poll_cq(a_.cq, 1, &none), 0);
}

// ibv_advise_mr() on the implicit MR: a prefetch of new memory makes its
// chunks and pages ready (the WRITE after it needs no fault of the
// receive path); a prefetch of memory that is not there fails (EFAULT).
TEST_F(ImplicitOdpTest, AdvisePrefetch) {
  uint8_t *map = MapAligned(2 * kChunk);
  ASSERT_NE(map, nullptr);
  long children = Counter("odp_implicit_children");
  ibv_sge s = ISge(map + kChunk - (512 << 10), 1 << 20);
  ASSERT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                          IBV_ADVISE_MR_FLAG_FLUSH, &s, 1),
            0);
  EXPECT_EQ(Counter("odp_implicit_children") - children, 2);
  long faults = Counter("odp_rx_faults");
  ASSERT_EQ(WriteTo(1, map + kChunk - (512 << 10), 1 << 20, 107),
            IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(map + kChunk - (512 << 10), 1 << 20, 107));
  EXPECT_EQ(Counter("odp_rx_faults"), faults);

  s = ISge(map, 4096);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &s, 1), 0);
  ASSERT_EQ(munmap(map + kChunk, kChunk), 0);
  s = ISge(map + kChunk + 4096, 4096);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                          IBV_ADVISE_MR_FLAG_FLUSH, &s, 1),
            EFAULT);
}

// Rights are the registration's: without remote write, a WRITE is
// refused and a READ allowed; a change of rights in place keeps the
// region implicit.
TEST_F(ImplicitOdpTest, AccessFlagsHonoured) {
  ibv_mr *ro = ibv_reg_mr(pd_, nullptr, SIZE_MAX,
                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(ro, nullptr) << strerror(errno);
  uint8_t *map = Map(1 << 20);
  ASSERT_NE(map, nullptr);
  Pattern(map, 8192, 108);
  std::fill(b_.buf.begin(), b_.buf.begin() + 8192, 0);
  ASSERT_EQ(PostSend(b_, 1, IBV_WR_RDMA_READ, Sges(b_, 0, 8192, 1),
                     Addr(map), ro->rkey),
            0);
  EXPECT_EQ(Wait(b_.cq).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(b_.buf.data(), 8192, 108));

  ASSERT_EQ(ibv_rereg_mr(imr_, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr,
                         0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_ON_DEMAND),
            0);
  ASSERT_EQ(WriteTo(2, map + 100000, 4096, 109), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(map + 100000, 4096, 109));

  Pattern(a_.buf.data(), 4096, 110);
  ASSERT_EQ(PostSend(a_, 3, IBV_WR_RDMA_WRITE, Sges(a_, 0, 4096, 1),
                     Addr(map), ro->rkey),
            0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(IsPattern(map, 8192, 108));
  ASSERT_EQ(ibv_dereg_mr(ro), 0);
}

// Dereg with chunks in use: the old rkey fails and nothing is written.
TEST_F(ImplicitOdpTest, DeregWithChildren) {
  uint8_t *map = Map(6 << 20);
  ASSERT_NE(map, nullptr);
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(WriteTo(i, map + i * (2 << 20) + 777, 4096, 111 + i),
              IBV_WC_SUCCESS);
  uint32_t rkey = imr_->rkey;
  ASSERT_EQ(ibv_dereg_mr(imr_), 0);
  imr_ = nullptr;
  memset(map, 0, 6 << 20);
  Pattern(a_.buf.data(), 4096, 114);
  ASSERT_EQ(PostSend(a_, 9, IBV_WR_RDMA_WRITE, Sges(a_, 0, 4096, 1),
                     Addr(map + 777), rkey),
            0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_REM_ACCESS_ERR);
  for (size_t i = 0; i < (6 << 20); i++) ASSERT_EQ(map[i], 0) << i;
}

// A process that exits holding an implicit MR with chunks in use: the
// kernel tears it down after the address space is gone (the lab run
// checks dmesg).
TEST_F(ImplicitOdpTest, ProcessExitWithChildren) {
  long children = Counter("odp_implicit_children");
  fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Context ctx = OpenDevice(DevName());
    if (!ctx) _exit(2);
    ibv_pd *pd = ibv_alloc_pd(ctx.get());
    if (!pd) _exit(3);
    ibv_mr *mr = ibv_reg_mr(pd, nullptr, SIZE_MAX, kOdpAccess);
    if (!mr) _exit(4);
    void *p = mmap(nullptr, 5 << 20, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) _exit(5);
    ibv_sge s = {Addr(p), 5 << 20, mr->lkey};
    if (ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                      IBV_ADVISE_MR_FLAG_FLUSH, &s, 1))
      _exit(6);
    _exit(0);  // no dereg, no close
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_GE(Counter("odp_implicit_children") - children, 3);
  // This process's own implicit MR still works.
  uint8_t *map = Map(1 << 20);
  ASSERT_NE(map, nullptr);
  ASSERT_EQ(WriteTo(1, map + 10, 4096, 115), IBV_WC_SUCCESS);
  EXPECT_TRUE(IsPattern(map + 10, 4096, 115));
}

}  // namespace
}  // namespace trdma_lab
