// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// Conformance of the RC data path at scale and in detail: many threads on
// many QPs and CQs, a thousand QPs carrying traffic at once, every
// completion field per opcode as ibv_poll_cq(3) defines it, unsignaled WRs
// retired by signaled ones, and the element every async event names.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <thread>
#include <vector>

#include "lab_util.h"
#include "qp_fixture.h"

using namespace trdma_lab;

namespace {

// FNV-1a over four numbers: per-WR seeds, lengths and immediates.
uint32_t Mix(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  uint32_t h = 2166136261u;
  for (uint32_t v : {a, b, c, d})
    for (int i = 0; i < 4; i++) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 16777619u;
    }
  return h;
}

void FillBytes(uint8_t *p, size_t len, uint32_t seed) {
  std::mt19937 rng(seed);
  for (size_t i = 0; i < len; i++) p[i] = static_cast<uint8_t>(rng());
}

// What one completion must say.  byte_len < 0: not defined, not checked.
struct Want {
  ibv_wc_opcode opcode;
  uint32_t qp_num;
  int64_t byte_len;
  bool imm;
  uint32_t imm_data;  // network order, as in ibv_wc
  uint32_t src_qp;    // receive completions only (0: not checked)
};

// Every completion any thread polls from any CQ, by wr_id, and how many
// arrived per owner (the top 32 bits of the wr_id).  Threads that share a
// CQ may poll each other's completions; the ledger is where they meet.
class Ledger {
 public:
  void Expect(uint64_t id, const Want &w) {
    std::lock_guard<std::mutex> l(mu_);
    EXPECT_TRUE(want_.emplace(id, w).second) << "wr_id reused: " << id;
  }
  void Poll(ibv_cq *cq) {
    ibv_wc wc[32];
    int n = ibv_poll_cq(cq, 32, wc);
    if (n < 0) ADD_FAILURE() << "ibv_poll_cq: " << n;
    if (n <= 0) return;
    std::lock_guard<std::mutex> l(mu_);
    for (int i = 0; i < n; i++) {
      got_[wc[i].wr_id].push_back(wc[i]);
      per_owner_[wc[i].wr_id >> 32]++;
    }
  }
  size_t Count(uint32_t owner) {
    std::lock_guard<std::mutex> l(mu_);
    return per_owner_[owner];
  }
  size_t Total() {
    std::lock_guard<std::mutex> l(mu_);
    size_t n = 0;
    for (auto &g : got_) n += g.second.size();
    return n;
  }
  // Every expected WR completed exactly once, successfully, with the
  // fields it must have; nothing else completed.
  void Check() {
    std::lock_guard<std::mutex> l(mu_);
    size_t bad = 0;
    for (auto &[id, w] : want_) {
      auto it = got_.find(id);
      size_t n = it == got_.end() ? 0 : it->second.size();
      if (n != 1) {
        if (bad++ < 20) ADD_FAILURE() << "wr_id " << id << " completed " << n
                                      << " times";
        continue;
      }
      const ibv_wc &wc = it->second[0];
      bool ok = wc.status == IBV_WC_SUCCESS && wc.opcode == w.opcode &&
                wc.qp_num == w.qp_num &&
                (w.byte_len < 0 || wc.byte_len == w.byte_len) &&
                !!(wc.wc_flags & IBV_WC_WITH_IMM) == w.imm &&
                (!w.imm || wc.imm_data == w.imm_data) &&
                (!w.src_qp || wc.src_qp == w.src_qp);
      if (!ok && bad++ < 20)
        ADD_FAILURE() << "wr_id " << id << ": status "
                      << ibv_wc_status_str(wc.status) << " opcode "
                      << wc.opcode << "/" << w.opcode << " qp " << wc.qp_num
                      << "/" << w.qp_num << " byte_len " << wc.byte_len << "/"
                      << w.byte_len << " flags " << wc.wc_flags << " imm "
                      << wc.imm_data << "/" << w.imm_data << " src_qp "
                      << wc.src_qp << "/" << w.src_qp;
    }
    for (auto &g : got_)
      if (!want_.count(g.first) && bad++ < 20)
        ADD_FAILURE() << "unexpected completion, wr_id " << g.first;
    EXPECT_EQ(bad, 0u);
  }

 private:
  std::mutex mu_;
  std::map<uint64_t, Want> want_;
  std::map<uint64_t, std::vector<ibv_wc>> got_;
  std::map<uint64_t, size_t> per_owner_;
};

// An async event as it arrived, with the element it named.
struct Event {
  ibv_event_type type;
  void *element;  // the QP, CQ or SRQ; null for port events
  int port;       // port events only
  uint32_t qpn;   // QP events only
};

class ConformanceTest : public DataPathTest {
 protected:
  // A QP of pd_ with its send and receive completions on the given CQs.
  ibv_qp *QpOn(ibv_cq *scq, ibv_cq *rcq, ibv_qp_cap cap,
               ibv_srq *srq = nullptr) {
    ibv_qp_init_attr ia = {};
    ia.send_cq = scq;
    ia.recv_cq = rcq;
    ia.srq = srq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap = cap;
    return ibv_create_qp(pd_, &ia);
  }

  // The next async event of `type` within ms, or none.  Every event seen
  // on the way is logged in events_ and acknowledged at once, so that
  // destroying its object never waits for the test.
  std::optional<Event> NextEvent(ibv_event_type type, int ms) {
    const auto end = Clock::now() + std::chrono::milliseconds(ms);
    int fl = fcntl(ctx_->async_fd, F_GETFL);
    fcntl(ctx_->async_fd, F_SETFL, fl | O_NONBLOCK);
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      end - Clock::now())
                      .count();
      if (left <= 0) return std::nullopt;
      pollfd pfd = {ctx_->async_fd, POLLIN, 0};
      if (poll(&pfd, 1, static_cast<int>(left)) <= 0) continue;
      ibv_async_event ev;
      if (ibv_get_async_event(ctx_.get(), &ev)) continue;
      Event e = {ev.event_type, nullptr, 0, 0};
      switch (ev.event_type) {
        case IBV_EVENT_CQ_ERR:
          e.element = ev.element.cq;
          break;
        case IBV_EVENT_SRQ_ERR:
        case IBV_EVENT_SRQ_LIMIT_REACHED:
          e.element = ev.element.srq;
          break;
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_PKEY_CHANGE:
        case IBV_EVENT_GID_CHANGE:
        case IBV_EVENT_SM_CHANGE:
        case IBV_EVENT_CLIENT_REREGISTER:
          e.port = ev.element.port_num;
          break;
        case IBV_EVENT_DEVICE_FATAL:
          break;
        default:  // the QP events
          e.element = ev.element.qp;
          e.qpn = ev.element.qp->qp_num;
          break;
      }
      ibv_ack_async_event(&ev);
      events_.push_back(e);
      if (e.type == type) return e;
    }
  }

  // The events of `type` logged so far naming `element`.
  int Logged(ibv_event_type type, void *element) {
    int n = 0;
    for (const Event &e : events_)
      n += e.type == type && e.element == element;
    return n;
  }

  // Polls cq until it stayed empty for 100 ms.
  void Drain(ibv_cq *cq) {
    ibv_wc wc[16];
    for (auto idle = Clock::now(); Ms(idle) < 100;)
      if (ibv_poll_cq(cq, 16, wc) > 0) idle = Clock::now();
  }

  // A connected pair on a_'s and b_'s CQs.
  std::pair<ibv_qp *, ibv_qp *> NewPair(ibv_qp_cap cap = {8, 8, 1, 1, 0}) {
    ibv_qp *x = NewQp(a_.cq, cap), *y = NewQp(b_.cq, cap);
    EXPECT_TRUE(x && y);
    if (!x || !y) return {x, y};
    EXPECT_EQ(Connect(x, y), 0);
    EXPECT_EQ(Connect(y, x), 0);
    return {x, y};
  }

  // ibv_post_recv / ibv_post_send of one WR on any QP.
  static int PostRecvOn(ibv_qp *qp, uint64_t id, ibv_sge sge) {
    ibv_recv_wr wr = {}, *bad;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_recv(qp, &wr, &bad);
  }
  static int PostSendOn(ibv_qp *qp, uint64_t id, ibv_wr_opcode op,
                        ibv_sge sge, uint64_t raddr = 0, uint32_t rkey = 0) {
    ibv_send_wr wr = {}, *bad;
    wr.wr_id = id;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return ibv_post_send(qp, &wr, &bad);
  }

  long QpCount() {
    std::smatch m;
    std::string out = ShOut("rdma resource show " + DevName());
    return std::regex_search(out, m, std::regex(" qp (\\d+)"))
               ? std::stol(m[1])
               : -1;
  }

  std::vector<Event> events_;
};

// --- many threads, many QPs -----------------------------------------------

// 8 threads each create and connect 8 QP pairs of their own (concurrently:
// the control path is exercised too), then run rounds in which every QP of
// every pair posts, as one chained list, a SEND, a WRITE, a WRITE_WITH_IMM
// and a READ of varied sizes (0 to 32 KiB) with a byte pattern of its own,
// both directions at once.  Threads 0-1 and 2-3 share one CQ; QPs of odd
// pairs take their receive completions on a second, thread-private CQ.
// Every byte must land (and nothing past the end), every WR complete once
// with IBV_WC_SUCCESS and its opcode, QP, length and immediate.
TEST_F(ConformanceTest, ManyThreadsManyQps) {
  constexpr int kThreads = 8, kPairs = 8, kRounds = 6;
  constexpr size_t kMax = 32 << 10;
  static const uint32_t kSizes[] = {0,    1,    3,    64,    1000,
                                    4095, 4096, 4097, 12288, 32768};
  // wr_id: thread << 32 | pair << 24 | round << 16 | kind; kinds 0-3 and
  // 4-7 the requests of sides 0 and 1, 8-9 and 10-11 their receives.
  auto id = [](uint64_t t, uint64_t p, uint64_t r, uint64_t k) {
    return t << 32 | p << 24 | r << 16 | k;
  };
  const auto t0 = Clock::now();

  std::vector<ibv_cq *> shared(2), main_cq(kThreads), recv_cq(kThreads);
  for (auto &cq : shared) {
    cq = ibv_create_cq(ctx_.get(), 1024, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
  }
  for (int t = 0; t < kThreads; t++) {
    if (t < 4) {
      main_cq[t] = shared[t / 2];
    } else {
      main_cq[t] = ibv_create_cq(ctx_.get(), 512, nullptr, nullptr, 0);
      ASSERT_NE(main_cq[t], nullptr);
    }
    recv_cq[t] = ibv_create_cq(ctx_.get(), 256, nullptr, nullptr, 0);
    ASSERT_NE(recv_cq[t], nullptr);
  }
  // One region per thread: per pair and side, source slots 0-3 and
  // destination slots 4-7 of kMax bytes.
  std::vector<std::vector<uint8_t>> mem(kThreads);
  std::vector<ibv_mr *> mr(kThreads);
  for (int t = 0; t < kThreads; t++) {
    mem[t].assign(kPairs * 2 * 8 * kMax, 0);
    mr[t] = ibv_reg_mr(pd_, mem[t].data(), mem[t].size(),
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(mr[t], nullptr);
  }
  std::vector<std::array<std::array<ibv_qp *, 2>, kPairs>> qps(kThreads);
  for (auto &tq : qps)
    for (auto &pq : tq) pq = {nullptr, nullptr};
  Ledger ledger;

  auto worker = [&](int t) {
    auto slot = [&](int p, int s, int k) {
      return mem[t].data() + ((p * 2 + s) * 8 + k) * kMax;
    };
    auto sge = [&](uint8_t *at, uint32_t len) {
      return ibv_sge{reinterpret_cast<uintptr_t>(at), len, mr[t]->lkey};
    };
    auto &q = qps[t];
    for (int p = 0; p < kPairs; p++)
      for (int s = 0; s < 2; s++) {
        q[p][s] = QpOn(main_cq[t], p % 2 ? recv_cq[t] : main_cq[t],
                       {16, 8, 1, 1, 0});
        if (!q[p][s]) {
          ADD_FAILURE() << "thread " << t << ": create_qp " << strerror(errno);
          return;
        }
      }
    for (int p = 0; p < kPairs; p++)
      if (Connect(q[p][0], q[p][1]) || Connect(q[p][1], q[p][0])) {
        ADD_FAILURE() << "thread " << t << ": connect pair " << p;
        return;
      }

    for (int r = 0; r < kRounds; r++) {
      const size_t before = ledger.Count(t);
      uint32_t len[kPairs][2][4];
      for (int p = 0; p < kPairs; p++)
        for (int s = 0; s < 2; s++)
          for (int k = 0; k < 4; k++) {
            len[p][s][k] = kSizes[Mix(t, p, r, s * 4 + k) % 10];
            FillBytes(slot(p, s, k), len[p][s][k] + (len[p][s][k] < kMax),
                      Mix(t, p, r, 100 + s * 4 + k));
          }
      // Destinations cleared whole: the peer's lengths decide slots 4-6.
      for (int p = 0; p < kPairs; p++)
        for (int s = 0; s < 2; s++) memset(slot(p, s, 4), 0, 4 * kMax);
      // Receives first: one for the SEND (into slot 4), one without SGEs
      // for the WRITE_WITH_IMM.
      for (int p = 0; p < kPairs; p++)
        for (int s = 0; s < 2; s++) {
          const int o = 1 - s;
          const uint32_t imm = htonl(Mix(t, p, r, 200 + o));
          ledger.Expect(id(t, p, r, 8 + 2 * s),
                        {IBV_WC_RECV, q[p][s]->qp_num, len[p][o][0], false, 0,
                         q[p][o]->qp_num});
          ledger.Expect(id(t, p, r, 9 + 2 * s),
                        {IBV_WC_RECV_RDMA_WITH_IMM, q[p][s]->qp_num,
                         len[p][o][2], true, imm, q[p][o]->qp_num});
          ibv_sge rs = sge(slot(p, s, 4), kMax);
          ibv_recv_wr rw[2] = {}, *rbad;
          rw[0].wr_id = id(t, p, r, 8 + 2 * s);
          rw[0].sg_list = &rs;
          rw[0].num_sge = 1;
          rw[0].next = &rw[1];
          rw[1].wr_id = id(t, p, r, 9 + 2 * s);
          if (ibv_post_recv(q[p][s], rw, &rbad)) {
            ADD_FAILURE() << "thread " << t << ": post_recv";
            return;
          }
        }
      for (int p = 0; p < kPairs; p++)
        for (int s = 0; s < 2; s++) {
          const int o = 1 - s;
          static const ibv_wr_opcode ops[4] = {
              IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM,
              IBV_WR_RDMA_READ};
          static const ibv_wc_opcode wcs[4] = {
              IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_WRITE,
              IBV_WC_RDMA_READ};
          ibv_sge sg[4];
          ibv_send_wr wr[4] = {}, *bad;
          for (int k = 0; k < 4; k++) {
            // READ gathers into its own slot 7 from the peer's slot 3;
            // the rest go from slot k to the peer's slot 4 + k.
            sg[k] = sge(k == 3 ? slot(p, s, 7) : slot(p, s, k), len[p][s][k]);
            wr[k].wr_id = id(t, p, r, 4 * s + k);
            wr[k].opcode = ops[k];
            wr[k].sg_list = &sg[k];
            wr[k].num_sge = 1;
            wr[k].send_flags = IBV_SEND_SIGNALED;
            wr[k].next = k < 3 ? &wr[k + 1] : nullptr;
            wr[k].wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(
                k == 3 ? slot(p, o, 3) : slot(p, o, 4 + k));
            wr[k].wr.rdma.rkey = mr[t]->rkey;
            ledger.Expect(wr[k].wr_id,
                          {wcs[k], q[p][s]->qp_num, -1, false, 0, 0});
          }
          wr[2].imm_data = htonl(Mix(t, p, r, 200 + s));
          if (ibv_post_send(q[p][s], wr, &bad)) {
            ADD_FAILURE() << "thread " << t << ": post_send";
            return;
          }
        }
      const size_t want = before + kPairs * 12;
      const auto end = Clock::now() + std::chrono::seconds(30);
      while (ledger.Count(t) < want && Clock::now() < end) {
        ledger.Poll(main_cq[t]);
        ledger.Poll(recv_cq[t]);
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      if (ledger.Count(t) != want) {
        ADD_FAILURE() << "thread " << t << " round " << r << ": "
                      << ledger.Count(t) - before << " of " << kPairs * 12
                      << " completions";
        return;
      }
      // The bytes, and not one past the end.
      int wrong = 0;
      for (int p = 0; p < kPairs; p++)
        for (int s = 0; s < 2; s++) {
          const int o = 1 - s;
          for (int k = 0; k < 4; k++) {
            const uint32_t n = len[p][s][k];
            const uint8_t *dst = k == 3 ? slot(p, s, 7) : slot(p, o, 4 + k);
            const uint8_t *src = k == 3 ? slot(p, o, 3) : slot(p, s, k);
            if (memcmp(dst, src, n) || (n < kMax && dst[n] != 0)) {
              if (wrong++ < 5)
                ADD_FAILURE() << "thread " << t << " round " << r << " pair "
                              << p << " side " << s << " op " << k << " len "
                              << n << ": wrong bytes";
            }
          }
        }
      if (wrong) return;
    }
  };
  const long fatal_before = Counter("qp_fatal"),
             connect_failures_before = Counter("connect_failures");
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) threads.emplace_back(worker, t);
  for (auto &th : threads) th.join();
  // Nothing failed on the way: no async event, no failed connection.
  NextEvent(IBV_EVENT_DEVICE_FATAL, 100);
  for (const Event &e : events_)
    ADD_FAILURE() << "async event " << ibv_event_type_str(e.type)
                  << " for QP " << e.qpn;
  EXPECT_EQ(Counter("qp_fatal"), fatal_before);
  EXPECT_EQ(Counter("connect_failures"), connect_failures_before);
  // Late or duplicate completions would show here.
  for (int i = 0; i < 3; i++) {
    for (auto *cq : shared) ledger.Poll(cq);
    for (int t = 4; t < kThreads; t++) ledger.Poll(main_cq[t]);
    for (auto *cq : recv_cq) ledger.Poll(cq);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(ledger.Total(),
            static_cast<size_t>(kThreads * kPairs * kRounds * 12));
  ledger.Check();
  std::cout << kThreads * kPairs * 2 << " QPs, " << ledger.Total()
            << " completions in " << Ms(t0) << " ms\n";

  for (auto &tq : qps)
    for (auto &pq : tq)
      for (ibv_qp *qp : pq)
        if (qp) {
          EXPECT_EQ(ibv_destroy_qp(qp), 0);
        }
  for (ibv_mr *m : mr) EXPECT_EQ(ibv_dereg_mr(m), 0);
  for (int t = 4; t < kThreads; t++) EXPECT_EQ(ibv_destroy_cq(main_cq[t]), 0);
  for (auto *cq : shared) EXPECT_EQ(ibv_destroy_cq(cq), 0);
  for (auto *cq : recv_cq) EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

// --- a thousand QPs -------------------------------------------------------

// 512 more pairs (1,024 QPs, on 16 CQs of 256 entries, queues 4 deep) are
// created and connected, and each QP SENDs to and WRITEs into its peer at
// once, a pattern and a length (1 to 1,024 bytes) of its own.  Every byte
// and every completion is checked, then all are destroyed and the device
// counts as many QPs as before.
TEST_F(ConformanceTest, ThousandQpsCarryTraffic) {
  constexpr int kPairs = 512, kCqs = 16;
  constexpr size_t kSlot = 1024;
  const long before = QpCount();
  ASSERT_GE(before, 2);
  const auto t0 = Clock::now();
  std::vector<ibv_cq *> cqs(kCqs);
  for (auto &cq : cqs) {
    cq = ibv_create_cq(ctx_.get(), 256, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
  }
  std::vector<std::array<ibv_qp *, 2>> qp(kPairs, {nullptr, nullptr});
  auto destroy_all = [&] {
    for (auto &pq : qp)
      for (ibv_qp *&x : pq)
        if (x) {
          EXPECT_EQ(ibv_destroy_qp(x), 0);
          x = nullptr;
        }
    for (ibv_cq *&cq : cqs)
      if (cq) {
        EXPECT_EQ(ibv_destroy_cq(cq), 0);
        cq = nullptr;
      }
  };
  // Also when an assertion ends the test early.
  struct AtExit {
    std::function<void()> f;
    ~AtExit() { f(); }
  } at_exit{destroy_all};
  for (int i = 0; i < kPairs; i++)
    for (int s = 0; s < 2; s++) {
      // Each CQ serves 64 QPs of both sides, 3 completions each.
      qp[i][s] = NewQp(cqs[(2 * i + s) % kCqs], {4, 4, 1, 1, 0});
      ASSERT_NE(qp[i][s], nullptr) << i << ": " << strerror(errno);
    }
  for (int i = 0; i < kPairs; i++) {
    ASSERT_EQ(Connect(qp[i][0], qp[i][1]), 0) << i;
    ASSERT_EQ(Connect(qp[i][1], qp[i][0]), 0) << i;
  }
  const long created_ms = Ms(t0);
  EXPECT_EQ(QpCount(), before + 2 * kPairs);

  // Per pair and side: slot 0 the SEND's source, 1 the WRITE's source,
  // 2 the SEND's destination, 3 the WRITE's destination.
  Side *side[2] = {&a_, &b_};
  auto off = [&](int i, int k) { return (i * 4 + k) * kSlot; };
  auto at = [&](int i, int s, int k) { return side[s]->buf.data() + off(i, k); };
  auto len = [](int i, int s, int k) {
    return 1 + Mix(i, s, k, 7) % static_cast<uint32_t>(kSlot);
  };
  auto id = [](uint64_t i, uint64_t s, uint64_t k) { return i << 8 | s << 4 | k; };
  for (int i = 0; i < kPairs; i++)
    for (int s = 0; s < 2; s++) {
      FillBytes(at(i, s, 0), kSlot, Mix(i, s, 0, 1));
      FillBytes(at(i, s, 1), kSlot, Mix(i, s, 1, 1));
      memset(at(i, s, 2), 0, 2 * kSlot);
    }
  const auto t1 = Clock::now();
  auto sge = [&](int i, int s, int k, uint32_t l) {
    return ibv_sge{reinterpret_cast<uintptr_t>(at(i, s, k)), l,
                   side[s]->mr->lkey};
  };
  for (int i = 0; i < kPairs; i++)
    for (int s = 0; s < 2; s++)
      ASSERT_EQ(PostRecvOn(qp[i][s], id(i, s, 2), sge(i, s, 2, kSlot)), 0);
  for (int i = 0; i < kPairs; i++)
    for (int s = 0; s < 2; s++) {
      const int o = 1 - s;
      ASSERT_EQ(PostSendOn(qp[i][s], id(i, s, 0), IBV_WR_SEND,
                           sge(i, s, 0, len(i, s, 0))),
                0);
      ASSERT_EQ(PostSendOn(qp[i][s], id(i, s, 1), IBV_WR_RDMA_WRITE,
                           sge(i, s, 1, len(i, s, 1)),
                           reinterpret_cast<uintptr_t>(at(i, o, 3)),
                           side[o]->mr->rkey),
                0);
    }
  std::map<uint64_t, std::vector<ibv_wc>> got;
  size_t n = 0;
  for (auto end = Clock::now() + std::chrono::seconds(90);
       n < kPairs * 6u && Clock::now() < end;) {
    int k = 0;
    for (ibv_cq *cq : cqs) {
      ibv_wc wc[32];
      k = ibv_poll_cq(cq, 32, wc);
      ASSERT_GE(k, 0);
      for (int j = 0; j < k; j++) got[wc[j].wr_id].push_back(wc[j]);
      n += k;
    }
    if (!k) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const long traffic_ms = Ms(t1);
  EXPECT_EQ(n, kPairs * 6u);
  int bad = 0;
  for (int i = 0; i < kPairs && bad < 10; i++)
    for (int s = 0; s < 2; s++) {
      const int o = 1 - s;
      for (int k = 0; k < 3; k++) {
        auto it = got.find(id(i, s, k));
        if (it == got.end() || it->second.size() != 1) {
          ADD_FAILURE() << "pair " << i << " side " << s << " kind " << k
                        << ": " << (it == got.end() ? 0 : it->second.size())
                        << " completions";
          bad++;
          continue;
        }
        const ibv_wc &wc = it->second[0];
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        EXPECT_EQ(wc.qp_num, qp[i][s]->qp_num);
        static const ibv_wc_opcode want[3] = {IBV_WC_SEND, IBV_WC_RDMA_WRITE,
                                              IBV_WC_RECV};
        EXPECT_EQ(wc.opcode, want[k]);
        if (k == 2) {
          EXPECT_EQ(wc.byte_len, len(i, o, 0));
          EXPECT_EQ(wc.src_qp, qp[i][o]->qp_num);
        }
      }
      // The SEND landed in the peer's slot 2, the WRITE in its slot 3.
      for (int k = 0; k < 2; k++) {
        const uint32_t l = len(i, s, k);
        const uint8_t *dst = at(i, o, 2 + k);
        if (memcmp(dst, at(i, s, k), l) || (l < kSlot && dst[l])) {
          ADD_FAILURE() << "pair " << i << " side " << s << " op " << k
                        << ": wrong bytes";
          bad++;
        }
      }
    }
  EXPECT_EQ(bad, 0);
  got.clear();

  const auto t2 = Clock::now();
  destroy_all();
  std::cout << 2 * kPairs << " QPs: created and connected in " << created_ms
            << " ms, traffic " << traffic_ms << " ms, destroyed in " << Ms(t2)
            << " ms\n";
  EXPECT_EQ(QpCount(), before);
}

// --- completion fields ----------------------------------------------------

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

// A QP may stay in RTR for good (it only receives) while its peer moves
// to RTS and sends, in either role; the connection must come up although
// the accepting side can check the PSN only once one of the two is in RTS
// (docs/wire.md).  Each case waits in RTR longer than the accepting side
// holds a connection it cannot check yet (1 s), so the connecting side has
// been asked to dial again; accept_timeout 2 bounds how long a connecting
// QP left in RTR waits before it does.
TEST_F(ConformanceTest, OneSideStaysInRtr) {
  const std::string param = "/sys/module/trdma/parameters/accept_timeout";
  const std::string old = ReadFile(param);
  ASSERT_EQ(Sh("echo 2 > " + param), 0);
  for (bool sender_connects : {false, true}) {
    SCOPED_TRACE(sender_connects ? "the connecting QP sends"
                                 : "the accepting QP sends");
    ibv_qp *x = NewQp(a_.cq), *y = NewQp(b_.cq);
    ASSERT_TRUE(x && y);
    ASSERT_LT(x->qp_num, y->qp_num);  // same GID: x connects, y accepts
    ASSERT_EQ(ToRtr(x, y), 0);
    ASSERT_EQ(ToRtr(y, x), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ibv_qp *from = sender_connects ? x : y, *to = sender_connects ? y : x;
    ibv_cq *from_cq = sender_connects ? a_.cq : b_.cq;
    ibv_cq *to_cq = sender_connects ? b_.cq : a_.cq;
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(ToRts(from), 0);
    ExpectSendArrives(from, from_cq, to, to_cq);
    double took = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - t0).count();
    std::cout << "  sent from RTS to RTR in " << took << " s" << std::endl;
    ibv_qp_attr qa;
    ibv_qp_init_attr qi;
    ASSERT_EQ(ibv_query_qp(to, &qa, IBV_QP_STATE, &qi), 0);
    EXPECT_EQ(qa.qp_state, IBV_QPS_RTR);
    ibv_destroy_qp(x);
    ibv_destroy_qp(y);
  }
  EXPECT_EQ(Sh("echo " + old + " > " + param), 0);
}

// The common order of a receiver that stays in RTR (perftest's bandwidth
// servers): the connecting QP moves to RTR and on to RTS soon after.  It
// waits for its RTS before it dials, for up to TRDMA_DIAL_RTR_WAIT (50
// ms), so its hello carries the sq_psn that the accepting QP can check in
// RTR: one TCP connection per QP pair.  Dialing from RTR at once instead,
// its hello could not be checked, was held a second and refused, and it
// dialed again (in 7 of 14 ib_write_bw runs, docs/performance.md): two
// connections, and a second lost.  Here 15 ms pass between RTR and RTS; a
// pair whose two calls took 40 ms or more (a slow moment of the guest)
// proves nothing and is not counted.  (That RTS dials at once rather than
// at the end of the wait is not timed here: one connection either way.)
// What is counted: the connections trdma's listener accepted (the guest's
// PassiveOpens) and refused (connections_refused), not the guest's
// ActiveOpens, which once counted one more than the listener accepted in
// a pair that went right (printed, cause not known).
TEST_F(ConformanceTest, ConnectingQpGoingOnToRtsDialsOnce) {
  int timely = 0;
  for (int i = 0; i < 5; i++) {
    ibv_qp *x = NewQp(a_.cq), *y = NewQp(b_.cq);
    ASSERT_TRUE(x && y);
    ASSERT_LT(x->qp_num, y->qp_num);  // same GID: x connects, y accepts
    ASSERT_EQ(ToRtr(y, x), 0);        // y stays in RTR
    const long active0 = TcpSnmp("ActiveOpens"),
               passive0 = TcpSnmp("PassiveOpens"),
               refused0 = Counter("connections_refused");
    ASSERT_GE(active0, 0);
    ASSERT_GE(refused0, 0);
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(ToRtr(x, y), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    ASSERT_EQ(ToRts(x), 0);
    const bool in_time =
        std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(40);
    ExpectSendArrives(x, a_.cq, y, b_.cq);
    if (in_time) {
      timely++;
      EXPECT_EQ(TcpSnmp("PassiveOpens") - passive0, 1) << "pair " << i;
      EXPECT_EQ(Counter("connections_refused"), refused0) << "pair " << i;
      if (TcpSnmp("ActiveOpens") - active0 != 1)
        std::cout << "  pair " << i << ": "
                  << TcpSnmp("ActiveOpens") - active0 << " active opens"
                  << std::endl;
    }
    ibv_destroy_qp(x);
    ibv_destroy_qp(y);
  }
  std::cout << "  " << timely << " of 5 pairs in RTS within 40 ms of RTR"
            << std::endl;
  if (!timely) GTEST_SKIP() << "no pair reached RTS within 40 ms of RTR";
}

// A QP in RTR whose connection attempt fails (here: no such peer QP) is
// not failed: nothing is lost yet, RoCE would not notice, and an
// application accepting through rdma_cm moves it to RTS next (librdmacm's
// rdma_accept), which must succeed.  Only in RTS does the failure count:
// the QP dials again at once and, refused again, goes to ERR with
// IBV_EVENT_QP_FATAL.
TEST_F(ConformanceTest, DialFailureInRtrWaitsForRts) {
  ibv_qp *x = NewQp(a_.cq);
  ASSERT_TRUE(x);
  ibv_qp fake = *x;
  fake.qp_num = 0xfffff0;  // nobody: x (the smaller QPN) connects to it
  const long failures = Counter("connect_failures");
  ASSERT_EQ(ToRtr(x, &fake), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ibv_qp_attr qa;
  ibv_qp_init_attr qi;
  ASSERT_EQ(ibv_query_qp(x, &qa, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(Counter("connect_failures"), failures + 1);
  EXPECT_FALSE(NextEvent(IBV_EVENT_QP_FATAL, 100));

  ASSERT_EQ(ToRts(x), 0);
  auto e = NextEvent(IBV_EVENT_QP_FATAL, 5000);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->element, x);
  ASSERT_EQ(ibv_query_qp(x, &qa, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
  EXPECT_EQ(Counter("connect_failures"), failures + 2);
  ASSERT_EQ(ibv_destroy_qp(x), 0);
}

// A reset ends the QP's dial on its way.  x dials from RTS towards y, which
// stays in RESET, so the accepting side holds x's connection until
// accept_timeout (4 s here) and then refuses it.  x is reset and moved to
// INIT meanwhile: that refusal belongs to x's ended life, and must neither
// fail x (INIT to ERR, IBV_EVENT_QP_FATAL) nor count as a connect failure.
// Then x2, in the same spot, goes on at once to RTS towards another peer:
// the run its new life queued must not wait for the old dial's answer
// (the reset shut that dial down: connected within 2.5 s, not after 4),
// nor be failed by it.
TEST_F(ConformanceTest, ResetEndsTheDialOnItsWay) {
  ModuleParam accept_timeout("accept_timeout", "4");
  ASSERT_TRUE(accept_timeout.ok());
  auto to_reset = [](ibv_qp *qp) {
    ibv_qp_attr a = {};
    a.qp_state = IBV_QPS_RESET;
    return !ibv_modify_qp(qp, &a, IBV_QP_STATE);
  };
  auto to_init = [&](ibv_qp *qp) {
    if (!to_reset(qp)) return false;
    ibv_qp_attr a = {};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    return !ibv_modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                              IBV_QP_ACCESS_FLAGS);
  };
  ibv_qp *x = NewQp(a_.cq), *y = NewQp(b_.cq);
  ASSERT_TRUE(x && y);
  ASSERT_LT(x->qp_num, y->qp_num);  // same GID: x connects, y accepts
  const long failures = Counter("connect_failures");
  ASSERT_EQ(Connect(x, y), 0);  // RTS: x dials at once
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(to_init(x));
  std::this_thread::sleep_for(std::chrono::milliseconds(4500));
  ibv_qp_attr qa;
  ibv_qp_init_attr qi;
  ASSERT_EQ(ibv_query_qp(x, &qa, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_INIT);
  EXPECT_FALSE(NextEvent(IBV_EVENT_QP_FATAL, 100));
  EXPECT_EQ(Counter("connect_failures"), failures);
  // Its next life connects.
  ASSERT_TRUE(to_reset(x));
  ASSERT_EQ(ToRtr(y, x), 0);
  ASSERT_EQ(Connect(x, y), 0);
  ASSERT_EQ(ToRts(y), 0);
  ExpectSendArrives(x, a_.cq, y, b_.cq);
  ExpectSendArrives(y, b_.cq, x, a_.cq);

  ibv_qp *x2 = NewQp(a_.cq), *y2 = NewQp(b_.cq), *z = NewQp(b_.cq);
  ASSERT_TRUE(x2 && y2 && z);
  ASSERT_LT(x2->qp_num, y2->qp_num);
  ASSERT_LT(x2->qp_num, z->qp_num);
  ASSERT_EQ(Connect(x2, y2), 0);  // y2 stays in RESET: the dial waits
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(to_reset(x2));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(ToRtr(z, x2), 0);
  ASSERT_EQ(ToRts(z), 0);
  ASSERT_EQ(Connect(x2, z), 0);
  ExpectSendArrives(x2, a_.cq, z, b_.cq);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  std::cout << "  the next life connected in " << took << " s" << std::endl;
  EXPECT_LT(took, 2.5);
  ASSERT_EQ(ibv_query_qp(x2, &qa, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_RTS);
  EXPECT_FALSE(NextEvent(IBV_EVENT_QP_FATAL, 100));
  EXPECT_EQ(Counter("connect_failures"), failures);
  for (ibv_qp *q : {x, y, x2, y2, z}) ibv_destroy_qp(q);
}

// For every opcode, the requester's completion (status, opcode, wr_id,
// qp_num) and, when the opcode consumes a receive, the responder's (status,
// opcode, wr_id, qp_num, src_qp = the peer's QPN, byte_len, imm_data in
// network order with IBV_WC_WITH_IMM exactly when there is one, and no
// IBV_WC_GRH on RC); opcodes that consume no receive complete nothing at the
// responder.  ibv_poll_cq(3) defines byte_len for receive completions
// only; the requester's is checked where rxe and mlx5 set it (READ,
// atomics).  The zero-length cases use a receive without SGEs, and the RDMA ones remote address 0 and
// rkey 0 (IBA C9-88: a zero-length RDMA checks neither).
TEST_F(ConformanceTest, CompletionFieldsPerOpcode) {
  struct Case {
    const char *name;
    ibv_wr_opcode op;
    uint32_t len;
    int nsge;        // SGEs of the request
    bool imm;
    int flags;       // besides IBV_SEND_SIGNALED
    bool zero_rdma;  // remote address 0, rkey 0
    ibv_wc_opcode req_op;
    bool recv;       // consumes a receive
    int recv_sges;   // SGEs of that receive
  };
  const Case cases[] = {
      {"SEND", IBV_WR_SEND, 3000, 2, false, 0, false, IBV_WC_SEND, true, 2},
      {"SEND inline", IBV_WR_SEND, 100, 1, false, IBV_SEND_INLINE, false,
       IBV_WC_SEND, true, 1},
      {"SEND 0 bytes into a receive without SGEs", IBV_WR_SEND, 0, 0, false,
       0, false, IBV_WC_SEND, true, 0},
      {"SEND_WITH_IMM", IBV_WR_SEND_WITH_IMM, 777, 1, true, 0, false,
       IBV_WC_SEND, true, 1},
      {"SEND_WITH_IMM 0 bytes", IBV_WR_SEND_WITH_IMM, 0, 0, true, 0, false,
       IBV_WC_SEND, true, 0},
      {"RDMA_WRITE", IBV_WR_RDMA_WRITE, 5000, 3, false, 0, false,
       IBV_WC_RDMA_WRITE, false, 0},
      {"RDMA_WRITE 0 bytes, addr 0 rkey 0", IBV_WR_RDMA_WRITE, 0, 0, false, 0,
       true, IBV_WC_RDMA_WRITE, false, 0},
      {"RDMA_WRITE_WITH_IMM", IBV_WR_RDMA_WRITE_WITH_IMM, 4097, 2, true, 0,
       false, IBV_WC_RDMA_WRITE, true, 1},
      {"RDMA_WRITE_WITH_IMM 0 bytes, addr 0 rkey 0",
       IBV_WR_RDMA_WRITE_WITH_IMM, 0, 0, true, 0, true, IBV_WC_RDMA_WRITE,
       true, 0},
      {"RDMA_READ", IBV_WR_RDMA_READ, 6000, 2, false, 0, false,
       IBV_WC_RDMA_READ, false, 0},
      {"RDMA_READ 0 bytes, addr 0 rkey 0", IBV_WR_RDMA_READ, 0, 0, false, 0,
       true, IBV_WC_RDMA_READ, false, 0},
      {"ATOMIC_CMP_AND_SWP", IBV_WR_ATOMIC_CMP_AND_SWP, 8, 1, false, 0, false,
       IBV_WC_COMP_SWAP, false, 0},
      {"ATOMIC_FETCH_AND_ADD", IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 1, false, 0,
       false, IBV_WC_FETCH_ADD, false, 0},
  };
  const size_t kSrc = 0, kRecv = 1 << 20, kRemote = 2 << 20, kAtomic = 3 << 20,
               kRead = 4 << 20;
  const uint64_t kOld = 0x1122334455667788ull;
  int c = 0;
  for (const Case &k : cases) {
    c++;
    SCOPED_TRACE(k.name);
    const uint32_t imm = 0x01020304u * c;  // four distinct bytes
    // Fresh patterns, destinations set to 0x5a.
    Fill(a_.buf, kSrc, 8192, 10 * c);
    Fill(b_.buf, kRemote, 8192, 10 * c + 1);
    memset(b_.buf.data() + kRecv, 0x5a, 8192);
    memset(a_.buf.data() + kRead, 0x5a, 8192);
    std::vector<uint8_t> remote_before(b_.buf.begin() + kRemote,
                                       b_.buf.begin() + kRemote + 8192);
    auto *target = reinterpret_cast<uint64_t *>(b_.buf.data() + kAtomic);
    auto *result = reinterpret_cast<uint64_t *>(a_.buf.data() + kAtomic);
    *target = kOld;
    *result = 0;

    const uint64_t rid = 100 + c, sid = 200 + c;
    std::vector<ibv_sge> rsg;
    if (k.recv) {
      if (k.recv_sges) rsg = Sges(b_, kRecv, k.len + 64, k.recv_sges);
      ASSERT_EQ(PostRecv(b_, rid, rsg), 0);
    }
    std::vector<ibv_sge> src =
        k.nsge ? Sges(a_, k.op == IBV_WR_RDMA_READ ? kRead : kSrc, k.len,
                      k.nsge)
               : std::vector<ibv_sge>{};
    const uint64_t raddr =
        k.zero_rdma ? 0 : reinterpret_cast<uintptr_t>(b_.buf.data() + kRemote);
    const uint32_t rkey = k.zero_rdma ? 0 : b_.mr->rkey;
    if (k.op == IBV_WR_ATOMIC_CMP_AND_SWP ||
        k.op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      ibv_sge res = {reinterpret_cast<uintptr_t>(result), 8, a_.mr->lkey};
      ASSERT_EQ(PostAtomic(a_.qp, sid, k.op, res,
                           reinterpret_cast<uintptr_t>(target), b_.mr->rkey,
                           k.op == IBV_WR_ATOMIC_CMP_AND_SWP ? kOld : 5,
                           0xabcdef),
                0);
    } else {
      ASSERT_EQ(PostSend(a_, sid, k.op, src, raddr, rkey, imm,
                         IBV_SEND_SIGNALED | k.flags),
                0);
    }

    ibv_wc s = Wait(a_.cq);
    EXPECT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
    EXPECT_EQ(s.wr_id, sid);
    EXPECT_EQ(s.opcode, k.req_op);
    EXPECT_EQ(s.qp_num, a_.qp->qp_num);
    // Not defined by ibv_poll_cq(3) for the requester; trdma reports it
    // as rxe and mlx5 do for READs and atomics: the length read, 8.
    if (k.op == IBV_WR_RDMA_READ) {
      EXPECT_EQ(s.byte_len, k.len);
    }
    if (k.op == IBV_WR_ATOMIC_CMP_AND_SWP ||
        k.op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      EXPECT_EQ(s.byte_len, 8u);
    }

    if (k.recv) {
      ibv_wc r = Wait(b_.cq);
      EXPECT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
      EXPECT_EQ(r.wr_id, rid);
      EXPECT_EQ(r.opcode, k.op == IBV_WR_RDMA_WRITE_WITH_IMM
                              ? IBV_WC_RECV_RDMA_WITH_IMM
                              : IBV_WC_RECV);
      EXPECT_EQ(r.byte_len, k.len);
      EXPECT_EQ(r.qp_num, b_.qp->qp_num);
      EXPECT_EQ(r.src_qp, a_.qp->qp_num);
      EXPECT_EQ(r.wc_flags & IBV_WC_GRH, 0u);
      EXPECT_EQ(!!(r.wc_flags & IBV_WC_WITH_IMM), k.imm);
      if (k.imm) {
        EXPECT_EQ(r.imm_data, htonl(imm)) << std::hex << r.imm_data;
      }
    }
    // Nothing (more) completes at the responder.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ibv_wc none;
    EXPECT_EQ(ibv_poll_cq(b_.cq, 1, &none), 0);

    // What the operation did to memory.
    const uint8_t *recv_at = b_.buf.data() + kRecv;
    switch (k.op) {
      case IBV_WR_SEND:
      case IBV_WR_SEND_WITH_IMM:
        {
          // Gathered source equals the scattered destination prefix.
          std::vector<uint8_t> sent, got;
          for (auto &g : src)
            sent.insert(sent.end(), reinterpret_cast<uint8_t *>(g.addr),
                        reinterpret_cast<uint8_t *>(g.addr) + g.length);
          for (auto &g : rsg)
            got.insert(got.end(), reinterpret_cast<uint8_t *>(g.addr),
                       reinterpret_cast<uint8_t *>(g.addr) + g.length);
          got.resize(sent.size());
          EXPECT_TRUE(sent == got);
          if (rsg.empty()) {
            EXPECT_EQ(recv_at[0], 0x5a);
          }
        }
        break;
      case IBV_WR_RDMA_WRITE:
      case IBV_WR_RDMA_WRITE_WITH_IMM:
        if (k.len) {
          EXPECT_TRUE(SameScattered(b_.buf.data() + kRemote, src));
          EXPECT_EQ(b_.buf[kRemote + k.len], remote_before[k.len]);
        } else {
          EXPECT_TRUE(std::equal(remote_before.begin(), remote_before.end(),
                                 b_.buf.begin() + kRemote));
        }
        // WRITE_WITH_IMM's receive has its SGE untouched.
        EXPECT_EQ(recv_at[0], 0x5a);
        break;
      case IBV_WR_RDMA_READ:
        if (k.len) {
          EXPECT_TRUE(SameScattered(b_.buf.data() + kRemote, src));
        } else {
          EXPECT_EQ(a_.buf[kRead], 0x5a);
        }
        EXPECT_TRUE(std::equal(remote_before.begin(), remote_before.end(),
                               b_.buf.begin() + kRemote));
        break;
      case IBV_WR_ATOMIC_CMP_AND_SWP:
        EXPECT_EQ(*result, kOld);
        EXPECT_EQ(*target, 0xabcdefu);
        break;
      case IBV_WR_ATOMIC_FETCH_AND_ADD:
        EXPECT_EQ(*result, kOld);
        EXPECT_EQ(*target, kOld + 5);
        break;
      default:
        break;
    }
  }
  ibv_wc none;
  EXPECT_EQ(ibv_poll_cq(a_.cq, 1, &none), 0);
}

// Unsignaled WRs are retired by the next signaled one: batches of exactly
// the granted SQ depth (depth - 1 unsignaled WRITEs, then one signaled
// WRITE or READ) fill the SQ, so each batch posts only if the previous
// signaled completion freed every slot.  Only the signaled WRs complete,
// and every unsignaled WRITE's bytes land.
TEST_F(ConformanceTest, UnsignaledWrsRetireWithTheNextSignaledOne) {
  auto [x, y] = NewPair({4, 4, 1, 1, 0});
  ASSERT_TRUE(x && y);
  ibv_qp_attr qa;
  ibv_qp_init_attr qi;
  ASSERT_EQ(ibv_query_qp(x, &qa, IBV_QP_CAP, &qi), 0);
  const uint32_t depth = qi.cap.max_send_wr;
  ASSERT_GE(depth, 4u);
  ASSERT_LE(depth, 64u);
  const int kBatches = 8;
  const uint32_t kLen = 512;
  const uint32_t total = kBatches * depth;
  Fill(a_.buf, 0, total * kLen, 321);
  std::fill(b_.buf.begin(), b_.buf.begin() + total * kLen, 0);
  std::fill(a_.buf.begin() + (4 << 20), a_.buf.begin() + (5 << 20), 0);
  Fill(b_.buf, 6 << 20, kBatches * kLen, 654);
  for (int b = 0; b < kBatches; b++) {
    for (uint32_t i = 0; i < depth; i++) {
      const uint32_t w = b * depth + i;
      const bool last = i == depth - 1;
      const bool read = last && b % 2;
      // The last of an odd batch READs the peer's slot b of 6 MiB.
      ibv_sge sg = read ? ibv_sge{reinterpret_cast<uintptr_t>(
                                      a_.buf.data() + (4 << 20) + b * kLen),
                                  kLen, a_.mr->lkey}
                        : ibv_sge{reinterpret_cast<uintptr_t>(
                                      a_.buf.data() + w * kLen),
                                  kLen, a_.mr->lkey};
      ibv_send_wr wr = {}, *bad;
      wr.wr_id = 1000 + w;
      wr.opcode = read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
      wr.sg_list = &sg;
      wr.num_sge = 1;
      wr.send_flags = last ? IBV_SEND_SIGNALED : 0;
      wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(
          read ? b_.buf.data() + (6 << 20) + b * kLen
               : b_.buf.data() + w * kLen);
      wr.wr.rdma.rkey = b_.mr->rkey;
      ASSERT_EQ(ibv_post_send(x, &wr, &bad), 0)
          << "batch " << b << " WR " << i << ": SQ slots not freed";
    }
    ibv_wc s = Wait(a_.cq);
    ASSERT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
    EXPECT_EQ(s.wr_id, 1000u + b * depth + depth - 1);
    EXPECT_EQ(s.opcode, b % 2 ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE);
    EXPECT_EQ(s.qp_num, x->qp_num);
    ibv_wc none;
    EXPECT_EQ(ibv_poll_cq(a_.cq, 1, &none), 0) << "unsignaled WR completed";
  }
  for (int b = 0; b < kBatches; b++)
    for (uint32_t i = 0; i < depth; i++) {
      const uint32_t w = b * depth + i;
      if (i == depth - 1 && b % 2) {
        EXPECT_EQ(memcmp(a_.buf.data() + (4 << 20) + b * kLen,
                         b_.buf.data() + (6 << 20) + b * kLen, kLen),
                  0)
            << "READ of batch " << b;
      } else {
        EXPECT_EQ(memcmp(a_.buf.data() + w * kLen, b_.buf.data() + w * kLen,
                         kLen),
                  0)
            << "WRITE " << w;
      }
    }
  ibv_wc none;
  EXPECT_EQ(ibv_poll_cq(b_.cq, 1, &none), 0);
  ibv_destroy_qp(x);
  ibv_destroy_qp(y);
}

// --- async events ---------------------------------------------------------

// Each QP, CQ and SRQ event names the object it is about.  The events'
// semantics are checked elsewhere (DataPathTest.ResetConnection...,
// PeerGone..., BadRkey..., SrqLimit..., VerbsTest.CqOverflowRaisesCqError);
// this test checks the element each one carries:
//  - a reset connection: QP_FATAL for each of the two QPs, once each;
//  - a peer gone with a request outstanding: QP_FATAL for the survivor;
//  - a bad rkey: QP_ACCESS_ERR for the responder, not the requester;
//  - a misaligned atomic: QP_REQ_ERR for the responder;
//  - a CQ overflow: CQ_ERR for that CQ;
//  - an armed SRQ limit crossed: SRQ_LIMIT_REACHED for that SRQ.
TEST_F(ConformanceTest, AsyncEventsNameTheirElement) {
  // Reset: both fixture QPs fail, each reported once, on its own QP.
  ExpectSendArrives(a_.qp, a_.cq, b_.qp, b_.cq);
  ASSERT_EQ(Sh("ss -K state established '( sport = :4791 or dport = :4791 )'"
               " >/dev/null"),
            0);
  auto e1 = NextEvent(IBV_EVENT_QP_FATAL, 5000);
  auto e2 = NextEvent(IBV_EVENT_QP_FATAL, 5000);
  ASSERT_TRUE(e1 && e2) << "QP_FATAL events: " << !!e1 + !!e2;
  EXPECT_EQ((std::set<void *>{e1->element, e2->element}),
            (std::set<void *>{a_.qp, b_.qp}));
  EXPECT_FALSE(NextEvent(IBV_EVENT_QP_FATAL, 300)) << "a third QP_FATAL";
  Drain(a_.cq);
  Drain(b_.cq);

  // Peer gone while x has a SEND waiting in RNR retries.
  {
    auto [x, y] = NewPair();
    ASSERT_TRUE(x && y);
    ibv_sge sg = {reinterpret_cast<uintptr_t>(a_.buf.data()), 64, a_.mr->lkey};
    ibv_send_wr wr = {}, *bad;
    wr.wr_id = 2;
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sg;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(ibv_post_send(x, &wr, &bad), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_EQ(ibv_destroy_qp(y), 0);
    auto e = NextEvent(IBV_EVENT_QP_FATAL, 5000);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->element, x);
    Drain(a_.cq);
    ASSERT_EQ(ibv_destroy_qp(x), 0);
  }

  // Bad rkey: the responder's QP reports the access error.
  {
    auto [x, y] = NewPair();
    ASSERT_TRUE(x && y);
    events_.clear();
    ibv_sge sg = {reinterpret_cast<uintptr_t>(a_.buf.data()), 64, a_.mr->lkey};
    ibv_send_wr wr = {}, *bad;
    wr.wr_id = 3;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sg;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(b_.buf.data());
    wr.wr.rdma.rkey = b_.mr->rkey ^ 0x100;
    ASSERT_EQ(ibv_post_send(x, &wr, &bad), 0);
    EXPECT_EQ(Wait(a_.cq).status, IBV_WC_REM_ACCESS_ERR);
    auto e = NextEvent(IBV_EVENT_QP_ACCESS_ERR, 5000);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->element, y);
    NextEvent(IBV_EVENT_DEVICE_FATAL, 300);  // log what else comes
    EXPECT_EQ(Logged(IBV_EVENT_QP_ACCESS_ERR, x), 0);
    EXPECT_EQ(Logged(IBV_EVENT_QP_ACCESS_ERR, y), 1);
    // The requester learns of the remote error from its completion alone,
    // as on IB (no affiliated event), and neither QP reports a fatal error.
    EXPECT_EQ(Logged(IBV_EVENT_QP_FATAL, x), 0);
    EXPECT_EQ(Logged(IBV_EVENT_QP_FATAL, y), 0);
    Drain(a_.cq);
    Drain(b_.cq);
    ASSERT_EQ(ibv_destroy_qp(x), 0);
    ASSERT_EQ(ibv_destroy_qp(y), 0);
  }

  // Misaligned atomic: the responder's QP reports the invalid request.
  {
    auto [x, y] = NewPair();
    ASSERT_TRUE(x && y);
    events_.clear();
    ibv_sge res = {reinterpret_cast<uintptr_t>(a_.buf.data()), 8, a_.mr->lkey};
    ASSERT_EQ(PostAtomic(x, 4, IBV_WR_ATOMIC_FETCH_AND_ADD, res,
                         reinterpret_cast<uintptr_t>(b_.buf.data() + 4),
                         b_.mr->rkey, 1, 0),
              0);
    EXPECT_EQ(Wait(a_.cq).status, IBV_WC_REM_INV_REQ_ERR);
    auto e = NextEvent(IBV_EVENT_QP_REQ_ERR, 5000);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->element, y);
    NextEvent(IBV_EVENT_DEVICE_FATAL, 300);
    EXPECT_EQ(Logged(IBV_EVENT_QP_REQ_ERR, x), 0);
    EXPECT_EQ(Logged(IBV_EVENT_QP_REQ_ERR, y), 1);
    Drain(a_.cq);
    Drain(b_.cq);
    ASSERT_EQ(ibv_destroy_qp(x), 0);
    ASSERT_EQ(ibv_destroy_qp(y), 0);
  }

  // CQ overflow: more flushed receives than a 1-entry CQ holds.
  {
    ibv_cq *small = ibv_create_cq(ctx_.get(), 1, nullptr, nullptr, 0);
    ASSERT_NE(small, nullptr);
    ibv_qp *q = NewQp(small, {4, 16, 1, 1, 0});
    ASSERT_NE(q, nullptr);
    ibv_qp_attr at = {};
    at.qp_state = IBV_QPS_INIT;
    at.port_num = 1;
    ASSERT_EQ(ibv_modify_qp(q, &at,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                IBV_QP_ACCESS_FLAGS),
              0);
    for (int i = 0; i < small->cqe + 3; i++) {
      ibv_sge sg = {reinterpret_cast<uintptr_t>(b_.buf.data()), 64,
                    b_.mr->lkey};
      ibv_recv_wr wr = {}, *bad;
      wr.wr_id = i;
      wr.sg_list = &sg;
      wr.num_sge = 1;
      ASSERT_EQ(ibv_post_recv(q, &wr, &bad), 0);
    }
    at = {};
    at.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(q, &at, IBV_QP_STATE), 0);
    auto e = NextEvent(IBV_EVENT_CQ_ERR, 5000);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->element, small);
    ASSERT_EQ(ibv_destroy_qp(q), 0);
    ASSERT_EQ(ibv_destroy_cq(small), 0);
    Drain(b_.cq);
  }

  // SRQ limit: armed at 2 with 3 receives, one SEND crosses it.
  {
    ibv_srq_init_attr sa = {};
    sa.attr = {8, 1, 0};
    ibv_srq *srq = ibv_create_srq(pd_, &sa);
    ASSERT_NE(srq, nullptr);
    ibv_qp *q = QpOn(b_.cq, b_.cq, {4, 0, 1, 0, 0}, srq);
    ibv_qp *sender = NewQp(a_.cq);
    ASSERT_TRUE(q && sender);
    ASSERT_EQ(Connect(q, sender), 0);
    ASSERT_EQ(Connect(sender, q), 0);
    for (int i = 0; i < 3; i++) {
      ibv_sge sg = {reinterpret_cast<uintptr_t>(b_.buf.data()), 64,
                    b_.mr->lkey};
      ibv_recv_wr wr = {}, *bad;
      wr.wr_id = 50 + i;
      wr.sg_list = &sg;
      wr.num_sge = 1;
      ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
    }
    ibv_srq_attr m = {};
    m.srq_limit = 3;
    ASSERT_EQ(ibv_modify_srq(srq, &m, IBV_SRQ_LIMIT), 0);
    ibv_sge sg = {reinterpret_cast<uintptr_t>(a_.buf.data()), 8, a_.mr->lkey};
    ibv_send_wr wr = {}, *bad;
    wr.wr_id = 60;
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sg;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(ibv_post_send(sender, &wr, &bad), 0);
    EXPECT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
    EXPECT_EQ(Wait(b_.cq).wr_id, 50u);
    auto e = NextEvent(IBV_EVENT_SRQ_LIMIT_REACHED, 5000);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->element, srq);
    ASSERT_EQ(ibv_destroy_qp(sender), 0);
    ASSERT_EQ(ibv_destroy_qp(q), 0);
    ASSERT_EQ(ibv_destroy_srq(srq), 0);
    Drain(a_.cq);
    Drain(b_.cq);
  }
}

// Port events name port 1: PORT_ERR and PORT_ACTIVE as the netdev goes down
// and up (DeviceTest.PortFollowsNetdevDownAndUpWithAsyncEvents checks the
// port state), GID_CHANGE when an address comes and goes.
TEST_F(ConformanceTest, PortEventsNameThePort) {
  const std::string ifc = NetdevName();
  ASSERT_EQ(Sh("ip link set dev " + ifc + " down"), 0);
  auto e = NextEvent(IBV_EVENT_PORT_ERR, 10000);
  EXPECT_EQ(Sh("ip link set dev " + ifc + " up"), 0);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->port, 1);
  e = NextEvent(IBV_EVENT_PORT_ACTIVE, 10000);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->port, 1);

  events_.clear();
  ASSERT_EQ(Sh("ip addr add 10.99.77.7/32 dev " + ifc), 0);
  e = NextEvent(IBV_EVENT_GID_CHANGE, 10000);
  EXPECT_EQ(Sh("ip addr del 10.99.77.7/32 dev " + ifc), 0);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->port, 1);
  e = NextEvent(IBV_EVENT_GID_CHANGE, 10000);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->port, 1);
}

// A QP attached to an SRQ that leaves service raises
// IBV_EVENT_QP_LAST_WQE_REACHED for that QP (IBA 11.6.3.2, o11-5.2.4: the
// consumer may destroy it safely once it arrives), both when it is moved to
// ERR and when its connection fails.  The SRQ's receives are not flushed:
// another QP on the SRQ still takes them, in order.  When this test was
// written trdma raised no LAST_WQE_REACHED at all, so it failed there.
TEST_F(ConformanceTest, LastWqeReachedWhenAnSrqQpLeavesService) {
  ibv_srq_init_attr sa = {};
  sa.attr = {16, 1, 0};
  ibv_srq *srq = ibv_create_srq(pd_, &sa);
  ASSERT_NE(srq, nullptr);
  for (int i = 0; i < 6; i++) {
    ibv_sge sg = {reinterpret_cast<uintptr_t>(b_.buf.data() + 64 * i), 64,
                  b_.mr->lkey};
    ibv_recv_wr wr = {}, *bad;
    wr.wr_id = 70 + i;
    wr.sg_list = &sg;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
  }
  uint64_t next_recv = 70;
  // A QP on the SRQ and its sender; one SEND proves it is in service.
  auto attached = [&](ibv_qp **q, ibv_qp **sender) {
    *q = QpOn(b_.cq, b_.cq, {4, 0, 1, 0, 0}, srq);
    *sender = NewQp(a_.cq);
    ASSERT_TRUE(*q && *sender);
    ASSERT_EQ(Connect(*q, *sender), 0);
    ASSERT_EQ(Connect(*sender, *q), 0);
    Fill(a_.buf, 0, 32, static_cast<unsigned>(next_recv));
    ibv_sge sg = {reinterpret_cast<uintptr_t>(a_.buf.data()), 32, a_.mr->lkey};
    ibv_send_wr wr = {}, *bad;
    wr.wr_id = 1;
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sg;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(ibv_post_send(*sender, &wr, &bad), 0);
    ibv_wc r = Wait(b_.cq);
    ASSERT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
    EXPECT_EQ(r.wr_id, next_recv);
    EXPECT_EQ(r.qp_num, (*q)->qp_num);
    EXPECT_EQ(memcmp(b_.buf.data() + 64 * (next_recv - 70), a_.buf.data(), 32),
              0);
    next_recv++;
    ASSERT_EQ(Wait(a_.cq).status, IBV_WC_SUCCESS);
  };

  // Moved to ERR by the consumer.
  ibv_qp *q1, *s1;
  attached(&q1, &s1);
  ASSERT_FALSE(HasFatalFailure());
  ibv_qp_attr at = {};
  at.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(q1, &at, IBV_QP_STATE), 0);
  auto e = NextEvent(IBV_EVENT_QP_LAST_WQE_REACHED, 5000);
  EXPECT_TRUE(e) << "no IBV_EVENT_QP_LAST_WQE_REACHED after modify to ERR";
  if (e) {
    EXPECT_EQ(e->element, q1);
  }

  // Its connection fails: the peer is destroyed.
  ibv_qp *q2, *s2;
  attached(&q2, &s2);
  ASSERT_FALSE(HasFatalFailure());
  events_.clear();
  ASSERT_EQ(ibv_destroy_qp(s2), 0);
  // s1 may fail too meanwhile: q1 closed its connection on going to ERR,
  // and an idle QP whose peer closed fails after peer_close_grace.
  auto f = NextEvent(IBV_EVENT_QP_FATAL, 5000);
  while (f && f->element == s1) f = NextEvent(IBV_EVENT_QP_FATAL, 5000);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->element, q2);
  e = NextEvent(IBV_EVENT_QP_LAST_WQE_REACHED, 5000);
  EXPECT_TRUE(e) << "no IBV_EVENT_QP_LAST_WQE_REACHED after QP_FATAL";
  if (e) {
    EXPECT_EQ(e->element, q2);
  }

  // The SRQ's receives were not flushed with q1 or q2.
  ibv_wc none;
  EXPECT_EQ(ibv_poll_cq(b_.cq, 1, &none), 0);
  ibv_qp *q3, *s3;
  attached(&q3, &s3);
  ASSERT_FALSE(HasFatalFailure());

  for (ibv_qp *q : {q1, s1, q2, q3, s3}) EXPECT_EQ(ibv_destroy_qp(q), 0);
  Drain(a_.cq);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

// A SEND whose receive WQE names memory the responder may not write (a
// key of no MR): the receive fails with a local protection error and the
// requester learns of a remote operational error, not an access error of
// its own request (as rxe and mlx5 answer; rdma-core's test_mr_rereg_pd
// and test_mr_rereg_addr expect it).
// The responder answers requests in order: READs it accepted are answered
// before the NAK of a later request it refuses.  The requester sees its
// READs complete with their data, then the refused WRITE's remote access
// error, then the rest flushed (never a flushed READ before the error).
TEST_F(DataPathTest, RefusalComesAfterTheReadsBeforeIt) {
  constexpr uint32_t kRead = 256 << 10;
  constexpr int kReads = 4;
  Fill(b_.buf, 0, kRead, 21);
  for (int i = 0; i < kReads; i++)
    ASSERT_EQ(PostSend(a_, 10 + i, IBV_WR_RDMA_READ,
                       Sges(a_, i * kRead, kRead, 1),
                       reinterpret_cast<uintptr_t>(b_.buf.data()),
                       b_.mr->rkey),
              0);
  // A WRITE under a key that names nothing, and one more READ behind it.
  ASSERT_EQ(PostSend(a_, 20, IBV_WR_RDMA_WRITE, Sges(a_, 0, 64, 1),
                     reinterpret_cast<uintptr_t>(b_.buf.data()),
                     b_.mr->rkey ^ 0xff00),
            0);
  ASSERT_EQ(PostSend(a_, 21, IBV_WR_RDMA_READ,
                     Sges(a_, kReads * kRead, 64, 1),
                     reinterpret_cast<uintptr_t>(b_.buf.data()), b_.mr->rkey),
            0);
  for (int i = 0; i < kReads; i++) {
    ibv_wc c = Wait(a_.cq);
    EXPECT_EQ(c.wr_id, 10u + i);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS)
        << "read " << i << ": " << ibv_wc_status_str(c.status);
    EXPECT_EQ(memcmp(a_.buf.data() + i * kRead, b_.buf.data(), kRead), 0)
        << "read " << i;
  }
  ibv_wc c = Wait(a_.cq);
  EXPECT_EQ(c.wr_id, 20u);
  EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(c.status);
  c = Wait(a_.cq);
  EXPECT_EQ(c.wr_id, 21u);
  EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(c.status);
}

TEST_F(DataPathTest, ReceiveIntoMemoryNotOursIsARemoteOperationalError) {
  Fill(a_.buf, 0, 4096, 3);
  SendIntoForeignReceive(a_, b_, 1, 2);
  for (size_t i = 0; i < 4096; i++)
    if (b_.buf[i]) {
      ADD_FAILURE() << "byte " << i << " written";
      break;
    }
}

// Both QPs in error, then each reset and connected again, one after the
// other, the first reaching RTS while its peer is still in ERR (rdma-core's
// test_mr_rereg_pd does this): the connection waits for the peer as for a
// peer not in RTR yet, and traffic flows again.  Either QP first, so that
// either side's dial waits.
TEST_F(DataPathTest, QpsResetAfterAnErrorConnectAgainOneAfterTheOther) {
  for (int round = 0; round < 2; round++) {
    SCOPED_TRACE(round);
    Side &first = round ? b_ : a_, &second = round ? a_ : b_;
    SendIntoForeignReceive(first, second, 1, 2);
    ASSERT_FALSE(HasFatalFailure());

    ibv_qp_attr ra = {};
    ra.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(first.qp, &ra, IBV_QP_STATE), 0);
    ASSERT_EQ(Connect(first.qp, second.qp), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ASSERT_EQ(ibv_modify_qp(second.qp, &ra, IBV_QP_STATE), 0);
    ASSERT_EQ(Connect(second.qp, first.qp), 0);

    Fill(first.buf, 0, 4096, 10 + round);
    ASSERT_EQ(PostRecv(second, 3, Sges(second, 65536, 4096, 1)), 0);
    ASSERT_EQ(PostSend(first, 4, IBV_WR_SEND, Sges(first, 0, 4096, 1)), 0);
    ibv_wc s = Wait(first.cq);
    EXPECT_EQ(s.wr_id, 4u);
    ASSERT_EQ(s.status, IBV_WC_SUCCESS) << ibv_wc_status_str(s.status);
    ibv_wc r = Wait(second.cq);
    EXPECT_EQ(r.wr_id, 3u);
    ASSERT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
    EXPECT_EQ(memcmp(first.buf.data(), second.buf.data() + 65536, 4096), 0);
  }
}

// Moving a QP to RESET removes its completions not polled yet from its CQ
// (as mlx4 and mlx5 do): a reset QP reports nothing more, and the other
// QPs' completions on that CQ stay, in order.
TEST_F(DataPathTest, ResetRemovesTheQpsCompletionsNotPolledYet) {
  ibv_qp *q1 = NewQp(a_.cq), *q2 = NewQp(a_.cq);
  ASSERT_TRUE(q1 && q2);
  ASSERT_EQ(ToRtr(q1, q2), 0);
  ASSERT_EQ(ToRtr(q2, q1), 0);
  ibv_sge sge = {reinterpret_cast<uintptr_t>(a_.buf.data()), 64,
                 a_.mr->lkey};
  for (uint64_t id = 1; id <= 6; id++) {
    ibv_recv_wr wr = {}, *bad;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_recv(id % 2 ? q1 : q2, &wr, &bad), 0);
  }
  ibv_qp_attr ea = {};
  ea.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(q2, &ea, IBV_QP_STATE), 0);
  ASSERT_EQ(ibv_modify_qp(q1, &ea, IBV_QP_STATE), 0);
  // Time for all six flushes to reach the CQ (none may come after the
  // reset either); none polled yet.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ibv_qp_attr ra = {};
  ra.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(q1, &ra, IBV_QP_STATE), 0);
  ibv_wc wc[8];
  int n = ibv_poll_cq(a_.cq, 8, wc);
  ASSERT_EQ(n, 3);
  for (int i = 0; i < n; i++) {
    EXPECT_EQ(wc[i].qp_num, q2->qp_num);
    EXPECT_EQ(wc[i].wr_id, 2u * (i + 1));
    EXPECT_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
  }
  EXPECT_EQ(ibv_destroy_qp(q1), 0);
  EXPECT_EQ(ibv_destroy_qp(q2), 0);
}

// A connected QP that stops transmitting gives back the page fragment
// TCP copied its headers into (32 KiB per socket; trdma_idle.c), once,
// frag_idle_ms after its last transmit, and takes a new one when it sends
// again: counted in tx_frags_released.
TEST_F(DataPathTest, IdleQpsReturnTheirSocketPageFragment) {
  ModuleParam idle("frag_idle_ms", "200");
  ASSERT_TRUE(idle.ok());

  for (int round = 0; round < 2; round++) {
    SCOPED_TRACE(round);
    const long before = Counter("tx_frags_released");
    ASSERT_GE(before, 0);
    // A small SEND (copied behind its header) each way, and the ACKs.
    Fill(a_.buf, 0, 64, 20 + round);
    Fill(b_.buf, 4096, 64, 30 + round);
    ASSERT_EQ(PostRecv(b_, 1, Sges(b_, 65536, 64, 1)), 0);
    ASSERT_EQ(PostRecv(a_, 2, Sges(a_, 65536, 64, 1)), 0);
    ASSERT_EQ(PostSend(a_, 3, IBV_WR_SEND, Sges(a_, 0, 64, 1)), 0);
    ASSERT_EQ(PostSend(b_, 4, IBV_WR_SEND, Sges(b_, 4096, 64, 1)), 0);
    for (Side *s : {&a_, &b_})
      for (int k = 0; k < 2; k++) {
        ibv_wc wc = Wait(s->cq);
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
      }
    EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data() + 65536, 64), 0);
    EXPECT_EQ(memcmp(b_.buf.data() + 4096, a_.buf.data() + 65536, 64), 0);
    // Both sockets give theirs back within a few idle periods ...
    long released = before;
    const auto t0 = std::chrono::steady_clock::now();
    while (released < before + 2 && MsSince(t0) < 3000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      released = Counter("tx_frags_released");
    }
    EXPECT_EQ(released, before + 2)
        << "fragments returned within " << MsSince(t0) << " ms";
    // ... and only once while they stay idle.
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    EXPECT_EQ(Counter("tx_frags_released"), released);
  }
}

}  // namespace
