// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// Memory windows: type 1 (ibv_bind_mw) and type 2 (IBV_WR_BIND_MW and
// ibv_wr_bind_mw), remote access through a window's rkey limited to its
// range and rights, invalidation (a type-1 rebind of length 0, LOCAL_INV,
// SEND_WITH_INV), the bind rules of the IB spec and what a bound window
// does to its MR; windows invalidated, unbound or freed under remote
// writes (MwRaceTest).  And ibv_rereg_mr (ReregMrTest), which a bound
// window refuses too.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <atomic>
#include <functional>
#include <thread>
#include <iostream>
#include <vector>

#include "qp_fixture.h"

namespace trdma_lab {
namespace {

constexpr size_t kWin = 8192;    // window length
constexpr size_t kWinOff = 4096;  // window start in b_'s buffer
constexpr uint64_t kSendOps =
    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
    IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_BIND_MW |
    IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV;

class MwTest : public DataPathTest {
 protected:
  void SetUp() override {
    DataPathTest::SetUp();
    if (HasFatalFailure()) return;
    // The MR windows are bound to: no remote rights of its own.
    wmr_ = ibv_reg_mr(pd_, b_.buf.data(), 1 << 20,
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    ASSERT_NE(wmr_, nullptr) << errno;
  }

  void TearDown() override {
    for (ibv_mw *mw : mws_) EXPECT_EQ(ibv_dealloc_mw(mw), 0);
    for (ibv_qp *qp : qps_) ibv_destroy_qp(qp);
    if (wmr_) {
      EXPECT_EQ(ibv_dereg_mr(wmr_), 0);
    }
    for (ibv_mr *mr : mrs_) ibv_dereg_mr(mr);
    for (ibv_pd *pd : pds_) ibv_dealloc_pd(pd);
    DataPathTest::TearDown();
  }

  ibv_mw *Mw(ibv_mw_type type, ibv_pd *pd = nullptr) {
    ibv_mw *mw = ibv_alloc_mw(pd ? pd : pd_, type);
    EXPECT_NE(mw, nullptr) << errno;
    if (mw) mws_.push_back(mw);
    return mw;
  }

  uint64_t B(size_t off) {
    return reinterpret_cast<uintptr_t>(b_.buf.data() + off);
  }

  ibv_mw_bind_info Info(ibv_mr *mr, size_t off, size_t len, int access) {
    ibv_mw_bind_info bi = {};
    bi.mr = mr;
    bi.addr = reinterpret_cast<uintptr_t>(b_.buf.data() + off);
    bi.length = len;
    bi.mw_access_flags = access;
    return bi;
  }

  // ibv_bind_mw() of a type-1 window on qp; returns the completion.
  ibv_wc Bind1(ibv_qp *qp, ibv_cq *cq, ibv_mw *mw, ibv_mw_bind_info bi) {
    ibv_mw_bind b = {};
    b.wr_id = 50;
    b.send_flags = IBV_SEND_SIGNALED;
    b.bind_info = bi;
    EXPECT_EQ(ibv_bind_mw(qp, mw, &b), 0);
    return Wait(cq);
  }

  // IBV_WR_BIND_MW of a window under rkey through ibv_post_send().
  ibv_wc Bind2(ibv_qp *qp, ibv_cq *cq, ibv_mw *mw, uint32_t rkey,
               ibv_mw_bind_info bi) {
    ibv_send_wr wr = {}, *bad;
    wr.wr_id = 51;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = rkey;
    wr.bind_mw.bind_info = bi;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), 0);
    return Wait(cq);
  }

  // One RDMA WRITE or READ of len bytes between a_'s buffer at a_off and
  // remote address raddr under rkey, from qp; returns its completion.
  ibv_wc Rdma(ibv_qp *qp, ibv_cq *cq, ibv_wr_opcode op, size_t a_off,
              uint32_t len, uint64_t raddr, uint32_t rkey) {
    EXPECT_EQ(PostSend(a_, 60, op, Sges(a_, a_off, len, 1), raddr, rkey), 0)
        << "post";
    (void)qp;
    return Wait(cq);
  }

  ibv_wc Post(ibv_qp *qp, ibv_cq *cq, ibv_send_wr wr) {
    ibv_send_wr *bad;
    wr.send_flags |= IBV_SEND_SIGNALED;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), 0);
    return Wait(cq);
  }

  ibv_send_wr WriteWr(size_t a_off, uint32_t len, uint64_t raddr,
                      uint32_t rkey, ibv_sge *sge) {
    *sge = {reinterpret_cast<uintptr_t>(a_.buf.data() + a_off), len,
            a_.mr->lkey};
    ibv_send_wr wr = {};
    wr.wr_id = 61;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return wr;
  }

  // Two new connected RC QPs of pd with the ibv_wr_* window operations;
  // xa on a_'s CQ, xb on b_'s.
  void XPair(ibv_qp **xa, ibv_qp **xb, ibv_pd *pd = nullptr,
             uint32_t depth = 16) {
    ibv_qp *q[2];
    ibv_cq *cq[2] = {a_.cq, b_.cq};
    for (int i = 0; i < 2; i++) {
      ibv_qp_init_attr_ex ia = {};
      ia.send_cq = cq[i];
      ia.recv_cq = cq[i];
      ia.qp_type = IBV_QPT_RC;
      ia.cap = {depth, 16, 1, 1, 0};
      ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
      ia.pd = pd ? pd : pd_;
      ia.send_ops_flags = kSendOps;
      q[i] = ibv_create_qp_ex(ctx_.get(), &ia);
      ASSERT_NE(q[i], nullptr) << errno;
      qps_.push_back(q[i]);
    }
    ASSERT_EQ(Connect(q[0], q[1]), 0);
    ASSERT_EQ(Connect(q[1], q[0]), 0);
    *xa = q[0];
    *xb = q[1];
  }

  void ExpectUntouched(size_t off, size_t len) {
    for (size_t i = 0; i < len; i++)
      if (b_.buf[off + i]) {
        ADD_FAILURE() << "byte " << off + i << " written";
        return;
      }
  }

  // A type-2 window bound on xb under a new key: remote write, kWin bytes
  // at kWinOff of b_'s buffer (through wmr_).  Returns that key.
  uint32_t BoundWriteWindow(ibv_qp *xb) {
    ibv_mw *mw = Mw(IBV_MW_TYPE_2);
    if (!mw) return 0;
    uint32_t rkey = ibv_inc_rkey(mw->rkey);
    ibv_wc c = Bind2(xb, b_.cq, mw, rkey,
                     Info(wmr_, kWinOff, kWin, IBV_ACCESS_REMOTE_WRITE));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
    EXPECT_EQ(c.opcode, IBV_WC_BIND_MW);
    return c.status == IBV_WC_SUCCESS ? rkey : 0;
  }

  // xa SENDs the first 100 bytes of a_'s buffer with an invalidation of
  // rkey, into a receive (wr_id 80) of 4096 bytes at addr under lkey that
  // it posts on xb first; returns the SEND's completion.
  ibv_wc SendWithInv(ibv_qp *xa, ibv_qp *xb, uint64_t addr, uint32_t lkey,
                     uint32_t rkey) {
    EXPECT_EQ(PostRecvOn(xb, 80, {{addr, 4096, lkey}}), 0);
    ibv_sge ss = {reinterpret_cast<uintptr_t>(a_.buf.data()), 100,
                  a_.mr->lkey};
    ibv_send_wr wr = {};
    wr.wr_id = 81;
    wr.opcode = IBV_WR_SEND_WITH_INV;
    wr.sg_list = &ss;
    wr.num_sge = 1;
    wr.invalidate_rkey = rkey;
    return Post(xa, a_.cq, wr);
  }

  // The receive of SendWithInv() completes on b_'s CQ, whole, naming rkey.
  void ExpectInvalidatingRecv(uint32_t rkey) {
    ibv_wc r = Wait(b_.cq);
    EXPECT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
    EXPECT_EQ(r.wr_id, 80u);
    EXPECT_EQ(r.opcode, IBV_WC_RECV);
    EXPECT_EQ(r.byte_len, 100u);
    EXPECT_TRUE(r.wc_flags & IBV_WC_WITH_INV);
    EXPECT_EQ(r.invalidated_rkey, rkey);
  }

  // rkey is invalid: xa's write through it fails and writes nothing.
  void ExpectDeadKey(ibv_qp *xa, uint32_t rkey) {
    ibv_sge sge;
    ibv_wc c = Post(xa, a_.cq, WriteWr(0, 64, B(kWinOff), rkey, &sge));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
    ExpectUntouched(0, kWinOff + kWin);
  }

  ibv_mr *wmr_ = nullptr;
  std::vector<ibv_mw *> mws_;
  std::vector<ibv_qp *> qps_;
  std::vector<ibv_mr *> mrs_;
  std::vector<ibv_pd *> pds_;
};

TEST_F(MwTest, DeviceAdvertisesBothTypes) {
  ibv_device_attr_ex attr = {};
  ASSERT_EQ(ibv_query_device_ex(ctx_.get(), nullptr, &attr), 0);
  EXPECT_TRUE(attr.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  EXPECT_TRUE(attr.orig_attr.device_cap_flags &
              IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  EXPECT_GT(attr.orig_attr.max_mw, 0);
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(pd_, static_cast<ibv_mw_type>(3)), nullptr);
  EXPECT_NE(errno, 0);
}

TEST_F(MwTest, Type1WriteReadAndAtomicsThroughTheWindow) {
  ibv_mw *mw = Mw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  uint32_t rkey0 = mw->rkey;
  ibv_wc c = Bind1(b_.qp, b_.cq, mw,
                   Info(wmr_, kWinOff, kWin,
                        IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                            IBV_ACCESS_REMOTE_ATOMIC));
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  EXPECT_EQ(c.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(c.wr_id, 50u);
  // The window's next key: same index, a new key byte.
  EXPECT_EQ(mw->rkey >> 8, rkey0 >> 8);
  EXPECT_NE(mw->rkey, rkey0);

  Fill(a_.buf, 0, kWin, 7);
  c = Rdma(a_.qp, a_.cq, IBV_WR_RDMA_WRITE, 0, kWin, B(kWinOff), mw->rkey);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data() + kWinOff, kWin), 0)
      << Diff(a_.buf.data(), b_.buf.data() + kWinOff, kWin);
  ExpectUntouched(0, kWinOff);
  ExpectUntouched(kWinOff + kWin, 4096);

  Fill(b_.buf, kWinOff + 100, 3000, 8);
  c = Rdma(a_.qp, a_.cq, IBV_WR_RDMA_READ, 65536, 3000, B(kWinOff + 100),
           mw->rkey);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  EXPECT_EQ(memcmp(a_.buf.data() + 65536, b_.buf.data() + kWinOff + 100,
                   3000),
            0);

  uint64_t v = 40;
  memcpy(b_.buf.data() + kWinOff + 8, &v, 8);
  ibv_sge res = {reinterpret_cast<uintptr_t>(a_.buf.data() + 131072), 8,
                 a_.mr->lkey};
  ibv_send_wr wr = {};
  wr.wr_id = 62;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.sg_list = &res;
  wr.num_sge = 1;
  wr.wr.atomic.remote_addr = B(kWinOff + 8);
  wr.wr.atomic.rkey = mw->rkey;
  wr.wr.atomic.compare_add = 2;
  c = Post(a_.qp, a_.cq, wr);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  memcpy(&v, a_.buf.data() + 131072, 8);
  EXPECT_EQ(v, 40u);
  memcpy(&v, b_.buf.data() + kWinOff + 8, 8);
  EXPECT_EQ(v, 42u);

  // The window's rkey is no local key.
  std::vector<ibv_sge> sg = {{reinterpret_cast<uintptr_t>(b_.buf.data() +
                                                            kWinOff),
                              64, mw->rkey}};
  ASSERT_EQ(PostSend(b_, 63, IBV_WR_RDMA_WRITE, sg, 0, a_.mr->rkey), 0);
  c = Wait(b_.cq);
  EXPECT_EQ(c.status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(c.status);
}

TEST_F(MwTest, Type1AccessPastTheWindowIsARemoteAccessError) {
  ibv_mw *mw = Mw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_EQ(Bind1(b_.qp, b_.cq, mw,
                  Info(wmr_, kWinOff, kWin, IBV_ACCESS_REMOTE_WRITE))
                .status,
            IBV_WC_SUCCESS);
  // Inside the MR, 8 bytes before the window.
  Fill(a_.buf, 0, 64, 9);
  ibv_wc c = Rdma(a_.qp, a_.cq, IBV_WR_RDMA_WRITE, 0, 64, B(kWinOff - 8),
                  mw->rkey);
  EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
  ExpectUntouched(0, kWinOff + kWin + 4096);
}

TEST_F(MwTest, Type1ReadWithoutTheReadRightIsARemoteAccessError) {
  ibv_mw *mw = Mw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_EQ(Bind1(b_.qp, b_.cq, mw,
                  Info(wmr_, kWinOff, kWin, IBV_ACCESS_REMOTE_WRITE))
                .status,
            IBV_WC_SUCCESS);
  ibv_wc c = Rdma(a_.qp, a_.cq, IBV_WR_RDMA_READ, 0, 64, B(kWinOff),
                  mw->rkey);
  EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
}

TEST_F(MwTest, Type1UnbindMakesTheKeyARemoteAccessError) {
  ibv_mw *mw = Mw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_EQ(Bind1(b_.qp, b_.cq, mw,
                  Info(wmr_, kWinOff, kWin, IBV_ACCESS_REMOTE_WRITE))
                .status,
            IBV_WC_SUCCESS);
  uint32_t bound = mw->rkey;
  // The MR is busy while a window is bound to it.
  EXPECT_EQ(ibv_dereg_mr(wmr_), EBUSY);
  // Rebinding with length 0 invalidates the window (a new key as well).
  ASSERT_EQ(Bind1(b_.qp, b_.cq, mw, Info(wmr_, 0, 0, 0)).status,
            IBV_WC_SUCCESS);
  EXPECT_NE(mw->rkey, bound);
  // Neither key reaches the memory now; the MR may go.
  ibv_wc c = Rdma(a_.qp, a_.cq, IBV_WR_RDMA_WRITE, 0, 64, B(kWinOff), bound);
  EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
  ExpectUntouched(0, kWinOff + kWin);
  EXPECT_EQ(ibv_dereg_mr(wmr_), 0);
  wmr_ = nullptr;
}

TEST_F(MwTest, BindToAnMrWithoutMwBindFails) {
  ibv_mw *mw = Mw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  // b_.mr has every remote right but not IBV_ACCESS_MW_BIND.
  ibv_wc c = Bind1(b_.qp, b_.cq, mw,
                   Info(b_.mr, kWinOff, kWin, IBV_ACCESS_REMOTE_WRITE));
  EXPECT_EQ(c.status, IBV_WC_MW_BIND_ERR) << ibv_wc_status_str(c.status);
  EXPECT_EQ(c.wr_id, 50u);
  ibv_qp_attr at;
  ibv_qp_init_attr ia;
  ASSERT_EQ(ibv_query_qp(b_.qp, &at, IBV_QP_STATE, &ia), 0);
  EXPECT_EQ(at.qp_state, IBV_QPS_ERR);
}

TEST_F(MwTest, BindPastTheMrFails) {
  ibv_mw *mw = Mw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ibv_wc c = Bind1(b_.qp, b_.cq, mw,
                   Info(wmr_, (1 << 20) - 4096, 8192,
                        IBV_ACCESS_REMOTE_READ));
  EXPECT_EQ(c.status, IBV_WC_MW_BIND_ERR) << ibv_wc_status_str(c.status);
}

TEST_F(MwTest, WritableWindowNeedsLocalWriteOnTheMr) {
  ibv_mr *ro = ibv_reg_mr(pd_, b_.buf.data(), 1 << 20, IBV_ACCESS_MW_BIND);
  ASSERT_NE(ro, nullptr) << errno;
  mrs_.push_back(ro);
  ibv_mw *mw = Mw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ibv_wc c = Bind1(b_.qp, b_.cq, mw,
                   Info(ro, kWinOff, kWin, IBV_ACCESS_REMOTE_WRITE));
  EXPECT_EQ(c.status, IBV_WC_MW_BIND_ERR) << ibv_wc_status_str(c.status);
}

TEST_F(MwTest, ZeroBasedAndWrongTypeBindsAreRefusedAtPost) {
  ibv_mw *mw1 = Mw(IBV_MW_TYPE_1), *mw2 = Mw(IBV_MW_TYPE_2);
  ASSERT_NE(mw1, nullptr);
  ASSERT_NE(mw2, nullptr);
  ibv_mw_bind b = {};
  b.bind_info = Info(wmr_, kWinOff, kWin,
                     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED);
  EXPECT_EQ(ibv_bind_mw(b_.qp, mw1, &b), EINVAL);
  b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
  // ibv_bind_mw() is for type 1 only (libibverbs' check).
  EXPECT_EQ(ibv_bind_mw(b_.qp, mw2, &b), EINVAL);
  // Nothing was posted: the QP still works.
  ExpectSendArrives(a_.qp, a_.cq, b_.qp, b_.cq);
}

TEST_F(MwTest, Type2BindUseLocalInvalidateThenRemoteAccessError) {
  ibv_qp *xa, *xb;
  XPair(&xa, &xb);
  ASSERT_FALSE(HasFatalFailure());
  ibv_mw *mw = Mw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  uint32_t rkey = ibv_inc_rkey(mw->rkey);
  ibv_mw_bind_info bi = Info(wmr_, kWinOff, kWin,
                             IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  ibv_qp_ex *x = ibv_qp_to_qp_ex(xb);
  ASSERT_NE(x, nullptr);
  ibv_wr_start(x);
  x->wr_id = 70;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(x, mw, rkey, &bi);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  ibv_wc c = Wait(b_.cq);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  EXPECT_EQ(c.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(c.wr_id, 70u);

  // Bound: a bind of a type-2 window that is not free fails (below, as
  // it ends xb); first the data path through it, from xb's peer.
  ibv_sge sge;
  Fill(a_.buf, 0, 5000, 11);
  c = Post(xa, a_.cq, WriteWr(0, 5000, B(kWinOff + 1000), rkey, &sge));
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data() + kWinOff + 1000, 5000), 0);
  // The MR stays while the window is bound.
  EXPECT_EQ(ibv_dereg_mr(wmr_), EBUSY);

  ibv_wr_start(x);
  x->wr_id = 71;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_local_inv(x, rkey);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  c = Wait(b_.cq);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  EXPECT_EQ(c.opcode, IBV_WC_LOCAL_INV);

  memset(b_.buf.data(), 0, 1 << 20);
  c = Post(xa, a_.cq, WriteWr(0, 64, B(kWinOff), rkey, &sge));
  EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
  ExpectUntouched(0, kWinOff + kWin);
}

TEST_F(MwTest, Type2WindowIsReachedThroughItsQpOnly) {
  ibv_qp *xa, *xb;
  XPair(&xa, &xb);
  ASSERT_FALSE(HasFatalFailure());
  ibv_mw *mw = Mw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  uint32_t rkey = ibv_inc_rkey(mw->rkey);
  ibv_wc c = Bind2(xb, b_.cq, mw, rkey,
                   Info(wmr_, kWinOff, kWin, IBV_ACCESS_REMOTE_WRITE));
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  // a_ -> b_ is another QP pair of the same PD.
  c = Rdma(a_.qp, a_.cq, IBV_WR_RDMA_WRITE, 0, 64, B(kWinOff), rkey);
  EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
  ExpectUntouched(0, kWinOff + kWin);
  // A bound type-2 window is not free: a second bind fails.
  c = Bind2(xb, b_.cq, mw, ibv_inc_rkey(rkey),
            Info(wmr_, kWinOff, kWin, IBV_ACCESS_REMOTE_WRITE));
  EXPECT_EQ(c.status, IBV_WC_MW_BIND_ERR) << ibv_wc_status_str(c.status);
}

TEST_F(MwTest, Type2SendWithInvalidateReportsTheKey) {
  ibv_qp *xa, *xb;
  XPair(&xa, &xb);
  ASSERT_FALSE(HasFatalFailure());
  uint32_t rkey = BoundWriteWindow(xb);
  ASSERT_NE(rkey, 0u);
  ibv_wc c = SendWithInv(xa, xb, B(65536), b_.mr->lkey, rkey);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  ExpectInvalidatingRecv(rkey);
  // Invalid now: the peer's write through it fails; the MR may go.
  ExpectDeadKey(xa, rkey);
  EXPECT_EQ(ibv_dereg_mr(wmr_), 0);
  wmr_ = nullptr;
}

// SEND_WITH_INV into a receive buffer of an ODP MR whose page is not
// present: the receive path, in softirq, cannot fault it in, answers RNR
// and the requester sends the message again.  The window is invalidated
// once, when the message is in, just before the receive completes.  (Where
// the first try's header invalidated it, the second found it invalid
// already: a remote access error, the QP failed.)
TEST_F(MwTest, Type2SendWithInvalidateIntoAnOdpPageNotPresent) {
  ibv_qp *xa, *xb;
  XPair(&xa, &xb);
  ASSERT_FALSE(HasFatalFailure());
  uint32_t rkey = BoundWriteWindow(xb);
  ASSERT_NE(rkey, 0u);
  // Never touched: no page of it is present when the SEND comes.
  constexpr size_t kLen = 1 << 16;
  void *odp = mmap(nullptr, kLen, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(odp, MAP_FAILED);
  ibv_mr *omr = ibv_reg_mr(pd_, odp, kLen,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(omr, nullptr) << errno;
  const long rnr0 = Counter("rnr_naks_sent");
  Fill(a_.buf, 0, 100, 31);
  ibv_wc c = SendWithInv(xa, xb, reinterpret_cast<uintptr_t>(odp),
                         omr->lkey, rkey);
  // The way this test is about: the first try was refused for the page.
  EXPECT_GT(Counter("rnr_naks_sent"), rnr0);
  EXPECT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  ExpectInvalidatingRecv(rkey);
  EXPECT_EQ(memcmp(odp, a_.buf.data(), 100), 0);
  // Invalid now: the peer's write through it fails.
  if (c.status == IBV_WC_SUCCESS) ExpectDeadKey(xa, rkey);
  EXPECT_EQ(ibv_dereg_mr(omr), 0);
  munmap(odp, kLen);
}

TEST_F(MwTest, Type2RebindAfterInvalidationAndDealloc) {
  ibv_qp *xa, *xb;
  XPair(&xa, &xb);
  ASSERT_FALSE(HasFatalFailure());
  ibv_mw *mw = Mw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  uint32_t k1 = ibv_inc_rkey(mw->rkey), k2 = ibv_inc_rkey(k1);
  ibv_mw_bind_info bi = Info(wmr_, kWinOff, kWin, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(Bind2(xb, b_.cq, mw, k1, bi).status, IBV_WC_SUCCESS);
  ibv_send_wr inv = {};
  inv.wr_id = 90;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.invalidate_rkey = k1;
  ASSERT_EQ(Post(xb, b_.cq, inv).status, IBV_WC_SUCCESS);
  // Free again: a bind names the window by the key it had (k1).
  mw->rkey = k1;
  ASSERT_EQ(Bind2(xb, b_.cq, mw, k2, bi).status, IBV_WC_SUCCESS);
  ibv_sge sge;
  Fill(a_.buf, 0, 64, 12);
  ibv_wc c = Post(xa, a_.cq, WriteWr(0, 64, B(kWinOff), k2, &sge));
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data() + kWinOff, 64), 0);
  // The old key is dead.
  c = Post(xa, a_.cq, WriteWr(0, 64, B(kWinOff), k1, &sge));
  EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
  // Dealloc of a bound window lets the MR go.
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  mws_.clear();
  EXPECT_EQ(ibv_dereg_mr(wmr_), 0);
  wmr_ = nullptr;
}

TEST_F(MwTest, LocalInvalidateOfAType1WindowFails) {
  ibv_mw *mw = Mw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_EQ(Bind1(b_.qp, b_.cq, mw,
                  Info(wmr_, kWinOff, kWin, IBV_ACCESS_REMOTE_WRITE))
                .status,
            IBV_WC_SUCCESS);
  ibv_send_wr inv = {};
  inv.wr_id = 91;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.invalidate_rkey = mw->rkey;
  ibv_wc c = Post(b_.qp, b_.cq, inv);
  EXPECT_EQ(c.status, IBV_WC_LOC_QP_OP_ERR) << ibv_wc_status_str(c.status);
  // Still bound: the MR is still busy.
  EXPECT_EQ(ibv_dereg_mr(wmr_), EBUSY);
}

TEST_F(MwTest, SendWithInvalidateOfAType1WindowIsARemoteAccessError) {
  ibv_mw *mw = Mw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_EQ(Bind1(b_.qp, b_.cq, mw,
                  Info(wmr_, kWinOff, kWin, IBV_ACCESS_REMOTE_WRITE))
                .status,
            IBV_WC_SUCCESS);
  ibv_wc s = SendWithInv(a_.qp, b_.qp, B(65536), b_.mr->lkey, mw->rkey);
  EXPECT_EQ(s.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(s.status);
}

// A window taken away while its peer streams RDMA WRITEs through it: the
// peer posts kRaceWrites writes of kRaceLen bytes, each of its own fill
// byte to its own part of the window, and once kKillAfter have completed
// kill() takes the window away on the owner's side.  Every key lookup of the receive path happens
// under the window's lock, so the writes complete in order: some whole
// (every byte landed), then at most one with a remote access error (which
// may have placed part of its range before the window went), then the
// rest flushed, having placed nothing.  A write through the dead key fails
// afterwards.  The same for READs, whose responses are read from the
// window's memory segment by segment.
constexpr int kRaceWrites = 256;
constexpr uint32_t kRaceLen = 4096;
constexpr int kKillAfter = 16;

class MwRaceTest : public MwTest {
 protected:
  // Returns whether every write completed whole (from is still up).
  bool Race(ibv_qp *from, ibv_cq *from_cq, uint32_t rkey,
            const std::function<void()> &kill,
            ibv_wr_opcode op = IBV_WR_RDMA_WRITE) {
    int whole = 0, failed = 0, flushed = 0;
    RaceInto(from, from_cq, rkey, kill, op, &whole, &failed, &flushed);
    std::cout << (op == IBV_WR_RDMA_WRITE ? "writes: " : "reads: ") << whole << " whole, " << failed << " failed, "
              << flushed << " flushed\n";
    return whole == kRaceWrites;
  }

  void RaceInto(ibv_qp *from, ibv_cq *from_cq, uint32_t rkey,
                const std::function<void()> &kill, ibv_wr_opcode op,
                int *whole_, int *failed_, int *flushed_) {
    int &whole = *whole_, &failed = *failed_, &flushed = *flushed_;
    // Source and target of the data: b_ is the window's side.
    std::vector<uint8_t> &src = op == IBV_WR_RDMA_WRITE ? a_.buf : b_.buf;
    std::vector<uint8_t> &dst = op == IBV_WR_RDMA_WRITE ? b_.buf : a_.buf;
    memset(dst.data(), 0, 1 << 20);
    for (int i = 0; i < kRaceWrites; i++)
      memset(src.data() + i * kRaceLen, i + 1, kRaceLen);
    // One thread posts the writes one by one while this one reaps them
    // and, after kKillAfter, takes the window away: mid-stream.
    std::atomic<int> posted{0};
    std::atomic<bool> done{false};
    std::thread poster([&] {
      for (int i = 0; i < kRaceWrites; i++) {
        ibv_sge sge;
        ibv_send_wr wr = WriteWr(i * kRaceLen, kRaceLen, B(i * kRaceLen),
                                 rkey, &sge);
        wr.wr_id = 1000 + i;
        wr.opcode = op;
        wr.send_flags = IBV_SEND_SIGNALED;
        ibv_send_wr *bad;
        if (ibv_post_send(from, &wr, &bad)) break;
        posted++;
      }
      done = true;
    });
    for (int i = 0;; i++) {
      if (i == kKillAfter) kill();
      while (!done && i >= posted) std::this_thread::yield();
      if (i >= posted) break;
      ibv_wc c = Wait(from_cq);
      if (c.wr_id != 1000u + i) {
        ADD_FAILURE() << "completion " << i << " is " << c.wr_id;
        break;
      }
      const uint8_t *p = dst.data() + i * kRaceLen;
      if (c.status == IBV_WC_SUCCESS) {
        EXPECT_EQ(failed + flushed, 0) << "write " << i << " after a failure";
        whole++;
        for (uint32_t j = 0; j < kRaceLen; j++)
          if (p[j] != static_cast<uint8_t>(i + 1)) {
            ADD_FAILURE() << "write " << i << " byte " << j;
            break;
          }
        continue;
      }
      // A READ cut off mid-response: the responder closes the connection.
      if (c.status == IBV_WC_REM_ACCESS_ERR ||
          (op == IBV_WR_RDMA_READ && c.status == IBV_WC_RETRY_EXC_ERR)) {
        EXPECT_EQ(failed + flushed, 0) << "write " << i << ": second failure";
        failed++;
      } else {
        EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR)
            << "write " << i << ": " << ibv_wc_status_str(c.status);
        EXPECT_EQ(failed, 1) << "flushed without a failure (" << whole
                             << " whole before it)";
        flushed++;
      }
      // A failed write placed only its own bytes, a flushed one none.
      for (uint32_t j = 0; j < kRaceLen; j++)
        if (p[j] && (flushed || p[j] != static_cast<uint8_t>(i + 1))) {
          ADD_FAILURE() << "write " << i << " byte " << j << " is "
                        << int(p[j]);
          break;
        }
    }
    poster.join();
    if (posted < kKillAfter) kill();
    // Posting stops only at a QP in error.
    if (posted < kRaceWrites) {
      EXPECT_GT(failed, 0);
    }
  }

  // LOCAL_INV of rkey on qp (the window's responder QP), mid-race.  It
  // takes effect when posted (at the send queue's intake); its completion
  // comes in send-queue order, after the response the responder was
  // sending, so when the invalidation fails that response the responder's
  // QP goes to error (a responder's access error is fatal to it, as on
  // RoCE) and the LOCAL_INV's completion is a flush.
  void LocalInv(ibv_qp *qp, uint32_t rkey) {
    ibv_send_wr inv = {};
    inv.wr_id = 92;
    inv.opcode = IBV_WR_LOCAL_INV;
    inv.invalidate_rkey = rkey;
    inv_ = Post(qp, b_.cq, inv);
  }

  void ExpectInvCompleted(bool up) {
    EXPECT_EQ(inv_.wr_id, 92u);
    if (inv_.status == IBV_WC_WR_FLUSH_ERR) {
      EXPECT_FALSE(up) << "LOCAL_INV flushed, nothing failed";
    } else {
      EXPECT_EQ(inv_.status, IBV_WC_SUCCESS)
          << ibv_wc_status_str(inv_.status);
    }
  }

  // A window of type over the first MiB of b_'s buffer with access, bound
  // (type 1 from b_.qp, type 2 from xb); its rkey in *rkey.
  ibv_mw *Window(ibv_mw_type type, ibv_qp *xb, int access, uint32_t *rkey) {
    ibv_mw *mw = Mw(type);
    if (!mw) return nullptr;
    ibv_mw_bind_info bi = Info(wmr_, 0, 1 << 20, access);
    *rkey = type == IBV_MW_TYPE_2 ? ibv_inc_rkey(mw->rkey) : 0;
    ibv_wc c = type == IBV_MW_TYPE_2 ? Bind2(xb, b_.cq, mw, *rkey, bi)
                                     : Bind1(b_.qp, b_.cq, mw, bi);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
    if (type == IBV_MW_TYPE_1) *rkey = mw->rkey;
    return c.status == IBV_WC_SUCCESS ? mw : nullptr;
  }

  ibv_wc inv_ = {};

  // The dead key reaches nothing, from a pair that is still up.
  void ExpectDead(ibv_qp *from, ibv_cq *from_cq, uint32_t rkey) {
    memset(b_.buf.data(), 0, 1 << 20);
    ibv_sge sge;
    ibv_wc c = Post(from, from_cq, WriteWr(0, 64, B(0), rkey, &sge));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
    ExpectUntouched(0, 1 << 20);
  }
};

TEST_F(MwRaceTest, Type2LocalInvalidateUnderRemoteWrites) {
  ibv_qp *xa, *xb;
  XPair(&xa, &xb, nullptr, kRaceWrites);
  ASSERT_FALSE(HasFatalFailure());
  uint32_t rkey;
  ibv_mw *mw = Window(IBV_MW_TYPE_2, xb, IBV_ACCESS_REMOTE_WRITE, &rkey);
  ASSERT_NE(mw, nullptr);
  bool up = Race(xa, a_.cq, rkey, [&] { LocalInv(xb, rkey); });
  ASSERT_FALSE(HasFatalFailure());
  ExpectInvCompleted(up);
  // The old key is dead (asked through xa, the only QP the window
  // answered, if the race left it up); the window is free, its MR may go.
  if (up) ExpectDead(xa, a_.cq, rkey);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  mws_.clear();
  EXPECT_EQ(ibv_dereg_mr(wmr_), 0);
  wmr_ = nullptr;
}

TEST_F(MwRaceTest, Type1DeallocUnderRemoteWrites) {
  ibv_qp *xa, *xb;
  XPair(&xa, &xb, nullptr, kRaceWrites);
  ASSERT_FALSE(HasFatalFailure());
  uint32_t rkey;
  ibv_mw *mw = Window(IBV_MW_TYPE_1, xb, IBV_ACCESS_REMOTE_WRITE, &rkey);
  ASSERT_NE(mw, nullptr);
  Race(xa, a_.cq, rkey, [&] {
    ASSERT_EQ(ibv_dealloc_mw(mw), 0);
    mws_.clear();
  });
  ASSERT_FALSE(HasFatalFailure());
  ExpectDead(a_.qp, a_.cq, rkey);
  EXPECT_EQ(ibv_dereg_mr(wmr_), 0);
  wmr_ = nullptr;
}

TEST_F(MwRaceTest, Type1UnbindUnderRemoteWrites) {
  ibv_qp *xa, *xb;
  XPair(&xa, &xb, nullptr, kRaceWrites);
  ASSERT_FALSE(HasFatalFailure());
  uint32_t rkey;
  ibv_mw *mw = Window(IBV_MW_TYPE_1, xb, IBV_ACCESS_REMOTE_WRITE, &rkey);
  ASSERT_NE(mw, nullptr);
  // A bind of length 0 from the owner's QP invalidates the window.
  Race(xa, a_.cq, rkey, [&] {
    ibv_wc c = Bind1(b_.qp, b_.cq, mw, Info(wmr_, 0, 0, 0));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  });
  ASSERT_FALSE(HasFatalFailure());
  ExpectDead(a_.qp, a_.cq, rkey);
}

TEST_F(MwRaceTest, Type2LocalInvalidateUnderRemoteReads) {
  ibv_qp *xa, *xb;
  XPair(&xa, &xb, nullptr, kRaceWrites);
  ASSERT_FALSE(HasFatalFailure());
  uint32_t rkey;
  ibv_mw *mw = Window(IBV_MW_TYPE_2, xb, IBV_ACCESS_REMOTE_READ, &rkey);
  ASSERT_NE(mw, nullptr);
  bool up = Race(xa, a_.cq, rkey, [&] { LocalInv(xb, rkey); },
                 IBV_WR_RDMA_READ);
  ExpectInvCompleted(up);
}

// Hostile binds, as a buggy or malicious process could post them: each
// completes with IBV_WC_MW_BIND_ERR and takes nothing.
class MwHostileTest : public MwTest,
                      public ::testing::WithParamInterface<int> {};

TEST_P(MwHostileTest, GarbageBindIsABindError) {
  ibv_mw *mw = Mw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  ibv_pd *pd2 = ibv_alloc_pd(ctx_.get());
  ASSERT_NE(pd2, nullptr);
  pds_.push_back(pd2);
  ibv_mw *other = Mw(IBV_MW_TYPE_2, pd2);
  ASSERT_NE(other, nullptr);
  ibv_mr fake = *wmr_;
  ibv_mw_bind_info bi = Info(wmr_, kWinOff, kWin, IBV_ACCESS_REMOTE_WRITE);
  ibv_mw wmw = *mw;
  uint32_t rkey = ibv_inc_rkey(mw->rkey);
  ibv_qp *qp = b_.qp;
  switch (GetParam()) {
  case 0:  // a window of another PD
    wmw = *other;
    rkey = ibv_inc_rkey(other->rkey);
    break;
  case 1:  // a new key of another window (another index)
    rkey = mw->rkey + 0x100;
    break;
  case 2:  // a key the window does not have now
    wmw.rkey ^= 0x5a;
    break;
  case 3:  // an lkey of nothing
    fake.lkey = 0xfffff00u | 0x7;
    bi.mr = &fake;
    break;
  case 4:  // unknown rights (and a zero-based window), raw
    bi.mw_access_flags = 0x7fffffff;
    break;
  case 5:  // length wraps the address space
    bi.addr = ~0ull - 16;
    bi.length = 4096;
    break;
  case 6: {  // a QP of another PD binds a window of ours
    ibv_qp *xa, *xb;
    XPair(&xa, &xb, pd2);
    ASSERT_FALSE(HasFatalFailure());
    qp = xb;
    break;
  }
  case 7:  // a type-2 bind of length 0
    bi.length = 0;
    break;
  }
  ibv_wc c = Bind2(qp, b_.cq, &wmw, rkey, bi);
  EXPECT_EQ(c.status, IBV_WC_MW_BIND_ERR) << ibv_wc_status_str(c.status);
  // Nothing bound: the MR is free to go.
  EXPECT_EQ(ibv_dereg_mr(wmr_), 0);
  wmr_ = nullptr;
}

INSTANTIATE_TEST_SUITE_P(Cases, MwHostileTest, ::testing::Range(0, 8));

// ibv_rereg_mr(): a new PD or new rights alone keep the keys; a new
// translation (or both, or write rights on memory pinned read-only) comes
// under new keys and the old ones fail; a bound window refuses it.
class ReregMrTest : public MwTest {
 protected:
  static constexpr size_t kLen = 65536;

  // An MR of b_'s buffer at off, kLen bytes, with access.
  ibv_mr *Mr(size_t off, int access) {
    ibv_mr *mr = ibv_reg_mr(pd_, b_.buf.data() + off, kLen, access);
    EXPECT_NE(mr, nullptr) << errno;
    if (mr) mrs_.push_back(mr);
    return mr;
  }

  ibv_pd *Pd() {
    ibv_pd *pd = ibv_alloc_pd(ctx_.get());
    EXPECT_NE(pd, nullptr) << errno;
    if (pd) pds_.push_back(pd);
    return pd;
  }

  // ibv_rereg_mr() of mr's access alone, or of its translation alone (to
  // kLen bytes of b_'s buffer at off).
  static int Reaccess(ibv_mr *mr, int access) {
    return ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                        access);
  }

  int Move(ibv_mr *mr, size_t off) {
    return ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr,
                        b_.buf.data() + off, kLen, 0);
  }

  // RDMA WRITE of len bytes of pattern seed from a_ to b_'s buffer at off.
  ibv_wc WriteTo(size_t off, uint32_t len, uint32_t rkey, unsigned seed) {
    Fill(a_.buf, 0, len, seed);
    return Rdma(a_.qp, a_.cq, IBV_WR_RDMA_WRITE, 0, len, B(off), rkey);
  }

  void ExpectWritten(size_t off, uint32_t len) {
    EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data() + off, len), 0)
        << Diff(a_.buf.data(), b_.buf.data() + off, len);
  }
};

constexpr int kRw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

TEST_F(ReregMrTest, TranslationMovesTheRegionUnderNewKeys) {
  ibv_mr *mr = Mr(0, kRw);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(WriteTo(0, 4096, mr->rkey, 1).status, IBV_WC_SUCCESS);
  ExpectWritten(0, 4096);
  uint32_t old_rkey = mr->rkey, old_lkey = mr->lkey;

  constexpr size_t kTo = 1 << 20;
  ASSERT_EQ(Move(mr, kTo), 0) << errno;
  EXPECT_NE(mr->rkey, old_rkey);
  EXPECT_NE(mr->lkey, old_lkey);
  EXPECT_EQ(mr->addr, b_.buf.data() + kTo);
  EXPECT_EQ(mr->length, kLen);

  // The new range, byte for byte, its last byte included; nothing at the
  // old one.
  std::vector<uint8_t> before(b_.buf.begin(), b_.buf.begin() + kLen);
  ibv_wc c = WriteTo(kTo + kLen - 8192, 8192, mr->rkey, 2);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  ExpectWritten(kTo + kLen - 8192, 8192);
  EXPECT_EQ(memcmp(before.data(), b_.buf.data(), kLen), 0);
  // The old range under the new key: outside the region.
  c = WriteTo(0, 64, mr->rkey, 3);
  EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
  EXPECT_EQ(memcmp(before.data(), b_.buf.data(), kLen), 0);
}

TEST_F(ReregMrTest, OldKeysFailAfterwards) {
  ibv_mr *mr = Mr(0, kRw);
  ASSERT_NE(mr, nullptr);
  uint32_t old_rkey = mr->rkey, old_lkey = mr->lkey;
  // The same range anew: new keys all the same.
  ASSERT_EQ(Move(mr, 0), 0) << errno;
  ASSERT_NE(mr->rkey, old_rkey);
  // Remote use of the old rkey: a remote access error.
  ibv_wc c = WriteTo(0, 64, old_rkey, 4);
  EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
  ExpectUntouched(0, kLen);
  // Local use of the old lkey, on a pair of its own (that error took
  // a_ and b_ down): a local protection error.
  ibv_qp *xa, *xb;
  XPair(&xa, &xb);
  ASSERT_FALSE(HasFatalFailure());
  ibv_sge sge = {B(0), 64, old_lkey};
  ibv_send_wr wr = {};
  wr.wr_id = 70;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(a_.buf.data());
  wr.wr.rdma.rkey = a_.mr->rkey;
  c = Post(xb, b_.cq, wr);
  EXPECT_EQ(c.status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(c.status);
}

TEST_F(ReregMrTest, AccessChangeGrantsAndRevokesUnderTheSameKeys) {
  ibv_mr *mr = Mr(0, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  uint32_t rkey = mr->rkey, lkey = mr->lkey;
  Fill(b_.buf, 0, kLen, 5);
  ASSERT_EQ(Reaccess(mr, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ), 0)
      << errno;
  EXPECT_EQ(mr->rkey, rkey);
  EXPECT_EQ(mr->lkey, lkey);
  ibv_wc c = Rdma(a_.qp, a_.cq, IBV_WR_RDMA_READ, 0, kLen, B(0), mr->rkey);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data(), kLen), 0)
      << Diff(b_.buf.data(), a_.buf.data(), kLen);

  // Read only now: a remote write through the key is refused.
  ASSERT_EQ(Reaccess(mr, IBV_ACCESS_REMOTE_READ), 0) << errno;
  EXPECT_EQ(mr->rkey, rkey);
  std::vector<uint8_t> before(b_.buf.begin(), b_.buf.begin() + kLen);
  c = WriteTo(0, 64, mr->rkey, 6);
  EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
  EXPECT_EQ(memcmp(before.data(), b_.buf.data(), kLen), 0);
}

// Memory registered without any write right is pinned read-only: rights to
// write it need it pinned anew, under new keys.
TEST_F(ReregMrTest, WriteRightsOnReadOnlyMemoryComeUnderNewKeys) {
  ibv_mr *mr = Mr(0, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  uint32_t rkey = mr->rkey;
  ASSERT_EQ(Reaccess(mr, kRw), 0) << errno;
  EXPECT_NE(mr->rkey, rkey);
  ibv_wc c = WriteTo(4096, 8192, mr->rkey, 14);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  ExpectWritten(4096, 8192);
  c = WriteTo(0, 64, rkey, 15);
  EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
}

TEST_F(ReregMrTest, PdChangeDecidesWhichQpsReachTheMr) {
  ibv_mr *mr = Mr(0, kRw);
  ASSERT_NE(mr, nullptr);
  ibv_pd *pd2 = Pd();
  ASSERT_NE(pd2, nullptr);
  uint32_t rkey = mr->rkey;
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, nullptr, 0, 0), 0)
      << errno;
  EXPECT_EQ(mr->pd, pd2);
  EXPECT_EQ(mr->rkey, rkey);
  // Back to the QPs' PD with more rights, both in one call: new keys.
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS,
                         pd_, nullptr, 0, kRw | IBV_ACCESS_REMOTE_READ),
            0)
      << errno;
  EXPECT_EQ(mr->pd, pd_);
  EXPECT_NE(mr->rkey, rkey);
  rkey = mr->rkey;
  ibv_wc c = WriteTo(128, 4096, mr->rkey, 7);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  ExpectWritten(128, 4096);
  c = Rdma(a_.qp, a_.cq, IBV_WR_RDMA_READ, 65536, 4096, B(128), mr->rkey);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  EXPECT_EQ(memcmp(a_.buf.data() + 65536, b_.buf.data() + 128, 4096), 0);

  // In another PD than b_'s QP: out of its reach, under the same key.
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, nullptr, 0, 0), 0)
      << errno;
  EXPECT_EQ(mr->rkey, rkey);
  std::vector<uint8_t> before(b_.buf.begin(), b_.buf.begin() + kLen);
  c = WriteTo(0, 64, mr->rkey, 8);
  EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
  EXPECT_EQ(memcmp(before.data(), b_.buf.data(), kLen), 0);
}

TEST_F(ReregMrTest, BoundWindowRefusesItAndTheMrStaysAsItWas) {
  ibv_mr *mr = Mr(0, kRw | IBV_ACCESS_MW_BIND);
  ASSERT_NE(mr, nullptr);
  ibv_mw *mw = Mw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_EQ(Bind1(b_.qp, b_.cq, mw, Info(mr, 0, 4096, IBV_ACCESS_REMOTE_WRITE))
                .status,
            IBV_WC_SUCCESS);
  uint32_t rkey = mr->rkey;
  // In place (rights) or anew (translation): both refused.
  errno = 0;
  EXPECT_EQ(Reaccess(mr, kRw), IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(errno, EBUSY);
  errno = 0;
  EXPECT_EQ(Move(mr, 0), IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(errno, EBUSY);
  EXPECT_EQ(mr->rkey, rkey);
  // The MR and the window both still work.
  ibv_wc c = WriteTo(8192, 4096, mr->rkey, 9);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  ExpectWritten(8192, 4096);
  c = WriteTo(0, 4096, mw->rkey, 10);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  ExpectWritten(0, 4096);

  // Unbound (a type-1 bind of length 0), the MR can change.
  ASSERT_EQ(Bind1(b_.qp, b_.cq, mw, Info(mr, 0, 0, IBV_ACCESS_REMOTE_WRITE))
                .status,
            IBV_WC_SUCCESS);
  ASSERT_EQ(Reaccess(mr, kRw), 0) << errno;
  c = WriteTo(16384, 4096, mr->rkey, 11);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  ExpectWritten(16384, 4096);
}

TEST_F(ReregMrTest, SenderReadsTheNewTranslationThroughItsNewLkey) {
  ibv_mr *mr = ibv_reg_mr(pd_, a_.buf.data() + (2 << 20), kLen,
                          IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << errno;
  mrs_.push_back(mr);
  constexpr size_t kTo = 3 << 20;
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr,
                         a_.buf.data() + kTo, kLen, 0),
            0)
      << errno;
  Fill(a_.buf, kTo, kLen, 12);
  std::vector<ibv_sge> sg = {
      {reinterpret_cast<uintptr_t>(a_.buf.data() + kTo), kLen, mr->lkey}};
  ASSERT_EQ(PostSend(a_, 71, IBV_WR_RDMA_WRITE, sg, B(0), b_.mr->rkey), 0);
  ibv_wc c = Wait(a_.cq);
  ASSERT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
  EXPECT_EQ(memcmp(a_.buf.data() + kTo, b_.buf.data(), kLen), 0)
      << Diff(a_.buf.data() + kTo, b_.buf.data(), kLen);
  // The old range under the new lkey: outside the region.
  sg[0].addr = reinterpret_cast<uintptr_t>(a_.buf.data() + (2 << 20));
  ASSERT_EQ(PostSend(a_, 72, IBV_WR_RDMA_WRITE, sg, B(0), b_.mr->rkey), 0);
  c = Wait(a_.cq);
  EXPECT_EQ(c.status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(c.status);
}

// READs in flight while their MR is registered anew.  A READ response is
// read from the MR segment by segment, as with ibv_dereg_mr under remote
// reads (HostileTest.MrDeregisteredUnderRemoteReads): each READ delivers
// the whole range, or one fails, with a remote access error (not started
// when the old key went) or a transport retry error (cut off mid-response:
// the responder closes the connection), and the rest flush.  The old
// registration goes once its last reader is done (no oops or leak: the
// lab's dmesg check).
TEST_F(ReregMrTest, ReadsInFlightFinishOrFailCleanly) {
  constexpr uint32_t kRead = 1 << 20;
  constexpr int kReads = 6;
  ibv_mr *mr = ibv_reg_mr(pd_, b_.buf.data(), kRead,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr) << errno;
  mrs_.push_back(mr);
  Fill(b_.buf, 0, kRead, 13);
  for (int i = 0; i < kReads; i++) {
    std::vector<ibv_sge> sg = {
        {reinterpret_cast<uintptr_t>(a_.buf.data() + i * kRead), kRead,
         a_.mr->lkey}};
    ASSERT_EQ(PostSend(a_, 80 + i, IBV_WR_RDMA_READ, sg, B(0), mr->rkey), 0);
  }
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr,
                         b_.buf.data(), kRead, 0),
            0)
      << errno;
  int ok = 0, failed = 0, flushed = 0;
  for (int i = 0; i < kReads; i++) {
    ibv_wc c = Wait(a_.cq);
    ASSERT_EQ(c.wr_id, 80u + i);
    if (c.status == IBV_WC_SUCCESS) {
      ASSERT_EQ(failed + flushed, 0) << "a success after a failure";
      ok++;
      EXPECT_EQ(memcmp(a_.buf.data() + i * kRead, b_.buf.data(), kRead), 0)
          << "read " << i << ": "
          << Diff(b_.buf.data(), a_.buf.data() + i * kRead, kRead);
    } else if (c.status == IBV_WC_REM_ACCESS_ERR ||
               c.status == IBV_WC_RETRY_EXC_ERR) {
      ASSERT_EQ(failed + flushed, 0) << "a second failure";
      failed++;
    } else {
      EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(c.status);
      EXPECT_EQ(failed, 1);
      flushed++;
    }
  }
  std::cout << "reads: " << ok << " whole, " << failed << " failed, "
            << flushed << " flushed\n";
  // The new key reads (on a pair still up).
  if (failed) return;
  ibv_wc c = Rdma(a_.qp, a_.cq, IBV_WR_RDMA_READ, 0, 4096, B(0), mr->rkey);
  EXPECT_EQ(c.status, IBV_WC_SUCCESS) << ibv_wc_status_str(c.status);
}

}  // namespace
}  // namespace trdma_lab
