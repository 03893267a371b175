// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// The RC data path between two QPs of one device: every operation across
// sizes and SGE layouts with byte-for-byte checks, completion fields,
// ordering, and the error cases (bad rkey, no receive WQE, peer gone).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <unistd.h>
#include <poll.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <rdma/trdma-wire.h>

#include "lab_util.h"
#include "qp_fixture.h"

using namespace trdma_lab;

namespace {

const uint32_t kSizes[] = {0, 1, 7, 4095, 4096, 4097, 65536, 65537,
                           1 << 20, 4 << 20};

TEST_F(DataPathTest, SendAcrossSizesAndSgeLayouts) {
  unsigned seed = 1;
  for (uint32_t len : kSizes)
    for (int nsge : {1, 3}) {
      SCOPED_TRACE("len " + std::to_string(len) + " sges " +
                   std::to_string(nsge));
      Fill(a_.buf, 0, len + 64, seed++);
      std::fill(b_.buf.begin(), b_.buf.begin() + len + 64, 0);
      auto src = Sges(a_, 0, len, len ? nsge : 0);
      auto dst = Sges(b_, 0, len + 16, 2);
      ASSERT_EQ(PostRecv(b_, 7, dst), 0);
      ASSERT_EQ(PostSend(a_, 8, IBV_WR_SEND, src), 0);
      ibv_wc r = Wait(b_.cq), s = Wait(a_.cq);
      ASSERT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
      ASSERT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
      EXPECT_EQ(r.wr_id, 7u);
      EXPECT_EQ(r.opcode, IBV_WC_RECV);
      EXPECT_EQ(r.byte_len, len);
      EXPECT_EQ(r.qp_num, b_.qp->qp_num);
      EXPECT_EQ(r.src_qp, a_.qp->qp_num);
      EXPECT_EQ(r.wc_flags & IBV_WC_WITH_IMM, 0u);
      EXPECT_EQ(s.wr_id, 8u);
      EXPECT_EQ(s.opcode, IBV_WC_SEND);
      // The payload, gathered from A, lands scattered over B's SGEs.
      std::vector<uint8_t> sent;
      for (auto &g : src)
        sent.insert(sent.end(), reinterpret_cast<uint8_t *>(g.addr),
                    reinterpret_cast<uint8_t *>(g.addr) + g.length);
      std::vector<uint8_t> got;
      for (auto &g : dst)
        got.insert(got.end(), reinterpret_cast<uint8_t *>(g.addr),
                   reinterpret_cast<uint8_t *>(g.addr) + g.length);
      got.resize(len);
      EXPECT_TRUE(sent == got);
    }
}

TEST_F(DataPathTest, SendWithImmAndInline) {
  Fill(a_.buf, 0, 100, 42);
  ASSERT_EQ(PostRecv(b_, 1, Sges(b_, 0, 4096, 1)), 0);
  ASSERT_EQ(PostSend(a_, 2, IBV_WR_SEND_WITH_IMM, Sges(a_, 0, 100, 1), 0, 0,
                     0xdeadbeef, IBV_SEND_SIGNALED | IBV_SEND_INLINE),
            0);
  ibv_wc r = Wait(b_.cq), s = Wait(a_.cq);
  ASSERT_EQ(r.status, IBV_WC_SUCCESS);
  ASSERT_EQ(s.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.opcode, IBV_WC_RECV);
  EXPECT_TRUE(r.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(r.imm_data), 0xdeadbeefu);
  EXPECT_EQ(r.byte_len, 100u);
  EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data(), 100), 0);
}

TEST_F(DataPathTest, WriteAndReadAcrossSizes) {
  unsigned seed = 100;
  for (uint32_t len : kSizes)
    for (int nsge : {1, 4}) {
      SCOPED_TRACE("len " + std::to_string(len) + " sges " +
                   std::to_string(nsge));
      const size_t roff = 4 << 20;  // remote target area
      Fill(a_.buf, 0, len + 64, seed++);
      std::fill(b_.buf.begin() + roff, b_.buf.begin() + roff + len + 8, 0);
      auto src = Sges(a_, 0, len, len ? nsge : 0);
      uint64_t raddr = reinterpret_cast<uintptr_t>(b_.buf.data() + roff);
      ASSERT_EQ(PostSend(a_, 1, IBV_WR_RDMA_WRITE, src, raddr, b_.mr->rkey),
                0);
      ibv_wc s = Wait(a_.cq);
      ASSERT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
      EXPECT_EQ(s.opcode, IBV_WC_RDMA_WRITE);
      EXPECT_TRUE(SameScattered(b_.buf.data() + roff, src));
      EXPECT_EQ(b_.buf[roff + len], 0);  // nothing past the end

      // Read it back into other places of A.
      const size_t loff = 2 << 20;
      std::fill(a_.buf.begin() + loff, a_.buf.begin() + loff + len + 64, 0);
      auto dst = Sges(a_, loff, len, len ? nsge : 0);
      ASSERT_EQ(PostSend(a_, 2, IBV_WR_RDMA_READ, dst, raddr, b_.mr->rkey),
                0);
      s = Wait(a_.cq);
      ASSERT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
      EXPECT_EQ(s.opcode, IBV_WC_RDMA_READ);
      EXPECT_TRUE(SameScattered(b_.buf.data() + roff, dst));
    }
  ibv_wc none;
  EXPECT_EQ(ibv_poll_cq(b_.cq, 1, &none), 0);  // WRITEs complete nothing
}

// Payloads of up to 1 KiB are copied behind the headers on transmit
// (TRDMA_TX_COPY_MAX), larger ones go by page: every operation around that
// size, gathered from SGEs that straddle a page boundary.
TEST_F(DataPathTest, SmallPayloadsAcrossPageBoundaries) {
  // Offset into a side's buffer of the page boundary after `near`.
  auto edge = [](Side &s, size_t near) {
    uintptr_t a = reinterpret_cast<uintptr_t>(s.buf.data()) + near;
    return near + ((4096 - a % 4096) % 4096);
  };
  unsigned seed = 900;
  for (uint32_t len : {1u, 63u, 64u, 1000u, 1023u, 1024u, 1025u, 2048u})
    for (int nsge : {1, 3}) {
      SCOPED_TRACE("len " + std::to_string(len) + " sges " +
                   std::to_string(nsge));
      const size_t src = edge(a_, 1 << 20) - len / 2;
      const size_t rcv = edge(b_, 1 << 20) - len / 3;
      const size_t roff = edge(b_, 3 << 20) - len / 2;
      const size_t loff = edge(a_, 5 << 20) - len / 3;
      Fill(a_.buf, src, len + 16, seed++);
      auto from = Sges(a_, src, len, nsge);

      std::fill(b_.buf.begin() + rcv, b_.buf.begin() + rcv + len + 16, 0);
      auto into = Sges(b_, rcv, len, nsge);
      ASSERT_EQ(PostRecv(b_, 1, into), 0);
      ASSERT_EQ(PostSend(a_, 2, IBV_WR_SEND, from), 0);
      ibv_wc r = Wait(b_.cq), w = Wait(a_.cq);
      ASSERT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
      ASSERT_EQ(w.status, IBV_WC_SUCCESS) << ibv_wc_status_str(w.status);
      EXPECT_EQ(r.byte_len, len);
      std::vector<uint8_t> sent;
      for (auto &g : from)
        sent.insert(sent.end(), reinterpret_cast<uint8_t *>(g.addr),
                    reinterpret_cast<uint8_t *>(g.addr) + g.length);
      EXPECT_TRUE(SameScattered(sent.data(), into));

      std::fill(b_.buf.begin() + roff, b_.buf.begin() + roff + len + 8, 0);
      uint64_t raddr = reinterpret_cast<uintptr_t>(b_.buf.data() + roff);
      ASSERT_EQ(PostSend(a_, 3, IBV_WR_RDMA_WRITE, from, raddr, b_.mr->rkey),
                0);
      w = Wait(a_.cq);
      ASSERT_EQ(w.status, IBV_WC_SUCCESS) << ibv_wc_status_str(w.status);
      EXPECT_TRUE(SameScattered(b_.buf.data() + roff, from));
      EXPECT_EQ(b_.buf[roff + len], 0);

      // The READ response is the responder's payload, copied or by page.
      std::fill(a_.buf.begin() + loff, a_.buf.begin() + loff + len + 16, 0);
      auto back = Sges(a_, loff, len, nsge);
      ASSERT_EQ(PostSend(a_, 4, IBV_WR_RDMA_READ, back, raddr, b_.mr->rkey),
                0);
      w = Wait(a_.cq);
      ASSERT_EQ(w.status, IBV_WC_SUCCESS) << ibv_wc_status_str(w.status);
      EXPECT_TRUE(SameScattered(b_.buf.data() + roff, back));
    }
}

// A ping-pong: each side's request carries its ACK of the other side's
// last one (flag K) instead of an ACK segment of its own, because a QP
// that sends requests too holds an owed ACK for a while (ack_delay_us).
TEST_F(DataPathTest, PingPongCarriesTheAcks) {
  // A held ACK waits at most twice the QP's turnaround, up to
  // ack_delay_us: the default (500) is short of the turnaround of a lab
  // guest on a loaded host, so the hold allows the longest a turnaround
  // sample counts (4 ms).  What is tested is that answers carry the ACKs,
  // not how fast they come.
  ModuleParam delay("ack_delay_us", "4000");
  ASSERT_TRUE(delay.ok());
  const int n = 300;
  int recvs[2] = {0, 0}, sends[2] = {0, 0};
  // Polls side i's CQ until it has `r` receives and `s` sends.
  auto until = [&](int i, int r, int s) {
    Side &side = i ? b_ : a_;
    while (recvs[i] < r || sends[i] < s) {
      ibv_wc wc = Wait(side.cq);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
      (wc.opcode == IBV_WC_RECV ? recvs : sends)[i]++;
    }
  };
  const long carried = Counter("acks_carried"), alone = Counter("acks_sent"),
             armed = Counter("ack_timer_armed"),
             cancelled = Counter("ack_timer_cancelled");
  ASSERT_GE(armed, 0);
  ASSERT_GE(cancelled, 0);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(PostRecv(b_, i, Sges(b_, 0, 64, 1)), 0);
    ASSERT_EQ(PostSend(a_, i, IBV_WR_SEND, Sges(a_, 0, 8, 1)), 0);
    ASSERT_NO_FATAL_FAILURE(until(1, i + 1, 0));
    ASSERT_EQ(PostRecv(a_, i, Sges(a_, 64, 64, 1)), 0);
    ASSERT_EQ(PostSend(b_, i, IBV_WR_SEND, Sges(b_, 128, 8, 1)), 0);
    ASSERT_NO_FATAL_FAILURE(until(0, i + 1, 0));
  }
  // The last ACKs have nothing to ride with: the hold ends, they go alone.
  ASSERT_NO_FATAL_FAILURE(until(0, n, n));
  ASSERT_NO_FATAL_FAILURE(until(1, n, n));
  const long ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  const long c = Counter("acks_carried") - carried,
             a = Counter("acks_sent") - alone,
             t = Counter("ack_timer_armed") - armed,
             x = Counter("ack_timer_cancelled") - cancelled;
  std::cout << "[          ] " << 2 * n << " messages in " << ms << " ms: "
            << c << " ACKs carried, " << a
            << " sent alone; the hold's timers armed " << t
            << " times, cancelled " << x << " times" << std::endl;
  EXPECT_GE(c, 2 * n * 8 / 10);
  EXPECT_GE(a, 1);  // at least the very last one
  // A carried ACK cancels the hold's timer only on the CPU that armed it
  // (no interrupt is left behind there), and leaves it running elsewhere:
  // each QP's timer is armed when an ACK becomes owed with none queued,
  // and again where it looked before that ACK's hold ended.  So the arms
  // not cancelled, each at most one expiry (one that brings a queued
  // timer forward adds none), come about twice per ack_delay_us (4 ms
  // here) for the two QPs, not once for each held ACK (per message).  A
  // bound by time: it tells the two apart only while a round trip takes
  // less than about 2 ms (the lab's: about 0.1-0.2 ms).
  EXPECT_GE(t, 1);
  EXPECT_LE(x, t);
  EXPECT_LE(t - x, ms + 4);
}

// A peer that answers later than ack_delay_us allows: its QP stops holding
// the ACKs its answers would come too late to carry, so the requester's
// SENDs complete an ACK's round trip after they went, not a hold later.
TEST_F(DataPathTest, SlowAnswersDoNotHoldTheAcks) {
  using Clock = std::chrono::steady_clock;
  // The hold a slow answerer would otherwise get: min(2 x 4 ms, 2.5 ms)
  // (a QP's turnaround counts at most 4 ms).
  ModuleParam delay("ack_delay_us", "2500");
  ASSERT_TRUE(delay.ok());
  const auto answer = std::chrono::microseconds(5000);
  const int n = 30, warm = 10;  // the running average needs a few answers
  std::vector<long> waits;
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(PostRecv(b_, i, Sges(b_, 0, 64, 1)), 0);
    const Clock::time_point sent = Clock::now();
    ASSERT_EQ(PostSend(a_, i, IBV_WR_SEND, Sges(a_, 0, 8, 1)), 0);
    ibv_wc r = Wait(b_.cq);
    ASSERT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
    // B "thinks" for 5 ms while A watches for its SEND's completion.
    bool done = false;
    while (Clock::now() - sent < answer) {
      ibv_wc s;
      int k = ibv_poll_cq(a_.cq, 1, &s);
      ASSERT_GE(k, 0);
      if (!k)
        continue;
      ASSERT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
      ASSERT_EQ(s.wr_id, static_cast<uint64_t>(i));
      if (i >= warm)
        waits.push_back(std::chrono::duration_cast<std::chrono::microseconds>(
                            Clock::now() - sent)
                            .count());
      done = true;
      break;
    }
    while (Clock::now() - sent < answer)
      ;
    ASSERT_EQ(PostRecv(a_, i, Sges(a_, 64, 64, 1)), 0);
    ASSERT_EQ(PostSend(b_, i, IBV_WR_SEND, Sges(b_, 128, 8, 1)), 0);
    // A's SEND completes by now at the latest, and B's answer arrives.
    int need_recv = 1, need_send = done ? 0 : 1;
    while (need_recv || need_send) {
      ibv_wc wc = Wait(a_.cq);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
      (wc.opcode == IBV_WC_RECV ? need_recv : need_send)--;
    }
    ASSERT_EQ(Wait(b_.cq).status, IBV_WC_SUCCESS);
    if (!done && i >= warm)
      waits.push_back(answer.count());
  }
  std::sort(waits.begin(), waits.end());
  const long median = waits[waits.size() / 2];
  std::cout << "[          ] SEND completion after " << waits.front() << " / "
            << median << " / " << waits.back()
            << " us (min / median / max); answers after " << answer.count()
            << " us" << std::endl;
  EXPECT_LT(median, 1500);
}

// A stream of unsignaled WRITEs, many times the SQ: the requester asks for
// an ACK only every quarter of its SQ, the responder acknowledges the rest
// with those (or after ack_coalesce_us), and the SQ never stays full
// although nothing the application waits for frees it.
TEST_F(DataPathTest, UnsignaledStreamIsAcknowledgedInBatches) {
  using Clock = std::chrono::steady_clock;
  const int n = 2000, len = 64;  // a_'s SQ has 256 slots
  const uint64_t raddr = reinterpret_cast<uintptr_t>(b_.buf.data());
  // Posts, waiting while the SQ is full; unsignaled unless signaled.
  auto post = [&](uint64_t id, ibv_wr_opcode op, std::vector<ibv_sge> sg,
                  uint64_t to, int flags) {
    const Clock::time_point end = Clock::now() + std::chrono::seconds(10);
    int rv;
    while ((rv = PostSend(a_, id, op, sg, to, b_.mr->rkey, 0, flags)) ==
           ENOMEM) {
      ASSERT_LT(Clock::now(), end) << "the SQ stayed full at WQE " << id;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    ASSERT_EQ(rv, 0) << strerror(rv);
  };
  Fill(a_.buf, 0, n * len, 5);
  const long alone = Counter("acks_sent"), carried = Counter("acks_carried");
  for (int i = 0; i < n; i++)
    ASSERT_NO_FATAL_FAILURE(post(i, IBV_WR_RDMA_WRITE,
                                 Sges(a_, i * len, len, 1), raddr + i * len,
                                 0));
  ASSERT_EQ(PostRecv(b_, 1, Sges(b_, n * len + 64, 64, 1)), 0);
  ASSERT_NO_FATAL_FAILURE(post(n, IBV_WR_SEND, Sges(a_, 0, 8, 1), 0,
                               IBV_SEND_SIGNALED));
  ibv_wc s = Wait(a_.cq), r = Wait(b_.cq);
  ASSERT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
  EXPECT_EQ(s.wr_id, static_cast<uint64_t>(n));  // the WRITEs complete none
  ASSERT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
  EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data(), n * len), 0);
  const long acks =
      Counter("acks_sent") - alone + Counter("acks_carried") - carried;
  std::cout << "[          ] " << n + 1 << " messages, " << acks << " ACKs"
            << std::endl;
  EXPECT_GE(acks, 1);
  EXPECT_LE(acks, n / 4);
}

// What a responder owes for a small request, an ACK or a READ response of a
// few bytes, goes from its receive path (softirq, as TCP's own ACKs), not
// by waking its worker: tx_from_rx counts those segments.  One request at
// a time, so no ACK covers more than 4 KiB and the worker never has work
// of its own; B sends no requests, so it holds no ACK for one to carry.
TEST_F(DataPathTest, SmallAnswersGoFromTheReceivePath) {
  const int n = 200;
  const uint64_t raddr = reinterpret_cast<uintptr_t>(b_.buf.data());
  Fill(b_.buf, 0, 8 * n, 11);
  const long from_rx = Counter("tx_from_rx"), acks = Counter("acks_sent");
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(PostSend(a_, i, IBV_WR_RDMA_READ, Sges(a_, 8 * i, 8, 1),
                       raddr + 8 * i, b_.mr->rkey),
              0);
    ibv_wc s = Wait(a_.cq);
    ASSERT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
  }
  ASSERT_EQ(memcmp(a_.buf.data(), b_.buf.data(), 8 * n), 0);
  const long reads = Counter("tx_from_rx") - from_rx;
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(PostRecv(b_, i, Sges(b_, 0, 64, 1)), 0);
    ASSERT_EQ(PostSend(a_, i, IBV_WR_SEND, Sges(a_, 0, 8, 1)), 0);
    ibv_wc r = Wait(b_.cq), s = Wait(a_.cq);
    ASSERT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
    ASSERT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
  }
  const long sends = Counter("tx_from_rx") - from_rx - reads,
             sent = Counter("acks_sent") - acks;
  std::cout << "[          ] from the receive path: " << reads << " of " << n
            << " READ responses, " << sends << " of " << sent << " ACKs"
            << std::endl;
  EXPECT_GE(reads, n * 3 / 4);
  EXPECT_LE(reads, n);
  EXPECT_GE(sent, n);  // every SEND was signaled: an ACK each
  EXPECT_GE(sends, n * 3 / 4);
  EXPECT_LE(sends, sent);
}

// An ACK of more than 4 KiB of messages on a connection that stays on this
// host (A and B are both here: a loopback route) goes from the worker, not
// from the receive path: over such a route that softirq runs inside the
// sender's transmit, on the sender's CPU (docs/performance.md).  Across
// hosts the same ACKs go from the receive path (tests/lab/run-2host).
TEST_F(DataPathTest, LargeAcksOnALocalRouteGoFromTheWorker) {
  const int n = 50, len = 65536;
  const uint64_t raddr = reinterpret_cast<uintptr_t>(b_.buf.data());
  Fill(a_.buf, 0, len, 12);
  const long from_rx = Counter("tx_from_rx"), acks = Counter("acks_sent");
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(PostSend(a_, i, IBV_WR_RDMA_WRITE, Sges(a_, 0, len, 1), raddr,
                       b_.mr->rkey),
              0);
    ibv_wc s = Wait(a_.cq);
    ASSERT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
  }
  ASSERT_EQ(memcmp(a_.buf.data(), b_.buf.data(), len), 0);
  const long from = Counter("tx_from_rx") - from_rx,
             sent = Counter("acks_sent") - acks;
  std::cout << "[          ] " << from << " of " << sent
            << " ACKs from the receive path" << std::endl;
  EXPECT_GE(sent, n);  // each WRITE signaled and waited for: an ACK each
  EXPECT_EQ(from, 0);
}

// An ACK held for a request to carry (ack_delay_us) that no request
// carries goes when its hold ends, from the hold's timer itself (softirq,
// counted in tx_from_timer), not by waking the QP's worker.  Each round B
// sends first, then answers A's SEND with nothing: B sent a request
// lately, so it holds the ACK it owes A, and the hold ends with A waiting.
TEST_F(DataPathTest, HeldAcksGoFromTheTimer) {
  ModuleParam delay("ack_delay_us", "4000");  // as in PingPongCarriesTheAcks
  ASSERT_TRUE(delay.ok());
  const int n = 100;
  // Polls cq until it has `r` receives and `s` sends more.
  auto until = [&](ibv_cq *cq, int r, int s) {
    while (r > 0 || s > 0) {
      ibv_wc wc = Wait(cq);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
      (wc.opcode == IBV_WC_RECV ? r : s)--;
    }
  };
  const long timer = Counter("tx_from_timer"), alone = Counter("acks_sent");
  ASSERT_GE(timer, 0);
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(PostRecv(a_, i, Sges(a_, 64, 64, 1)), 0);
    ASSERT_EQ(PostRecv(b_, i, Sges(b_, 0, 64, 1)), 0);
    ASSERT_EQ(PostSend(b_, i, IBV_WR_SEND, Sges(b_, 128, 8, 1)), 0);
    ASSERT_NO_FATAL_FAILURE(until(a_.cq, 1, 0));
    // B holds its ACK of this one: only B's timer sends it.
    ASSERT_EQ(PostSend(a_, i, IBV_WR_SEND, Sges(a_, 0, 8, 1)), 0);
    ASSERT_NO_FATAL_FAILURE(until(a_.cq, 0, 1));
    ASSERT_NO_FATAL_FAILURE(until(b_.cq, 1, 1));
  }
  const long t = Counter("tx_from_timer") - timer,
             a = Counter("acks_sent") - alone;
  std::cout << "[          ] " << n << " rounds: " << a
            << " ACKs sent alone, " << t << " by the timer" << std::endl;
  EXPECT_GE(a, n);  // every one of B's, and A's when it holds none
  EXPECT_LE(t, a);
  EXPECT_GE(t, n * 3 / 4);
}

TEST_F(DataPathTest, WriteWithImmConsumesAReceive) {
  Fill(a_.buf, 0, 5000, 7);
  ASSERT_EQ(PostRecv(b_, 9, {}), 0);  // a receive without SGEs
  uint64_t raddr = reinterpret_cast<uintptr_t>(b_.buf.data() + 100);
  ASSERT_EQ(PostSend(a_, 3, IBV_WR_RDMA_WRITE_WITH_IMM, Sges(a_, 0, 5000, 2),
                     raddr, b_.mr->rkey, 0x1234),
            0);
  ibv_wc r = Wait(b_.cq), s = Wait(a_.cq);
  ASSERT_EQ(r.status, IBV_WC_SUCCESS);
  ASSERT_EQ(s.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.wr_id, 9u);
  EXPECT_EQ(r.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(ntohl(r.imm_data), 0x1234u);
  EXPECT_EQ(r.byte_len, 5000u);

  // Zero bytes, address 0 and rkey 0 are fine for a zero-length write.
  ASSERT_EQ(PostRecv(b_, 10, {}), 0);
  ASSERT_EQ(PostSend(a_, 4, IBV_WR_RDMA_WRITE_WITH_IMM, {}, 0, 0, 5), 0);
  r = Wait(b_.cq);
  s = Wait(a_.cq);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.byte_len, 0u);
  EXPECT_EQ(s.status, IBV_WC_SUCCESS);
}

TEST_F(DataPathTest, WriteIsPlacedBeforeALaterSendCompletes) {
  for (int i = 0; i < 20; i++) {
    uint32_t len = 256 << 10;
    Fill(a_.buf, 0, len, 500 + i);
    ASSERT_EQ(PostRecv(b_, i, Sges(b_, 8 << 20, 64, 1)), 0);
    uint64_t raddr = reinterpret_cast<uintptr_t>(b_.buf.data());
    ASSERT_EQ(PostSend(a_, 0, IBV_WR_RDMA_WRITE, Sges(a_, 0, len, 1), raddr,
                       b_.mr->rkey, 0, 0),
              0);  // unsignaled
    ASSERT_EQ(PostSend(a_, 100 + i, IBV_WR_SEND, Sges(a_, 0, 8, 1)), 0);
    ibv_wc r = Wait(b_.cq);
    ASSERT_EQ(r.status, IBV_WC_SUCCESS);
    EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data(), len), 0);
    // The unsignaled WRITE retires with the signaled SEND: one completion.
    ibv_wc s = Wait(a_.cq);
    EXPECT_EQ(s.wr_id, 100u + i);
  }
  ibv_wc none;
  EXPECT_EQ(ibv_poll_cq(a_.cq, 1, &none), 0);
}

TEST_F(DataPathTest, ManyOutstandingReadsAndSends) {
  const int n = 64;
  Fill(b_.buf, 0, n * 4096, 77);
  for (int i = 0; i < n; i++) {
    uint64_t raddr = reinterpret_cast<uintptr_t>(b_.buf.data() + i * 4096);
    ASSERT_EQ(PostSend(a_, i, IBV_WR_RDMA_READ,
                       Sges(a_, i * 4096, 4096, 1), raddr, b_.mr->rkey),
              0);
  }
  for (int i = 0; i < n; i++) {
    ibv_wc s = Wait(a_.cq);
    ASSERT_EQ(s.status, IBV_WC_SUCCESS);
    EXPECT_EQ(s.wr_id, static_cast<uint64_t>(i));  // in order
  }
  EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data(), n * 4096), 0);
}

TEST_F(DataPathTest, BadRkeyIsARemoteAccessError) {
  uint64_t raddr = reinterpret_cast<uintptr_t>(b_.buf.data());
  ASSERT_EQ(PostSend(a_, 1, IBV_WR_RDMA_WRITE, Sges(a_, 0, 64, 1), raddr,
                     b_.mr->rkey ^ 0x100),
            0);
  ibv_wc s = Wait(a_.cq);
  EXPECT_EQ(s.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(s.status);
  EXPECT_TRUE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_QP_ACCESS_ERR, 5000));
  ibv_qp_attr at;
  ibv_qp_init_attr ia;
  ASSERT_EQ(ibv_query_qp(a_.qp, &at, IBV_QP_STATE, &ia), 0);
  EXPECT_EQ(at.qp_state, IBV_QPS_ERR);
  ASSERT_EQ(ibv_query_qp(b_.qp, &at, IBV_QP_STATE, &ia), 0);
  EXPECT_EQ(at.qp_state, IBV_QPS_ERR);
}

// SEND_WITH_INV may only invalidate a fast-registration MR of the
// responder's PD that allows remote access (kernel consumers have them);
// a user MR, or a key of nothing, is a remote access error: the
// requester's WQE fails, the receive WQE completes in error, both QPs end.
class SendWithInvTest : public DataPathTest {
 protected:
  // len over 64 KiB: the IETH comes on SEND_LAST_INV, after SEND_FIRST.
  void Check(uint32_t rkey, uint32_t len) {
    ASSERT_EQ(PostRecv(b_, 1, Sges(b_, 0, 1 << 20, 1)), 0);
    std::vector<ibv_sge> sg = Sges(a_, 0, len, 1);
    ibv_send_wr wr = {}, *bad;
    wr.wr_id = 2;
    wr.opcode = IBV_WR_SEND_WITH_INV;
    wr.sg_list = sg.data();
    wr.num_sge = sg.size();
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.invalidate_rkey = rkey;
    ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
    ibv_wc s = Wait(a_.cq), r = Wait(b_.cq);
    EXPECT_EQ(s.wr_id, 2u);
    EXPECT_EQ(s.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(s.status);
    EXPECT_EQ(r.wr_id, 1u);
    EXPECT_EQ(r.status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(r.status);
  }
};

TEST_F(SendWithInvTest, OfAUserMrIsARemoteAccessError) {
  Check(b_.mr->rkey, 100);
}

TEST_F(SendWithInvTest, OfAStaleKeyIsARemoteAccessError) {
  Check(b_.mr->rkey ^ 0x1, 200000);
}

// LOCAL_INV from user space invalidates type-2 memory windows only
// (mw_test.cc): user space has no fast-registration MR, so LOCAL_INV of an
// MR's key fails and the QP ends.
TEST_F(DataPathTest, LocalInvalidateFromUserSpaceIsRefused) {
  ibv_send_wr wr = {}, *bad;
  wr.wr_id = 7;
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = a_.mr->lkey;
  ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
  ibv_wc s = Wait(a_.cq);
  EXPECT_EQ(s.wr_id, 7u);
  EXPECT_EQ(s.status, IBV_WC_LOC_QP_OP_ERR) << ibv_wc_status_str(s.status);
  ibv_qp_attr at;
  ibv_qp_init_attr ia;
  ASSERT_EQ(ibv_query_qp(a_.qp, &at, IBV_QP_STATE, &ia), 0);
  EXPECT_EQ(at.qp_state, IBV_QPS_ERR);
}

TEST_F(DataPathTest, ReadBeyondTheRegionIsARemoteAccessError) {
  uint64_t raddr = reinterpret_cast<uintptr_t>(b_.buf.data() + kBuf - 16);
  ASSERT_EQ(PostSend(a_, 1, IBV_WR_RDMA_READ, Sges(a_, 0, 64, 1), raddr,
                     b_.mr->rkey),
            0);
  ibv_wc s = Wait(a_.cq);
  EXPECT_EQ(s.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(s.status);
}

TEST_F(DataPathTest, NoReceiveWithoutRnrRetryFails) {
  ibv_qp_attr a = {};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(a_.qp, &a, IBV_QP_STATE), 0);
  ASSERT_EQ(ibv_modify_qp(b_.qp, &a, IBV_QP_STATE), 0);
  ibv_destroy_qp(a_.qp);
  ibv_destroy_qp(b_.qp);
  a_.qp = b_.qp = nullptr;
  for (Side *s : {&a_, &b_}) {
    s->qp = NewQp(s->cq, {16, 16, 1, 1, 0});
    ASSERT_NE(s->qp, nullptr);
  }
  ASSERT_EQ(Connect(a_.qp, b_.qp, 0), 0);
  ASSERT_EQ(Connect(b_.qp, a_.qp, 0), 0);
  ASSERT_EQ(PostSend(a_, 5, IBV_WR_SEND, Sges(a_, 0, 8, 1)), 0);
  ibv_wc s = Wait(a_.cq);
  EXPECT_EQ(s.wr_id, 5u);
  EXPECT_EQ(s.status, IBV_WC_RNR_RETRY_EXC_ERR) << ibv_wc_status_str(s.status);
}

int PostAtomic(ibv_qp *qp, uint64_t id, ibv_wr_opcode op, ibv_sge sge,
               uint64_t raddr, uint32_t rkey, uint64_t compare_add,
               uint64_t swap) {
  ibv_send_wr wr = {}, *bad;
  wr.wr_id = id;
  wr.opcode = op;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = raddr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  return ibv_post_send(qp, &wr, &bad);
}

TEST_F(DataPathTest, AtomicsReturnTheOriginalValue) {
  auto *target = reinterpret_cast<uint64_t *>(b_.buf.data() + 4096);
  auto *result = reinterpret_cast<uint64_t *>(a_.buf.data() + 8);
  ibv_sge res = {reinterpret_cast<uintptr_t>(result), 8, a_.mr->lkey};
  uint64_t raddr = reinterpret_cast<uintptr_t>(target);
  *target = 100;

  ASSERT_EQ(PostAtomic(a_.qp, 1, IBV_WR_ATOMIC_FETCH_AND_ADD, res, raddr,
                       b_.mr->rkey, 5, 0),
            0);
  ibv_wc s = Wait(a_.cq);
  ASSERT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
  EXPECT_EQ(s.opcode, IBV_WC_FETCH_ADD);
  EXPECT_EQ(*result, 100u);
  EXPECT_EQ(*target, 105u);

  ASSERT_EQ(PostAtomic(a_.qp, 2, IBV_WR_ATOMIC_CMP_AND_SWP, res, raddr,
                       b_.mr->rkey, 105, 7),
            0);
  s = Wait(a_.cq);
  ASSERT_EQ(s.status, IBV_WC_SUCCESS);
  EXPECT_EQ(s.opcode, IBV_WC_COMP_SWAP);
  EXPECT_EQ(*result, 105u);
  EXPECT_EQ(*target, 7u);

  ASSERT_EQ(PostAtomic(a_.qp, 3, IBV_WR_ATOMIC_CMP_AND_SWP, res, raddr,
                       b_.mr->rkey, 999, 1),
            0);
  s = Wait(a_.cq);
  ASSERT_EQ(s.status, IBV_WC_SUCCESS);
  EXPECT_EQ(*result, 7u);
  EXPECT_EQ(*target, 7u);  // compare failed: unchanged

  // Many outstanding fetch-and-adds: each sees a distinct original value.
  const int n = 64;
  for (int i = 0; i < n; i++) {
    ibv_sge r = {reinterpret_cast<uintptr_t>(a_.buf.data() + 4096 + 8 * i), 8,
                 a_.mr->lkey};
    ASSERT_EQ(PostAtomic(a_.qp, 10 + i, IBV_WR_ATOMIC_FETCH_AND_ADD, r, raddr,
                         b_.mr->rkey, 1, 0),
              0);
  }
  std::set<uint64_t> seen;
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  }
  for (int i = 0; i < n; i++)
    seen.insert(*reinterpret_cast<uint64_t *>(a_.buf.data() + 4096 + 8 * i));
  EXPECT_EQ(seen.size(), static_cast<size_t>(n));
  EXPECT_EQ(*target, 7u + n);
}

TEST_F(DataPathTest, MisalignedAtomicIsAnInvalidRequest) {
  ibv_sge res = {reinterpret_cast<uintptr_t>(a_.buf.data()), 8, a_.mr->lkey};
  ASSERT_EQ(PostAtomic(a_.qp, 1, IBV_WR_ATOMIC_FETCH_AND_ADD, res,
                       reinterpret_cast<uintptr_t>(b_.buf.data() + 4),
                       b_.mr->rkey, 1, 0),
            0);
  ibv_wc s = Wait(a_.cq);
  EXPECT_EQ(s.status, IBV_WC_REM_INV_REQ_ERR) << ibv_wc_status_str(s.status);
}

// Without a receive WQE the responder answers RNR NAK and drops the SEND
// and everything after it; the requester sends them again after the RNR
// timer, and once receives are posted all arrive, in order, once.
TEST_F(DataPathTest, RnrRetryDeliversOnceReceivesArePosted) {
  const int n = 5;
  for (int i = 0; i < n; i++) {
    Fill(a_.buf, i * 100, 100, 900 + i);
    ASSERT_EQ(PostSend(a_, 50 + i, IBV_WR_SEND, Sges(a_, i * 100, 100, 1)), 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ibv_wc none;
  EXPECT_EQ(ibv_poll_cq(a_.cq, 1, &none), 0);  // nothing completed yet
  for (int i = 0; i < n; i++)
    ASSERT_EQ(PostRecv(b_, 70 + i, Sges(b_, 8192 + i * 128, 128, 1)), 0);
  for (int i = 0; i < n; i++) {
    ibv_wc r = Wait(b_.cq);
    ASSERT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
    EXPECT_EQ(r.wr_id, 70u + i);
    EXPECT_EQ(r.byte_len, 100u);
    EXPECT_EQ(memcmp(b_.buf.data() + 8192 + i * 128, a_.buf.data() + i * 100,
                     100),
              0);
  }
  for (int i = 0; i < n; i++) {
    ibv_wc s = Wait(a_.cq);
    ASSERT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
    EXPECT_EQ(s.wr_id, 50u + i);
  }
  EXPECT_EQ(ibv_poll_cq(b_.cq, 1, &none), 0);  // nothing twice
}

// An armed SRQ limit fires once when arriving SENDs take the SRQ below it.
TEST_F(DataPathTest, SrqLimitEventFiresWhenReceivesRunLow) {
  ibv_srq_init_attr sa = {};
  sa.attr = {16, 1, 0};
  ibv_srq *srq = ibv_create_srq(pd_, &sa);
  ASSERT_NE(srq, nullptr);
  ibv_qp_init_attr ia = {};
  ia.send_cq = b_.cq;
  ia.recv_cq = b_.cq;
  ia.srq = srq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {16, 0, 1, 0, 0};
  ibv_qp *qp = ibv_create_qp(pd_, &ia);
  ASSERT_NE(qp, nullptr);
  ibv_qp_init_attr ia2 = {};
  ia2.send_cq = a_.cq;
  ia2.recv_cq = a_.cq;
  ia2.qp_type = IBV_QPT_RC;
  ia2.cap = {16, 1, 1, 1, 0};
  ibv_qp *sender = ibv_create_qp(pd_, &ia2);
  ASSERT_NE(sender, nullptr);
  ASSERT_EQ(Connect(qp, sender), 0);
  ASSERT_EQ(Connect(sender, qp), 0);

  for (int i = 0; i < 10; i++) {
    ibv_sge sge = {reinterpret_cast<uintptr_t>(b_.buf.data() + i * 64), 64,
                   b_.mr->lkey};
    ibv_recv_wr wr = {}, *bad;
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
  }
  ibv_srq_attr m = {};
  m.srq_limit = 6;
  ASSERT_EQ(ibv_modify_srq(srq, &m, IBV_SRQ_LIMIT), 0);

  // 4 arrivals leave 6 receives: not below the limit yet.
  ibv_send_wr wr = {}, *bad;
  ibv_sge sge = {reinterpret_cast<uintptr_t>(a_.buf.data()), 8, a_.mr->lkey};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  for (int i = 0; i < 4; i++) {
    wr.wr_id = 200 + i;
    ASSERT_EQ(ibv_post_send(sender, &wr, &bad), 0);
    ASSERT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  }
  EXPECT_FALSE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_SRQ_LIMIT_REACHED, 300));
  wr.wr_id = 300;
  ASSERT_EQ(ibv_post_send(sender, &wr, &bad), 0);  // 5 left: below 6
  ASSERT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_SRQ_LIMIT_REACHED, 5000));
  ibv_srq_attr q;
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u);  // disarmed
  for (int i = 0; i < 5; i++) EXPECT_EQ(Wait(b_.cq).status, IBV_WC_SUCCESS);
  ibv_destroy_qp(sender);
  ibv_destroy_qp(qp);
  ibv_destroy_srq(srq);
}

// A CQ armed for solicited completions only wakes up for a SEND that asks.
TEST_F(DataPathTest, SolicitedOnlyNotification) {
  ibv_comp_channel *ch = ibv_create_comp_channel(ctx_.get());
  ASSERT_NE(ch, nullptr);
  ibv_cq *cq = ibv_create_cq(ctx_.get(), 16, nullptr, ch, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp *rq = NewQp(cq);
  ASSERT_NE(rq, nullptr);
  ibv_qp *sq = NewQp(a_.cq);
  ASSERT_NE(sq, nullptr);
  ASSERT_EQ(Connect(rq, sq), 0);
  ASSERT_EQ(Connect(sq, rq), 0);
  for (int i = 0; i < 2; i++) {
    ibv_sge sge = {reinterpret_cast<uintptr_t>(b_.buf.data()), 64,
                   b_.mr->lkey};
    ibv_recv_wr wr = {}, *bad;
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_recv(rq, &wr, &bad), 0);
  }
  ASSERT_EQ(ibv_req_notify_cq(cq, 1), 0);  // solicited only

  ibv_sge sge = {reinterpret_cast<uintptr_t>(a_.buf.data()), 8, a_.mr->lkey};
  ibv_send_wr wr = {}, *bad;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ASSERT_EQ(ibv_post_send(sq, &wr, &bad), 0);
  ASSERT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  pollfd pfd = {ch->fd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 300), 0) << "event for an unsolicited SEND";

  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
  ASSERT_EQ(ibv_post_send(sq, &wr, &bad), 0);
  ASSERT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  ASSERT_EQ(poll(&pfd, 1, 5000), 1) << "no event for a solicited SEND";
  ibv_cq *ev_cq;
  void *ev_ctx;
  ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, cq);
  ibv_ack_cq_events(cq, 1);
  ibv_wc wc[2];
  EXPECT_EQ(ibv_poll_cq(cq, 2, wc), 2);
  ibv_destroy_qp(sq);
  ibv_destroy_qp(rq);
  ibv_destroy_cq(cq);
  ibv_destroy_comp_channel(ch);
}

// A peer that completes the hello and then sends a malformed segment: the
// connection is closed, only that QP goes to error (QP_FATAL), other QPs
// keep working.
// ibv_resize_cq() while the kernel completes work into the CQ: every
// completion arrives once, in order, across grows and shrinks; a size
// below what the CQ holds is refused and loses nothing; the sizes asked
// for are granted.
TEST_F(DataPathTest, ResizeCqUnderTrafficLosesNoCompletion) {
  using Clock = std::chrono::steady_clock;
  const int n = 3000, len = 32, window = 200;  // a_'s SQ has 256 slots
  const int sizes[] = {256, 1024, 300, 4096, 512};
  const uint64_t raddr = reinterpret_cast<uintptr_t>(b_.buf.data());
  Fill(a_.buf, 0, n * len, 23);
  int posted = 0, done = 0, resized = 0;
  const Clock::time_point end = Clock::now() + std::chrono::seconds(120);
  while (done < n) {
    ASSERT_LT(Clock::now(), end) << done << " of " << n << " completed";
    while (posted < n && posted - done < window) {
      ASSERT_EQ(PostSend(a_, posted, IBV_WR_RDMA_WRITE,
                         Sges(a_, posted * len, len, 1), raddr + posted * len,
                         b_.mr->rkey),
                0);
      posted++;
    }
    // Up to 200 completions outstanding: every size here holds them.
    const int want = sizes[resized % 5];
    ASSERT_EQ(ibv_resize_cq(a_.cq, want), 0) << "resize " << resized;
    ASSERT_GE(a_.cq->cqe, want);
    resized++;
    ibv_wc wc[16];
    const int got = ibv_poll_cq(a_.cq, 16, wc);
    ASSERT_GE(got, 0);
    for (int i = 0; i < got; i++, done++) {
      ASSERT_EQ(wc[i].status, IBV_WC_SUCCESS)
          << ibv_wc_status_str(wc[i].status) << " wr " << wc[i].wr_id;
      ASSERT_EQ(wc[i].wr_id, static_cast<uint64_t>(done));
      ASSERT_EQ(wc[i].opcode, IBV_WC_RDMA_WRITE);
    }
  }
  EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data(), n * len), 0);
  std::cout << "[          ] " << n << " WRITEs, " << resized
            << " resizes in between" << std::endl;

  // 50 completions waiting: 16 slots cannot hold them; 64 can.
  for (int i = 0; i < 50; i++)
    ASSERT_EQ(PostSend(a_, 10000 + i, IBV_WR_RDMA_WRITE,
                       Sges(a_, i * len, len, 1), raddr + i * len,
                       b_.mr->rkey),
              0);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(ibv_resize_cq(a_.cq, 16), EINVAL);
  EXPECT_EQ(ibv_resize_cq(a_.cq, 0), EINVAL);
  ibv_device_attr da;
  ASSERT_EQ(ibv_query_device(ctx_.get(), &da), 0);
  EXPECT_EQ(ibv_resize_cq(a_.cq, da.max_cqe + 1), EINVAL);
  ASSERT_EQ(ibv_resize_cq(a_.cq, 64), 0);
  EXPECT_GE(a_.cq->cqe, 64);
  for (int i = 0; i < 50; i++) {
    ibv_wc wc = Wait(a_.cq);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.wr_id, 10000u + i);
  }
  ibv_wc none;
  EXPECT_EQ(ibv_poll_cq(a_.cq, 1, &none), 0);
}

TEST_F(DataPathTest, MalformedSegmentClosesOnlyThatConnection) {
  const long malformed = Counter("malformed_segments");
  ASSERT_GE(malformed, 0);
  ibv_qp *victim = nullptr;
  int fd = RawPeer(&victim);
  ASSERT_GE(fd, 0);
  ibv_sge sge = {reinterpret_cast<uintptr_t>(b_.buf.data()), 64, b_.mr->lkey};
  ibv_recv_wr rwr = {}, *rbad;
  rwr.wr_id = 77;
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  ASSERT_EQ(ibv_post_recv(victim, &rwr, &rbad), 0);

  const uint8_t junk[40] = {0x7f, 0xff, 0xff, 0xff};  // unknown opcode
  ASSERT_EQ(write(fd, junk, sizeof(junk)), static_cast<ssize_t>(sizeof(junk)));
  EXPECT_TRUE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_QP_FATAL, 5000));
  char c;
  EXPECT_EQ(read(fd, &c, 1), 0);  // closed by trdma
  close(fd);
  EXPECT_EQ(Counter("malformed_segments"), malformed + 1);
  ibv_wc wc = Wait(b_.cq);
  EXPECT_EQ(wc.wr_id, 77u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  ibv_destroy_qp(victim);

  // The fixture's QPs never noticed.
  ASSERT_EQ(PostRecv(b_, 5, Sges(b_, 0, 64, 1)), 0);
  ASSERT_EQ(PostSend(a_, 6, IBV_WR_SEND, Sges(a_, 0, 8, 1)), 0);
  EXPECT_EQ(Wait(b_.cq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
}

// The pattern of ibv_rc_pingpong's end: B destroys its QP as soon as its
// last receive completes.  A's SEND still completes successfully (B's ACK
// went out before the close), and A, owing B nothing, is not failed at once:
// its leftover receives stay posted for the peer_close_grace (1 s), then the
// QP goes to error and they flush.  The connection ends with FINs, never a
// reset (which would fail A at once).
TEST_F(DataPathTest, PeerDestroyedAfterItsLastCompletion) {
  const long rsts = TcpSnmp("OutRsts");
  for (int i = 0; i < 4; i++) ASSERT_EQ(PostRecv(a_, 50 + i, Sges(a_, 0, 64, 1)), 0);
  ASSERT_EQ(PostRecv(b_, 1, Sges(b_, 0, 64, 1)), 0);
  ASSERT_EQ(PostSend(a_, 2, IBV_WR_SEND, Sges(a_, 0, 64, 1)), 0);
  ASSERT_EQ(Wait(b_.cq).status, IBV_WC_SUCCESS);
  ASSERT_EQ(ibv_destroy_qp(b_.qp), 0);
  b_.qp = nullptr;
  auto t0 = std::chrono::steady_clock::now();
  ibv_wc s = Wait(a_.cq);
  EXPECT_EQ(s.wr_id, 2u);
  EXPECT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
  ExpectPeerCloseGrace(a_, t0, 50, 4);
  EXPECT_EQ(TcpSnmp("OutRsts"), rsts) << "a connection was reset";
}

// A's last WRITEs were unsignaled, so B holds their ACK (ack_coalesce_us)
// when A destroys its QP: B owes A nothing A asked for, so B is not failed
// at once either; its receive stays posted for the peer_close_grace.  Where
// B's held ACK crosses A's FIN, A's closing socket still takes it in: TCP
// would answer bytes for a socket closed for reading with a reset.
TEST_F(DataPathTest, PeerDestroyedAfterUnsignaledWrites) {
  const long rsts = TcpSnmp("OutRsts");
  const uint64_t raddr = reinterpret_cast<uintptr_t>(b_.buf.data());
  // trdma asks for the ACK of every message whose MSN is a multiple of a
  // quarter of the SQ (64 here) even when unsignaled, and B would then owe
  // A that ACK.  A's messages are numbered from its sq_psn (Connect()):
  // signaled WRITEs first, until none of the next three is such a one.
  uint32_t msn = 1000 + a_.qp->qp_num;
  for (uint64_t id = 90; msn % 64 == 0 || (msn + 1) % 64 == 0 ||
                         (msn + 2) % 64 == 0;
       id++, msn++) {
    ASSERT_EQ(PostSend(a_, id, IBV_WR_RDMA_WRITE, Sges(a_, 8192, 8, 1),
                       raddr + 8192, b_.mr->rkey),
              0);
    ASSERT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  }
  ASSERT_EQ(PostRecv(b_, 50, Sges(b_, 4096, 64, 1)), 0);
  Fill(a_.buf, 0, 3 * 64, 9);
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(PostSend(a_, i, IBV_WR_RDMA_WRITE, Sges(a_, i * 64, 64, 1),
                       raddr + i * 64, b_.mr->rkey, 0, 0),
              0);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  bool seen = false;
  while (!(seen = !memcmp(a_.buf.data(), b_.buf.data(), 3 * 64)) &&
         std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(seen) << "not placed in 5 s: "
                    << Diff(a_.buf.data(), b_.buf.data(), 3 * 64);
  ASSERT_EQ(ibv_destroy_qp(a_.qp), 0);
  a_.qp = nullptr;
  ExpectPeerCloseGrace(b_, std::chrono::steady_clock::now(), 50, 1);
  EXPECT_EQ(TcpSnmp("OutRsts"), rsts) << "a connection was reset";
}

// The peer goes away while A has a request on the wire.  As an IB
// requester whose peer vanished, A is not failed at once: nobody answers,
// and after its transport timeout (timeout 14, retry_cnt 7: 537 ms) the
// request ends with RETRY_EXC_ERR, the QP goes to error, the rest flushes.
TEST_F(DataPathTest, PeerGoneWithARequestOutstandingFailsAfterItsTimeout) {
  ASSERT_EQ(PostRecv(a_, 11, Sges(a_, 0, 64, 1)), 0);
  // No receive at B: the SEND waits in RNR retries, outstanding.
  ASSERT_EQ(PostSend(a_, 12, IBV_WR_SEND, Sges(a_, 0, 64, 1)), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(ibv_destroy_qp(b_.qp), 0);
  b_.qp = nullptr;
  EXPECT_TRUE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_QP_FATAL, 5000));
  auto ms = MsSince(t0);
  EXPECT_GE(ms, 400);
  EXPECT_LT(ms, 900);
  ibv_wc r = Wait(a_.cq);
  EXPECT_EQ(r.wr_id, 12u);
  EXPECT_EQ(r.status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(r.status);
  r = Wait(a_.cq);
  EXPECT_EQ(r.wr_id, 11u);
  EXPECT_EQ(r.status, IBV_WC_WR_FLUSH_ERR);
}

// ibv_srq_pingpong's end: one side has all it waits for and exits while
// the other still posts a request past the ones it waits for.  That request
// is not failed at once (the poster would take its error with the last
// completion it waits for): it ends with RETRY_EXC_ERR after the transport
// timeout, as on a fabric, and only it.
TEST_F(DataPathTest, RequestPostedAfterThePeerClosedFailsAfterItsTimeout) {
  ASSERT_EQ(PostRecv(a_, 31, Sges(a_, 0, 64, 1)), 0);
  ASSERT_EQ(PostRecv(b_, 41, Sges(b_, 0, 64, 1)), 0);
  ASSERT_EQ(PostSend(a_, 32, IBV_WR_SEND, Sges(a_, 0, 64, 1)), 0);
  ASSERT_EQ(Wait(b_.cq).status, IBV_WC_SUCCESS);
  ASSERT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  ASSERT_EQ(ibv_destroy_qp(b_.qp), 0);
  b_.qp = nullptr;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its FIN
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(PostSend(a_, 33, IBV_WR_SEND, Sges(a_, 0, 64, 1)), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  ibv_wc none;
  EXPECT_EQ(ibv_poll_cq(a_.cq, 1, &none), 0) << "failed at once";
  EXPECT_TRUE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_QP_FATAL, 5000));
  auto ms = MsSince(t0);
  EXPECT_GE(ms, 400);
  EXPECT_LT(ms, 1500);
  ibv_wc r = Wait(a_.cq);
  EXPECT_EQ(r.wr_id, 33u);
  EXPECT_EQ(r.status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(r.status);
  r = Wait(a_.cq);
  EXPECT_EQ(r.wr_id, 31u);
  EXPECT_EQ(r.status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(DataPathTest, PeerGoneFlushesAndRaisesQpFatal) {
  ASSERT_EQ(PostRecv(a_, 11, Sges(a_, 0, 64, 1)), 0);
  ASSERT_EQ(ibv_destroy_qp(b_.qp), 0);
  b_.qp = nullptr;
  EXPECT_TRUE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_QP_FATAL, 5000));
  ibv_wc r = Wait(a_.cq);
  EXPECT_EQ(r.wr_id, 11u);
  EXPECT_EQ(r.status, IBV_WC_WR_FLUSH_ERR);
}

// A QP whose destination is its own GID and QPN: its connection is a TCP
// connection connected to itself, and every operation targets its own memory.
TEST_F(DataPathTest, QpConnectedToItself) {
  Side c;
  c.cq = ibv_create_cq(ctx_.get(), 64, nullptr, nullptr, 0);
  ASSERT_NE(c.cq, nullptr);
  c.buf.assign(1 << 20, 0);
  c.mr = ibv_reg_mr(pd_, c.buf.data(), c.buf.size(),
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                        IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  ASSERT_NE(c.mr, nullptr);
  c.qp = NewQp(c.cq, {16, 16, 4, 4, 0});
  ASSERT_NE(c.qp, nullptr);
  ASSERT_EQ(Connect(c.qp, c.qp), 0);

  // Two completions of one CQ, in wr_id order.
  auto two = [&] {
    ibv_wc x = Wait(c.cq), y = Wait(c.cq);
    if (x.wr_id > y.wr_id) std::swap(x, y);
    return std::make_pair(x, y);
  };
  const uint32_t len = 100000;
  Fill(c.buf, 0, len, 77);
  ASSERT_EQ(PostRecv(c, 1, Sges(c, 512 << 10, len, 2)), 0);
  auto src = Sges(c, 0, len, 3);
  ASSERT_EQ(PostSend(c, 2, IBV_WR_SEND_WITH_IMM, src, 0, 0, 0x55), 0);
  auto [r, s] = two();
  ASSERT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
  ASSERT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
  EXPECT_EQ(r.opcode, IBV_WC_RECV);
  EXPECT_EQ(r.byte_len, len);
  EXPECT_EQ(r.qp_num, c.qp->qp_num);
  EXPECT_EQ(r.src_qp, c.qp->qp_num);
  EXPECT_EQ(ntohl(r.imm_data), 0x55u);
  EXPECT_EQ(s.opcode, IBV_WC_SEND);
  std::vector<uint8_t> sent;
  for (auto &g : src)
    sent.insert(sent.end(), reinterpret_cast<uint8_t *>(g.addr),
                reinterpret_cast<uint8_t *>(g.addr) + g.length);
  EXPECT_TRUE(SameScattered(sent.data(), Sges(c, 512 << 10, len, 2)));

  // WRITE into its own buffer, READ it back elsewhere.
  uint64_t raddr = reinterpret_cast<uintptr_t>(c.buf.data() + (256 << 10));
  ASSERT_EQ(PostSend(c, 3, IBV_WR_RDMA_WRITE, Sges(c, 0, len, 1), raddr,
                     c.mr->rkey),
            0);
  ibv_wc w = Wait(c.cq);
  ASSERT_EQ(w.status, IBV_WC_SUCCESS) << ibv_wc_status_str(w.status);
  EXPECT_EQ(memcmp(c.buf.data(), c.buf.data() + (256 << 10), len), 0);
  ASSERT_EQ(PostSend(c, 4, IBV_WR_RDMA_READ, Sges(c, 768 << 10, len, 1),
                     raddr, c.mr->rkey),
            0);
  w = Wait(c.cq);
  ASSERT_EQ(w.status, IBV_WC_SUCCESS) << ibv_wc_status_str(w.status);
  EXPECT_EQ(memcmp(c.buf.data(), c.buf.data() + (768 << 10), len), 0);

  // An atomic on its own memory.
  uint64_t *target = reinterpret_cast<uint64_t *>(c.buf.data() + 1000 * 8);
  *target = 40;
  ibv_sge res = {reinterpret_cast<uintptr_t>(c.buf.data() + 1001 * 8), 8,
                 c.mr->lkey};
  ibv_send_wr aw = {}, *bad;
  aw.wr_id = 5;
  aw.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  aw.sg_list = &res;
  aw.num_sge = 1;
  aw.send_flags = IBV_SEND_SIGNALED;
  aw.wr.atomic.remote_addr = reinterpret_cast<uintptr_t>(target);
  aw.wr.atomic.rkey = c.mr->rkey;
  aw.wr.atomic.compare_add = 2;
  ASSERT_EQ(ibv_post_send(c.qp, &aw, &bad), 0);
  w = Wait(c.cq);
  ASSERT_EQ(w.status, IBV_WC_SUCCESS) << ibv_wc_status_str(w.status);
  EXPECT_EQ(*target, 42u);
  EXPECT_EQ(*reinterpret_cast<uint64_t *>(c.buf.data() + 1001 * 8), 40u);

  EXPECT_EQ(ibv_destroy_qp(c.qp), 0);
  EXPECT_EQ(ibv_dereg_mr(c.mr), 0);
  EXPECT_EQ(ibv_destroy_cq(c.cq), 0);
}

// The TCP connection under the QPs is reset (ss -K, as an administrator
// would): both QPs go to ERR with IBV_EVENT_QP_FATAL and their outstanding
// WRs complete with a flush status.
TEST_F(DataPathTest, ResetConnectionFlushesAndRaisesQpFatal) {
  ASSERT_EQ(PostRecv(b_, 1, Sges(b_, 0, 64, 1)), 0);
  ASSERT_EQ(PostSend(a_, 2, IBV_WR_SEND, Sges(a_, 0, 64, 1)), 0);
  ASSERT_EQ(Wait(b_.cq).status, IBV_WC_SUCCESS);
  ASSERT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);

  ASSERT_EQ(PostRecv(a_, 11, Sges(a_, 0, 64, 1)), 0);
  ASSERT_EQ(PostRecv(b_, 12, Sges(b_, 0, 64, 1)), 0);
  ASSERT_EQ(Sh("ss -K state established '( sport = :4791 or dport = :4791 )'"
               " >/dev/null"),
            0);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_QP_FATAL, 5000));
  ibv_wc r = Wait(a_.cq);
  EXPECT_EQ(r.wr_id, 11u);
  EXPECT_EQ(r.status, IBV_WC_WR_FLUSH_ERR);
  r = Wait(b_.cq);
  EXPECT_EQ(r.wr_id, 12u);
  EXPECT_EQ(r.status, IBV_WC_WR_FLUSH_ERR);
  std::cout << "both QPs flushed "
            << MsSince(t0)
            << " ms after the reset\n";
  for (ibv_qp *qp : {a_.qp, b_.qp}) {
    ibv_qp_attr qa;
    ibv_qp_init_attr qi;
    ASSERT_EQ(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi), 0);
    EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
  }
  // Posted now, a WR completes with a flush status too.
  ASSERT_EQ(PostSend(a_, 13, IBV_WR_SEND, Sges(a_, 0, 8, 1)), 0);
  r = Wait(a_.cq);
  EXPECT_EQ(r.wr_id, 13u);
  EXPECT_EQ(r.status, IBV_WC_WR_FLUSH_ERR);
}

// A QP moved from RTS straight to RESET lets go of its connection: what its
// peer writes afterwards is not placed in its memory (the peer's WRITE
// fails instead), and both QPs, reset and connected again, move data both
// ways on a fresh connection.
TEST_F(DataPathTest, ResetFromRtsLetsGoOfTheConnection) {
  const uintptr_t abuf = reinterpret_cast<uintptr_t>(a_.buf.data());
  const uintptr_t bbuf = reinterpret_cast<uintptr_t>(b_.buf.data());
  Fill(a_.buf, 0, 4096, 1);
  ASSERT_EQ(PostSend(a_, 1, IBV_WR_RDMA_WRITE, Sges(a_, 0, 4096, 1), bbuf,
                     b_.mr->rkey),
            0);
  ASSERT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  ASSERT_EQ(memcmp(a_.buf.data(), b_.buf.data(), 4096), 0);

  ibv_qp_attr ra = {};
  ra.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(a_.qp, &ra, IBV_QP_STATE), 0);
  const size_t off = 1 << 20;
  Fill(b_.buf, off, 4096, 2);
  std::vector<uint8_t> before(a_.buf.begin() + off,
                              a_.buf.begin() + off + 4096);
  ASSERT_EQ(PostSend(b_, 2, IBV_WR_RDMA_WRITE, Sges(b_, off, 4096, 1),
                     abuf + off, a_.mr->rkey),
            0);
  ibv_wc r = Wait(b_.cq);
  EXPECT_EQ(r.wr_id, 2u);
  EXPECT_NE(r.status, IBV_WC_SUCCESS) << "a reset QP's peer wrote into it";
  EXPECT_EQ(memcmp(before.data(), a_.buf.data() + off, 4096), 0)
      << Diff(before.data(), a_.buf.data() + off, 4096);
  ibv_wc none;
  EXPECT_EQ(ibv_poll_cq(a_.cq, 1, &none), 0) << "a reset QP completed a WR";

  ASSERT_EQ(ibv_modify_qp(b_.qp, &ra, IBV_QP_STATE), 0);
  ASSERT_EQ(Connect(a_.qp, b_.qp), 0);
  ASSERT_EQ(Connect(b_.qp, a_.qp), 0);
  Fill(a_.buf, 0, 8192, 3);
  Fill(b_.buf, off, 8192, 4);
  ASSERT_EQ(PostSend(a_, 3, IBV_WR_RDMA_WRITE, Sges(a_, 0, 8192, 1), bbuf,
                     b_.mr->rkey),
            0);
  ASSERT_EQ(PostSend(b_, 4, IBV_WR_RDMA_WRITE, Sges(b_, off, 8192, 1),
                     abuf + off, a_.mr->rkey),
            0);
  r = Wait(a_.cq);
  EXPECT_EQ(r.wr_id, 3u);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  r = Wait(b_.cq);
  EXPECT_EQ(r.wr_id, 4u);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data(), 8192), 0)
      << Diff(a_.buf.data(), b_.buf.data(), 8192);
  EXPECT_EQ(memcmp(b_.buf.data() + off, a_.buf.data() + off, 8192), 0)
      << Diff(b_.buf.data() + off, a_.buf.data() + off, 8192);
}

// The connection is blackholed (an nftables rule drops its packets): the
// sender's bytes stay unacknowledged, and after the QP's timeout x
// (retry_cnt + 1) (TCP_USER_TIMEOUT; 67 ms x 8 here) the WR on the wire ends
// with IBV_WC_RETRY_EXC_ERR, the QP goes to ERR with IBV_EVENT_QP_FATAL and
// the WRs behind it flush.
TEST_F(DataPathTest, BlackholedConnectionTimesOut) {
  ASSERT_EQ(PostRecv(b_, 1, Sges(b_, 0, 64, 1)), 0);
  ASSERT_EQ(PostSend(a_, 2, IBV_WR_SEND, Sges(a_, 0, 64, 1)), 0);
  ASSERT_EQ(Wait(b_.cq).status, IBV_WC_SUCCESS);
  ASSERT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);

  Blackhole bh("trdma_bh");
  ASSERT_TRUE(bh.on());
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(PostSend(a_, 21, IBV_WR_SEND, Sges(a_, 0, 4096, 1)), 0);
  ASSERT_EQ(PostSend(a_, 22, IBV_WR_RDMA_WRITE, Sges(a_, 0, 4096, 1),
                     reinterpret_cast<uintptr_t>(b_.buf.data()), b_.mr->rkey),
            0);
  EXPECT_TRUE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_QP_FATAL, 10000));
  ibv_wc s1 = Wait(a_.cq), s2 = Wait(a_.cq);
  auto ms = MsSince(t0);
  EXPECT_TRUE(bh.Off());
  EXPECT_EQ(s1.wr_id, 21u);
  EXPECT_EQ(s1.status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(s1.status);
  EXPECT_EQ(s2.wr_id, 22u);
  EXPECT_EQ(s2.status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(s2.status);
  std::cout << "timed out after " << ms << " ms\n";
  // Not before the QP's own timeout, and well within TCP's retry spacing.
  EXPECT_GE(ms, 500);
  EXPECT_LT(ms, 10000);
}

// The tests of a connection its QPs let go of, which closes on for a while
// (docs/wire.md): DataPathTest's pair, and a way back should a test delete
// the device.
class ClosingTest : public DataPathTest {
 protected:
  void TearDown() override {
    DataPathTest::TearDown();
    if (!DeviceExists()) {
      EXPECT_EQ(Sh(LinkAddCmd()), 0);
      // Its IPv4 GID, which the next test's connections use, appears once
      // the device has seen the netdev's address.
      auto t0 = std::chrono::steady_clock::now();
      bool gid = false;
      while (!gid && MsSince(t0) < 5000) {
        Context c = OpenDevice(DevName());
        ibv_gid g;
        gid = c && RoceV2Gid(c.get(), &g) >= 0;
        if (!gid) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      EXPECT_TRUE(gid) << DevName() << " added again has no IPv4 GID";
    }
  }

  // What TCP sends after the QPs let go of their connection (bytes the
  // peer had not acknowledged, or not yet received) still carries the
  // trdma TCP option: the connection closes on with the QP's option
  // records, and keeps the option's hook where delete_device takes the
  // namespace's last trdma device away meanwhile.  Captured from the SYNs
  // on: a SEND of 100,000 bytes arrives (check-capture wants tagged
  // packets in the middle of a trdma segment too); then every segment is
  // dropped before the capture sees it while a SEND of 3,000 bytes is
  // posted and both QPs are destroyed (and the device deleted), so that
  // its bytes, the ACKs owed and both FINs first reach the wire after the
  // blackhole, a tenth of a second later (TCP tries again no sooner than
  // 0.2 s after a drop), while the connection closes.  check-capture
  // passes only where they carry the option.
  void ClosingSegmentsCarryTheOption(bool delete_device) {
    const std::string check = "tools/wireshark/check-capture";
    const std::string cap = "/tmp/trdma-closing.pcap";
    ASSERT_EQ(access(check.c_str(), X_OK), 0)
        << check << " (run from the project root)";
    // Whatever a failed assertion leaves: the capture.
    struct Cleanup {
      bool tcpdump = false;
      ~Cleanup() {
        if (tcpdump) Sh("kill $(cat /tmp/tcpdump-closing.pid)");
      }
    } cleanup;
    ASSERT_EQ(Sh("tcpdump -i lo -B 32768 -U -w " + cap +
                 " tcp port 4791 2>/tmp/tcpdump-closing.log & "
                 "echo $! >/tmp/tcpdump-closing.pid; sleep 1"),
              0);
    cleanup.tcpdump = true;
    ibv_qp *x = NewQp(a_.cq), *y = NewQp(b_.cq);
    ASSERT_NE(x, nullptr);
    ASSERT_NE(y, nullptr);
    // Timeout 18 (1.07 s): TCP gives up on the connection after 8.6 s
    // (TCP_USER_TIMEOUT), well after the blackhole.
    ASSERT_EQ(Connect(x, y, 7, 18), 0);
    ASSERT_EQ(Connect(y, x, 7, 18), 0);
    Side xs;  // x, posting from a_'s buffer
    xs.qp = x;
    ASSERT_EQ(PostRecvOn(y, 1, Sges(b_, 0, 100000, 1)), 0);
    ASSERT_EQ(PostSend(xs, 2, IBV_WR_SEND, Sges(a_, 0, 100000, 1)), 0);
    EXPECT_EQ(Wait(b_.cq).status, IBV_WC_SUCCESS);
    EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);

    ASSERT_EQ(PostRecvOn(y, 3, Sges(b_, 0, 3000, 1)), 0);
    Blackhole bh("trdma_closing");
    ASSERT_TRUE(bh.on());
    const auto posted = std::chrono::steady_clock::now();
    ASSERT_EQ(PostSend(xs, 4, IBV_WR_SEND, Sges(a_, 0, 3000, 1)), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(ibv_destroy_qp(x), 0);
    EXPECT_EQ(ibv_destroy_qp(y), 0);
    const long destroy_ms = MsSince(t0);
    // The SEND never acknowledged, the receive never filled: both flushed.
    EXPECT_EQ(Wait(a_.cq).status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(Wait(b_.cq).status, IBV_WC_WR_FLUSH_ERR);
    long delete_ms = -1;
    if (delete_device) {
      // The namespace's last trdma device goes, and with it what else
      // the namespace had of trdma's; the closing connection stays.
      const auto td = std::chrono::steady_clock::now();
      EXPECT_EQ(Sh("rdma link delete " + DevName()), 0);
      delete_ms = MsSince(td);
      EXPECT_FALSE(DeviceExists());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const long dropped = bh.Dropped();
    // Captured from here on, what went after the QPs were gone: taken
    // before the blackhole is removed, as nothing it drops is captured.
    // (Taken after, it missed what TCP sent again between the table's
    // removal and the nft command's end: a try that fell there, and then
    // nothing more to send, failed the test.)
    const std::string off = std::to_string(
        std::chrono::duration<double>(
            std::chrono::system_clock::now().time_since_epoch())
            .count());
    EXPECT_TRUE(bh.Off());
    const long blackhole_ms = MsSince(posted);
    // TCP tries again with its timers backing off: wait for the SEND's
    // bytes and both FINs on the wire (a FIN may go with the SEND's bytes).
    const std::string seen =
        "tshark -n -r " + cap + " -Y 'frame.time_epoch >= " + off +
        " && (tcp.len >= 3000 || tcp.flags.fin == 1)'"
        " -T fields -e tcp.len -e tcp.flags.fin -e frame.time_epoch"
        " 2>/dev/null";
    auto t1 = std::chrono::steady_clock::now();
    int n_send, n_fin;
    double last = 0;  // when the last of them went, s after the blackhole
    do {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      std::istringstream in(ShOut(seen));
      std::string fin;
      unsigned len;
      double at;
      n_send = n_fin = 0;
      while (in >> len >> fin >> at) {
        n_send += len >= 3000 && len < 3100;
        n_fin += fin == "1" || fin == "True";
        last = std::max(last, at - std::stod(off));
      }
    } while ((n_send < 1 || n_fin < 2) && MsSince(t1) < 6000);
    const long wire_ms = MsSince(t1);
    // Where TCP is with them, should they not have gone.
    const std::string sockets =
        ShOut("ss -tnoieH state all '( sport = :4791 or dport = :4791 )'; "
              "nstat -az TcpRetransSegs TcpExtTCPRetransFail "
              "TcpExtTCPWinProbe TcpExtTCPAbortOnTimeout");
    Sh("sleep 1; kill $(cat /tmp/tcpdump-closing.pid); sleep 1");
    cleanup.tcpdump = false;
    const std::string verdict = ShOut(check + " " + cap + " 2>&1; echo rc=$?");
    if (delete_device)
      std::cout << "the device deleted in " << delete_ms << " ms\n";
    std::cout << "destroyed in " << destroy_ms << " ms; " << dropped
              << " segments dropped in " << blackhole_ms
              << " ms of blackhole; seen within " << wire_ms
              << " ms of the blackhole's end, the last " << last
              << " s after its removal began: " << n_send
              << " segments of the SEND, " << n_fin << " FINs\n"
              << verdict;
    EXPECT_GT(dropped, 0);
    // TCP's tries after the first drop come 0.2, 0.6, 1.4 and 3 s after it
    // (later where its RTT estimate is longer): the blackhole must end
    // before the closing's 5 s are over.
    EXPECT_LT(destroy_ms, 1000);
    EXPECT_LT(blackhole_ms, 3000);
    EXPECT_GE(n_send, 1) << "the SEND's bytes never went\n" << sockets;
    EXPECT_GE(n_fin, 2) << "a FIN never went";
    EXPECT_NE(verdict.find("rc=0"), std::string::npos)
        << ShOut("tshark -n -r " + cap + " 2>&1 | tail -20");
  }
};

TEST_F(ClosingTest, SegmentsSentWhileTheConnectionClosesCarryTheOption) {
  ClosingSegmentsCarryTheOption(false);
}

// The same with the namespace's only trdma device deleted while the
// connection closes: the closing keeps the option's hook (before, the
// last device took it away, and what TCP sent then went untagged).
TEST_F(ClosingTest, SegmentsSentAfterTheLastDeviceIsGoneCarryTheOption) {
  std::istringstream devs(ShOut("ls /sys/class/infiniband"));
  std::vector<std::string> trdma;
  for (std::string d; devs >> d;)
    if (access(("/sys/class/infiniband/" + d +
                "/ports/1/hw_counters/tcp_option_left_off")
                   .c_str(),
               F_OK) == 0)
      trdma.push_back(d);
  ASSERT_EQ(trdma, std::vector<std::string>{DevName()})
      << "not the namespace's only trdma device";
  ClosingSegmentsCarryTheOption(true);
}

// A connection still closing when the closing's 5 s are over (the peer
// silent, here every segment dropped) is reset rather than left to TCP as
// an orphan: nothing TCP would send later goes without the trdma TCP
// option (docs/wire.md).  Both QPs are destroyed with a SEND's bytes and
// both FINs unacknowledged; 7 s later neither socket is left with
// anything to send (FIN_WAIT1, CLOSING, LAST_ACK).  The QPs' timeout
// (20: TCP gives up after 34 s) keeps TCP itself from ending them sooner.
TEST_F(ClosingTest, ConnectionStillClosingAfterItsLingerIsReset) {
  ibv_qp *x = NewQp(a_.cq), *y = NewQp(b_.cq);
  ASSERT_NE(x, nullptr);
  ASSERT_NE(y, nullptr);
  ASSERT_EQ(Connect(x, y, 7, 20), 0);
  ASSERT_EQ(Connect(y, x, 7, 20), 0);
  Side xs;
  xs.qp = x;
  ExpectSendArrives(x, a_.cq, y, b_.cq);
  // The connections on trdma's port with something left to send, by
  // their two addresses.  Another test's may be among them (one stayed
  // over 12 s once): only those new after the destroy are this test's.
  auto closing = [] {
    std::istringstream in(ShOut(
        "ss -tnH state fin-wait-1 state closing state last-ack "
        "'( sport = :4791 or dport = :4791 )' | awk '{print $(NF-1), $NF}'"));
    std::set<std::string> s;
    for (std::string l; std::getline(in, l);)
      if (!l.empty()) s.insert(l);
    return s;
  };
  const std::set<std::string> before = closing();
  ASSERT_EQ(PostRecvOn(y, 3, Sges(b_, 0, 3000, 1)), 0);
  Blackhole bh("trdma_linger");
  ASSERT_TRUE(bh.on());
  ASSERT_EQ(PostSend(xs, 4, IBV_WR_SEND, Sges(a_, 0, 3000, 1)), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ibv_destroy_qp(x), 0);
  EXPECT_EQ(ibv_destroy_qp(y), 0);
  EXPECT_EQ(Wait(a_.cq).status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(Wait(b_.cq).status, IBV_WC_WR_FLUSH_ERR);
  std::set<std::string> ours;
  for (const std::string &c : closing())
    if (!before.count(c)) ours.insert(c);
  std::this_thread::sleep_for(std::chrono::milliseconds(7000));
  size_t left = 0;
  for (const std::string &c : closing()) left += ours.count(c);
  const long dropped = bh.Dropped();
  EXPECT_TRUE(bh.Off());
  std::cout << "closing sockets after the destroy: " << ours.size()
            << ", 7 s later: " << left << " (another test's: "
            << before.size() << "); " << dropped << " segments dropped\n";
  for (const std::string &c : before)
    std::cout << "  another test's, closing: " << c << "\n";
  EXPECT_GT(dropped, 0);
  EXPECT_FALSE(ours.empty()) << "nothing was left closing to test";
  EXPECT_EQ(left, 0u) << ShOut("ss -tnoH state all '( sport = :4791 or "
                               "dport = :4791 )'");
}

// Inline at the maximum the module grants (max_inline): the bytes are taken
// at post time from several SGEs, so changing the source right after
// ibv_post_send returns does not change what arrives.
TEST_F(DataPathTest, InlineAtTheReportedMaximum) {
  const uint32_t max = std::stoul(
      ReadFile("/sys/module/trdma/parameters/max_inline"));
  ibv_qp *x = NewQp(a_.cq, {8, 8, 4, 4, max});
  ASSERT_NE(x, nullptr);
  ibv_qp_attr qa;
  ibv_qp_init_attr qi;
  ASSERT_EQ(ibv_query_qp(x, &qa, IBV_QP_CAP, &qi), 0);
  EXPECT_EQ(qi.cap.max_inline_data, max);
  ibv_qp *y = NewQp(b_.cq, {8, 8, 4, 4, 0});
  ASSERT_NE(y, nullptr);
  ASSERT_EQ(Connect(x, y), 0);
  ASSERT_EQ(Connect(y, x), 0);

  Fill(a_.buf, 0, max + 64, 99);
  std::vector<uint8_t> want(a_.buf.begin(), a_.buf.begin() + max);
  ibv_sge rs = {reinterpret_cast<uintptr_t>(b_.buf.data()), max + 64,
                b_.mr->lkey};
  ibv_recv_wr rwr = {}, *rbad;
  rwr.wr_id = 1;
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  ASSERT_EQ(ibv_post_recv(y, &rwr, &rbad), 0);
  // Three SGEs, no lkey needed for inline data.
  ibv_sge sg[3] = {
      {reinterpret_cast<uintptr_t>(a_.buf.data()), max / 3, 0},
      {reinterpret_cast<uintptr_t>(a_.buf.data() + max / 3), max / 3, 0},
      {reinterpret_cast<uintptr_t>(a_.buf.data() + 2 * (max / 3)),
       max - 2 * (max / 3), 0}};
  ibv_send_wr wr = {}, *bad;
  wr.wr_id = 2;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = sg;
  wr.num_sge = 3;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ASSERT_EQ(ibv_post_send(x, &wr, &bad), 0);
  memset(a_.buf.data(), 0xee, max);  // after the post: must not matter
  ibv_wc r = Wait(b_.cq), s = Wait(a_.cq);
  ASSERT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
  ASSERT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
  EXPECT_EQ(r.byte_len, max);
  EXPECT_EQ(memcmp(b_.buf.data(), want.data(), max), 0);
  // One byte more is refused at post time.
  sg[2].length++;
  EXPECT_NE(ibv_post_send(x, &wr, &bad), 0);
  ibv_destroy_qp(x);
  ibv_destroy_qp(y);
}

// 64 MiB WRITE, READ and SEND from and into three SGEs each, byte for byte.
TEST_F(DataPathTest, SixtyFourMibMessages) {
  const size_t kLen = 64 << 20;
  std::vector<uint8_t> src(kLen + 4096), dst(kLen + 4096);
  const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                  IBV_ACCESS_REMOTE_READ;
  ibv_mr *smr = ibv_reg_mr(pd_, src.data(), src.size(), acc);
  ibv_mr *dmr = ibv_reg_mr(pd_, dst.data(), dst.size(), acc);
  ASSERT_TRUE(smr && dmr);
  auto three = [](std::vector<uint8_t> &v, ibv_mr *mr) {
    const uint32_t p = (64 << 20) / 3;
    return std::vector<ibv_sge>{
        {reinterpret_cast<uintptr_t>(v.data()), p, mr->lkey},
        {reinterpret_cast<uintptr_t>(v.data() + p + 100), p, mr->lkey},
        {reinterpret_cast<uintptr_t>(v.data() + 2 * p + 200),
         (64u << 20) - 2 * p, mr->lkey}};
  };
  auto gathered = [](const std::vector<ibv_sge> &sg) {
    std::vector<uint8_t> out;
    for (auto &g : sg)
      out.insert(out.end(), reinterpret_cast<uint8_t *>(g.addr),
                 reinterpret_cast<uint8_t *>(g.addr) + g.length);
    return out;
  };
  auto wait_long = [](ibv_cq *cq) {
    ibv_wc wc = {};
    wc.status = IBV_WC_GENERAL_ERR;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (ibv_poll_cq(cq, 1, &wc) == 0 &&
           std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    return wc;
  };
  std::mt19937 rng(64);
  for (auto &c : src) c = static_cast<uint8_t>(rng());
  auto ssg = three(src, smr);
  const auto want = gathered(ssg);

  // WRITE: scattered source, one contiguous target.
  ASSERT_EQ(PostSend(a_, 1, IBV_WR_RDMA_WRITE, ssg,
                     reinterpret_cast<uintptr_t>(dst.data()), dmr->rkey),
            0);
  ASSERT_EQ(wait_long(a_.cq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(dst.data(), want.data(), kLen), 0);

  // READ: the contiguous copy back into three scattered pieces.
  std::vector<uint8_t> back(kLen + 4096, 0);
  ibv_mr *bmr = ibv_reg_mr(pd_, back.data(), back.size(), acc);
  ASSERT_NE(bmr, nullptr);
  auto bsg = three(back, bmr);
  ASSERT_EQ(PostSend(a_, 2, IBV_WR_RDMA_READ, bsg,
                     reinterpret_cast<uintptr_t>(dst.data()), dmr->rkey),
            0);
  ASSERT_EQ(wait_long(a_.cq).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(gathered(bsg) == want);

  // SEND: scattered to scattered.
  std::fill(dst.begin(), dst.end(), 0);
  auto dsg = three(dst, dmr);
  ASSERT_EQ(PostRecv(b_, 3, dsg), 0);
  ASSERT_EQ(PostSend(a_, 4, IBV_WR_SEND, ssg), 0);
  ibv_wc r = wait_long(b_.cq);
  ASSERT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
  EXPECT_EQ(r.byte_len, kLen);
  ASSERT_EQ(wait_long(a_.cq).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(gathered(dsg) == want);
  ibv_dereg_mr(bmr);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
}

// A VA window of `size` bytes whose pages are `period` bytes of one memfd
// mapped over and over: a 2 GiB memory region in a guest of 2 GiB.
struct RepeatedWindow {
  RepeatedWindow(size_t size, size_t period) : size(size) {
    fd = memfd_create("trdma-window", 0);
    if (fd < 0 || ftruncate(fd, period)) return;
    void *at = mmap(nullptr, size, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (at == MAP_FAILED) return;
    for (size_t off = 0; off < size; off += period)
      if (mmap(static_cast<uint8_t *>(at) + off, period,
               PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
               0) == MAP_FAILED) {
        munmap(at, size);
        return;
      }
    base = static_cast<uint8_t *>(at);
  }
  ~RepeatedWindow() {
    if (base) munmap(base, size);
    if (fd >= 0) close(fd);
  }
  uint8_t *base = nullptr;
  size_t size;
  int fd = -1;
};

// Messages of 2 GiB (the max_msg_sz trdma reports): WRITE, READ and SEND
// with byte_len 2^31.  Both regions repeat a 64 MiB period, so the last pass
// over each period decides its final bytes; those are checked.
TEST_F(DataPathTest, TwoGibMessages) {
  const size_t kMsg = size_t{1} << 31, kPeriod = 64 << 20;
  ibv_device_attr da;
  ASSERT_EQ(ibv_query_device(ctx_.get(), &da), 0);
  ibv_port_attr pa;
  ASSERT_EQ(ibv_query_port(ctx_.get(), 1, &pa), 0);
  ASSERT_GE(pa.max_msg_sz, kMsg);
  RepeatedWindow src(kMsg, kPeriod), dst(kMsg, kPeriod);
  ASSERT_NE(src.base, nullptr);
  ASSERT_NE(dst.base, nullptr);
  const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                  IBV_ACCESS_REMOTE_READ;
  ibv_mr *smr = ibv_reg_mr(pd_, src.base, kMsg, acc);
  ASSERT_NE(smr, nullptr) << strerror(errno);
  ibv_mr *dmr = ibv_reg_mr(pd_, dst.base, kMsg, acc);
  ASSERT_NE(dmr, nullptr) << strerror(errno);

  std::mt19937_64 rng(2031);
  auto fill = [&](uint8_t *p) {
    for (size_t i = 0; i < kPeriod; i += 8) {
      uint64_t v = rng();
      memcpy(p + i, &v, 8);
    }
  };
  auto wait_long = [&](ibv_cq *cq) {
    ibv_wc wc = {};
    wc.status = IBV_WC_GENERAL_ERR;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    while (std::chrono::steady_clock::now() < end) {
      int n = ibv_poll_cq(cq, 1, &wc);
      if (n == 1) return wc;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ADD_FAILURE() << "no completion within 300 s";
    return wc;
  };
  auto secs = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         t0)
        .count();
  };
  ibv_sge s_sge = {reinterpret_cast<uintptr_t>(src.base),
                   static_cast<uint32_t>(kMsg), smr->lkey};
  ibv_sge d_sge = {reinterpret_cast<uintptr_t>(dst.base),
                   static_cast<uint32_t>(kMsg), dmr->lkey};

  // WRITE: a's window into b's.
  fill(src.base);
  memset(dst.base, 0, kPeriod);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(PostSend(a_, 1, IBV_WR_RDMA_WRITE, {s_sge},
                     reinterpret_cast<uintptr_t>(dst.base), dmr->rkey),
            0);
  ibv_wc wc = wait_long(a_.cq);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  std::cout << "2 GiB WRITE: " << secs(t0) << " s\n";
  EXPECT_EQ(memcmp(src.base, dst.base, kPeriod), 0);

  // READ: b's window back into a's.
  fill(dst.base);
  t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(PostSend(a_, 2, IBV_WR_RDMA_READ, {s_sge},
                     reinterpret_cast<uintptr_t>(dst.base), dmr->rkey),
            0);
  wc = wait_long(a_.cq);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  std::cout << "2 GiB READ: " << secs(t0) << " s\n";
  EXPECT_EQ(memcmp(src.base, dst.base, kPeriod), 0);

  // SEND: byte_len is 2^31.
  fill(src.base);
  ASSERT_EQ(PostRecv(b_, 3, {d_sge}), 0);
  t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(PostSend(a_, 4, IBV_WR_SEND, {s_sge}), 0);
  ibv_wc r = wait_long(b_.cq);
  wc = wait_long(a_.cq);
  ASSERT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  std::cout << "2 GiB SEND: " << secs(t0) << " s\n";
  EXPECT_EQ(r.byte_len, kMsg);
  EXPECT_EQ(memcmp(src.base, dst.base, kPeriod), 0);

  // One byte more is refused.
  ibv_sge two[2] = {s_sge, {s_sge.addr, 1, smr->lkey}};
  ASSERT_EQ(PostSend(a_, 5, IBV_WR_RDMA_WRITE, {two[0], two[1]},
                     reinterpret_cast<uintptr_t>(dst.base), dmr->rkey),
            0);
  wc = Wait(a_.cq);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << ibv_wc_status_str(wc.status);

  EXPECT_EQ(ibv_dereg_mr(smr), 0);
  EXPECT_EQ(ibv_dereg_mr(dmr), 0);
}

// Small SENDs posted in one list (tx_cork, docs/wire.md): the transmitter
// finds the next WQE ready behind each and lets TCP pack them, so fewer TCP
// segments than SENDs go out; each SEND still completes once, in order,
// with its own bytes, and every packet's trdma option names the segment of
// its first byte.
TEST_F(DataPathTest, SmallSendsPostedTogetherShareTcpSegments) {
  ModuleParam on("tx_cork", "1");
  ASSERT_TRUE(on.ok());
  const int n = 64, batches = 8;
  const uint32_t len = 64;
  const long corked0 = Counter("tx_corked"),
             disagree0 = Counter("tcp_option_disagree");
  for (int b = 0; b < batches; b++) {
    ASSERT_NO_FATAL_FAILURE(StageSmallSends(b * n, n, len, 7));
    WrList l = Chain(a_, IBV_WR_SEND, b * n * len, len, n, b * n);
    ibv_send_wr *bad = nullptr;
    ASSERT_EQ(ibv_post_send(a_.qp, l.wr.data(), &bad), 0);
    ASSERT_NO_FATAL_FAILURE(ExpectInOrder(n, b * n, 1, n, b * n, len));
  }
  ASSERT_EQ(0, memcmp(a_.buf.data(), b_.buf.data(), n * batches * len));
  const long corked = Counter("tx_corked") - corked0;
  std::cout << "[          ] " << n * batches << " SENDs of " << len
            << " B in lists of " << n << ": " << corked << " corked"
            << std::endl;
  EXPECT_GE(corked, n * batches / 4);
  EXPECT_EQ(Counter("tcp_option_disagree") - disagree0, 0);
}

// SENDs posted one ibv_post_send() each while earlier ones are outstanding,
// as perftest's ib_send_bw posts (one in 16 signaled; the unsignaled ones'
// ACKs wait for a signaled one, so sends stay outstanding even over
// loopback, where a signaled SEND's whole round trip runs inside its own
// doorbell): with tx_defer a doorbell with sends outstanding leaves the
// sending to the worker, whose tx_active in the SQ ring lets the provider
// post on without doorbells, so fewer system calls than posts reach the
// kernel (sq_doorbells); every SEND still arrives once, in order, with its
// own bytes, and every signaled one completes, in order.
TEST_F(DataPathTest, SendsPostedOneByOneNeedFewerDoorbells) {
  ModuleParam defer("tx_defer", "1");
  ASSERT_TRUE(defer.ok());
  const int n = 128, batches = 8;
  const uint32_t len = 64;
  const long bells0 = Counter("sq_doorbells"),
             deferred0 = Counter("tx_deferred");
  for (int b = 0; b < batches; b++) {
    ASSERT_NO_FATAL_FAILURE(StageSmallSends(b * n, n, len, 13));
    for (int i = 0; i < n; i++) {
      const int k = b * n + i;
      ASSERT_EQ(PostSend(a_, k, IBV_WR_SEND, Sges(a_, k * len, len, 1), 0, 0,
                         0, i % 16 == 15 ? IBV_SEND_SIGNALED : 0),
                0);
    }
    ASSERT_NO_FATAL_FAILURE(
        ExpectInOrder(n / 16, b * n + 15, 16, n, b * n, len));
  }
  ASSERT_EQ(0, memcmp(a_.buf.data(), b_.buf.data(), n * batches * len));
  ibv_wc extra;
  EXPECT_EQ(ibv_poll_cq(a_.cq, 1, &extra), 0);
  EXPECT_EQ(ibv_poll_cq(b_.cq, 1, &extra), 0);
  const long bells = Counter("sq_doorbells") - bells0,
             deferred = Counter("tx_deferred") - deferred0;
  std::cout << "[          ] " << n * batches << " SENDs of " << len
            << " B posted one by one: " << bells << " doorbells, "
            << deferred << " left to the worker" << std::endl;
  EXPECT_GT(deferred, 0);
  EXPECT_LT(bells, n * batches * 3 / 4);
}

// Two threads post SENDs one at a time on one QP, the main thread polls:
// whichever context transmits, a post that skipped its doorbell because a
// transmitter was active (tx_active) is always found by it.  A lost one
// would leave a SEND without its completion; each thread's SENDs arrive
// in its order, each with its own bytes.
TEST_F(DataPathTest, TwoThreadsPostingOnOneQpLoseNoSend) {
  ModuleParam defer("tx_defer", "1");
  ASSERT_TRUE(defer.ok());
  constexpr int kThreads = 2, kPer = 64, kRounds = 16;
  const uint32_t len = 64;
  std::vector<uint8_t> &src = a_.buf;
  for (int r = 0; r < kRounds; r++) {
    for (int i = 0; i < kThreads * kPer; i++)
      ASSERT_EQ(PostRecv(b_, i, Sges(b_, i * len, len, 1)), 0);
    std::vector<int> failed(kThreads, 0);
    std::vector<std::thread> th;
    for (int t = 0; t < kThreads; t++)
      th.emplace_back([&, t] {
        for (int i = 0; i < kPer; i++) {
          const size_t off = (t * kPer + i) * len;
          for (uint32_t j = 0; j < len; j++)
            src[off + j] = static_cast<uint8_t>(r * 31 + t * 7 + i + j);
          src[off] = static_cast<uint8_t>(t);
          src[off + 1] = static_cast<uint8_t>(i);
          ibv_sge sg = {reinterpret_cast<uintptr_t>(src.data() + off), len,
                        a_.mr->lkey};
          ibv_send_wr wr = {}, *bad = nullptr;
          wr.wr_id = (uint64_t)t << 32 | i;
          wr.opcode = IBV_WR_SEND;
          wr.sg_list = &sg;
          wr.num_sge = 1;
          wr.send_flags = IBV_SEND_SIGNALED;
          if (ibv_post_send(a_.qp, &wr, &bad)) failed[t]++;
        }
      });
    for (auto &x : th) x.join();
    for (int t = 0; t < kThreads; t++) ASSERT_EQ(failed[t], 0);
    std::vector<int> next_send(kThreads, 0), next_recv(kThreads, 0);
    for (int k = 0; k < 2 * kThreads * kPer; k++) {
      const bool send = k < kThreads * kPer;
      ibv_wc wc = Wait(send ? a_.cq : b_.cq);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS)
          << "round " << r << ": " << ibv_wc_status_str(wc.status);
      if (send) {
        const int t = wc.wr_id >> 32, i = wc.wr_id & 0xffffffff;
        ASSERT_LT(t, kThreads);
        ASSERT_EQ(i, next_send[t]++) << "round " << r << " thread " << t;
        continue;
      }
      ASSERT_EQ(wc.byte_len, len);
      const uint8_t *got = b_.buf.data() + wc.wr_id * len;
      const int t = got[0], i = got[1];
      ASSERT_LT(t, kThreads);
      ASSERT_EQ(i, next_recv[t]++) << "round " << r << " thread " << t;
      ASSERT_EQ(0, memcmp(got, src.data() + (t * kPer + i) * len, len))
          << "round " << r << " thread " << t << " SEND " << i;
    }
  }
  ibv_wc extra;
  EXPECT_EQ(ibv_poll_cq(a_.cq, 1, &extra), 0);
  EXPECT_EQ(ibv_poll_cq(b_.cq, 1, &extra), 0);
}

// The transmitter's run owns its socket (tx_hold_sock, docs/operations.md);
// what arrives meanwhile (TCP's ACKs, the peer's own segments) waits in the
// socket's backlog, and after a send that finds something waiting the run
// lets go of the socket and takes it again.  Both QPs streaming at once,
// 64 KiB WRITEs one way and SENDs the other, posted as lists: with the
// socket owned for the run and without, every message completes once, in
// order, and lands whole; owned, the runs let go mid-run for what waited
// (tx_backlog_flushes), not owned, never.
TEST_F(DataPathTest, TransmitterOwningItsSocketOrNotMovesTheSameBytes) {
  constexpr int kMsgs = 32, kRounds = 4;
  constexpr uint32_t kLen = 64 << 10;
  constexpr size_t kSendAt = 4 << 20;  // SEND sources, receive targets
  for (const char *hold : {"1", "0"}) {
    ModuleParam p("tx_hold_sock", hold);
    ASSERT_TRUE(p.ok());
    const long flushes0 = Counter("tx_backlog_flushes");
    for (int r = 0; r < kRounds; r++) {
      Fill(a_.buf, 0, kMsgs * kLen, 100 + r);
      Fill(b_.buf, kSendAt, kMsgs * kLen, 200 + r);
      std::fill(b_.buf.begin(), b_.buf.begin() + kMsgs * kLen, 0);
      std::fill(a_.buf.begin() + kSendAt,
                a_.buf.begin() + kSendAt + kMsgs * kLen, 0);
      for (int i = 0; i < kMsgs; i++)
        ASSERT_EQ(PostRecv(a_, i, Sges(a_, kSendAt + i * kLen, kLen, 1)), 0);
      WrList w = Chain(a_, IBV_WR_RDMA_WRITE, 0, kLen, kMsgs);
      for (int i = 0; i < kMsgs; i++) {
        w.wr[i].wr.rdma.remote_addr =
            reinterpret_cast<uintptr_t>(b_.buf.data() + i * kLen);
        w.wr[i].wr.rdma.rkey = b_.mr->rkey;
      }
      WrList snd = Chain(b_, IBV_WR_SEND, kSendAt, kLen, kMsgs);
      ibv_send_wr *bad = nullptr;
      ASSERT_EQ(ibv_post_send(a_.qp, w.wr.data(), &bad), 0);
      ASSERT_EQ(ibv_post_send(b_.qp, snd.wr.data(), &bad), 0);
      int writes = 0, recvs = 0, sends = 0;
      while (writes + recvs < 2 * kMsgs) {
        ibv_wc wc = Wait(a_.cq);
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS)
            << "tx_hold_sock=" << hold << " round " << r << ": "
            << ibv_wc_status_str(wc.status);
        if (wc.opcode == IBV_WC_RECV) {
          ASSERT_EQ(wc.wr_id, static_cast<uint64_t>(recvs++));
          ASSERT_EQ(wc.byte_len, kLen);
        } else {
          ASSERT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
          ASSERT_EQ(wc.wr_id, static_cast<uint64_t>(writes++));
        }
      }
      while (sends < kMsgs) {
        ibv_wc wc = Wait(b_.cq);
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS)
            << "tx_hold_sock=" << hold << " round " << r << ": "
            << ibv_wc_status_str(wc.status);
        ASSERT_EQ(wc.opcode, IBV_WC_SEND);
        ASSERT_EQ(wc.wr_id, static_cast<uint64_t>(sends++));
      }
      ASSERT_EQ(0, memcmp(a_.buf.data(), b_.buf.data(), kMsgs * kLen))
          << "WRITEs, tx_hold_sock=" << hold << " round " << r << ": "
          << Diff(a_.buf.data(), b_.buf.data(), kMsgs * kLen);
      ASSERT_EQ(0, memcmp(b_.buf.data() + kSendAt, a_.buf.data() + kSendAt,
                          kMsgs * kLen))
          << "SENDs, tx_hold_sock=" << hold << " round " << r << ": "
          << Diff(b_.buf.data() + kSendAt, a_.buf.data() + kSendAt,
                  kMsgs * kLen);
    }
    const long flushes = Counter("tx_backlog_flushes") - flushes0;
    std::cout << "[          ] tx_hold_sock=" << hold << ": " << flushes
              << " let-gos mid-run for what waited, " << 2 * kRounds * kMsgs
              << " messages of 64 KiB" << std::endl;
    if (hold[0] == '1')
      EXPECT_GT(flushes, 0);
    else
      EXPECT_EQ(flushes, 0);
  }
  ibv_wc extra;
  EXPECT_EQ(ibv_poll_cq(a_.cq, 1, &extra), 0);
  EXPECT_EQ(ibv_poll_cq(b_.cq, 1, &extra), 0);
}

}  // namespace
