// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// Control-path verbs and the shared rings: PD, MR, CQ, QP, SRQ and AH, their
// success and failure paths, posting and flushing, and a process that
// scribbles over its own mapped rings.
#include <arpa/inet.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "lab_util.h"

using namespace trdma_lab;

namespace {

class VerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = OpenDevice(DevName());
    ASSERT_TRUE(ctx_) << "cannot open " << DevName();
    ASSERT_EQ(ibv_query_device(ctx_.get(), &dattr_), 0);
    pd_ = ibv_alloc_pd(ctx_.get());
    ASSERT_NE(pd_, nullptr) << strerror(errno);
    cq_ = ibv_create_cq(ctx_.get(), 64, nullptr, nullptr, 0);
    ASSERT_NE(cq_, nullptr) << strerror(errno);
    buf_.assign(1 << 16, 0);
    mr_ = ibv_reg_mr(pd_, buf_.data(), buf_.size(),
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                         IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(mr_, nullptr) << strerror(errno);
  }
  void TearDown() override {
    for (ibv_qp *qp : qps_) ibv_destroy_qp(qp);
    if (mr_) ibv_dereg_mr(mr_);
    if (cq_) ibv_destroy_cq(cq_);
    if (pd_) ibv_dealloc_pd(pd_);
  }

  ibv_qp *CreateQp(uint32_t send_wr = 64, uint32_t recv_wr = 64,
                   uint32_t sge = 2, uint32_t inl = 64, ibv_srq *srq = nullptr,
                   int sig_all = 0) {
    ibv_qp_init_attr ia = {};
    ia.send_cq = cq_;
    ia.recv_cq = cq_;
    ia.srq = srq;
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = sig_all;
    ia.cap.max_send_wr = send_wr;
    ia.cap.max_recv_wr = srq ? 0 : recv_wr;
    ia.cap.max_send_sge = sge;
    ia.cap.max_recv_sge = srq ? 0 : sge;
    ia.cap.max_inline_data = inl;
    ibv_qp *qp = ibv_create_qp(pd_, &ia);
    if (qp) qps_.push_back(qp);
    return qp;
  }

  void Destroy(ibv_qp *qp) {
    qps_.erase(std::remove(qps_.begin(), qps_.end(), qp), qps_.end());
    ASSERT_EQ(ibv_destroy_qp(qp), 0);
  }

  // The GID table index of the netdev's IPv4-mapped RoCE v2 GID.
  int V4GidIndex() {
    ibv_port_attr pa;
    if (ibv_query_port(ctx_.get(), 1, &pa)) return -1;
    for (int i = 0; i < pa.gid_tbl_len; i++) {
      ibv_gid_entry e;
      if (ibv_query_gid_ex(ctx_.get(), 1, i, &e, 0)) continue;
      static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
      if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && !memcmp(e.gid.raw, pfx, 12))
        return i;
    }
    return -1;
  }

  int ToInit(ibv_qp *qp) {
    ibv_qp_attr a = {};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                             IBV_QP_ACCESS_FLAGS);
  }

  ibv_qp_attr RtrAttr(ibv_qp *qp) {
    ibv_qp_attr a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = qp->qp_num;  // connected to itself
    a.rq_psn = 0x123456;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.sgid_index = V4GidIndex();
    a.ah_attr.grh.hop_limit = 64;
    ibv_query_gid(ctx_.get(), 1, a.ah_attr.grh.sgid_index, &a.ah_attr.grh.dgid);
    return a;
  }
  static constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC |
                                  IBV_QP_MIN_RNR_TIMER;

  int ToRtr(ibv_qp *qp) {
    ibv_qp_attr a = RtrAttr(qp);
    return ibv_modify_qp(qp, &a, kRtrMask);
  }

  // To RTR towards peer; PSNs as a requester from ToRts() expects them.
  int ToRtrTowards(ibv_qp *qp, ibv_qp *peer) {
    ibv_qp_attr a = RtrAttr(qp);
    a.dest_qp_num = peer->qp_num;
    a.rq_psn = 0x654321;
    return ibv_modify_qp(qp, &a, kRtrMask);
  }

  // qp in RTS connected to a peer that stays in RTR with no receive
  // posted: every SEND of qp is refused with RNR NAKs and retried without
  // limit (rnr_retry 7), so what qp posts stays outstanding.  (A QP
  // connected to itself refuses its own SENDs, its sq_psn not being its
  // rq_psn, and fails: its WRs would complete early, flushed.)
  int ToRtsTowardsSilentPeer(ibv_qp *qp) {
    ibv_qp *peer = CreateQp();
    if (!peer || ToInit(peer) || ToRtrTowards(peer, qp)) return -1;
    if (ToRtrTowards(qp, peer)) return -1;
    return ToRts(qp);
  }

  int ToRts(ibv_qp *qp) {
    ibv_qp_attr a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0x654321;
    a.max_rd_atomic = 4;
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                             IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                             IBV_QP_MAX_QP_RD_ATOMIC);
  }

  int ToError(ibv_qp *qp) {
    ibv_qp_attr a = {};
    a.qp_state = IBV_QPS_ERR;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE);
  }

  ibv_qp_state State(ibv_qp *qp) {
    ibv_qp_attr a;
    ibv_qp_init_attr ia;
    EXPECT_EQ(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
    return a.qp_state;
  }

  int PostSend(ibv_qp *qp, uint64_t wr_id, ibv_wr_opcode op = IBV_WR_SEND,
               uint32_t lkey = 0, uint32_t len = 64, int flags = 0) {
    ibv_sge sge = {reinterpret_cast<uintptr_t>(buf_.data()), len,
                   lkey ? lkey : mr_->lkey};
    ibv_send_wr wr = {}, *bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED | flags;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf_.data());
    wr.wr.rdma.rkey = mr_->rkey;
    return ibv_post_send(qp, &wr, &bad);
  }

  int PostRecv(ibv_qp *qp, uint64_t wr_id) {
    ibv_sge sge = {reinterpret_cast<uintptr_t>(buf_.data()), 64, mr_->lkey};
    ibv_recv_wr wr = {}, *bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_recv(qp, &wr, &bad);
  }

  // Polls until n completions arrived or 5 s passed.
  std::vector<ibv_wc> Poll(size_t n) {
    std::vector<ibv_wc> out;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (out.size() < n && std::chrono::steady_clock::now() < end) {
      ibv_wc wc[16];
      int k = ibv_poll_cq(cq_, 16, wc);
      EXPECT_GE(k, 0);
      out.insert(out.end(), wc, wc + std::max(k, 0));
      if (k == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return out;
  }

  Context ctx_;
  ibv_device_attr dattr_ = {};
  ibv_pd *pd_ = nullptr;
  ibv_cq *cq_ = nullptr;
  ibv_mr *mr_ = nullptr;
  std::vector<char> buf_;
  std::vector<ibv_qp *> qps_;
};

// --- device limits --------------------------------------------------------

unsigned long Param(const std::string &name) {
  return std::stoul(ReadFile("/sys/module/trdma/parameters/" + name));
}

TEST_F(VerbsTest, DeviceLimitsAreTheModuleParameters) {
  EXPECT_EQ(static_cast<unsigned long>(dattr_.max_qp), Param("max_qp"));
  EXPECT_EQ(static_cast<unsigned long>(dattr_.max_qp_wr), Param("max_qp_wr"));
  EXPECT_EQ(static_cast<unsigned long>(dattr_.max_sge), Param("max_sge"));
  EXPECT_EQ(static_cast<unsigned long>(dattr_.max_cq), Param("max_cq"));
  EXPECT_EQ(static_cast<unsigned long>(dattr_.max_cqe), Param("max_cqe"));
  EXPECT_EQ(static_cast<unsigned long>(dattr_.max_mr), Param("max_mr"));
  EXPECT_EQ(static_cast<unsigned long>(dattr_.max_pd), Param("max_pd"));
  EXPECT_EQ(static_cast<unsigned long>(dattr_.max_srq), Param("max_srq"));
  EXPECT_EQ(static_cast<unsigned long>(dattr_.max_srq_wr),
            Param("max_srq_wr"));
  std::string out = ShOut("ibv_devinfo -v -d " + DevName());
  EXPECT_NE(out.find("max_qp:\t\t\t\t" + std::to_string(dattr_.max_qp)),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("max_cqe:\t\t\t" + std::to_string(dattr_.max_cqe)),
            std::string::npos)
      << out;
}

// With the module loaded with small limits (tests/lab/run does so for this
// test), every object can be created exactly up to its limit, and the next
// one fails with ENOMEM.
// Objects of a kind the device holds now, from `rdma resource show DEV`
// ("... pd 1 cq 1 qp 1 ..."): the kernel's own, such as the MAD layer's QP1
// with its PD and CQ, count against the limits like any other.
static unsigned InUse(const std::string &what) {
  std::string out = ShOut("rdma resource show " + DevName());
  size_t at = out.find(" " + what + " ");
  if (at == std::string::npos) return ~0u;
  return std::stoul(out.substr(at + what.size() + 2));
}

TEST(Limits, EveryLimitIsEnforcedExactly) {
  if (Param("max_pd") > 64 || Param("max_qp") > 64 || Param("max_mr") > 64 ||
      Param("max_cq") > 64 || Param("max_srq") > 64 || Param("max_ah") > 64)
    GTEST_SKIP() << "needs trdma loaded with limits of at most 64";
  Context ctx = OpenDevice(DevName());
  ASSERT_TRUE(ctx);
  // What the kernel holds: with limits that leave room for it, the MAD
  // layer's QP1, a PD (with the DMA MR the core gives every kernel PD) and
  // a CQ; with the lab's small limits (QP1 wants 512 receive WQEs), none.
  const unsigned pd_used = InUse("pd"), cq_used = InUse("cq");
  const unsigned qp_used = InUse("qp"), srq_used = InUse("srq");
  ASSERT_NE(qp_used, ~0u) << "cannot read rdma resource";

  std::vector<ibv_pd *> pds;
  for (ibv_pd *pd; (pd = ibv_alloc_pd(ctx.get()));) pds.push_back(pd);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(pds.size(), Param("max_pd") - pd_used);
  while (pds.size() > 1) {
    ibv_dealloc_pd(pds.back());
    pds.pop_back();
  }
  ibv_pd *pd = pds[0];

  static char mem[4096];
  std::vector<ibv_mr *> mrs;
  for (ibv_mr *mr; (mr = ibv_reg_mr(pd, mem, sizeof(mem), 0));)
    mrs.push_back(mr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(mrs.size(), Param("max_mr") - pd_used);
  for (ibv_mr *mr : mrs) ibv_dereg_mr(mr);

  std::vector<ibv_cq *> cqs;
  for (ibv_cq *cq; (cq = ibv_create_cq(ctx.get(), 4, nullptr, nullptr, 0));)
    cqs.push_back(cq);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(cqs.size(), Param("max_cq") - cq_used);
  while (cqs.size() > 1) {
    ibv_destroy_cq(cqs.back());
    cqs.pop_back();
  }

  std::vector<ibv_qp *> qps;
  for (;;) {
    ibv_qp_init_attr ia = {};
    ia.send_cq = cqs[0];
    ia.recv_cq = cqs[0];
    ia.qp_type = IBV_QPT_RC;
    ia.cap = {2, 2, 1, 1, 0};
    ibv_qp *qp = ibv_create_qp(pd, &ia);
    if (!qp) break;
    qps.push_back(qp);
  }
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(qps.size(), Param("max_qp") - qp_used);
  for (ibv_qp *qp : qps) ibv_destroy_qp(qp);

  std::vector<ibv_srq *> srqs;
  for (;;) {
    ibv_srq_init_attr sa = {};
    sa.attr = {4, 1, 0};
    ibv_srq *srq = ibv_create_srq(pd, &sa);
    if (!srq) break;
    srqs.push_back(srq);
  }
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(srqs.size(), Param("max_srq") - srq_used);
  for (ibv_srq *srq : srqs) ibv_destroy_srq(srq);

  ibv_ah_attr aa = {};
  aa.is_global = 1;
  aa.port_num = 1;
  aa.grh.hop_limit = 64;
  ASSERT_EQ(ibv_query_gid(ctx.get(), 1, 0, &aa.grh.dgid), 0);
  std::vector<ibv_ah *> ahs;
  for (ibv_ah *ah; (ah = ibv_create_ah(pd, &aa));) ahs.push_back(ah);
  EXPECT_EQ(ahs.size(), Param("max_ah"));
  for (ibv_ah *ah : ahs) ibv_destroy_ah(ah);

  ibv_destroy_cq(cqs[0]);
  ibv_dealloc_pd(pd);
}

// --- PD and MR ------------------------------------------------------------

TEST_F(VerbsTest, MrKeysChangeOnReregistration) {
  std::set<uint32_t> keys;
  for (int i = 0; i < 8; i++) {
    ibv_mr *mr = ibv_reg_mr(pd_, buf_.data(), 4096, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    EXPECT_EQ(mr->lkey, mr->rkey);
    EXPECT_TRUE(keys.insert(mr->lkey).second) << "key reused: " << mr->lkey;
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
  }
}

TEST_F(VerbsTest, MrAccessFlagsAreChecked) {
  errno = 0;
  // Remote write without local write is invalid (IB spec).
  EXPECT_EQ(ibv_reg_mr(pd_, buf_.data(), 4096, IBV_ACCESS_REMOTE_WRITE),
            nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, buf_.data(), 0, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_NE(errno, 0);
  // On-demand paging and zero-based MRs are not offered.
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, buf_.data(), 4096,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED),
            nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(VerbsTest, SmallUnalignedOverlappingAndRelaxedMrs) {
  std::vector<ibv_mr *> mrs;
  for (size_t off : {1, 3, 100, 4095, 4097}) {
    ibv_mr *mr = ibv_reg_mr(pd_, buf_.data() + off, 7, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr) << off;
    mrs.push_back(mr);
  }
  // The IOVA keeps the page offset of the address, as uverbs requires.
  char *addr = buf_.data() + 10;
  uint64_t iova = 0x100000 + (reinterpret_cast<uintptr_t>(addr) & 4095);
  ibv_mr *relaxed = ibv_reg_mr_iova2(
      pd_, addr, 5000, iova,
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
  ASSERT_NE(relaxed, nullptr) << strerror(errno);
  mrs.push_back(relaxed);
  std::set<uint32_t> keys;
  for (ibv_mr *mr : mrs) EXPECT_TRUE(keys.insert(mr->lkey).second);
  for (ibv_mr *mr : mrs) EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(VerbsTest, RegisteringUnmappedMemoryFails) {
  void *p = mmap(nullptr, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  munmap(p, 8192);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, p, 8192, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_NE(errno, 0);
}

// --- CQ -------------------------------------------------------------------

TEST_F(VerbsTest, CqSizeIsCheckedAndGranted) {
  ibv_cq *cq = ibv_create_cq(ctx_.get(), 100, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_GE(cq->cqe, 100);
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(cq, 1, &wc), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_.get(), dattr_.max_cqe + 1, nullptr, nullptr, 0),
            nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(VerbsTest, CqOverflowRaisesCqError) {
  ibv_cq *cq = ibv_create_cq(ctx_.get(), 1, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr ia = {};
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {4, 16, 1, 1, 0};
  ibv_qp *qp = ibv_create_qp(pd_, &ia);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(ToInit(qp), 0);
  const int posted = cq->cqe + 3;
  for (int i = 0; i < posted; i++) ASSERT_EQ(PostRecv(qp, i), 0);
  ASSERT_EQ(ToError(qp), 0);  // more flushes than the CQ holds
  EXPECT_TRUE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_CQ_ERR, 5000));
  // What did fit is intact and in order.
  std::vector<ibv_wc> wc(posted);
  int n = ibv_poll_cq(cq, posted, wc.data());
  EXPECT_EQ(n, cq->cqe);
  for (int i = 0; i < n; i++) EXPECT_EQ(wc[i].wr_id, static_cast<uint64_t>(i));
  ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
}

TEST_F(VerbsTest, CqInUseCannotBeDestroyed) {
  ibv_qp *qp = CreateQp();
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ibv_destroy_cq(cq_), EBUSY);
}

// --- QP -------------------------------------------------------------------

TEST_F(VerbsTest, QpCapsAreGrantedAndLimited) {
  ibv_qp_init_attr ia = {};
  ia.send_cq = cq_;
  ia.recv_cq = cq_;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {100, 50, 3, 2, 40};
  ibv_qp *qp = ibv_create_qp(pd_, &ia);
  ASSERT_NE(qp, nullptr) << strerror(errno);
  qps_.push_back(qp);
  EXPECT_GE(ia.cap.max_send_wr, 100u);
  EXPECT_GE(ia.cap.max_recv_wr, 50u);
  EXPECT_GE(ia.cap.max_send_sge, 3u);
  EXPECT_GE(ia.cap.max_recv_sge, 2u);
  EXPECT_GE(ia.cap.max_inline_data, 40u);
  EXPECT_GE(qp->qp_num, 16u);

  ibv_qp_attr a;
  ibv_qp_init_attr qia;
  ASSERT_EQ(ibv_query_qp(qp, &a, IBV_QP_CAP, &qia), 0);
  EXPECT_EQ(qia.cap.max_send_wr, ia.cap.max_send_wr);
  EXPECT_EQ(qia.cap.max_inline_data, ia.cap.max_inline_data);

  errno = 0;
  EXPECT_EQ(CreateQp(dattr_.max_qp_wr + 1), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(CreateQp(8, 8, dattr_.max_sge + 1), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(CreateQp(8, 8, 1, 1 << 20), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// Other QP types than RC, UC and UD (UC: tests/lab/uc_test.cc) are refused.
TEST_F(VerbsTest, XrcAndRawQpsAreRefused) {
  for (ibv_qp_type t : {IBV_QPT_XRC_SEND, IBV_QPT_RAW_PACKET}) {
    ibv_qp_init_attr ia = {};
    ia.send_cq = cq_;
    ia.recv_cq = cq_;
    ia.qp_type = t;
    ia.cap = {8, 8, 1, 1, 0};
    errno = 0;
    ibv_qp *qp = ibv_create_qp(pd_, &ia);
    EXPECT_EQ(qp, nullptr) << t;
    EXPECT_EQ(errno, EOPNOTSUPP) << t;
    if (qp) ibv_destroy_qp(qp);
  }
}

// --- UD QPs ---------------------------------------------------------------

class UdTest : public VerbsTest {
 protected:
  static constexpr uint32_t kQkey = 0x11111111;

  void SetUp() override {
    VerbsTest::SetUp();
    if (HasFatalFailure()) return;
    // The IPv4-mapped RoCE v2 GID of the port.
    for (gid_index_ = 0; gid_index_ < 16; gid_index_++) {
      ASSERT_EQ(ibv_query_gid(ctx_.get(), 1, gid_index_, &gid_), 0);
      static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
      if (!memcmp(gid_.raw, v4, sizeof(v4))) break;
    }
    ASSERT_LT(gid_index_, 16) << "no IPv4 GID";
    ibv_ah_attr aa = {};
    aa.is_global = 1;
    aa.port_num = 1;
    aa.grh.dgid = gid_;
    aa.grh.sgid_index = gid_index_;
    aa.grh.hop_limit = 64;
    ah_ = ibv_create_ah(pd_, &aa);
    ASSERT_NE(ah_, nullptr) << strerror(errno);
  }
  void TearDown() override {
    for (ibv_qp *qp : qps_) ibv_destroy_qp(qp);
    qps_.clear();
    if (ah_) ibv_destroy_ah(ah_);
    VerbsTest::TearDown();
  }
  // A UD QP in RTS with both queues' completions on cq (cq_ if none),
  // taking its receive WQEs from srq if given.
  ibv_qp *UdQp(uint32_t qkey = kQkey, ibv_cq *cq = nullptr,
               ibv_srq *srq = nullptr, ibv_qp_cap cap = {16, 16, 1, 1, 0}) {
    ibv_qp_init_attr ia = {};
    ia.send_cq = cq ? cq : cq_;
    ia.recv_cq = cq ? cq : cq_;
    ia.srq = srq;
    ia.qp_type = IBV_QPT_UD;
    ia.sq_sig_all = 1;
    ia.cap = cap;
    ibv_qp *qp = ibv_create_qp(pd_, &ia);
    if (!qp) return nullptr;
    qps_.push_back(qp);
    ibv_qp_attr a = {};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = qkey;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                  IBV_QP_QKEY))
      return nullptr;
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) return nullptr;
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 7;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) return nullptr;
    return qp;
  }
  // Posts a receive of len bytes at buf_ offset off.
  void Recv(ibv_qp *qp, size_t off, uint32_t len, uint64_t id) {
    ibv_sge sge = {Addr(B() + off), len, mr_->lkey};
    ibv_recv_wr wr = {}, *bad;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_recv(qp, &wr, &bad), 0);
  }
  int Send(ibv_qp *qp, size_t off, uint32_t len, uint32_t dqpn, uint32_t qkey,
           uint64_t id, bool imm = false) {
    ibv_sge sge = {Addr(B() + off), len, mr_->lkey};
    ibv_send_wr wr = {}, *bad;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    wr.imm_data = htonl(0xabcd1234);
    wr.wr.ud.ah = ah_;
    wr.wr.ud.remote_qpn = dqpn;
    wr.wr.ud.remote_qkey = qkey;
    return ibv_post_send(qp, &wr, &bad);
  }
  // The next completion within ms, or status -1.
  ibv_wc Poll(int ms = 2000) {
    ibv_wc wc = {};
    wc.status = static_cast<ibv_wc_status>(-1);
    auto t0 = Clock::now();
    while (Ms(t0) < ms)
      if (ibv_poll_cq(cq_, 1, &wc) == 1) return wc;
    wc.status = static_cast<ibv_wc_status>(-1);
    return wc;
  }

  uint8_t *B() { return reinterpret_cast<uint8_t *>(buf_.data()); }

  ibv_ah *ah_ = nullptr;
  union ibv_gid gid_;
  int gid_index_ = 0;
};

TEST_F(UdTest, DatagramArrivesWithTheRoceGrh) {
  ibv_qp *a = UdQp(), *b = UdQp();
  ASSERT_TRUE(a && b) << strerror(errno);
  Pattern(B() + 4096, 200, 42);
  Recv(b, 0, 40 + 200, 77);
  ASSERT_EQ(Send(a, 4096, 200, b->qp_num, kQkey, 1, true), 0);
  bool got_send = false, got_recv = false;
  for (int i = 0; i < 2; i++) {
    ibv_wc wc = Poll();
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    if (wc.wr_id == 1) {
      EXPECT_EQ(wc.opcode, IBV_WC_SEND);
      got_send = true;
      continue;
    }
    got_recv = true;
    EXPECT_EQ(wc.wr_id, 77u);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.byte_len, 40u + 200);
    EXPECT_EQ(wc.wc_flags, unsigned(IBV_WC_GRH | IBV_WC_WITH_IMM));
    EXPECT_EQ(ntohl(wc.imm_data), 0xabcd1234u);
    EXPECT_EQ(wc.qp_num, b->qp_num);
    EXPECT_EQ(wc.src_qp, a->qp_num);
    EXPECT_EQ(wc.pkey_index, 0);
    EXPECT_EQ(wc.sl, 2) << "RoCE v2 over IPv4, as mlx5 reports it";
    // The GRH area: an IPv4 header in its last 20 bytes, from this address
    // to this address, with a valid checksum.
    const uint8_t *ip = B() + 20;
    EXPECT_EQ(ip[0], 0x45);
    EXPECT_EQ(ip[9], 17) << "UDP";
    EXPECT_EQ(memcmp(ip + 12, gid_.raw + 12, 4), 0) << "source";
    EXPECT_EQ(memcmp(ip + 16, gid_.raw + 12, 4), 0) << "destination";
    uint32_t sum = 0;
    for (int w = 0; w < 10; w++) sum += ip[2 * w] << 8 | ip[2 * w + 1];
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    EXPECT_EQ(sum, 0xffffu) << "IPv4 header checksum";
    EXPECT_TRUE(IsPattern(B() + 40, 200, 42));
    // libibverbs builds the reply's address from it.
    ibv_ah_attr back = {};
    ASSERT_EQ(ibv_init_ah_from_wc(ctx_.get(), 1, &wc,
                                  reinterpret_cast<ibv_grh *>(B()),
                                  &back),
              0);
    EXPECT_EQ(memcmp(back.grh.dgid.raw, gid_.raw, 16), 0);
  }
  EXPECT_TRUE(got_send && got_recv);
}

TEST_F(UdTest, WrongQkeyIsDroppedAndCounted) {
  ibv_qp *a = UdQp(), *b = UdQp();
  ASSERT_TRUE(a && b) << strerror(errno);
  Recv(b, 0, 40 + 64, 5);
  long before = Counter("ud_rx_bad_qkey");
  ASSERT_EQ(Send(a, 4096, 64, b->qp_num, kQkey + 1, 1), 0);
  ibv_wc wc = Poll();
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 1u) << "the sender completes: UD is unreliable";
  EXPECT_EQ(Poll(300).status, static_cast<ibv_wc_status>(-1))
      << "nothing arrives";
  EXPECT_EQ(Counter("ud_rx_bad_qkey"), before + 1);
  // A Q_Key with the high bit set in the WR means the QP's own (IBA).
  ASSERT_EQ(Send(a, 4096, 64, b->qp_num, 0x80000000u, 2), 0);
  int n = 0;
  for (ibv_wc w; (w = Poll()).status == IBV_WC_SUCCESS && ++n < 2;) {
  }
  EXPECT_EQ(n, 2) << "the send and the receive";
}

// The effective capability set without CAP_NET_RAW while it lives.
class NoNetRaw {
 public:
  NoNetRaw() {
    if (syscall(SYS_capget, &h_, d_)) return;
    __user_cap_data_struct d[2] = {d_[0], d_[1]};
    d[0].effective &= ~(1u << CAP_NET_RAW);
    ok_ = !syscall(SYS_capset, &h_, d);
  }
  ~NoNetRaw() {
    if (ok_) syscall(SYS_capset, &h_, d_);
  }
  bool ok() const { return ok_; }

 private:
  __user_cap_header_struct h_ = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d_[2] = {};
  bool ok_ = false;
};

TEST_F(UdTest, PrivilegedQkeyNeedsCapNetRaw) {
  ibv_qp_init_attr ia = {};
  ia.send_cq = cq_;
  ia.recv_cq = cq_;
  ia.qp_type = IBV_QPT_UD;
  ia.cap = {4, 4, 1, 1, 0};
  ibv_qp *qp = ibv_create_qp(pd_, &ia);
  ASSERT_NE(qp, nullptr) << strerror(errno);
  qps_.push_back(qp);
  ibv_qp_attr a = {};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = 0x80010000;  // QP1's
  const int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
  {
    NoNetRaw drop;
    ASSERT_TRUE(drop.ok()) << "cannot drop CAP_NET_RAW";
    EXPECT_EQ(ibv_modify_qp(qp, &a, mask), EPERM);
    a.qkey = 0x7fffffff;
    EXPECT_EQ(ibv_modify_qp(qp, &a, mask), 0) << "a plain Q_Key is fine";
    a.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  }
  a.qp_state = IBV_QPS_INIT;
  a.qkey = 0x80010000;
  EXPECT_EQ(ibv_modify_qp(qp, &a, mask), 0) << "with CAP_NET_RAW";
}

TEST_F(UdTest, OverTheMtuIsALocalLengthError) {
  ibv_port_attr pa;
  ASSERT_EQ(ibv_query_port(ctx_.get(), 1, &pa), 0);
  uint32_t mtu = 128u << pa.active_mtu;
  ibv_qp *a = UdQp(), *b = UdQp();
  ASSERT_TRUE(a && b) << strerror(errno);
  Recv(b, 0, 40 + mtu + 1, 5);
  ASSERT_EQ(Send(a, 8192, mtu + 1, b->qp_num, kQkey, 1), 0);
  ibv_wc wc = Poll();
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(wc.wr_id, 1u);
}

TEST_F(UdTest, UnknownQpnIsCountedAndRdmaOpsAreRefused) {
  ibv_qp *a = UdQp();
  ASSERT_NE(a, nullptr) << strerror(errno);
  long before = Counter("ud_rx_no_qp");
  ASSERT_EQ(Send(a, 4096, 8, 0xfffff0, kQkey, 1), 0);
  EXPECT_EQ(Poll().status, IBV_WC_SUCCESS);
  for (int i = 0; i < 50 && Counter("ud_rx_no_qp") == before; i++)
    usleep(10000);
  EXPECT_EQ(Counter("ud_rx_no_qp"), before + 1);
  ibv_sge sge = {Addr(B()), 8, mr_->lkey};
  ibv_send_wr wr = {}, *bad = nullptr;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.ud.ah = ah_;
  EXPECT_EQ(ibv_post_send(a, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
}

// A UD QP on an SRQ moved to ERR takes no more WQEs from it and says so:
// IBV_EVENT_QP_LAST_WQE_REACHED, once; a datagram sent to it then is
// dropped and the SRQ keeps its WQEs for the other QPs.
TEST_F(UdTest, OnAnSrqErrRaisesLastWqeReached) {
  ibv_srq_init_attr sa = {};
  sa.attr = {16, 1, 0};
  ibv_srq *srq = ibv_create_srq(pd_, &sa);
  ASSERT_NE(srq, nullptr) << strerror(errno);
  ibv_qp *a = UdQp(), *b = UdQp(kQkey, nullptr, srq, {16, 0, 1, 0, 0});
  ibv_qp *c = UdQp(kQkey, nullptr, srq, {16, 0, 1, 0, 0});
  ASSERT_TRUE(a && b && c) << strerror(errno);
  for (uint64_t id : {10, 11}) {
    ibv_sge sge = {Addr(B() + (id - 10) * 256), 40 + 64, mr_->lkey};
    ibv_recv_wr wr = {}, *bad;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
  }
  ASSERT_EQ(Send(a, 4096, 64, b->qp_num, kQkey, 1), 0);
  std::set<uint64_t> ids;
  for (int i = 0; i < 2; i++) {
    ibv_wc wc = Poll();
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    ids.insert(wc.wr_id);
  }
  EXPECT_EQ(ids, (std::set<uint64_t>{1, 10}));

  ibv_qp_attr at = {};
  at.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(b, &at, IBV_QP_STATE), 0);
  EXPECT_TRUE(
      WaitAsyncEventOf(ctx_.get(), IBV_EVENT_QP_LAST_WQE_REACHED, b, 5000));
  EXPECT_FALSE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_QP_LAST_WQE_REACHED, 300))
      << "raised twice";
  const long dropped = Counter("ud_rx_no_qp");
  ASSERT_EQ(Send(a, 4096, 64, b->qp_num, kQkey, 2), 0);
  ibv_wc wc = Poll();
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 2u);
  for (int i = 0; i < 50 && Counter("ud_rx_no_qp") == dropped; i++)
    usleep(10000);
  EXPECT_EQ(Counter("ud_rx_no_qp"), dropped + 1);
  EXPECT_EQ(Poll(300).status, static_cast<ibv_wc_status>(-1))
      << "the QP in ERR took a WQE";
  // The SRQ's last WQE went to c.
  ASSERT_EQ(Send(a, 4096, 64, c->qp_num, kQkey, 3), 0);
  ids.clear();
  for (int i = 0; i < 2; i++) {
    wc = Poll();
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    ids.insert(wc.wr_id);
  }
  EXPECT_EQ(ids, (std::set<uint64_t>{3, 11}));
  for (ibv_qp *q : qps_) ibv_destroy_qp(q);
  qps_.clear();
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

// Datagrams for one UD QP sent from two CPUs at once (over loopback each
// is delivered on its sender's CPU): the receive completions come in the
// order of the receive queue, with every one a success.
TEST_F(UdTest, DatagramsFromTwoCpusCompleteInRqOrder) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "one CPU";
  constexpr int kRecv = 1024, kEach = 400;
  ibv_cq *rcq = ibv_create_cq(ctx_.get(), 2 * kRecv, nullptr, nullptr, 0);
  ASSERT_NE(rcq, nullptr);
  ibv_cq *scq[2] = {ibv_create_cq(ctx_.get(), 64, nullptr, nullptr, 0),
                    ibv_create_cq(ctx_.get(), 64, nullptr, nullptr, 0)};
  ASSERT_TRUE(scq[0] && scq[1]);
  ibv_qp *b = UdQp(kQkey, rcq, nullptr, {16, kRecv, 1, 1, 0});
  ibv_qp *s[2] = {UdQp(kQkey, scq[0]), UdQp(kQkey, scq[1])};
  ASSERT_TRUE(b && s[0] && s[1]) << strerror(errno);
  for (int i = 0; i < kRecv; i++) Recv(b, (i % 256) * 128, 40 + 64, i);
  std::atomic<int> ready{0};
  std::vector<std::thread> senders;
  for (int t = 0; t < 2; t++)
    senders.emplace_back([&, t] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(t, &set);
      sched_setaffinity(0, sizeof(set), &set);
      ready++;
      while (ready < 2) {
      }
      int posted = 0, done = 0;
      while (done < kEach) {
        if (posted < kEach && posted - done < 8 &&
            Send(s[t], 32768 + t * 4096, 64, b->qp_num, kQkey, posted) == 0)
          posted++;
        ibv_wc wc;
        if (ibv_poll_cq(scq[t], 1, &wc) == 1) done++;
      }
    });
  for (auto &th : senders) th.join();
  std::vector<ibv_wc> got;
  for (auto t0 = Clock::now(); Ms(t0) < 2000;) {
    ibv_wc wc[32];
    int n = ibv_poll_cq(rcq, 32, wc);
    got.insert(got.end(), wc, wc + std::max(n, 0));
    if (n <= 0) usleep(1000);
  }
  ASSERT_GT(got.size(), 0u);
  int out_of_order = 0, failed = 0;
  for (size_t i = 0; i < got.size(); i++) {
    failed += got[i].status != IBV_WC_SUCCESS;
    out_of_order += got[i].wr_id != i;
  }
  std::cout << got.size() << " of " << 2 * kEach << " datagrams arrived\n";
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(out_of_order, 0) << "receive completions out of RQ order";
  for (ibv_qp *q : qps_) ibv_destroy_qp(q);
  qps_.clear();
  for (ibv_cq *c : {rcq, scq[0], scq[1]}) EXPECT_EQ(ibv_destroy_cq(c), 0);
}

TEST_F(VerbsTest, StateMachineAndQueryQp) {
  ibv_qp *qp = CreateQp();
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(State(qp), IBV_QPS_RESET);

  // Skipping states, or missing required attributes, is refused.
  ibv_qp_attr a = {};
  a.qp_state = IBV_QPS_RTS;
  EXPECT_NE(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  a.qp_state = IBV_QPS_INIT;
  EXPECT_NE(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  EXPECT_EQ(State(qp), IBV_QPS_RESET);
  // A bad port or P_Key index.
  a = {};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 2;
  EXPECT_NE(ibv_modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                              IBV_QP_ACCESS_FLAGS),
            0);
  a.port_num = 1;
  a.pkey_index = 1;
  EXPECT_NE(ibv_modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                              IBV_QP_ACCESS_FLAGS),
            0);

  ASSERT_EQ(ToInit(qp), 0);
  EXPECT_EQ(State(qp), IBV_QPS_INIT);

  // RTR with an MTU above 4096 or too many reads is refused.
  ibv_qp_attr r = RtrAttr(qp);
  r.path_mtu = static_cast<ibv_mtu>(6);
  EXPECT_NE(ibv_modify_qp(qp, &r, kRtrMask), 0);
  r = RtrAttr(qp);
  r.max_dest_rd_atomic = dattr_.max_qp_rd_atom + 1;
  EXPECT_NE(ibv_modify_qp(qp, &r, kRtrMask), 0);
  EXPECT_EQ(State(qp), IBV_QPS_INIT);

  ASSERT_EQ(ToRtr(qp), 0);
  ASSERT_EQ(ToRts(qp), 0);

  ibv_qp_init_attr ia;
  ASSERT_EQ(ibv_query_qp(qp, &a, ~0, &ia), 0);
  EXPECT_EQ(a.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(a.path_mtu, IBV_MTU_1024);
  EXPECT_EQ(a.dest_qp_num, qp->qp_num);
  EXPECT_EQ(a.rq_psn, 0x123456u);
  EXPECT_EQ(a.sq_psn, 0x654321u);
  EXPECT_EQ(a.max_dest_rd_atomic, 4);
  EXPECT_EQ(a.max_rd_atomic, 4);
  EXPECT_EQ(a.min_rnr_timer, 12);
  EXPECT_EQ(a.timeout, 14);
  EXPECT_EQ(a.retry_cnt, 7);
  EXPECT_EQ(a.rnr_retry, 7);
  EXPECT_EQ(a.port_num, 1);
  EXPECT_EQ(a.qp_access_flags,
            static_cast<unsigned>(IBV_ACCESS_REMOTE_WRITE |
                                  IBV_ACCESS_REMOTE_READ));
  EXPECT_EQ(a.ah_attr.grh.sgid_index, V4GidIndex());
  EXPECT_EQ(ia.qp_type, IBV_QPT_RC);
  EXPECT_EQ(ia.send_cq, cq_);

  // Back through ERR to RESET and up again.
  ASSERT_EQ(ToError(qp), 0);
  EXPECT_EQ(State(qp), IBV_QPS_ERR);
  a = {};
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  EXPECT_EQ(State(qp), IBV_QPS_RESET);
  EXPECT_EQ(ToInit(qp), 0);
}

TEST_F(VerbsTest, PostingInTheWrongStateFails) {
  ibv_qp *qp = CreateQp();
  ASSERT_NE(qp, nullptr);
  EXPECT_NE(PostSend(qp, 1), 0);  // RESET
  ASSERT_EQ(ToInit(qp), 0);
  EXPECT_NE(PostSend(qp, 2), 0);  // INIT
  EXPECT_EQ(PostRecv(qp, 3), 0);  // receives may be posted from INIT on
  ASSERT_EQ(ToRtr(qp), 0);
  EXPECT_NE(PostSend(qp, 4), 0);  // RTR
  ASSERT_EQ(ToRts(qp), 0);
  EXPECT_EQ(PostSend(qp, 5), 0);
}

TEST_F(VerbsTest, PostSendChecksSgesInlineAndRoom) {
  ibv_qp *qp = CreateQp(4, 4, 2, 32);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(ToInit(qp), 0);
  // Nothing posted may complete before the queue is full.
  ASSERT_EQ(ToRtsTowardsSilentPeer(qp), 0);
  ibv_qp_attr a;
  ibv_qp_init_attr ia;
  ASSERT_EQ(ibv_query_qp(qp, &a, IBV_QP_CAP, &ia), 0);

  std::vector<ibv_sge> sges(ia.cap.max_send_sge + 1,
                            {reinterpret_cast<uintptr_t>(buf_.data()), 8,
                             mr_->lkey});
  ibv_send_wr wr = {}, *bad = nullptr;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = sges.data();
  wr.num_sge = ia.cap.max_send_sge + 1;
  EXPECT_NE(ibv_post_send(qp, &wr, &bad), 0);
  EXPECT_EQ(bad, &wr);

  ibv_sge big = {reinterpret_cast<uintptr_t>(buf_.data()),
                 ia.cap.max_inline_data + 1, mr_->lkey};
  wr.sg_list = &big;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_INLINE;
  EXPECT_NE(ibv_post_send(qp, &wr, &bad), 0);
  big.length = ia.cap.max_inline_data;
  EXPECT_EQ(ibv_post_send(qp, &wr, &bad), 0);

  // The send queue holds max_send_wr WRs; one more does not fit.
  int posted = 1;
  while (posted < static_cast<int>(ia.cap.max_send_wr))
    ASSERT_EQ(PostSend(qp, 100 + posted++), 0);
  int ret = PostSend(qp, 999);
  EXPECT_EQ(ret, ENOMEM);
  if (ret != ENOMEM) {
    // Say what freed a slot: a completion nobody expected yet.
    ibv_wc wc[64];
    int k = ibv_poll_cq(cq_, 64, wc);
    for (int i = 0; i < k; i++)
      ADD_FAILURE() << "early completion wr_id " << wc[i].wr_id << " status "
                    << ibv_wc_status_str(wc[i].status) << " state "
                    << State(qp);
  }
}

// Every WR posted before the QP errors comes back once, flushed, in order.
TEST_F(VerbsTest, ErrorFlushesEverythingOutstanding) {
  ibv_qp *qp = CreateQp(32, 32);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(ToInit(qp), 0);
  for (int i = 0; i < 10; i++) ASSERT_EQ(PostRecv(qp, 1000 + i), 0);
  ASSERT_EQ(ToRtr(qp), 0);
  ASSERT_EQ(ToRts(qp), 0);
  for (int i = 0; i < 7; i++)
    ASSERT_EQ(PostSend(qp, 2000 + i, i % 2 ? IBV_WR_RDMA_WRITE : IBV_WR_SEND),
              0);
  ASSERT_EQ(ToError(qp), 0);

  auto wcs = Poll(17);
  ASSERT_EQ(wcs.size(), 17u);
  std::vector<uint64_t> sends, recvs;
  for (const ibv_wc &wc : wcs) {
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wc.qp_num, qp->qp_num);
    (wc.wr_id >= 2000 ? sends : recvs).push_back(wc.wr_id);
  }
  for (int i = 0; i < 7; i++) EXPECT_EQ(sends[i], 2000u + i);
  for (int i = 0; i < 10; i++) EXPECT_EQ(recvs[i], 1000u + i);
  EXPECT_TRUE(Poll(1).empty());

  // Posting in ERR completes at once with a flush.
  ASSERT_EQ(PostSend(qp, 3000), 0);
  ASSERT_EQ(PostRecv(qp, 3001), 0);
  wcs = Poll(2);
  ASSERT_EQ(wcs.size(), 2u);
  std::set<uint64_t> ids;
  for (const ibv_wc &wc : wcs) {
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    ids.insert(wc.wr_id);
  }
  EXPECT_EQ(ids, (std::set<uint64_t>{3000, 3001}));
}

TEST_F(VerbsTest, DestroyFlushesOutstandingWork) {
  ibv_qp *qp = CreateQp();
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(ToInit(qp), 0);
  ASSERT_EQ(PostRecv(qp, 7), 0);
  // The SEND is refused (RNR) and retried until the QP goes.
  ASSERT_EQ(ToRtsTowardsSilentPeer(qp), 0);
  ASSERT_EQ(PostSend(qp, 8), 0);
  Destroy(qp);
  auto wcs = Poll(2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc &wc : wcs) EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(VerbsTest, BadLkeyFailsTheWrAndTheQp) {
  ibv_qp *qp = CreateQp();
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(ToInit(qp), 0);
  ASSERT_EQ(ToRtr(qp), 0);
  ASSERT_EQ(ToRts(qp), 0);
  ASSERT_EQ(PostSend(qp, 1, IBV_WR_SEND, mr_->lkey ^ 0x100), 0);
  ASSERT_EQ(PostSend(qp, 2), 0);
  auto wcs = Poll(2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(State(qp), IBV_QPS_ERR);
}

TEST_F(VerbsTest, LocalProtectionAndRangeAreChecked) {
  ibv_mr *ro = ibv_reg_mr(pd_, buf_.data(), 4096, 0);  // local read only
  ASSERT_NE(ro, nullptr);
  struct Case {
    ibv_wr_opcode op;
    uint32_t lkey;
    uint32_t len;
  } cases[] = {
      {IBV_WR_RDMA_READ, ro->lkey, 64},  // READ needs local write
      {IBV_WR_SEND, ro->lkey, 8192},     // past the end of the MR
  };
  for (const Case &c : cases) {
    ibv_qp *qp = CreateQp();
    ASSERT_NE(qp, nullptr);
    ASSERT_EQ(ToInit(qp), 0);
    ASSERT_EQ(ToRtr(qp), 0);
    ASSERT_EQ(ToRts(qp), 0);
    ASSERT_EQ(PostSend(qp, 5, c.op, c.lkey, c.len), 0);
    auto wcs = Poll(1);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR);
    Destroy(qp);
  }
  // An MR of another PD is no good either.
  ibv_pd *pd2 = ibv_alloc_pd(ctx_.get());
  ASSERT_NE(pd2, nullptr);
  ibv_mr *other = ibv_reg_mr(pd2, buf_.data(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(other, nullptr);
  ibv_qp *qp = CreateQp();
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(ToInit(qp), 0);
  ASSERT_EQ(ToRtr(qp), 0);
  ASSERT_EQ(ToRts(qp), 0);
  ASSERT_EQ(PostSend(qp, 6, IBV_WR_SEND, other->lkey), 0);
  auto wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR);
  Destroy(qp);
  ibv_dereg_mr(other);
  ibv_dealloc_pd(pd2);
  ibv_dereg_mr(ro);
}

TEST_F(VerbsTest, DeregisteredKeyFailsTheWr) {
  ibv_mr *mr = ibv_reg_mr(pd_, buf_.data(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  uint32_t stale = mr->lkey;
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  ibv_qp *qp = CreateQp();
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(ToInit(qp), 0);
  ASSERT_EQ(ToRtr(qp), 0);
  ASSERT_EQ(ToRts(qp), 0);
  ASSERT_EQ(PostSend(qp, 9, IBV_WR_SEND, stale), 0);
  auto wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR);
}

TEST_F(VerbsTest, CompletionChannelDeliversAnEvent) {
  ibv_comp_channel *ch = ibv_create_comp_channel(ctx_.get());
  ASSERT_NE(ch, nullptr);
  ibv_cq *cq = ibv_create_cq(ctx_.get(), 16, this, ch, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr ia = {};
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {4, 4, 1, 1, 0};
  ibv_qp *qp = ibv_create_qp(pd_, &ia);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  ASSERT_EQ(ToInit(qp), 0);
  ASSERT_EQ(PostRecv(qp, 42), 0);
  ASSERT_EQ(ToError(qp), 0);

  pollfd pfd = {ch->fd, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 5000), 1);
  ibv_cq *ev_cq = nullptr;
  void *ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, cq);
  EXPECT_EQ(ev_ctx, this);
  ibv_ack_cq_events(cq, 1);
  ibv_wc wc;
  ASSERT_EQ(ibv_poll_cq(cq, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 42u);
  ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
  ibv_destroy_comp_channel(ch);
}

TEST_F(VerbsTest, ManyThreadsPostingToOneQpGetEveryWrBack) {
  const int kThreads = 4, kPer = 200;
  ibv_cq *cq = ibv_create_cq(ctx_.get(), kThreads * kPer, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr ia = {};
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {kThreads * kPer, 1, 1, 1, 0};
  ibv_qp *qp = ibv_create_qp(pd_, &ia);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(ToInit(qp), 0);
  ASSERT_EQ(ToRtr(qp), 0);
  ASSERT_EQ(ToRts(qp), 0);
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kPer; i++)
        if (PostSend(qp, t * kPer + i)) failures++;
    });
  for (auto &t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(ToError(qp), 0);
  std::set<uint64_t> ids;
  std::vector<ibv_wc> wc(64);
  for (int spins = 0; spins < 5000 && ids.size() < kThreads * kPer; spins++) {
    int n = ibv_poll_cq(cq, wc.size(), wc.data());
    for (int i = 0; i < n; i++) {
      EXPECT_TRUE(ids.insert(wc[i].wr_id).second) << "twice: " << wc[i].wr_id;
      EXPECT_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
    }
    if (!n) usleep(1000);
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kThreads * kPer));
  ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
}

// --- SRQ and AH -----------------------------------------------------------

TEST_F(VerbsTest, SrqCreateQueryModifyAndAttach) {
  ibv_srq_init_attr sa = {};
  sa.attr.max_wr = 100;
  sa.attr.max_sge = 2;
  ibv_srq *srq = ibv_create_srq(pd_, &sa);
  ASSERT_NE(srq, nullptr) << strerror(errno);
  EXPECT_GE(sa.attr.max_wr, 100u);
  ibv_srq_attr q;
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, sa.attr.max_wr);
  EXPECT_EQ(q.srq_limit, 0u);

  ibv_srq_attr m = {};
  m.srq_limit = 10;
  ASSERT_EQ(ibv_modify_srq(srq, &m, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 10u);
  m.srq_limit = q.max_wr + 1;
  EXPECT_NE(ibv_modify_srq(srq, &m, IBV_SRQ_LIMIT), 0);
  m.max_wr = 1000;
  EXPECT_EQ(ibv_modify_srq(srq, &m, IBV_SRQ_MAX_WR), EOPNOTSUPP);

  ibv_sge sge = {reinterpret_cast<uintptr_t>(buf_.data()), 64, mr_->lkey};
  ibv_recv_wr wr = {}, *bad = nullptr;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  for (uint32_t i = 0; i < q.max_wr; i++) {
    wr.wr_id = i;
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0) << i;
  }
  EXPECT_NE(ibv_post_srq_recv(srq, &wr, &bad), 0);  // full

  ibv_qp *qp = CreateQp(8, 0, 1, 0, srq);
  ASSERT_NE(qp, nullptr) << strerror(errno);
  EXPECT_NE(PostRecv(qp, 1), 0);  // receives go to the SRQ
  EXPECT_EQ(ibv_destroy_srq(srq), EBUSY);
  Destroy(qp);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);

  sa.attr.max_wr = dattr_.max_srq_wr + 1;
  errno = 0;
  EXPECT_EQ(ibv_create_srq(pd_, &sa), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(VerbsTest, AddressHandles) {
  ibv_ah_attr aa = {};
  aa.is_global = 1;
  aa.port_num = 1;
  aa.grh.sgid_index = V4GidIndex();
  aa.grh.hop_limit = 64;
  ASSERT_EQ(ibv_query_gid(ctx_.get(), 1, aa.grh.sgid_index, &aa.grh.dgid), 0);
  ibv_ah *ah = ibv_create_ah(pd_, &aa);
  ASSERT_NE(ah, nullptr) << strerror(errno);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

// --- cleanup and hostility ------------------------------------------------

// Object counts of the device from `rdma resource show`.
std::string Resources() {
  return ShOut("rdma resource show " + DevName() +
               " | sed 's/.*: *//'");
}

TEST_F(VerbsTest, ProcessExitWithLiveObjectsIsCleanedUp) {
  std::string before = Resources();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Context ctx = OpenDevice(DevName());
    ibv_pd *pd = ibv_alloc_pd(ctx.get());
    ibv_cq *cq = ibv_create_cq(ctx.get(), 64, nullptr, nullptr, 0);
    static char mem[8192];
    ibv_mr *mr = ibv_reg_mr(pd, mem, sizeof(mem), IBV_ACCESS_LOCAL_WRITE);
    ibv_srq_init_attr sa = {};
    sa.attr = {16, 1, 0};
    ibv_srq *srq = ibv_create_srq(pd, &sa);
    ibv_qp_init_attr ia = {};
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap = {16, 16, 1, 1, 0};
    ibv_qp *qp = ibv_create_qp(pd, &ia);
    bool ok = pd && cq && mr && srq && qp;
    kill(getpid(), SIGKILL);  // no cleanup at all
    _exit(ok ? 0 : 1);
  }
  int st;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(st));
  std::string after;
  for (int i = 0; i < 50 && (after = Resources()) != before; i++) usleep(100000);
  EXPECT_EQ(after, before);
}

// The mappings of the uverbs device in this process: the rings.
std::vector<std::pair<char *, size_t>> RingMappings() {
  std::vector<std::pair<char *, size_t>> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/dev/infiniband/uverbs") == std::string::npos) continue;
    uintptr_t lo, hi;
    if (sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2)
      out.emplace_back(reinterpret_cast<char *>(lo), hi - lo);
  }
  return out;
}

TEST_F(VerbsTest, ScribblingOverTheRingsHurtsOnlyThisProcess) {
  ibv_qp *qp = CreateQp(16, 16, 2, 32);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(ToInit(qp), 0);
  ASSERT_EQ(ToRtr(qp), 0);
  ASSERT_EQ(ToRts(qp), 0);
  auto maps = RingMappings();
  ASSERT_GE(maps.size(), 3u);  // CQ, SQ, RQ
  const long fatal_before = Counter("qp_fatal");

  std::mt19937_64 rng(1234);
  for (int round = 0; round < 50; round++) {
    for (auto &m : maps) {
      auto *w = reinterpret_cast<uint32_t *>(m.first);
      for (size_t i = 0; i < m.second / 4; i++)
        if (rng() % 4 == 0) w[i] = static_cast<uint32_t>(rng());
      // Sometimes plausible indices, so that garbage slots get taken in.
      if (round % 2) w[0] = w[16] + rng() % 8;
    }
    // Ring the doorbells and poll through the garbage.
    ibv_send_wr *bad = nullptr;
    ibv_send_wr wr = {};
    wr.opcode = IBV_WR_SEND;
    ibv_post_send(qp, &wr, &bad);
    ibv_recv_wr *rbad = nullptr;
    ibv_recv_wr rwr = {};
    ibv_post_recv(qp, &rwr, &rbad);
    ibv_wc wc[16];
    ibv_poll_cq(cq_, 16, wc);
  }
  // The garbage ends the QP (an impossible producer index, a garbage WQE
  // taken in, ...): IBV_EVENT_QP_FATAL, once, and counted in qp_fatal.
  int fatal = 0;
  while (WaitAsyncEvent(ctx_.get(), IBV_EVENT_QP_FATAL, 200)) fatal++;
  std::cout << fatal << " IBV_EVENT_QP_FATAL\n";
  EXPECT_LE(fatal, 1);
  EXPECT_EQ(Counter("qp_fatal") - fatal_before, fatal);
  // Whatever happened to this QP, the device still works for others.
  ibv_qp *other = CreateQp();
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(ToInit(other), 0);
  Destroy(qp);
}

}  // namespace
