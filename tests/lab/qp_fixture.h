// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// The fixture of the data-path lab tests: two RC QPs (UC QPs in a fixture
// whose QpType() says so) of the device under test, connected to each
// other, each with its CQ and a registered buffer, and helpers to post,
// wait and compare.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <rdma/trdma-wire.h>

#include "lab_util.h"

namespace trdma_lab {

struct Side {
  ibv_cq *cq = nullptr;
  ibv_qp *qp = nullptr;
  std::vector<uint8_t> buf;
  ibv_mr *mr = nullptr;
};

class DataPathTest : public ::testing::Test {
 protected:
  static constexpr size_t kBuf = 9 << 20;

  // The type of a_'s, b_'s and NewQp()'s QPs: RC or UC.
  virtual ibv_qp_type QpType() const { return IBV_QPT_RC; }

  void SetUp() override {
    ctx_ = OpenDevice(DevName());
    ASSERT_TRUE(ctx_);
    pd_ = ibv_alloc_pd(ctx_.get());
    ASSERT_NE(pd_, nullptr);
    for (Side *s : {&a_, &b_}) {
      s->cq = ibv_create_cq(ctx_.get(), 512, nullptr, nullptr, 0);
      ASSERT_NE(s->cq, nullptr);
      s->buf.assign(kBuf, 0);
      s->mr = ibv_reg_mr(pd_, s->buf.data(), kBuf,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ |
                             IBV_ACCESS_REMOTE_ATOMIC);
      ASSERT_NE(s->mr, nullptr);
      ibv_qp_init_attr ia = {};
      ia.send_cq = s->cq;
      ia.recv_cq = s->cq;
      ia.qp_type = QpType();
      ia.cap = {256, 256, 4, 4, 128};
      s->qp = ibv_create_qp(pd_, &ia);
      ASSERT_NE(s->qp, nullptr);
    }
    ASSERT_EQ(Connect(a_.qp, b_.qp), 0);
    ASSERT_EQ(Connect(b_.qp, a_.qp), 0);
  }

  void TearDown() override {
    for (Side *s : {&a_, &b_}) {
      if (s->qp) ibv_destroy_qp(s->qp);
      if (s->mr) ibv_dereg_mr(s->mr);
      if (s->cq) ibv_destroy_cq(s->cq);
    }
    if (pd_) ibv_dealloc_pd(pd_);
  }

  int GidIndex() {
    ibv_gid g;
    return RoceV2Gid(ctx_.get(), &g);
  }

  int Connect(ibv_qp *qp, ibv_qp *peer, uint8_t rnr_retry = 7,
              uint8_t timeout = 14) {
    int rv = ToRtr(qp, peer);
    return rv ? rv : ToRts(qp, rnr_retry, timeout);
  }

  // The two halves of Connect(): RESET to RTR towards peer (rq_psn 1000 +
  // the peer's QPN), then RTR to RTS (sq_psn 1000 + its own QPN).  A UC
  // QP gets only what UC has: no READ or atomic rights, no RDMA READ
  // depth, RNR timer, retry counts or timeout.
  int ToRtr(ibv_qp *qp, ibv_qp *peer) {
    const bool uc = qp->qp_type == IBV_QPT_UC;
    ibv_qp_attr a = {};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = uc ? IBV_ACCESS_REMOTE_WRITE
                           : IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                 IBV_ACCESS_REMOTE_ATOMIC;
    int rv = ibv_modify_qp(qp, &a,
                           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                               IBV_QP_ACCESS_FLAGS);
    if (rv) return rv;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer->qp_num;
    a.rq_psn = 1000 + peer->qp_num;
    a.max_dest_rd_atomic = 8;
    a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.sgid_index = GidIndex();
    a.ah_attr.grh.hop_limit = 64;
    ibv_query_gid(ctx_.get(), 1, a.ah_attr.grh.sgid_index, &a.ah_attr.grh.dgid);
    rv = ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                           IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                           (uc ? 0
                               : IBV_QP_MAX_DEST_RD_ATOMIC |
                                     IBV_QP_MIN_RNR_TIMER));
    return rv;
  }

  int ToRts(ibv_qp *qp, uint8_t rnr_retry = 7, uint8_t timeout = 14) {
    ibv_qp_attr a = {};
    if (qp->qp_type == IBV_QPT_UC) {
      a.qp_state = IBV_QPS_RTS;
      a.sq_psn = 1000 + qp->qp_num;
      return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    }
    a.qp_state = IBV_QPS_RTS;
    a.timeout = timeout;
    a.retry_cnt = 7;
    a.rnr_retry = rnr_retry;
    a.sq_psn = 1000 + qp->qp_num;
    a.max_rd_atomic = 8;
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                             IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                             IBV_QP_MAX_QP_RD_ATOMIC);
  }

  // s's peer QP was destroyed at t0, s owing it nothing: s is not failed
  // at once (no completion in 300 ms) but after peer_close_grace
  // (IBV_EVENT_QP_FATAL no sooner than 900 ms after t0), and then its n
  // receives, wr_ids first to first + n - 1, flush in order.
  void ExpectPeerCloseGrace(Side &s, std::chrono::steady_clock::time_point t0,
                            uint64_t first, int n) {
    ibv_wc none;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(ibv_poll_cq(s.cq, 1, &none), 0) << "error completion at once";
    EXPECT_TRUE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_QP_FATAL, 5000));
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
    EXPECT_GE(ms, 900);
    for (int i = 0; i < n; i++) {
      ibv_wc r = Wait(s.cq);
      EXPECT_EQ(r.wr_id, first + i);
      EXPECT_EQ(r.status, IBV_WC_WR_FLUSH_ERR);
    }
  }

  // A SEND of 4 KiB from req into a receive WQE of resp naming memory resp
  // may not write (a key of no MR): req's SEND fails with a remote
  // operational error, resp's receive with a local protection error, and
  // both QPs go to error.
  void SendIntoForeignReceive(Side &req, Side &resp, uint64_t recv_id,
                              uint64_t send_id) {
    std::vector<ibv_sge> rs = Sges(resp, 0, 4096, 1);
    rs[0].lkey ^= 0x100;  // another key byte: no MR
    ASSERT_EQ(PostRecv(resp, recv_id, rs), 0);
    ASSERT_EQ(PostSend(req, send_id, IBV_WR_SEND, Sges(req, 0, 4096, 1)), 0);
    ibv_wc s = Wait(req.cq);
    EXPECT_EQ(s.wr_id, send_id);
    EXPECT_EQ(s.status, IBV_WC_REM_OP_ERR) << ibv_wc_status_str(s.status);
    ibv_wc r = Wait(resp.cq);
    EXPECT_EQ(r.wr_id, recv_id);
    EXPECT_EQ(r.status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(r.status);
  }

  // Small SENDs from a_ to b_, one message of len bytes per index: writes
  // the bytes of messages first..first+n-1 into a_'s buffer (a function
  // of the index and seed) and posts a receive for each on b_, into the
  // same offset of b_'s buffer.
  void StageSmallSends(int first, int n, uint32_t len, int seed) {
    for (int i = 0; i < n; i++) {
      const int k = first + i;
      for (uint32_t j = 0; j < len; j++)
        a_.buf[k * len + j] = static_cast<uint8_t>(k * seed + j);
      ASSERT_EQ(PostRecv(b_, k, Sges(b_, k * len, len, 1)), 0);
    }
  }

  // Waits for `recvs` receives of len bytes on b_, wr_ids first_recv on,
  // and for `sends` SEND completions on a_, wr_ids first_send, first_send
  // + step, ...: each successful and in order.
  void ExpectInOrder(int sends, uint64_t first_send, uint64_t step, int recvs,
                     uint64_t first_recv, uint32_t len) {
    int s = 0, r = 0;
    while (s < sends || r < recvs) {
      ibv_wc wc = Wait(s < sends ? a_.cq : b_.cq);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
      if (wc.opcode == IBV_WC_RECV) {
        ASSERT_EQ(wc.wr_id, first_recv + r);
        ASSERT_EQ(wc.byte_len, len);
        r++;
      } else {
        ASSERT_EQ(wc.opcode, IBV_WC_SEND);
        ASSERT_EQ(wc.wr_id, first_send + s * step);
        s++;
      }
    }
  }

  // Waits for one completion on cq (10 s).
  ibv_wc Wait(ibv_cq *cq) {
    ibv_wc wc = {};
    wc.status = IBV_WC_GENERAL_ERR;
    wc.wr_id = ~0ull;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      int n = ibv_poll_cq(cq, 1, &wc);
      if (n == 1) return wc;
      EXPECT_EQ(n, 0);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    ADD_FAILURE() << "no completion within 10 s\n" << StuckReport();
    return wc;
  }

  // Milliseconds from t0 to now.
  static long MsSince(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now() - t0)
        .count();
  }

  // Where two byte ranges differ, for a failure message.
  static std::string Diff(const uint8_t *want, const uint8_t *got, size_t n) {
    size_t first = n, count = 0;
    for (size_t i = 0; i < n; i++)
      if (want[i] != got[i] && count++ == 0) first = i;
    if (!count) return "equal";
    return std::to_string(count) + " of " + std::to_string(n) +
           " bytes differ, the first at " + std::to_string(first) +
           ": want " + std::to_string(want[first]) + " got " +
           std::to_string(got[first]);
  }

  void Fill(std::vector<uint8_t> &v, size_t off, size_t len, unsigned seed) {
    std::mt19937 rng(seed);
    for (size_t i = 0; i < len; i++) v[off + i] = static_cast<uint8_t>(rng());
  }

  // SGEs covering [off, off + len) of a side's buffer, cut into n pieces of
  // uneven size.
  std::vector<ibv_sge> Sges(Side &s, size_t off, uint32_t len, int n) {
    std::vector<ibv_sge> v;
    uint32_t left = len;
    for (int i = 0; i < n; i++) {
      uint32_t piece = i == n - 1 ? left : left / (n - i) + (i % 2) * 7;
      piece = std::min(piece, left);
      v.push_back({reinterpret_cast<uintptr_t>(s.buf.data() + off), piece,
                   s.mr->lkey});
      off += piece + 3;  // a gap between pieces
      left -= piece;
    }
    return v;
  }

  int PostRecv(Side &s, uint64_t id, std::vector<ibv_sge> sges) {
    return PostRecvOn(s.qp, id, std::move(sges));
  }

  int PostRecvOn(ibv_qp *qp, uint64_t id, std::vector<ibv_sge> sges) {
    ibv_recv_wr wr = {}, *bad;
    wr.wr_id = id;
    wr.sg_list = sges.data();
    wr.num_sge = sges.size();
    return ibv_post_recv(qp, &wr, &bad);
  }

  // n signaled one-SGE WRs of op chained through next, for one
  // ibv_post_send(): the i-th (wr_id first_id + i) over the len bytes of
  // s's buffer at off + i * len.  A WRITE's remote address is left to the
  // caller.
  struct WrList {
    std::vector<ibv_sge> sg;
    std::vector<ibv_send_wr> wr;
  };
  WrList Chain(Side &s, ibv_wr_opcode op, size_t off, uint32_t len, int n,
               uint64_t first_id = 0) {
    WrList l{std::vector<ibv_sge>(n), std::vector<ibv_send_wr>(n)};
    for (int i = 0; i < n; i++) {
      l.sg[i] = {reinterpret_cast<uintptr_t>(s.buf.data() + off + i * len),
                 len, s.mr->lkey};
      l.wr[i] = {};
      l.wr[i].wr_id = first_id + i;
      l.wr[i].opcode = op;
      l.wr[i].sg_list = &l.sg[i];
      l.wr[i].num_sge = 1;
      l.wr[i].send_flags = IBV_SEND_SIGNALED;
      l.wr[i].next = i + 1 < n ? &l.wr[i + 1] : nullptr;
    }
    return l;
  }

  int PostSend(Side &s, uint64_t id, ibv_wr_opcode op, std::vector<ibv_sge> sg,
               uint64_t raddr = 0, uint32_t rkey = 0, uint32_t imm = 0,
               int flags = IBV_SEND_SIGNALED) {
    ibv_send_wr wr = {}, *bad;
    wr.wr_id = id;
    wr.opcode = op;
    wr.sg_list = sg.data();
    wr.num_sge = sg.size();
    wr.send_flags = flags;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return ibv_post_send(s.qp, &wr, &bad);
  }

  // Bytes [off, off+len) of `from` equal the scattered bytes of `sges`.
  static bool SameScattered(const uint8_t *from, const std::vector<ibv_sge> &sg) {
    size_t at = 0;
    for (const ibv_sge &s : sg) {
      if (memcmp(from + at, reinterpret_cast<void *>(s.addr), s.length))
        return false;
      at += s.length;
    }
    return true;
  }

  // A new QP (QpType()) of pd_ with both queues' completions on cq.
  ibv_qp *NewQp(ibv_cq *cq, ibv_qp_cap cap = {8, 8, 1, 1, 0}) {
    ibv_qp_init_attr ia = {};
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.qp_type = QpType();
    ia.cap = cap;
    return ibv_create_qp(pd_, &ia);
  }

  // One 64-byte SEND from a_'s buffer on `from` into b_'s buffer on `to`:
  // both complete successfully.
  void ExpectSendArrives(ibv_qp *from, ibv_cq *from_cq, ibv_qp *to,
                         ibv_cq *to_cq) {
    ibv_sge rs = {reinterpret_cast<uintptr_t>(b_.buf.data()), 64,
                  b_.mr->lkey};
    ibv_recv_wr rwr = {}, *rbad;
    rwr.wr_id = 1;
    rwr.sg_list = &rs;
    rwr.num_sge = 1;
    ASSERT_EQ(ibv_post_recv(to, &rwr, &rbad), 0);
    ibv_sge ss = {reinterpret_cast<uintptr_t>(a_.buf.data()), 64,
                  a_.mr->lkey};
    ibv_send_wr swr = {}, *sbad;
    swr.wr_id = 2;
    swr.opcode = IBV_WR_SEND;
    swr.sg_list = &ss;
    swr.num_sge = 1;
    swr.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(ibv_post_send(from, &swr, &sbad), 0);
    EXPECT_EQ(Wait(to_cq).status, IBV_WC_SUCCESS);
    EXPECT_EQ(Wait(from_cq).status, IBV_WC_SUCCESS);
  }

  // A new QP on b_'s CQ whose peer is a raw TCP socket of the test posing
  // as QPN 1 on our own GID (the smaller: the QP accepts), its hello with
  // hello_flags.  Returns that socket, connected and greeted (the QP's
  // ACCEPT read), or -1; *reply (if given) is the type of the QP's answer.
  int RawPeer(ibv_qp **victim, uint8_t timeout = 14, uint16_t hello_flags = 0,
              uint8_t *reply = nullptr) {
    *victim = NewQp(b_.cq);
    if (!*victim) return -1;
    ibv_qp fake = **victim;
    fake.qp_num = 1;
    if (Connect(*victim, &fake, 7, timeout)) return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(TRDMA_DEFAULT_PORT);
    inet_pton(AF_INET, NetdevAddr().c_str(), &sa.sin_addr);
    trdma_hello h = {}, r = {};
    h.magic = htonl(TRDMA_HELLO_MAGIC);
    h.version = TRDMA_WIRE_VERSION;
    h.type = TRDMA_HELLO_REQ;
    h.flags = htons(hello_flags);
    h.src_qpn = htonl(1);
    h.dst_qpn = htonl((*victim)->qp_num);
    h.start_msn = htonl(1000 + (*victim)->qp_num);
    h.max_dest_rd_atomic = 8;
    ibv_gid gid;
    if (ibv_query_gid(ctx_.get(), 1, GidIndex(), &gid)) goto fail;
    memcpy(h.src_gid, gid.raw, 16);
    memcpy(h.dst_gid, gid.raw, 16);
    if (connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)) ||
        write(fd, &h, sizeof(h)) != static_cast<ssize_t>(sizeof(h)) ||
        recv(fd, &r, sizeof(r), MSG_WAITALL) !=
            static_cast<ssize_t>(sizeof(r)))
      goto fail;
    if (reply) *reply = r.type;
    if (r.type != TRDMA_HELLO_ACCEPT) goto fail;
    return fd;
  fail:
    close(fd);
    return -1;
  }

  Context ctx_;
  ibv_pd *pd_ = nullptr;
  Side a_, b_;
};

}  // namespace trdma_lab
