// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// UC QPs (IBV_QPT_UC): SENDs and WRITEs over the QPs' TCP connection, each
// completed at the requester once TCP has it; the responder answers
// nothing and drops (and counts, uc_rx_dropped) a message it cannot place,
// staying usable; READs and atomics are refused at post; modify_qp takes
// UC's attributes only; a UC QP binds only to a UC peer.
#include <arpa/inet.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <rdma/trdma-wire.h>

#include "lab_util.h"
#include "qp_fixture.h"

namespace trdma_lab {
namespace {

class UcTest : public DataPathTest {
 protected:
  ibv_qp_type QpType() const override { return IBV_QPT_UC; }

  // No completion on cq for ms milliseconds.
  void ExpectQuiet(ibv_cq *cq, int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    ibv_wc wc;
    EXPECT_EQ(ibv_poll_cq(cq, 1, &wc), 0)
        << "completion " << wc.wr_id << " status " << wc.status;
  }

  // The completions of a SEND id of len bytes from a_ to b_, both
  // successful; returns the receive's.
  ibv_wc ExpectPair(uint64_t id, uint32_t len) {
    ibv_wc s = Wait(a_.cq), r = Wait(b_.cq);
    EXPECT_EQ(s.status, IBV_WC_SUCCESS);
    EXPECT_EQ(s.opcode, IBV_WC_SEND);
    EXPECT_EQ(s.wr_id, id);
    EXPECT_EQ(r.status, IBV_WC_SUCCESS);
    EXPECT_EQ(r.opcode, IBV_WC_RECV);
    EXPECT_EQ(r.wr_id, id);
    EXPECT_EQ(r.byte_len, len);
    return r;
  }

  // A SEND of len bytes (seed) from a_ at offset 0 into a receive at b_'s
  // offset 0: both succeed and the bytes arrive.
  void ExpectSend(uint64_t id, uint32_t len, unsigned seed) {
    Fill(a_.buf, 0, len, seed);
    ASSERT_EQ(PostRecv(b_, id, Sges(b_, 0, len, 1)), 0);
    ASSERT_EQ(PostSend(a_, id, IBV_WR_SEND, Sges(a_, 0, len, 1)), 0);
    ExpectPair(id, len);
    EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data(), len), 0)
        << Diff(a_.buf.data(), b_.buf.data(), len);
  }
};

// SENDs with and without immediate, from one byte to several segments
// (over 64 KiB), scattered over several SGEs on both sides.
TEST_F(UcTest, SendsArriveByteForByte) {
  const uint32_t sizes[] = {1, 1000, 4096, 70000, 300000};
  uint64_t id = 1;
  for (uint32_t len : sizes) {
    for (bool imm : {false, true}) {
      SCOPED_TRACE("len " + std::to_string(len) + (imm ? " imm" : ""));
      Fill(a_.buf, 0, len + 64, static_cast<unsigned>(id));
      std::fill(b_.buf.begin(), b_.buf.begin() + (4 << 20), 0);
      auto rs = Sges(b_, 0, len, len > 10 ? 3 : 1);
      auto ss = Sges(a_, 0, len, len > 10 ? 4 : 1);
      ASSERT_EQ(PostRecv(b_, id, rs), 0);
      ASSERT_EQ(PostSend(a_, id, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
                         ss, 0, 0, 0xabc000 + id),
                0);
      ibv_wc r = ExpectPair(id, len);
      EXPECT_EQ(!!(r.wc_flags & IBV_WC_WITH_IMM), imm);
      if (imm) {
        EXPECT_EQ(ntohl(r.imm_data), 0xabc000 + id);
      }
      std::vector<uint8_t> sent;
      for (const ibv_sge &g : ss) {
        const uint8_t *p = reinterpret_cast<const uint8_t *>(g.addr);
        sent.insert(sent.end(), p, p + g.length);
      }
      EXPECT_TRUE(SameScattered(sent.data(), rs));
      id++;
    }
  }
}

// WRITE (one byte to several segments) and WRITE with immediate, which
// consumes a receive and reports the message length.
TEST_F(UcTest, WritesArriveByteForByte) {
  const size_t kAt = 1 << 20;
  uint64_t id = 1;
  for (uint32_t len : {1u, 3000u, 65536u, 200001u}) {
    for (bool imm : {false, true}) {
      SCOPED_TRACE("len " + std::to_string(len) + (imm ? " imm" : ""));
      Fill(a_.buf, 0, len + 64, static_cast<unsigned>(100 + id));
      std::fill(b_.buf.begin() + kAt, b_.buf.begin() + kAt + len + 16, 0);
      auto ss = Sges(a_, 0, len, 2);
      std::vector<uint8_t> sent;
      for (const ibv_sge &g : ss) {
        const uint8_t *p = reinterpret_cast<const uint8_t *>(g.addr);
        sent.insert(sent.end(), p, p + g.length);
      }
      if (imm) {
        ASSERT_EQ(PostRecv(b_, id, {}), 0);
      }
      ASSERT_EQ(PostSend(a_, id,
                         imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
                         ss, reinterpret_cast<uintptr_t>(b_.buf.data() + kAt),
                         b_.mr->rkey, 0x5eed0000 + id),
                0);
      ibv_wc s = Wait(a_.cq);
      EXPECT_EQ(s.status, IBV_WC_SUCCESS);
      EXPECT_EQ(s.opcode, IBV_WC_RDMA_WRITE);
      if (imm) {
        ibv_wc r = Wait(b_.cq);
        EXPECT_EQ(r.status, IBV_WC_SUCCESS);
        EXPECT_EQ(r.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
        EXPECT_EQ(r.byte_len, len);
        EXPECT_EQ(ntohl(r.imm_data), 0x5eed0000 + id);
      } else {
        // Nothing tells the responder: a SEND behind the WRITE, which
        // the stream delivers after it, shows it is placed.
        ExpectSend(1000 + id, 8, 7);
      }
      EXPECT_EQ(memcmp(sent.data(), b_.buf.data() + kAt, len), 0)
          << Diff(sent.data(), b_.buf.data() + kAt, len);
      EXPECT_EQ(b_.buf[kAt + len], 0) << "written past the end";
      id++;
    }
  }
}

// What the responder cannot place is dropped and counted, the requester
// sees success, and both QPs go on: a SEND with no receive posted, a WRITE
// and a WRITE with immediate to a bad rkey (the receive stays posted), a
// SEND longer than its receive (that receive completes in error).
TEST_F(UcTest, UnplaceableMessagesAreDroppedAndTheQpsGoOn) {
  long dropped = Counter("uc_rx_dropped");
  ASSERT_GE(dropped, 0);

  // No receive posted: dropped.
  Fill(a_.buf, 0, 100, 1);
  ASSERT_EQ(PostSend(a_, 1, IBV_WR_SEND, Sges(a_, 0, 100, 1)), 0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  ExpectQuiet(b_.cq, 200);
  EXPECT_EQ(Counter("uc_rx_dropped"), dropped + 1);
  // The next SEND takes the receive posted now.
  ExpectSend(2, 5000, 2);

  // Bad rkey: WRITE and WRITE with immediate; b_'s receive is not used.
  ASSERT_EQ(PostRecv(b_, 3, Sges(b_, 0, 64, 1)), 0);
  std::fill(b_.buf.begin(), b_.buf.begin() + 256, 0x5a);
  for (ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM}) {
    ASSERT_EQ(PostSend(a_, 4, op, Sges(a_, 0, 128, 1),
                       reinterpret_cast<uintptr_t>(b_.buf.data()),
                       b_.mr->rkey ^ 0x80, 9),
              0);
    EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  }
  ExpectQuiet(b_.cq, 200);
  EXPECT_EQ(Counter("uc_rx_dropped"), dropped + 3);
  for (int i = 0; i < 256; i++) ASSERT_EQ(b_.buf[i], 0x5a) << "byte " << i;
  // The receive posted before is still there: a SEND lands in it.
  Fill(a_.buf, 0, 64, 3);
  ASSERT_EQ(PostSend(a_, 5, IBV_WR_SEND, Sges(a_, 0, 64, 1)), 0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  ibv_wc r = Wait(b_.cq);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.wr_id, 3u);
  EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data(), 64), 0);

  // Too long for its receive: that receive ends in error, the QP goes on.
  ASSERT_EQ(PostRecv(b_, 6, Sges(b_, 0, 64, 1)), 0);
  ASSERT_EQ(PostSend(a_, 7, IBV_WR_SEND, Sges(a_, 0, 100000, 1)), 0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  r = Wait(b_.cq);
  EXPECT_EQ(r.wr_id, 6u);
  EXPECT_EQ(r.status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(Counter("uc_rx_dropped"), dropped + 4);

  // Both ways still work, and neither QP left RTS.
  ExpectSend(8, 70000, 8);
  for (Side *s : {&a_, &b_}) {
    ibv_qp_attr qa;
    ibv_qp_init_attr qi;
    ASSERT_EQ(ibv_query_qp(s->qp, &qa, IBV_QP_STATE, &qi), 0);
    EXPECT_EQ(qa.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(qi.qp_type, IBV_QPT_UC);
  }
  Fill(b_.buf, 0, 32, 9);
  ASSERT_EQ(PostRecv(a_, 9, Sges(a_, 0, 32, 1)), 0);
  ASSERT_EQ(PostSend(b_, 9, IBV_WR_SEND, Sges(b_, 0, 32, 1)), 0);
  EXPECT_EQ(Wait(b_.cq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data(), 32), 0);
}

// READs, atomics and SEND with invalidate are refused at post (EINVAL,
// nothing queued); the QP stays in RTS and goes on.
TEST_F(UcTest, ReadsAndAtomicsAreRefusedAtPost) {
  for (ibv_wr_opcode op :
       {IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
        IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_SEND_WITH_INV}) {
    EXPECT_EQ(PostSend(a_, 77, op, Sges(a_, 0, 8, 1),
                       reinterpret_cast<uintptr_t>(b_.buf.data()),
                       b_.mr->rkey),
              EINVAL)
        << op;
  }
  ExpectQuiet(a_.cq, 100);
  ExpectSend(1, 100, 1);
}

// modify_qp takes what IB defines for UC and refuses the rest (EINVAL):
// READ and atomic rights, the RDMA READ depths, RNR timer and retry
// counts, the local ACK timeout.
TEST_F(UcTest, ModifyQpTakesUcAttributesOnly) {
  ibv_qp *qp = NewQp(a_.cq);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr a = {};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  const int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                   IBV_QP_ACCESS_FLAGS;
  for (int acc : {IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_ATOMIC}) {
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | acc;
    EXPECT_EQ(ibv_modify_qp(qp, &a, init), EINVAL) << acc;
  }
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(ibv_modify_qp(qp, &a, init), 0);

  // RTR: no max_dest_rd_atomic, no min_rnr_timer.
  ibv_qp_attr r = {};
  r.qp_state = IBV_QPS_RTR;
  r.path_mtu = IBV_MTU_1024;
  r.dest_qp_num = b_.qp->qp_num;
  r.rq_psn = 5;
  r.ah_attr.is_global = 1;
  r.ah_attr.port_num = 1;
  r.ah_attr.grh.sgid_index = GidIndex();
  r.ah_attr.grh.hop_limit = 64;
  ibv_query_gid(ctx_.get(), 1, r.ah_attr.grh.sgid_index, &r.ah_attr.grh.dgid);
  const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  for (int extra : {IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MIN_RNR_TIMER})
    EXPECT_EQ(ibv_modify_qp(qp, &r, rtr | extra), EINVAL) << extra;
  // Required: the destination QPN.
  EXPECT_EQ(ibv_modify_qp(qp, &r, rtr & ~IBV_QP_DEST_QPN), EINVAL);

  // RTS: no timeout, retry counts or READ depth (any value); its peer
  // never comes.
  ASSERT_EQ(ibv_modify_qp(qp, &r, rtr), 0);
  ibv_qp_attr t = {};
  t.qp_state = IBV_QPS_RTS;
  t.sq_psn = 9;
  for (int extra : {IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY,
                    IBV_QP_MAX_QP_RD_ATOMIC})
    EXPECT_EQ(ibv_modify_qp(qp, &t, IBV_QP_STATE | IBV_QP_SQ_PSN | extra),
              EINVAL)
        << extra;
  ASSERT_EQ(ibv_modify_qp(qp, &t, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);

  ibv_qp_attr q;
  ibv_qp_init_attr qi;
  ASSERT_EQ(ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS |
                                     IBV_QP_SQ_PSN | IBV_QP_RQ_PSN |
                                     IBV_QP_DEST_QPN,
                         &qi),
            0);
  EXPECT_EQ(qi.qp_type, IBV_QPT_UC);
  EXPECT_EQ(q.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(q.qp_access_flags, IBV_ACCESS_REMOTE_WRITE);
  EXPECT_EQ(q.sq_psn, 9u);
  EXPECT_EQ(q.rq_psn, 5u);
  EXPECT_EQ(q.dest_qp_num, b_.qp->qp_num);
  EXPECT_EQ(q.max_rd_atomic, 0);
  EXPECT_EQ(q.max_dest_rd_atomic, 0);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

// A UC QP binds only to a UC peer: a hello without TRDMA_HELLO_UC (an RC
// QP's) is refused and the QP keeps waiting; one with it is accepted.  The
// peer that then sends an RC opcode on the UC connection fails the QP.
TEST_F(UcTest, BindsOnlyToAUcPeer) {
  const long refused = Counter("connections_refused");
  ibv_qp *v1 = nullptr, *v2 = nullptr;
  uint8_t reply = 0;
  EXPECT_EQ(RawPeer(&v1, 14, 0, &reply), -1);
  EXPECT_EQ(reply, TRDMA_HELLO_REJECT);
  EXPECT_EQ(Counter("connections_refused"), refused + 1);

  int fd = RawPeer(&v2, 14, TRDMA_HELLO_UC, &reply);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(reply, TRDMA_HELLO_ACCEPT);
  // A UC SEND_ONLY from the raw peer lands in a receive of v2.
  ASSERT_EQ(PostRecvOn(v2, 42, Sges(b_, 0, 64, 1)), 0);
  struct {
    trdma_bth bth;
    uint8_t data[4];
  } __attribute__((packed)) m = {};
  m.bth.opcode = TRDMA_OP_UC_SEND_ONLY;
  m.bth.dest_qpn = htonl(v2->qp_num);
  m.bth.msn = htonl(1000 + 1);  // the raw peer's sq_psn: 1000 + its QPN 1
  m.bth.length = htonl(4);
  memcpy(m.data, "uc!!", 4);
  ASSERT_EQ(write(fd, &m, sizeof(m)), static_cast<ssize_t>(sizeof(m)));
  ibv_wc r = Wait(b_.cq);
  EXPECT_EQ(r.wr_id, 42u);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.byte_len, 4u);
  EXPECT_EQ(memcmp(b_.buf.data(), "uc!!", 4), 0);

  // An RC SEND on a UC connection: malformed, the QP fails.
  m.bth.opcode = TRDMA_OP_SEND_ONLY;
  m.bth.msn = htonl(1000 + 2);
  ASSERT_EQ(write(fd, &m, sizeof(m)), static_cast<ssize_t>(sizeof(m)));
  EXPECT_TRUE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_QP_FATAL, 10000));
  ibv_qp_attr qa;
  ibv_qp_init_attr qi;
  ASSERT_EQ(ibv_query_qp(v2, &qa, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
  close(fd);
  if (v1) ibv_destroy_qp(v1);
  ibv_destroy_qp(v2);
  // The fixture's pair is untouched.
  ExpectSend(1, 256, 3);
}

// Nothing is lost: WQEs posted and then flushed by ERR each complete once,
// on both queues.
TEST_F(UcTest, ErrorFlushesEveryWqeOnce) {
  for (int i = 0; i < 8; i++)
    ASSERT_EQ(PostRecv(b_, 100 + i, Sges(b_, 0, 64, 1)), 0);
  ibv_qp_attr a = {};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(b_.qp, &a, IBV_QP_STATE), 0);
  for (int i = 0; i < 8; i++) {
    ibv_wc r = Wait(b_.cq);
    EXPECT_EQ(r.wr_id, 100u + i);
    EXPECT_EQ(r.status, IBV_WC_WR_FLUSH_ERR);
  }
  ExpectQuiet(b_.cq, 50);
  ASSERT_EQ(ibv_modify_qp(a_.qp, &a, IBV_QP_STATE), 0);
  for (int i = 0; i < 4; i++)
    ASSERT_EQ(PostSend(a_, 200 + i, IBV_WR_SEND, Sges(a_, 0, 16, 1)), 0);
  for (int i = 0; i < 4; i++) {
    ibv_wc s = Wait(a_.cq);
    EXPECT_EQ(s.wr_id, 200u + i);
    EXPECT_EQ(s.status, IBV_WC_WR_FLUSH_ERR);
  }
  ExpectQuiet(a_.cq, 50);
}

}  // namespace
}  // namespace trdma_lab
