// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// The extended verbs on a trdma device: ibv_create_cq_ex() polled with
// ibv_start_poll()/ibv_next_poll()/ibv_end_poll() and the ibv_wc_read_*
// getters, ibv_create_qp_ex() posting through the ibv_wr_* API.  Data moves
// between two connected RC QPs (and two UD QPs) of the device, every opcode
// trdma executes, and the bytes and every getter's value are checked.

#include <arpa/inet.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "qp_fixture.h"

namespace trdma_lab {
namespace {

constexpr uint64_t kWcFlags =
    IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
    IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
    IBV_WC_EX_WITH_DLID_PATH_BITS;

constexpr uint64_t kRcOps =
    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
    IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

// One completion as the ex getters report it.
struct Cqe {
  uint64_t wr_id;
  ibv_wc_status status;
  ibv_wc_opcode opcode;
  uint32_t vendor_err, byte_len, qp_num, src_qp, slid;
  uint32_t imm;  // host order
  unsigned wc_flags;
  uint8_t sl, dlid_path_bits;
};

class XVerbsTest : public DataPathTest {
 protected:
  void SetUp() override {
    DataPathTest::SetUp();
    if (HasFatalFailure()) return;
    xa_ = NewCqEx();
    xb_ = NewCqEx();
    ASSERT_TRUE(xa_ && xb_) << strerror(errno);
    qa_ = NewQpEx(xa_, IBV_QPT_RC, kRcOps);
    qb_ = NewQpEx(xb_, IBV_QPT_RC, kRcOps);
    ASSERT_TRUE(qa_ && qb_) << strerror(errno);
    ASSERT_EQ(Connect(qa_, qb_), 0);
    ASSERT_EQ(Connect(qb_, qa_), 0);
    xqa_ = ibv_qp_to_qp_ex(qa_);
    ASSERT_NE(xqa_, nullptr);
  }

  void TearDown() override {
    for (auto it = qps_.rbegin(); it != qps_.rend(); ++it)
      EXPECT_EQ(ibv_destroy_qp(*it), 0);
    for (ibv_cq_ex *cq : cqs_) EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
    DataPathTest::TearDown();
  }

  ibv_cq_ex *NewCqEx(uint64_t wc_flags = kWcFlags) {
    ibv_cq_init_attr_ex a = {};
    a.cqe = 256;
    a.wc_flags = wc_flags;
    ibv_cq_ex *cq = ibv_create_cq_ex(ctx_.get(), &a);
    if (cq) cqs_.push_back(cq);
    return cq;
  }

  ibv_qp *NewQpEx(ibv_cq_ex *cq, ibv_qp_type type, uint64_t ops) {
    ibv_qp_init_attr_ex a = {};
    a.send_cq = ibv_cq_ex_to_cq(cq);
    a.recv_cq = ibv_cq_ex_to_cq(cq);
    a.qp_type = type;
    a.cap = {64, 64, 4, 4, 128};
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.pd = pd_;
    a.send_ops_flags = ops;
    ibv_qp *qp = ibv_create_qp_ex(ctx_.get(), &a);
    if (qp) qps_.push_back(qp);
    return qp;
  }

  // Up to n completions through start/next/end_poll within ms.
  std::vector<Cqe> PollEx(ibv_cq_ex *cq, size_t n, int ms = 10000) {
    std::vector<Cqe> out;
    auto t0 = Clock::now();
    while (out.size() < n && Ms(t0) < ms) {
      ibv_poll_cq_attr pa = {};
      int rv = ibv_start_poll(cq, &pa);
      if (rv == ENOENT) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        continue;
      }
      EXPECT_EQ(rv, 0);
      if (rv) break;
      do {
        Cqe c;
        c.wr_id = cq->wr_id;
        c.status = cq->status;
        c.opcode = ibv_wc_read_opcode(cq);
        c.vendor_err = ibv_wc_read_vendor_err(cq);
        c.byte_len = ibv_wc_read_byte_len(cq);
        c.qp_num = ibv_wc_read_qp_num(cq);
        c.src_qp = ibv_wc_read_src_qp(cq);
        c.wc_flags = ibv_wc_read_wc_flags(cq);
        c.imm = ntohl(ibv_wc_read_imm_data(cq));
        c.slid = ibv_wc_read_slid(cq);
        c.sl = ibv_wc_read_sl(cq);
        c.dlid_path_bits = ibv_wc_read_dlid_path_bits(cq);
        out.push_back(c);
      } while (out.size() < n && (rv = ibv_next_poll(cq)) == 0);
      if (rv != 0) {
        EXPECT_EQ(rv, ENOENT);
      }
      ibv_end_poll(cq);
    }
    if (out.size() < n)
      ADD_FAILURE() << "got " << out.size() << " of " << n << " completions";
    return out;
  }

  // Nothing arrives on cq within ms.
  void ExpectQuiet(ibv_cq_ex *cq, int ms = 300) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    ibv_poll_cq_attr pa = {};
    int rv = ibv_start_poll(cq, &pa);
    EXPECT_EQ(rv, ENOENT) << "unexpected completion, wr_id " << cq->wr_id;
    if (rv == 0) ibv_end_poll(cq);
  }

  void Recv(ibv_qp *qp, uint64_t id, size_t off, uint32_t len) {
    ibv_sge s = {Addr(b_.buf.data() + off), len, b_.mr->lkey};
    ibv_recv_wr wr = {}, *bad;
    wr.wr_id = id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_recv(qp, &wr, &bad), 0);
  }

  // A successful sender-side completion of qa_.
  void ExpectSent(const Cqe &c, uint64_t id, ibv_wc_opcode op) {
    EXPECT_EQ(c.wr_id, id);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
    EXPECT_EQ(c.opcode, op);
    EXPECT_EQ(c.qp_num, qa_->qp_num);
    EXPECT_EQ(c.vendor_err, 0u);
    EXPECT_EQ(c.wc_flags, 0u);
  }

  // A successful receive on qb_ of a message from qa_.
  void ExpectRecv(const Cqe &c, uint64_t id, ibv_wc_opcode op, uint32_t len,
                  bool imm, uint32_t imm_value = 0) {
    EXPECT_EQ(c.wr_id, id);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
    EXPECT_EQ(c.opcode, op);
    EXPECT_EQ(c.byte_len, len);
    EXPECT_EQ(c.qp_num, qb_->qp_num);
    EXPECT_EQ(c.src_qp, qa_->qp_num);
    EXPECT_EQ(c.wc_flags, imm ? unsigned(IBV_WC_WITH_IMM) : 0u);
    if (imm) {
      EXPECT_EQ(c.imm, imm_value);
    }
    EXPECT_EQ(c.slid, 0u);
    EXPECT_EQ(c.sl, 0);  // no GRH on RC
    EXPECT_EQ(c.dlid_path_bits, 0);
    EXPECT_EQ(c.vendor_err, 0u);
  }

  uint8_t *A(size_t off) { return a_.buf.data() + off; }
  uint8_t *B(size_t off) { return b_.buf.data() + off; }

  std::vector<ibv_cq_ex *> cqs_;
  std::vector<ibv_qp *> qps_;
  ibv_cq_ex *xa_ = nullptr, *xb_ = nullptr;
  ibv_qp *qa_ = nullptr, *qb_ = nullptr;
  ibv_qp_ex *xqa_ = nullptr;
};

TEST_F(XVerbsTest, QueryDeviceExAnswers) {
  ibv_device_attr_ex attr = {};
  ASSERT_EQ(ibv_query_device_ex(ctx_.get(), nullptr, &attr), 0);
  EXPECT_GT(attr.orig_attr.max_qp, 0);
  EXPECT_GT(attr.orig_attr.max_cqe, 0);
  // A plain QP has no ibv_qp_ex; an ibv_wr_* one does.
  EXPECT_EQ(ibv_qp_to_qp_ex(a_.qp), nullptr);
  EXPECT_EQ(static_cast<void *>(xqa_), static_cast<void *>(qa_));
}

TEST_F(XVerbsTest, RefusesWhatTrdmaDoesNotDo) {
  for (uint64_t f : {uint64_t(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP),
                     uint64_t(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)}) {
    errno = 0;
    EXPECT_EQ(NewCqEx(kWcFlags | f), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
  }
  errno = 0;
  EXPECT_EQ(NewQpEx(xa_, IBV_QPT_RC, kRcOps | IBV_QP_EX_WITH_TSO), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // Atomic write: RC only.
  for (ibv_qp_type t : {IBV_QPT_UD, IBV_QPT_UC}) {
    errno = 0;
    EXPECT_EQ(NewQpEx(xa_, t,
                      IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_WRITE),
              nullptr)
        << t;
    EXPECT_EQ(errno, EOPNOTSUPP) << t;
  }
  errno = 0;
  EXPECT_EQ(NewQpEx(xa_, IBV_QPT_UD,
                    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE),
            nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

// RDMA ATOMIC WRITE through ibv_wr_atomic_write(): a pair of RC QPs that
// asked for it, qw_ -> qr_, their own CQs.
class AtomicWriteTest : public XVerbsTest {
 protected:
  void SetUp() override {
    XVerbsTest::SetUp();
    if (HasFatalFailure()) return;
    cw_ = NewCqEx();
    cr_ = NewCqEx();
    ASSERT_TRUE(cw_ && cr_) << strerror(errno);
    qw_ = NewQpEx(cw_, IBV_QPT_RC, kRcOps | IBV_QP_EX_WITH_ATOMIC_WRITE);
    qr_ = NewQpEx(cr_, IBV_QPT_RC, kRcOps | IBV_QP_EX_WITH_ATOMIC_WRITE);
    ASSERT_TRUE(qw_ && qr_) << strerror(errno);
    ASSERT_EQ(Connect(qw_, qr_), 0);
    ASSERT_EQ(Connect(qr_, qw_), 0);
    xw_ = ibv_qp_to_qp_ex(qw_);
    ASSERT_NE(xw_, nullptr);
  }

  // Posts one signaled atomic write of the 8 bytes at val to addr (rkey)
  // and returns its completion.
  Cqe AtomicWrite(uint64_t id, uint32_t rkey, const void *addr,
                  const void *val) {
    ibv_wr_start(xw_);
    xw_->wr_id = id;
    xw_->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_write(xw_, rkey, Addr(addr), val);
    EXPECT_EQ(ibv_wr_complete(xw_), 0);
    auto s = PollEx(cw_, 1);
    return s.empty() ? Cqe{} : s[0];
  }

  ibv_cq_ex *cw_ = nullptr, *cr_ = nullptr;
  ibv_qp *qw_ = nullptr, *qr_ = nullptr;
  ibv_qp_ex *xw_ = nullptr;
};

// The 8 bytes land as they were given, byte for byte, and nothing around
// them changes; the requester completes with IBV_WC_ATOMIC_WRITE, the
// responder with nothing.
TEST_F(AtomicWriteTest, EightBytesLandExactly) {
  const uint8_t val[8] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
  uint8_t *t = B(3 << 20);
  std::memset(t - 64, 0xee, 192);
  Cqe c = AtomicWrite(21, b_.mr->rkey, t, val);
  EXPECT_EQ(c.wr_id, 21u);
  EXPECT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  EXPECT_EQ(c.opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(c.qp_num, qw_->qp_num);
  EXPECT_EQ(c.byte_len, 8u);
  EXPECT_EQ(std::memcmp(t, val, 8), 0);
  for (int i = -64; i < 128; i++) {
    if (i >= 0 && i < 8) continue;
    ASSERT_EQ(t[i], 0xee) << "byte " << i;
  }

  // Again over it, and to the last word of the MR.
  const uint8_t val2[8] = {0xff, 0, 0x80, 0x7f, 1, 2, 3, 4};
  c = AtomicWrite(22, b_.mr->rkey, t, val2);
  EXPECT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  EXPECT_EQ(std::memcmp(t, val2, 8), 0);
  uint8_t *last = B(kBuf - 8);
  c = AtomicWrite(23, b_.mr->rkey, last, val);
  EXPECT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  EXPECT_EQ(std::memcmp(last, val, 8), 0);
  ExpectQuiet(cr_, 100);
  ExpectQuiet(cw_, 50);

  // ibv_post_send() has no field for the 8 bytes: refused, nothing posted.
  ibv_sge sg = {Addr(val), 8, a_.mr->lkey};
  ibv_send_wr wr = {}, *bad = nullptr;
  wr.wr_id = 24;
  wr.opcode = IBV_WR_ATOMIC_WRITE;
  wr.sg_list = &sg;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = Addr(t);
  wr.wr.rdma.rkey = b_.mr->rkey;
  EXPECT_EQ(ibv_post_send(qw_, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  ExpectQuiet(cw_, 100);
  EXPECT_EQ(std::memcmp(t, val2, 8), 0);
}

// A target not 8-byte aligned: NAK invalid request; nothing written.
TEST_F(AtomicWriteTest, MisalignedIsAnInvalidRequest) {
  const uint8_t val[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint8_t *t = B(3 << 20);
  std::memset(t, 0xee, 32);
  Cqe c = AtomicWrite(31, b_.mr->rkey, t + 4, val);
  EXPECT_EQ(c.wr_id, 31u);
  EXPECT_EQ(c.status, IBV_WC_REM_INV_REQ_ERR) << ibv_wc_status_str(c.status);
  for (int i = 0; i < 32; i++) ASSERT_EQ(t[i], 0xee) << "byte " << i;
}

// An rkey without remote write (read and atomic rights only): NAK remote
// access error; nothing written.
TEST_F(AtomicWriteTest, NoRemoteWriteRightIsAnAccessError) {
  const uint8_t val[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint8_t> ro(4096, 0xee);
  ibv_mr *mr = ibv_reg_mr(pd_, ro.data(), ro.size(),
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_ATOMIC);
  ASSERT_NE(mr, nullptr) << strerror(errno);
  Cqe c = AtomicWrite(41, mr->rkey, ro.data() + 64, val);
  EXPECT_EQ(c.wr_id, 41u);
  EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
  for (size_t i = 0; i < ro.size(); i++) ASSERT_EQ(ro[i], 0xee) << i;
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

// Atomic writes from one QP and fetch-adds from another on one word never
// tear: every value written or added keeps the word's two halves equal
// (no carry crosses them), and every value seen (the fetch-adds'
// originals, the CPU's reads, the end result) has equal halves.
TEST_F(AtomicWriteTest, AtomicWritesAndFetchAddsNeverTear) {
  const int n = 300;
  const uint64_t one = (uint64_t(1) << 32) | 1;
  uint64_t *word = reinterpret_cast<uint64_t *>(B(4 << 20));
  auto even = [](uint64_t v) { return (v >> 32) == (v & 0xffffffffu); };
  __atomic_store_n(word, 0, __ATOMIC_RELAXED);
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, bad{0};

  std::thread reader([&] {
    while (!done.load()) {
      if (!even(__atomic_load_n(word, __ATOMIC_RELAXED))) torn++;
    }
  });
  std::thread adder([&] {
    uint64_t *sink = reinterpret_cast<uint64_t *>(A(4 << 20));
    for (int i = 0; i < n && !bad; i++) {
      ibv_wr_start(xqa_);
      xqa_->wr_id = 1000 + i;
      xqa_->wr_flags = IBV_SEND_SIGNALED;
      ibv_wr_atomic_fetch_add(xqa_, b_.mr->rkey, Addr(word), one);
      ibv_wr_set_sge(xqa_, a_.mr->lkey, Addr(sink), 8);
      if (ibv_wr_complete(xqa_)) {
        bad++;
        break;
      }
      auto s = PollEx(xa_, 1);
      if (s.size() != 1 || s[0].status != IBV_WC_SUCCESS) bad++;
      if (!even(*sink)) torn++;
    }
  });
  for (int i = 0; i < n && !bad; i++) {
    // Halves equal, small: no fetch-add carries from one into the other.
    uint64_t v = uint64_t(i * 4096) * one;
    Cqe c = AtomicWrite(2000 + i, b_.mr->rkey, word, &v);
    if (c.status != IBV_WC_SUCCESS || c.opcode != IBV_WC_ATOMIC_WRITE) bad++;
  }
  adder.join();
  done = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(torn.load(), 0);
  EXPECT_TRUE(even(__atomic_load_n(word, __ATOMIC_RELAXED)));
}

TEST_F(XVerbsTest, EveryRcOpcodeMovesDataAndReportsThroughTheGetters) {
  // SEND, gathered from two SGEs.
  Pattern(A(0), 6000, 1);
  std::vector<ibv_sge> sg = Sges(a_, 0, 5000, 2);
  Recv(qb_, 100, 0, 8192);
  ibv_wr_start(xqa_);
  xqa_->wr_id = 1;
  xqa_->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(xqa_);
  ibv_wr_set_sge_list(xqa_, sg.size(), sg.data());
  ASSERT_EQ(ibv_wr_complete(xqa_), 0);
  auto r = PollEx(xb_, 1);
  ASSERT_EQ(r.size(), 1u);
  ExpectRecv(r[0], 100, IBV_WC_RECV, 5000, false);
  EXPECT_TRUE(SameScattered(B(0), sg)) << "SEND payload";
  auto s = PollEx(xa_, 1);
  ASSERT_EQ(s.size(), 1u);
  ExpectSent(s[0], 1, IBV_WC_SEND);
  EXPECT_EQ(s[0].byte_len, 5000u);

  // SEND_WITH_IMM, inline.
  const char msg[] = "inline through ibv_wr_set_inline_data";
  Recv(qb_, 101, 16384, 256);
  ibv_wr_start(xqa_);
  xqa_->wr_id = 2;
  ibv_wr_send_imm(xqa_, htonl(0xc0ffee01));
  ibv_wr_set_inline_data(xqa_, const_cast<char *>(msg), sizeof(msg));
  ASSERT_EQ(ibv_wr_complete(xqa_), 0);
  r = PollEx(xb_, 1);
  ASSERT_EQ(r.size(), 1u);
  ExpectRecv(r[0], 101, IBV_WC_RECV, sizeof(msg), true, 0xc0ffee01);
  EXPECT_EQ(memcmp(B(16384), msg, sizeof(msg)), 0);
  s = PollEx(xa_, 1);
  ASSERT_EQ(s.size(), 1u);
  ExpectSent(s[0], 2, IBV_WC_SEND);

  // RDMA WRITE: no receive consumed, bytes land at the remote address.
  Pattern(A(32768), 70000, 3);
  ibv_wr_start(xqa_);
  xqa_->wr_id = 3;
  ibv_wr_rdma_write(xqa_, b_.mr->rkey, Addr(B(131072)));
  ibv_wr_set_sge(xqa_, a_.mr->lkey, Addr(A(32768)), 70000);
  ASSERT_EQ(ibv_wr_complete(xqa_), 0);
  s = PollEx(xa_, 1);
  ASSERT_EQ(s.size(), 1u);
  ExpectSent(s[0], 3, IBV_WC_RDMA_WRITE);
  EXPECT_TRUE(IsPattern(B(131072), 70000, 3)) << "WRITE payload";
  ExpectQuiet(xb_, 50);

  // RDMA WRITE_WITH_IMM from an inline list; the receive reports it.
  ibv_data_buf parts[2] = {{const_cast<char *>("trdma "), 6},
                           {const_cast<char *>("write+imm"), 9}};
  Recv(qb_, 102, 0, 16);
  ibv_wr_start(xqa_);
  xqa_->wr_id = 4;
  ibv_wr_rdma_write_imm(xqa_, b_.mr->rkey, Addr(B(262144)), htonl(77));
  ibv_wr_set_inline_data_list(xqa_, 2, parts);
  ASSERT_EQ(ibv_wr_complete(xqa_), 0);
  r = PollEx(xb_, 1);
  ASSERT_EQ(r.size(), 1u);
  ExpectRecv(r[0], 102, IBV_WC_RECV_RDMA_WITH_IMM, 15, true, 77);
  EXPECT_EQ(memcmp(B(262144), "trdma write+imm", 15), 0);
  s = PollEx(xa_, 1);
  ASSERT_EQ(s.size(), 1u);
  ExpectSent(s[0], 4, IBV_WC_RDMA_WRITE);

  // RDMA READ of remote bytes into two local SGEs.
  Pattern(B(524288), 9000, 5);
  std::vector<ibv_sge> rsg = Sges(a_, 1 << 20, 9000, 2);
  ibv_wr_start(xqa_);
  xqa_->wr_id = 5;
  ibv_wr_rdma_read(xqa_, b_.mr->rkey, Addr(B(524288)));
  ibv_wr_set_sge_list(xqa_, rsg.size(), rsg.data());
  ASSERT_EQ(ibv_wr_complete(xqa_), 0);
  s = PollEx(xa_, 1);
  ASSERT_EQ(s.size(), 1u);
  ExpectSent(s[0], 5, IBV_WC_RDMA_READ);
  EXPECT_EQ(s[0].byte_len, 9000u);
  EXPECT_TRUE(SameScattered(B(524288), rsg)) << "READ payload";

  // Atomics on an aligned remote word; the original value comes back.
  uint64_t *word = reinterpret_cast<uint64_t *>(B(2 << 20));
  uint64_t *sink = reinterpret_cast<uint64_t *>(A(2 << 20));
  *word = 0x1000;
  *sink = 0;
  ibv_wr_start(xqa_);
  xqa_->wr_id = 6;
  ibv_wr_atomic_cmp_swp(xqa_, b_.mr->rkey, Addr(word), 0x1000, 0x2222);
  ibv_wr_set_sge(xqa_, a_.mr->lkey, Addr(sink), 8);
  ASSERT_EQ(ibv_wr_complete(xqa_), 0);
  s = PollEx(xa_, 1);
  ASSERT_EQ(s.size(), 1u);
  ExpectSent(s[0], 6, IBV_WC_COMP_SWAP);
  EXPECT_EQ(*sink, 0x1000u);
  EXPECT_EQ(*word, 0x2222u);

  ibv_wr_start(xqa_);
  xqa_->wr_id = 7;
  ibv_wr_atomic_fetch_add(xqa_, b_.mr->rkey, Addr(word), 5);
  ibv_wr_set_sge(xqa_, a_.mr->lkey, Addr(sink), 8);
  ASSERT_EQ(ibv_wr_complete(xqa_), 0);
  s = PollEx(xa_, 1);
  ASSERT_EQ(s.size(), 1u);
  ExpectSent(s[0], 7, IBV_WC_FETCH_ADD);
  EXPECT_EQ(*sink, 0x2222u);
  EXPECT_EQ(*word, 0x2227u);
  ExpectQuiet(xa_, 50);
  ExpectQuiet(xb_, 50);
}

// Several WRs in one wr_start..wr_complete, unsignaled ones among them,
// completing in order; ibv_poll_cq() still reads an extended CQ.
TEST_F(XVerbsTest, OneBatchManyWrsAndPlainPollCq) {
  const int n = 20;
  for (int i = 0; i < n; i++) Recv(qb_, 200 + i, 4096 * i, 4096);
  for (int i = 0; i < n; i++) Pattern(A(65536 + 4096 * i), 1000 + i, 10 + i);
  ibv_wr_start(xqa_);
  for (int i = 0; i < n; i++) {
    xqa_->wr_id = 300 + i;
    xqa_->wr_flags = i % 2 ? 0 : IBV_SEND_SIGNALED;
    ibv_wr_send(xqa_);
    ibv_wr_set_sge(xqa_, a_.mr->lkey, Addr(A(65536 + 4096 * i)), 1000 + i);
  }
  ASSERT_EQ(ibv_wr_complete(xqa_), 0);

  // The receiver through ibv_poll_cq(), the sender through start_poll.
  ibv_cq *bcq = ibv_cq_ex_to_cq(xb_);
  for (int i = 0; i < n; i++) {
    ibv_wc wc = Wait(bcq);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, uint64_t(200 + i));
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.byte_len, uint32_t(1000 + i));
    EXPECT_EQ(wc.qp_num, qb_->qp_num);
    EXPECT_TRUE(IsPattern(B(4096 * i), 1000 + i, 10 + i)) << i;
  }
  auto s = PollEx(xa_, n / 2);
  ASSERT_EQ(s.size(), size_t(n / 2));
  for (int i = 0; i < n / 2; i++) ExpectSent(s[i], 300 + 2 * i, IBV_WC_SEND);
  ExpectQuiet(xa_, 100);
}

// A bad lkey: wr_complete posts it (the provider cannot know the key), the
// kernel completes it in error, read through the ex getters; the QP is
// then in error and what is posted after flushes, each WR completing once.
TEST_F(XVerbsTest, BadLkeyCompletesInErrorThroughTheGetters) {
  ibv_wr_start(xqa_);
  xqa_->wr_id = 11;
  xqa_->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(xqa_, b_.mr->rkey, Addr(B(0)));
  ibv_wr_set_sge(xqa_, a_.mr->lkey ^ 0x5a5a00, Addr(A(0)), 64);
  ASSERT_EQ(ibv_wr_complete(xqa_), 0);
  auto s = PollEx(xa_, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].wr_id, 11u);
  EXPECT_EQ(s[0].status, IBV_WC_LOC_PROT_ERR)
      << ibv_wc_status_str(s[0].status);
  EXPECT_EQ(s[0].qp_num, qa_->qp_num);

  ibv_wr_start(xqa_);
  xqa_->wr_id = 12;
  ibv_wr_send(xqa_);
  ibv_wr_set_sge(xqa_, a_.mr->lkey, Addr(A(0)), 64);
  xqa_->wr_id = 13;
  ibv_wr_send(xqa_);
  ASSERT_EQ(ibv_wr_complete(xqa_), 0);
  s = PollEx(xa_, 2);
  ASSERT_EQ(s.size(), 2u);
  for (int i = 0; i < 2; i++) {
    EXPECT_EQ(s[i].wr_id, uint64_t(12 + i));
    EXPECT_EQ(s[i].status, IBV_WC_WR_FLUSH_ERR);
  }
  ExpectQuiet(xa_, 100);
}

// wr_abort posts nothing: no completion on either side, the receive stays
// posted for the next message, which carries the next batch's wr_id.
TEST_F(XVerbsTest, WrAbortPostsNothing) {
  Pattern(A(0), 512, 21);
  Pattern(A(4096), 512, 22);
  Recv(qb_, 400, 8192, 1024);
  ibv_wr_start(xqa_);
  xqa_->wr_id = 41;
  xqa_->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(xqa_);
  ibv_wr_set_sge(xqa_, a_.mr->lkey, Addr(A(0)), 512);
  ibv_wr_rdma_write(xqa_, b_.mr->rkey, Addr(B(0)));
  ibv_wr_set_sge(xqa_, a_.mr->lkey, Addr(A(0)), 512);
  ibv_wr_abort(xqa_);
  ExpectQuiet(xa_);
  ExpectQuiet(xb_, 10);
  for (size_t i = 0; i < 512; i++) ASSERT_EQ(*B(i), 0) << "WRITE went out";

  // An error inside a batch: wr_complete refuses it, nothing goes out.
  std::vector<ibv_sge> many(300, {Addr(A(0)), 1, a_.mr->lkey});
  ibv_wr_start(xqa_);
  xqa_->wr_id = 42;
  ibv_wr_send(xqa_);
  ibv_wr_set_sge(xqa_, a_.mr->lkey, Addr(A(0)), 512);
  ibv_wr_send(xqa_);
  ibv_wr_set_sge_list(xqa_, many.size(), many.data());  // > max_send_sge
  EXPECT_EQ(ibv_wr_complete(xqa_), EINVAL);
  ExpectQuiet(xa_);

  ibv_wr_start(xqa_);
  xqa_->wr_id = 43;
  ibv_wr_send(xqa_);
  ibv_wr_set_sge(xqa_, a_.mr->lkey, Addr(A(4096)), 512);
  ASSERT_EQ(ibv_wr_complete(xqa_), 0);
  auto r = PollEx(xb_, 1);
  ASSERT_EQ(r.size(), 1u);
  ExpectRecv(r[0], 400, IBV_WC_RECV, 512, false);
  EXPECT_TRUE(IsPattern(B(8192), 512, 22));
  auto s = PollEx(xa_, 1);
  ASSERT_EQ(s.size(), 1u);
  ExpectSent(s[0], 43, IBV_WC_SEND);
  ExpectQuiet(xa_, 100);
  ExpectQuiet(xb_, 10);
}

// UD: ibv_wr_set_ud_addr names the destination; the receive reports the
// GRH, the source QP and the network type (sl) through the getters.
TEST_F(XVerbsTest, UdDatagramsThroughWrSetUdAddr) {
  constexpr uint32_t kQkey = 0x22222222;
  ibv_qp *u[2];
  for (ibv_qp *&q : u) {
    q = NewQpEx(xa_, IBV_QPT_UD,
                IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
    ASSERT_NE(q, nullptr) << strerror(errno);
    ibv_qp_attr a = {};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = kQkey;
    ASSERT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                       IBV_QP_PORT | IBV_QP_QKEY),
              0);
    a.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE), 0);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 7;
    ASSERT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
  }
  ibv_ah_attr aa = {};
  aa.is_global = 1;
  aa.port_num = 1;
  aa.grh.sgid_index = GidIndex();
  aa.grh.hop_limit = 64;
  ASSERT_EQ(ibv_query_gid(ctx_.get(), 1, aa.grh.sgid_index, &aa.grh.dgid), 0);
  ibv_ah *ah = ibv_create_ah(pd_, &aa);
  ASSERT_NE(ah, nullptr) << strerror(errno);

  Pattern(A(0), 300, 31);
  ibv_sge rs = {Addr(B(0)), 40 + 300, b_.mr->lkey};
  ibv_recv_wr rwr = {}, *rbad;
  rwr.wr_id = 500;
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  ASSERT_EQ(ibv_post_recv(u[1], &rwr, &rbad), 0);

  ibv_qp_ex *x = ibv_qp_to_qp_ex(u[0]);
  ASSERT_NE(x, nullptr);
  ibv_wr_start(x);
  x->wr_id = 51;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_imm(x, htonl(0xabcd1234));
  ibv_wr_set_ud_addr(x, ah, u[1]->qp_num, kQkey);
  ibv_wr_set_sge(x, a_.mr->lkey, Addr(A(0)), 300);
  ASSERT_EQ(ibv_wr_complete(x), 0);

  auto c = PollEx(xa_, 2);
  ASSERT_EQ(c.size(), 2u);
  bool sent = false, got = false;
  for (const Cqe &e : c) {
    EXPECT_EQ(e.status, IBV_WC_SUCCESS) << ibv_wc_status_str(e.status);
    if (e.wr_id == 51) {
      sent = true;
      EXPECT_EQ(e.opcode, IBV_WC_SEND);
      EXPECT_EQ(e.qp_num, u[0]->qp_num);
      continue;
    }
    got = true;
    EXPECT_EQ(e.wr_id, 500u);
    EXPECT_EQ(e.opcode, IBV_WC_RECV);
    EXPECT_EQ(e.byte_len, 40u + 300);
    EXPECT_EQ(e.qp_num, u[1]->qp_num);
    EXPECT_EQ(e.src_qp, u[0]->qp_num);
    EXPECT_EQ(e.wc_flags, unsigned(IBV_WC_GRH | IBV_WC_WITH_IMM));
    EXPECT_EQ(e.imm, 0xabcd1234u);
    EXPECT_EQ(e.sl, 2) << "RoCE v2 over IPv4";
    EXPECT_TRUE(IsPattern(B(40), 300, 31));
  }
  EXPECT_TRUE(sent && got);

  // Without an address the batch is refused and nothing goes out.
  ibv_wr_start(x);
  ibv_wr_send(x);
  ibv_wr_set_sge(x, a_.mr->lkey, Addr(A(0)), 10);
  EXPECT_EQ(ibv_wr_complete(x), EINVAL);
  ExpectQuiet(xa_, 200);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

// The poll path and a built-and-aborted batch make no system call: a child
// in seccomp strict mode (read, write, exit and sigreturn only, anything
// else kills it) polls a completion through start_poll, the getters and
// end_poll, and builds and aborts a batch, then reports through a pipe.
// The CQ ring is a shared mapping, so the child sees what the kernel wrote.
TEST_F(XVerbsTest, PollPathAndWrAbortMakeNoSystemCall) {
  Recv(qb_, 600, 0, 64);
  ibv_wr_start(xqa_);
  xqa_->wr_id = 61;
  xqa_->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(xqa_);
  ibv_wr_set_sge(xqa_, a_.mr->lkey, Addr(A(0)), 64);
  ASSERT_EQ(ibv_wr_complete(xqa_), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));

  struct Report {
    int start, next;
    uint64_t wr_id;
    int status, opcode;
    uint32_t qp_num;
  } rep = {};
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Report r = {};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT) != 0) syscall(SYS_exit, 3);
    ibv_poll_cq_attr pa = {};
    r.start = ibv_start_poll(xa_, &pa);
    if (r.start == 0) {
      r.wr_id = xa_->wr_id;
      r.status = xa_->status;
      r.opcode = ibv_wc_read_opcode(xa_);
      r.qp_num = ibv_wc_read_qp_num(xa_);
      (void)ibv_wc_read_byte_len(xa_);
      (void)ibv_wc_read_wc_flags(xa_);
      r.next = ibv_next_poll(xa_);
      ibv_end_poll(xa_);
    }
    ibv_wr_start(xqa_);
    ibv_wr_send(xqa_);
    ibv_wr_set_sge(xqa_, a_.mr->lkey, Addr(A(0)), 64);
    ibv_wr_rdma_write(xqa_, b_.mr->rkey, Addr(B(0)));
    ibv_wr_set_inline_data(xqa_, A(0), 16);
    ibv_wr_abort(xqa_);
    if (write(fds[1], &r, sizeof(r)) != sizeof(r)) syscall(SYS_exit, 2);
    syscall(SYS_exit, 0);
  }
  close(fds[1]);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st)) << "child killed by signal "
                             << (WIFSIGNALED(st) ? WTERMSIG(st) : 0)
                             << ": a system call in the poll or wr path";
  ASSERT_EQ(WEXITSTATUS(st), 0);
  ASSERT_EQ(read(fds[0], &rep, sizeof(rep)), ssize_t(sizeof(rep)));
  close(fds[0]);
  EXPECT_EQ(rep.start, 0);
  EXPECT_EQ(rep.wr_id, 61u);
  EXPECT_EQ(rep.status, IBV_WC_SUCCESS);
  EXPECT_EQ(rep.opcode, IBV_WC_SEND);
  EXPECT_EQ(rep.qp_num, qa_->qp_num);
  EXPECT_EQ(rep.next, ENOENT);
}

}  // namespace
}  // namespace trdma_lab
