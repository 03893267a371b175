// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// Fault injection: a peer process SIGKILLed mid-transfer, the netdev going
// down and up, connections blackholed for less and for longer than the QP
// timeout, loss/reorder/duplication/delay on lo (netem), the device removed
// under traffic, resource pressure (RLIMIT_MEMLOCK, a CQ too small for its
// QPs) and a soak that mixes them.  Throughout: every posted WR completes
// exactly once and in order per queue (successes, then at most one error,
// then flushes), and every byte that arrives is the byte that was sent.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <set>
#include <thread>
#include <type_traits>
#include <vector>

#include <rdma/trdma-wire.h>

#include "lab_util.h"

extern char **environ;

using namespace trdma_lab;

namespace {

void SleepMs(long ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

const std::string kPort = std::to_string(TRDMA_DEFAULT_PORT);

// --- the lab around the device ---------------------------------------------

// Object counts of the device, as `rdma resource show` has them.
using Counts = std::map<std::string, long>;

Counts Resources() {
  Counts m;
  std::string out = ShOut("rdma resource show " + DevName());
  std::regex re("\\b(pd|cq|qp|cm_id|mr|ctx|srq) (\\d+)");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end;
       ++it)
    m[(*it)[1]] = std::stol((*it)[2]);
  return m;
}

std::string Show(const Counts &c) {
  std::string s;
  for (auto &[k, v] : c) s += k + " " + std::to_string(v) + " ";
  return s;
}

// Waits up to ms for the device's counts to become want.
Counts ResourcesBecome(const Counts &want, long ms) {
  auto t0 = Clock::now();
  Counts now = Resources();
  while (now != want && Ms(t0) < ms) {
    SleepMs(100);
    now = Resources();
  }
  return now;
}

// The port's state as ibv_query_port reports it.
ibv_port_state PortState(ibv_context *ctx) {
  ibv_port_attr pa = {};
  if (ibv_query_port(ctx, 1, &pa)) return IBV_PORT_NOP;
  return pa.state;
}

// A netem qdisc as the root qdisc of lo, removed again when this goes.
class Netem {
 public:
  explicit Netem(const std::string &spec) {
    Sh("tc qdisc del dev lo root 2>/dev/null");
    on_ = Sh("tc qdisc add dev lo root netem " + spec) == 0;
  }
  ~Netem() { Off(); }
  bool on() const { return on_; }
  void Off() {
    if (on_) Sh("tc qdisc del dev lo root");
    on_ = false;
  }

 private:
  bool on_ = false;
};

// The device's netdev set down, up again when this goes.
class LinkDown {
 public:
  LinkDown() { on_ = Sh("ip link set " + NetdevName() + " down") == 0; }
  ~LinkDown() { Up(); }
  bool on() const { return on_; }
  void Up() {
    if (on_) Sh("ip link set " + NetdevName() + " up");
    on_ = false;
  }

 private:
  bool on_ = false;
};

// A function run on a thread of its own, joined when this goes.
class Background {
 public:
  explicit Background(std::function<void()> f)
      : t_([this, f] {
          f();
          done_ = true;
        }) {}
  ~Background() {
    if (t_.joinable()) t_.join();
  }
  bool done() const { return done_; }

 private:
  std::atomic<bool> done_{false};
  std::thread t_;
};

// `sh -c cmd` started without waiting for it (posix_spawn: no copy of this
// process's pinned memory).
pid_t Spawn(const std::string &cmd) {
  pid_t pid = -1;
  const char *argv[] = {"sh", "-c", cmd.c_str(), nullptr};
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr,
                  const_cast<char *const *>(argv), environ))
    return -1;
  return pid;
}

// The exit status of pid once it has ended (-1: killed by a signal).
std::optional<int> Reap(pid_t pid) {
  int st;
  if (waitpid(pid, &st, WNOHANG) != pid) return std::nullopt;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// --- connecting QPs --------------------------------------------------------

// The local ACK timeout exponent and retry counts of a QP: TCP_USER_TIMEOUT
// is 4.096 us * 2^timeout * (retry_cnt + 1).
struct Timeouts {
  uint8_t timeout, retry_cnt, rnr_retry;
};

// Takes qp to RTS, connected to QP dest_qpn of the same device (both ends
// of the lab's traffic live on one GID).
int ConnectQp(ibv_context *ctx, ibv_qp *qp, uint32_t dest_qpn, Timeouts t) {
  ibv_gid gid;
  int gi = RoceV2Gid(ctx, &gid);
  if (gi < 0) return ENODEV;
  ibv_qp_attr a = {};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                      IBV_ACCESS_REMOTE_ATOMIC;
  int rv = ibv_modify_qp(
      qp, &a,
      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rv) return rv;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = 1000 + dest_qpn;
  a.max_dest_rd_atomic = 8;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.sgid_index = gi;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.grh.dgid = gid;
  rv = ibv_modify_qp(qp, &a,
                     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                         IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rv) return rv;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = t.timeout;
  a.retry_cnt = t.retry_cnt;
  a.rnr_retry = t.rnr_retry;
  a.sq_psn = 1000 + qp->qp_num;
  a.max_rd_atomic = 8;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
}

ibv_qp *CreateRcQp(ibv_pd *pd, ibv_cq *scq, ibv_cq *rcq, ibv_qp_cap cap) {
  ibv_qp_init_attr ia = {};
  ia.send_cq = scq;
  ia.recv_cq = rcq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = cap;
  return ibv_create_qp(pd, &ia);
}

uint8_t *MapBuffer(size_t len) {
  void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t *>(p);
}

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

bool Consumes(ibv_wr_opcode op) {
  return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM ||
         op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

const std::vector<ibv_wr_opcode> kAllOps = {
    IBV_WR_SEND,       IBV_WR_SEND_WITH_IMM,      IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD};

// --- the traffic engine ----------------------------------------------------
//
// Pairs of connected RC QPs of one context, each QP with its own CQ and
// buffer, carrying every opcode both ways with all WRs signaled.  Each send
// WR has a unique wr_id (the uid that also names its byte pattern), each
// receive one with the top bit set.  What a QP posted is kept in post order;
// each completion must be the oldest outstanding WR of its queue, so a WR
// that completes twice, out of order or never is caught.  Data is checked
// where it lands: SENDs in the receive buffer, WRITEs in the target region
// when the requester's completion arrives, READs against the source region,
// atomics against the count of atomics the QP issued before.

constexpr int kWin = 16;    // send WRs outstanding per QP
constexpr int kRecvs = 32;  // receives kept posted per QP
constexpr uint64_t kRecvBit = 1ull << 63;

struct EngineOptions {
  int pairs = 2;
  Timeouts to = {18, 7, 7};  // 1.07 s x 8: TCP_USER_TIMEOUT 8.6 s
  uint32_t max_msg = 64 << 10;
  std::vector<ibv_wr_opcode> ops = kAllOps;
  bool recreate = false;     // replace a pair whose QPs failed (soak)
  bool verbose = false;      // print each pair's failure
  long force_err_ms = 3000;  // then move the surviving QP of a pair to ERR
  unsigned seed = 1;
};

struct Stats {
  uint64_t posted = 0, success = 0, flushed = 0, errors = 0;
  uint64_t flushed_at_finish = 0;  // receives flushed by Finish()
  uint64_t bytes = 0;              // bytes verified where they landed
  uint64_t bad = 0;                // accounting or data failures
  uint64_t post_failures = 0;
  uint64_t pair_deaths = 0, pairs_recreated = 0;
  uint64_t qp_fatal = 0, port_err = 0, port_active = 0, device_fatal = 0;
  std::map<int, uint64_t> error_status;
  std::map<int, uint64_t> op_success;
};

struct SendWr {
  uint64_t uid;
  ibv_wr_opcode op;
  uint32_t len, slot, roff;
  uint64_t old;  // atomics: the value the target must have held
};

struct RecvWr {
  uint64_t id;
  uint32_t slot;
};

// A message under way to a QP that takes one of its receives.
struct Msg {
  uint64_t uid;
  ibv_wr_opcode op;
  uint32_t len, slot;
};

struct Ep {
  int index = 0;
  uint32_t m = 0;  // largest message
  ibv_cq *cq = nullptr;
  ibv_qp *qp = nullptr;
  uint8_t *buf = nullptr;
  size_t len = 0;
  ibv_mr *mr = nullptr;
  Ep *peer = nullptr;
  uint32_t peer_qpn = 0;
  uint64_t seq = 0, rseq = 0;
  std::deque<SendWr> sq;
  std::deque<RecvWr> rq;
  std::deque<Msg> inbound;
  std::vector<uint64_t> wtgt_owner;  // uid written last into each slot
  uint64_t atomics = 0;              // atomics issued by this QP
  bool sq_err = false, rq_err = false;  // an unsuccessful completion seen
  bool destroyed = false;               // destroyed under traffic
  int first_sq_error = -1;  // status of the first failed send completion
  int first_error = -1;     // status of the first failed completion
  bool first_error_recv = false;
  int fatal_events = 0;

  static size_t Size(uint32_t m) {
    return static_cast<size_t>(3 * kWin + kRecvs + 1) * m + 4096;
  }
  bool dead() const { return sq_err || rq_err || destroyed; }
  uint8_t *Src(uint32_t s) { return buf + static_cast<size_t>(s) * m; }
  uint8_t *Rdst(uint32_t s) {
    return buf + static_cast<size_t>(kWin + s) * m;
  }
  uint8_t *Wtgt(uint32_t s) {
    return buf + static_cast<size_t>(2 * kWin + s) * m;
  }
  uint8_t *Rcv(uint32_t s) {
    return buf + static_cast<size_t>(3 * kWin + s) * m;
  }
  uint8_t *Rsrc() { return buf + static_cast<size_t>(3 * kWin + kRecvs) * m; }
  uint64_t *Counter() { return reinterpret_cast<uint64_t *>(Rsrc() + m); }
  uint64_t *AtomRes(uint32_t s) { return Counter() + 8 + s; }
};

class Engine {
 public:
  Engine(ibv_context *ctx, EngineOptions o)
      : ctx_(ctx), o_(std::move(o)), rng_(o_.seed) {
    int fl = fcntl(ctx_->async_fd, F_GETFL);
    fcntl(ctx_->async_fd, F_SETFL, fl | O_NONBLOCK);
    pd_ = ibv_alloc_pd(ctx_);
    if (!pd_) {
      ADD_FAILURE() << "ibv_alloc_pd: " << strerror(errno);
      return;
    }
    for (int i = 0; i < 2 * o_.pairs; i++) {
      auto e = std::make_unique<Ep>();
      e->index = i;
      e->m = o_.max_msg;
      e->len = Ep::Size(e->m);
      e->buf = MapBuffer(e->len);
      if (!e->buf) {
        ADD_FAILURE() << "mmap " << e->len;
        return;
      }
      e->mr = ibv_reg_mr(pd_, e->buf, e->len, kAllAccess);
      e->cq = ibv_create_cq(ctx_, 2 * (kWin + kRecvs), nullptr, nullptr, 0);
      if (!e->mr || !e->cq) {
        ADD_FAILURE() << "ibv_reg_mr/ibv_create_cq: " << strerror(errno);
        return;
      }
      Pattern(e->Rsrc(), e->m, 0x5000 + i);
      e->wtgt_owner.assign(kWin, 0);
      eps_.push_back(std::move(e));
    }
    for (int i = 0; i < o_.pairs; i++) {
      Pair p;
      p.x = eps_[2 * i].get();
      p.y = eps_[2 * i + 1].get();
      p.x->peer = p.y;
      p.y->peer = p.x;
      pairs_.push_back(p);
    }
    for (Pair &p : pairs_)
      if (!MakeQps(p)) {
        ADD_FAILURE() << "creating and connecting a QP pair failed";
        return;
      }
    ok_ = true;
  }

  ~Engine() {
    DestroyAll();
    for (auto &e : eps_)
      if (e->buf) munmap(e->buf, e->len);
  }

  bool ok() const { return ok_; }
  Stats &stats() { return st_; }
  void set_posting(bool on) { posting_ = on; }
  int pairs_up() const {
    int n = 0;
    for (const Pair &p : pairs_) n += p.state == PairState::kUp;
    return n;
  }
  const std::vector<std::unique_ptr<Ep>> &eps() const { return eps_; }

  // One round: async events, every CQ, the pairs' health, new WRs.
  void Step() {
    bool idle = true;
    PollAsync();
    for (auto &e : eps_) idle &= !PollCq(*e);
    for (Pair &p : pairs_) Tend(p);
    // Both QPs' receives before any send, as an application does: no RNR
    // (FaultTest.RnrRetryWithAnAtomicQueuedBehind covers that).
    if (posting_)
      for (Pair &p : pairs_) {
        if (p.state != PairState::kUp) continue;
        PostRecvs(*p.x);
        PostRecvs(*p.y);
        for (Ep *e : {p.x, p.y})
          while (e->sq.size() < kWin && PostOne(*e)) idle = false;
      }
    if (idle) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  void RunFor(long ms) {
    auto t0 = Clock::now();
    while (Ms(t0) < ms) Step();
  }

  // Steps until done() (each call of it one look) says so, for at most ms:
  // whether it did.
  bool RunUntil(const std::function<bool()> &done, long ms) {
    auto t0 = Clock::now();
    for (;;) {
      if (done()) return true;
      if (Ms(t0) >= ms) return false;
      Step();
    }
  }

  size_t Outstanding() const {
    size_t n = 0;
    for (auto &e : eps_) n += e->sq.size() + e->rq.size();
    return n;
  }

  // Stops posting, lets every send WR complete, moves every QP to ERR and
  // polls the flushed receives: afterwards nothing is outstanding, or a
  // failure says what never completed within ms.
  bool Finish(long ms) {
    posting_ = false;
    auto t0 = Clock::now();
    auto sends_done = [&] {
      for (auto &e : eps_)
        if (!e->sq.empty()) return false;
      for (const Pair &p : pairs_)
        if (p.state == PairState::kFailing) return false;
      return true;
    };
    while (!sends_done() && Ms(t0) < ms) Step();
    finishing_ = true;
    for (auto &e : eps_) ToErr(*e);
    while (Outstanding() && Ms(t0) < ms) Step();
    size_t left = Outstanding();
    if (left) {
      std::ostringstream os;
      for (auto &e : eps_)
        if (!e->sq.empty() || !e->rq.empty())
          os << " QP " << (e->qp ? e->qp->qp_num : 0) << ": " << e->sq.size()
             << " sends, " << e->rq.size() << " receives;";
      Bad(std::to_string(left) + " WRs never completed:" + os.str());
    }
    return left == 0;
  }

  // The atomics target of each QP holds the number of atomics its peer
  // issued, on every pair that never failed (nothing lost, none doubled).
  void CheckAtomicCounters() {
    for (const Pair &p : pairs_) {
      if (p.state != PairState::kUp) continue;
      for (Ep *e : {p.x, p.y})
        EXPECT_EQ(*e->peer->Counter(), e->atomics)
            << "atomics target of QP " << e->peer->index;
    }
  }

  // posted == completed + flushed, and no accounting or data failure.
  void ExpectBalanced() {
    EXPECT_EQ(st_.posted, st_.success + st_.errors + st_.flushed)
        << Summary();
    EXPECT_EQ(st_.bad, 0u) << Summary();
    EXPECT_EQ(Outstanding(), 0u);
  }

  // No QP failed: nothing but the receives that Finish() flushed.
  void ExpectNoFailure() {
    EXPECT_EQ(st_.errors, 0u) << Summary();
    EXPECT_EQ(st_.flushed, st_.flushed_at_finish) << Summary();
    EXPECT_EQ(st_.pair_deaths, 0u) << Summary();
    EXPECT_EQ(st_.qp_fatal, 0u) << Summary();
  }

  std::string Summary() const {
    std::ostringstream os;
    os << "posted " << st_.posted << " completed "
       << st_.success + st_.errors << " (" << st_.success << " ok, "
       << st_.errors << " errors";
    for (auto &[s, n] : st_.error_status)
      os << " " << ibv_wc_status_str(static_cast<ibv_wc_status>(s)) << " x"
         << n;
    os << ") flushed " << st_.flushed << " bytes verified " << st_.bytes
       << " failures " << st_.bad << " pair deaths " << st_.pair_deaths
       << " QP_FATAL " << st_.qp_fatal << " PORT_ERR " << st_.port_err
       << " PORT_ACTIVE " << st_.port_active << " DEVICE_FATAL "
       << st_.device_fatal;
    return os.str();
  }

  // Fault: destroys one QP of a random healthy pair under traffic (its
  // peer's process is gone, as it were).  Its WRs flush into its CQ.
  bool DestroyOneQp() {
    std::vector<Pair *> up;
    for (Pair &p : pairs_)
      if (p.state == PairState::kUp) up.push_back(&p);
    if (up.empty()) return false;
    Pair *p = up[rng_() % up.size()];
    Ep *e = rng_() % 2 ? p->x : p->y;
    int rv = ibv_destroy_qp(e->qp);
    if (rv) Bad("ibv_destroy_qp under traffic: " + std::to_string(rv));
    e->qp = nullptr;
    e->destroyed = true;
    return rv == 0;
  }

  // Destroys every object; returns how many destroy calls failed.
  int DestroyAll() {
    int failed = 0;
    for (auto &e : eps_)
      if (e->qp) {
        int rv = ibv_destroy_qp(e->qp);
        if (rv) std::cout << "ibv_destroy_qp: " << rv << "\n";
        failed += rv != 0;
        e->qp = nullptr;
      }
    for (auto &e : eps_) {
      if (e->mr) {
        int rv = ibv_dereg_mr(e->mr);
        if (rv) std::cout << "ibv_dereg_mr: " << rv << "\n";
        failed += rv != 0;
        e->mr = nullptr;
      }
      if (e->cq) {
        int rv = ibv_destroy_cq(e->cq);
        if (rv) std::cout << "ibv_destroy_cq: " << rv << "\n";
        failed += rv != 0;
        e->cq = nullptr;
      }
    }
    if (pd_) {
      int rv = ibv_dealloc_pd(pd_);
      if (rv) std::cout << "ibv_dealloc_pd: " << rv << "\n";
      failed += rv != 0;
      pd_ = nullptr;
    }
    return failed;
  }

 private:
  enum class PairState { kUp, kFailing, kDown };
  struct Pair {
    Ep *x = nullptr, *y = nullptr;
    PairState state = PairState::kUp;
    Clock::time_point since, retry_at, born;
    bool forced = false, reported = false;
    int generation = 0;
  };

  void LogFailure(const Pair &p) {
    std::ostringstream os;
    os << "engine: " << Ms(start_) << " ms: pair " << p.x->index / 2
       << " (generation " << p.generation << ", up " << Ms(p.born)
       << " ms) failed:";
    for (Ep *e : {p.x, p.y}) {
      os << " QP " << (e->qp ? e->qp->qp_num : 0) << ":";
      if (e->destroyed) os << " destroyed";
      if (e->first_error >= 0)
        os << " first " << (e->first_error_recv ? "receive " : "send ")
           << ibv_wc_status_str(static_cast<ibv_wc_status>(e->first_error));
      os << " fatal events " << e->fatal_events << ";";
    }
    std::cout << os.str() << std::endl;
  }

  void Bad(const std::string &what) {
    if (st_.bad++ < 20) ADD_FAILURE() << what;
  }

  uint32_t PickLen() {
    const uint32_t m = o_.max_msg;
    const uint32_t lens[] = {0,    1,    7,    64,    512,   4095,
                             4096, 4097, m / 4, m / 2, m - 1, m};
    return lens[rng_() % (sizeof(lens) / sizeof(lens[0]))];
  }

  bool MakeQps(Pair &p) {
    for (Ep *e : {p.x, p.y}) {
      e->qp = CreateRcQp(pd_, e->cq, e->cq, {kWin, kRecvs, 1, 1, 0});
      if (!e->qp) {
        std::cout << "ibv_create_qp: " << strerror(errno) << "\n";
        DestroyQps(p);
        return false;
      }
    }
    int rx = ConnectQp(ctx_, p.x->qp, p.y->qp->qp_num, o_.to);
    int ry = rx ? rx : ConnectQp(ctx_, p.y->qp, p.x->qp->qp_num, o_.to);
    if (rx || ry) {
      std::cout << "connecting QPs: " << strerror(rx ? rx : ry) << "\n";
      DestroyQps(p);
      return false;
    }
    for (Ep *e : {p.x, p.y}) {
      e->peer_qpn = e->peer->qp->qp_num;
      e->seq = e->rseq = 0;
      e->inbound.clear();
      e->wtgt_owner.assign(kWin, 0);
      e->atomics = 0;
      *e->Counter() = 0;
      e->sq_err = e->rq_err = e->destroyed = false;
      e->first_sq_error = e->first_error = -1;
      e->fatal_events = 0;
    }
    p.state = PairState::kUp;
    p.born = Clock::now();
    p.generation++;
    p.forced = p.reported = false;
    return true;
  }

  void DestroyQps(Pair &p) {
    for (Ep *e : {p.x, p.y})
      if (e->qp) {
        int rv = ibv_destroy_qp(e->qp);
        if (rv) Bad("ibv_destroy_qp: " + std::to_string(rv));
        e->qp = nullptr;
      }
  }

  void ToErr(Ep &e) {
    if (!e.qp) return;
    ibv_qp_attr a = {};
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(e.qp, &a, IBV_QP_STATE);
  }

  static bool Drained(const Pair &p) {
    return p.x->sq.empty() && p.x->rq.empty() && p.y->sq.empty() &&
           p.y->rq.empty();
  }

  // A pair with a failed QP: once all its WRs completed it is down (and
  // replaced, with recreate); the surviving QP, which may never learn that
  // its peer is gone (it has nothing to send), is moved to ERR after
  // force_err_ms; still outstanding 20 s later is a hang.
  void Tend(Pair &p) {
    if (finishing_) return;
    switch (p.state) {
      case PairState::kUp:
        if (!p.x->dead() && !p.y->dead()) return;
        p.state = PairState::kFailing;
        p.since = Clock::now();
        if (o_.verbose) LogFailure(p);
        [[fallthrough]];
      case PairState::kFailing:
        if (Drained(p)) {
          st_.pair_deaths++;
          p.state = PairState::kDown;
          p.since = p.retry_at = Clock::now();
          if (o_.recreate) DestroyQps(p);
          return;
        }
        if (!p.forced && Ms(p.since) > o_.force_err_ms) {
          ToErr(*p.x);
          ToErr(*p.y);
          p.forced = true;
        }
        if (!p.reported && Ms(p.since) > 20000) {
          Bad("QP pair " + std::to_string(p.x->index / 2) + ": " +
              std::to_string(p.x->sq.size() + p.x->rq.size() +
                             p.y->sq.size() + p.y->rq.size()) +
              " WRs still outstanding 20 s after it failed");
          p.reported = true;
        }
        return;
      case PairState::kDown:
        if (!o_.recreate || Clock::now() < p.retry_at) return;
        if (MakeQps(p)) {
          st_.pairs_recreated++;
          return;
        }
        p.retry_at = Clock::now() + std::chrono::milliseconds(500);
        if (!p.reported && Ms(p.since) > 30000) {
          Bad("a QP pair could not be re-created for 30 s");
          p.reported = true;
        }
        return;
    }
  }

  void PollAsync() {
    if (async_broken_) return;
    pollfd pfd = {ctx_->async_fd, POLLIN, 0};
    while (poll(&pfd, 1, 0) > 0) {
      ibv_async_event ev;
      if (ibv_get_async_event(ctx_, &ev)) {
        if (errno != EAGAIN) async_broken_ = true;
        return;
      }
      switch (ev.event_type) {
        case IBV_EVENT_QP_FATAL:
          // Finish() moving one QP of a pair to ERR closes the other's
          // connection: not counted then.
          if (!finishing_) st_.qp_fatal++;
          for (auto &e : eps_)
            if (e->qp == ev.element.qp) e->fatal_events++;
          break;
        case IBV_EVENT_PORT_ERR:
          st_.port_err++;
          break;
        case IBV_EVENT_PORT_ACTIVE:
          st_.port_active++;
          break;
        case IBV_EVENT_DEVICE_FATAL:
          st_.device_fatal++;
          break;
        default:
          break;
      }
      ibv_ack_async_event(&ev);
    }
  }

  bool PollCq(Ep &e) {
    if (!e.cq) return false;
    ibv_wc wc[32];
    int n = ibv_poll_cq(e.cq, 32, wc);
    if (n < 0) {
      Bad("ibv_poll_cq: " + std::to_string(n));
      return false;
    }
    for (int i = 0; i < n; i++) {
      if (wc[i].wr_id & kRecvBit)
        OnRecv(e, wc[i]);
      else
        OnSend(e, wc[i]);
    }
    return n > 0;
  }

  void Failed(Ep &e, const ibv_wc &wc, bool send) {
    if (wc.status == IBV_WC_WR_FLUSH_ERR) {
      st_.flushed++;
      if (finishing_ && !send) st_.flushed_at_finish++;
    } else {
      st_.errors++;
      st_.error_status[wc.status]++;
    }
    if (send && e.first_sq_error < 0) e.first_sq_error = wc.status;
    if (e.first_error < 0) {
      e.first_error = wc.status;
      e.first_error_recv = !send;
    }
    (send ? e.sq_err : e.rq_err) = true;
  }

  // A completion that is not the oldest WR of its queue: out of order (then
  // it is taken out where it was), or unknown (twice, or never posted).
  template <class Q>
  void Unexpected(Ep &e, Q &q, const ibv_wc &wc, bool send) {
    for (auto it = q.begin(); it != q.end(); ++it) {
      uint64_t id;
      if constexpr (std::is_same_v<typename Q::value_type, SendWr>)
        id = it->uid;
      else
        id = it->id;
      if (id == wc.wr_id) {
        Bad("QP " + std::to_string(e.index) + ": wr_id " +
            std::to_string(wc.wr_id) + " completed out of order");
        q.erase(it);
        if (wc.status == IBV_WC_SUCCESS)
          st_.success++;
        else
          Failed(e, wc, send);
        return;
      }
    }
    Bad("QP " + std::to_string(e.index) + ": completion for wr_id " +
        std::to_string(wc.wr_id) + " that is not outstanding (status " +
        ibv_wc_status_str(wc.status) + ")");
  }

  void OnSend(Ep &e, const ibv_wc &wc) {
    if (e.sq.empty() || e.sq.front().uid != wc.wr_id) {
      Unexpected(e, e.sq, wc, true);
      return;
    }
    SendWr w = e.sq.front();
    e.sq.pop_front();
    if (wc.status != IBV_WC_SUCCESS) {
      Failed(e, wc, true);
      return;
    }
    if (e.sq_err) Bad("send completed successfully after an error");
    st_.success++;
    st_.op_success[w.op]++;
    Ep &p = *e.peer;
    bool ok = wc.opcode == trdma_send_wc_opcode(w.op);
    switch (w.op) {
      case IBV_WR_RDMA_WRITE:
      case IBV_WR_RDMA_WRITE_WITH_IMM:
        ok = ok && IsPattern(p.Wtgt(w.slot), w.len, w.uid);
        break;
      case IBV_WR_RDMA_READ:
        ok = ok && wc.byte_len == w.len &&
             !memcmp(e.Rdst(w.slot), p.Rsrc() + w.roff, w.len);
        break;
      case IBV_WR_ATOMIC_CMP_AND_SWP:
      case IBV_WR_ATOMIC_FETCH_AND_ADD:
        ok = ok && wc.byte_len == 8 && *e.AtomRes(w.slot) == w.old;
        break;
      default:
        return;  // SENDs are checked where they land
    }
    if (!ok)
      Bad(std::string(OpName(w.op)) + " wr_id " + std::to_string(w.uid) +
          " len " + std::to_string(w.len) + ": wrong data or completion" +
          " (opcode " + std::to_string(wc.opcode) + ", byte_len " +
          std::to_string(wc.byte_len) + ")");
    else
      st_.bytes += w.len;
  }

  void OnRecv(Ep &e, const ibv_wc &wc) {
    if (e.rq.empty() || e.rq.front().id != wc.wr_id) {
      Unexpected(e, e.rq, wc, false);
      return;
    }
    RecvWr r = e.rq.front();
    e.rq.pop_front();
    if (wc.status != IBV_WC_SUCCESS) {
      Failed(e, wc, false);
      return;
    }
    if (e.rq_err) Bad("receive completed successfully after an error");
    st_.success++;
    if (e.inbound.empty()) {
      Bad("a receive completed with no message under way");
      return;
    }
    Msg m = e.inbound.front();
    e.inbound.pop_front();
    const bool imm = m.op != IBV_WR_SEND;
    bool ok = wc.opcode == (m.op == IBV_WR_RDMA_WRITE_WITH_IMM
                                ? IBV_WC_RECV_RDMA_WITH_IMM
                                : IBV_WC_RECV) &&
              wc.byte_len == m.len &&
              !!(wc.wc_flags & IBV_WC_WITH_IMM) == imm &&
              (!imm || ntohl(wc.imm_data) == static_cast<uint32_t>(m.uid)) &&
              wc.src_qp == e.peer_qpn;
    if (m.op == IBV_WR_RDMA_WRITE_WITH_IMM) {
      // Unless a later WRITE was posted into that region since.
      if (e.wtgt_owner[m.slot] == m.uid)
        ok = ok && IsPattern(e.Wtgt(m.slot), m.len, m.uid);
    } else {
      ok = ok && IsPattern(e.Rcv(r.slot), m.len, m.uid);
      if (ok) st_.bytes += m.len;
    }
    if (!ok)
      Bad(std::string("receive of ") + OpName(m.op) + " wr_id " +
          std::to_string(m.uid) + " len " + std::to_string(m.len) +
          ": wrong data or completion (opcode " + std::to_string(wc.opcode) +
          ", byte_len " + std::to_string(wc.byte_len) + ", flags " +
          std::to_string(wc.wc_flags) + ", src_qp " +
          std::to_string(wc.src_qp) + ")");
  }

  void PostRecvs(Ep &e) {
    while (e.rq.size() < kRecvs) {
      uint32_t slot = e.rseq % kRecvs;
      ibv_sge sge = {Addr(e.Rcv(slot)), e.m, e.mr->lkey};
      ibv_recv_wr wr = {}, *bad;
      wr.wr_id = kRecvBit | ++uid_;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      int rv = ibv_post_recv(e.qp, &wr, &bad);
      if (rv) {
        st_.post_failures++;
        if (!st_.device_fatal) Bad("ibv_post_recv: " + std::to_string(rv));
        return;
      }
      e.rq.push_back({wr.wr_id, slot});
      e.rseq++;
      st_.posted++;
    }
  }

  bool PostOne(Ep &e) {
    Ep &p = *e.peer;
    ibv_wr_opcode op = o_.ops[rng_() % o_.ops.size()];
    if (Consumes(op) && p.inbound.size() >= static_cast<size_t>(kRecvs)) {
      // The peer has no receive to spare: something else that fits.
      bool found = false;
      for (ibv_wr_opcode o : o_.ops)
        if (!Consumes(o)) {
          op = o;
          found = true;
          break;
        }
      if (!found) return false;
    }
    const uint32_t slot = e.seq % kWin;
    SendWr w = {++uid_, op, 0, slot, 0, 0};
    ibv_sge sge = {};
    ibv_send_wr wr = {}, *bad = nullptr;
    wr.wr_id = w.uid;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (IsAtomic(op)) {
      w.len = 8;
      w.old = e.atomics;
      *e.AtomRes(slot) = ~0ull;
      sge = {Addr(e.AtomRes(slot)), 8, e.mr->lkey};
      wr.wr.atomic.remote_addr = Addr(p.Counter());
      wr.wr.atomic.rkey = p.mr->rkey;
      wr.wr.atomic.compare_add =
          op == IBV_WR_ATOMIC_FETCH_AND_ADD ? 1 : e.atomics;
      wr.wr.atomic.swap = e.atomics + 1;
    } else if (op == IBV_WR_RDMA_READ) {
      w.len = PickLen();
      w.roff = rng_() % (o_.max_msg - w.len + 1);
      memset(e.Rdst(slot), 0xa5, w.len);
      sge = {Addr(e.Rdst(slot)), w.len, e.mr->lkey};
      wr.wr.rdma.remote_addr = Addr(p.Rsrc() + w.roff);
      wr.wr.rdma.rkey = p.mr->rkey;
    } else {
      w.len = PickLen();
      Pattern(e.Src(slot), w.len, w.uid);
      sge = {Addr(e.Src(slot)), w.len, e.mr->lkey};
      wr.imm_data = htonl(static_cast<uint32_t>(w.uid));
      if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM) {
        wr.wr.rdma.remote_addr = Addr(p.Wtgt(slot));
        wr.wr.rdma.rkey = p.mr->rkey;
      }
    }
    if (!w.len) wr.num_sge = 0;
    int rv = ibv_post_send(e.qp, &wr, &bad);
    if (rv) {
      st_.post_failures++;
      if (!st_.device_fatal) Bad("ibv_post_send: " + std::to_string(rv));
      return false;
    }
    if (IsAtomic(op)) e.atomics++;
    e.seq++;
    e.sq.push_back(w);
    st_.posted++;
    if (Consumes(op)) p.inbound.push_back({w.uid, op, w.len, slot});
    if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM)
      p.wtgt_owner[slot] = w.uid;
    return true;
  }

  ibv_context *ctx_;
  EngineOptions o_;
  std::mt19937 rng_;
  ibv_pd *pd_ = nullptr;
  std::vector<std::unique_ptr<Ep>> eps_;
  std::vector<Pair> pairs_;
  Stats st_;
  uint64_t uid_ = 0;
  bool ok_ = false, posting_ = true, finishing_ = false;
  bool async_broken_ = false;
  Clock::time_point start_ = Clock::now();
};

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override { CleanUp(); }
  void TearDown() override { CleanUp(); }

  // Whatever an earlier failure left behind: a blackhole, netem, the
  // netdev down, the device deleted.
  static void CleanUp() {
    Sh("nft delete table inet trdma_fault 2>/dev/null; "
       "tc qdisc del dev lo root 2>/dev/null; ip link set " +
       NetdevName() + " up");
    if (!DeviceExists()) Sh(LinkAddCmd());
  }

  static Context Open() {
    Context ctx = OpenDevice(DevName());
    EXPECT_TRUE(ctx) << "no device " << DevName();
    return ctx;
  }
};

// --- 1. peer process SIGKILLed mid-transfer --------------------------------

constexpr uint32_t kPm = 32 << 10;  // largest message
constexpr int kPw = 32;             // window and receives, both processes

uint32_t ParentSendLen(uint64_t k) {
  return SplitMix(k ^ 0x11) % (kPm + 1);
}
uint32_t ChildSendLen(uint64_t k) { return SplitMix(k ^ 0x22) % (kPm + 1); }
uint64_t ParentSendKey(uint64_t k) { return (1ull << 40) | k; }
uint64_t ChildSendKey(uint64_t k) { return (2ull << 40) | k; }
constexpr uint64_t kChildRsrcKey = 3ull << 40;
uint64_t ParentWriteKey(uint64_t id) { return (4ull << 40) | id; }

// The child's buffer: WRITE targets | READ source | atomics target |
// receives | send sources.  The parent's: sources | READ destinations |
// receives | atomics results.
constexpr size_t kChildWtgt = 0, kChildRsrc = kPw * size_t{kPm},
                 kChildCounter = kChildRsrc + kPm,
                 kChildRcv = kChildCounter + 4096,
                 kChildSrc = kChildRcv + kPw * size_t{kPm},
                 kChildLen = kChildSrc + kPw * size_t{kPm};
constexpr size_t kParSrc = 0, kParRdst = kPw * size_t{kPm},
                 kParRcv = kParRdst + kPw * size_t{kPm},
                 kParAtom = kParRcv + kPw * size_t{kPm},
                 kParLen = kParAtom + 4096;

struct PeerInfo {
  uint32_t qpn, rkey;
  uint64_t addr;
};

// What the child reports through memory shared with the parent.
struct ChildBoard {
  std::atomic<uint64_t> received;  // parent's SENDs that arrived intact
  std::atomic<uint64_t> bad;       // parent's SENDs that arrived wrong
  std::atomic<uint64_t> sent;      // own SENDs completed
  char why[256];
};

// The child: its own context and QP connected to the parent's, SENDs and
// SENDs with immediate to the parent for as long as it lives, checking
// every SEND of the parent that arrives.  Killed by the parent.
[[noreturn]] void PeerChild(int sock, ChildBoard *board) {
  alarm(60);
  auto fail = [&](const char *why) {
    snprintf(board->why, sizeof(board->why), "%s (errno %d)", why, errno);
    _exit(2);
  };
  Context ctx = OpenDevice(DevName());
  if (!ctx) fail("open device");
  ibv_pd *pd = ibv_alloc_pd(ctx.get());
  ibv_cq *cq = ibv_create_cq(ctx.get(), 4 * kPw, nullptr, nullptr, 0);
  uint8_t *buf = MapBuffer(kChildLen);
  if (!pd || !cq || !buf) fail("pd/cq/buffer");
  Pattern(buf + kChildRsrc, kPm, kChildRsrcKey);
  *reinterpret_cast<uint64_t *>(buf + kChildCounter) = 0;
  ibv_mr *mr = ibv_reg_mr(pd, buf, kChildLen, kAllAccess);
  ibv_qp *qp = mr ? CreateRcQp(pd, cq, cq, {kPw, kPw, 1, 1, 0}) : nullptr;
  if (!qp) fail("mr/qp");
  PeerInfo me = {qp->qp_num, mr->rkey, Addr(buf)}, peer;
  if (write(sock, &me, sizeof(me)) != sizeof(me) ||
      !ReadFull(sock, &peer, sizeof(peer), 10000))
    fail("exchange");
  if (ConnectQp(ctx.get(), qp, peer.qpn, {18, 7, 7})) fail("connect");
  uint64_t rseq = 0;
  auto post_recv = [&] {
    uint32_t slot = rseq % kPw;
    ibv_sge sge = {Addr(buf + kChildRcv + slot * size_t{kPm}), kPm, mr->lkey};
    ibv_recv_wr wr = {}, *bad;
    wr.wr_id = kRecvBit | rseq++;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(qp, &wr, &bad)) fail("post_recv");
  };
  for (int i = 0; i < kPw; i++) post_recv();
  if (write(sock, "r", 1) != 1) fail("ready");
  uint64_t posted = 0, done = 0, received = 0;
  for (;;) {
    while (posted - done < kPw) {
      uint64_t k = ++posted;
      uint32_t slot = k % kPw, len = ChildSendLen(k);
      uint8_t *src = buf + kChildSrc + slot * size_t{kPm};
      Pattern(src, len, ChildSendKey(k));
      ibv_sge sge = {Addr(src), len, mr->lkey};
      ibv_send_wr wr = {}, *bad;
      wr.wr_id = k;
      wr.opcode = k % 2 ? IBV_WR_SEND : IBV_WR_SEND_WITH_IMM;
      wr.imm_data = htonl(static_cast<uint32_t>(k));
      wr.sg_list = &sge;
      wr.num_sge = len ? 1 : 0;
      wr.send_flags = IBV_SEND_SIGNALED;
      if (ibv_post_send(qp, &wr, &bad)) fail("post_send");
    }
    ibv_wc wc[16];
    int n = ibv_poll_cq(cq, 16, wc);
    if (n < 0) fail("poll_cq");
    for (int i = 0; i < n; i++) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        snprintf(board->why, sizeof(board->why), "completion status %s",
                 ibv_wc_status_str(wc[i].status));
        _exit(3);
      }
      if (!(wc[i].wr_id & kRecvBit)) {
        done++;
        board->sent++;
        continue;
      }
      uint64_t k = ++received;
      uint32_t slot = (wc[i].wr_id & ~kRecvBit) % kPw;
      uint32_t len = ParentSendLen(k);
      bool ok = wc[i].opcode == IBV_WC_RECV && wc[i].byte_len == len &&
                IsPattern(buf + kChildRcv + slot * size_t{kPm}, len,
                          ParentSendKey(k));
      (ok ? board->received : board->bad)++;
      post_recv();
    }
    if (!n) usleep(20);
  }
}

// The peer process of a QP is SIGKILLed while WRs run both ways: the
// surviving QP goes to ERR with IBV_EVENT_QP_FATAL within a bound, every WR
// it had outstanding completes (success or flush) exactly once, what did
// arrive is intact, and the dead process's objects are freed.
TEST_F(FaultTest, PeerProcessKilledMidTransfer) {
  const Counts baseline = Resources();
  ASSERT_FALSE(baseline.empty());
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  void *shared = mmap(nullptr, sizeof(ChildBoard), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  ChildBoard *board = new (shared) ChildBoard();
  fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(sv[0]);
    PeerChild(sv[1], board);
  }
  close(sv[1]);
  struct Reaper {
    pid_t pid;
    int st = 0;
    bool reaped = false;
    ~Reaper() {
      if (!reaped) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } child{pid};

  // The parent's side, created after the fork.
  Context ctx = Open();
  ASSERT_TRUE(ctx);
  ibv_pd *pd = ibv_alloc_pd(ctx.get());
  ASSERT_NE(pd, nullptr);
  ibv_cq *cq = ibv_create_cq(ctx.get(), 4 * kPw, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  uint8_t *buf = MapBuffer(kParLen);
  ASSERT_NE(buf, nullptr);
  ibv_mr *mr = ibv_reg_mr(pd, buf, kParLen, kAllAccess);
  ASSERT_NE(mr, nullptr);
  ibv_qp *qp = CreateRcQp(pd, cq, cq, {kPw, kPw, 1, 1, 0});
  ASSERT_NE(qp, nullptr);
  PeerInfo me = {qp->qp_num, mr->rkey, Addr(buf)}, peer;
  ASSERT_EQ(write(sv[0], &me, sizeof(me)), static_cast<ssize_t>(sizeof(me)));
  ASSERT_TRUE(ReadFull(sv[0], &peer, sizeof(peer), 10000)) << board->why;
  ASSERT_EQ(ConnectQp(ctx.get(), qp, peer.qpn, {18, 7, 7}), 0);
  Counts own = baseline;
  for (const char *k : {"ctx", "pd", "cq", "qp", "mr"}) own[k]++;

  struct Wr {
    uint64_t id;
    ibv_wr_opcode op;
    uint32_t len, slot, roff;
    uint64_t key;  // READ-back of a WRITE: the WRITE's pattern
    bool readback;
    uint64_t old;
  };
  std::deque<Wr> sq;
  std::deque<std::pair<uint64_t, uint32_t>> rq;  // wr_id, slot
  uint64_t seq = 0, rseq = 0, sends = 0, atomics = 0, received = 0;
  uint64_t ok = 0, flushed = 0, bad = 0, other = 0, after_kill_ok = 0;
  uint64_t retry_exc = 0;
  bool sq_err = false, rq_err = false, err = false, killed = false;
  std::mt19937 rng(7);
  auto fail = [&](const std::string &what) {
    if (bad++ < 10) ADD_FAILURE() << what;
  };
  auto post_recv = [&] {
    uint32_t slot = rseq % kPw;
    ibv_sge sge = {Addr(buf + kParRcv + slot * size_t{kPm}), kPm, mr->lkey};
    ibv_recv_wr wr = {}, *rbad;
    wr.wr_id = kRecvBit | rseq++;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    int rv = ibv_post_recv(qp, &wr, &rbad);
    if (rv) fail("ibv_post_recv: " + std::to_string(rv));
    else rq.push_back({wr.wr_id, slot});
  };
  auto post = [&](Wr w, uint64_t raddr, uint64_t compare_add, uint64_t swap) {
    ibv_sge sge = {};
    if (w.op == IBV_WR_RDMA_READ)
      sge = {Addr(buf + kParRdst + w.slot * size_t{kPm}), w.len, mr->lkey};
    else if (IsAtomic(w.op))
      sge = {Addr(buf + kParAtom + 8 * w.slot), 8, mr->lkey};
    else
      sge = {Addr(buf + kParSrc + w.slot * size_t{kPm}), w.len, mr->lkey};
    ibv_send_wr wr = {}, *sbad;
    wr.wr_id = w.id;
    wr.opcode = w.op;
    wr.sg_list = &sge;
    wr.num_sge = w.len ? 1 : 0;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = peer.rkey;
    if (IsAtomic(w.op)) {
      wr.wr.atomic.remote_addr = raddr;
      wr.wr.atomic.rkey = peer.rkey;
      wr.wr.atomic.compare_add = compare_add;
      wr.wr.atomic.swap = swap;
    }
    int rv = ibv_post_send(qp, &wr, &sbad);
    if (rv) {
      fail("ibv_post_send: " + std::to_string(rv));
      return false;
    }
    sq.push_back(w);
    return true;
  };
  // Posts the parent's mix while the window has room: SENDs (checked by
  // the child), a WRITE followed by a READ of the same bytes back, READs
  // of the child's pattern, atomics on the child's counter.
  auto post_some = [&] {
    while (sq.size() + 2 <= kPw) {
      int kind = rng() % 4;
      uint32_t slot = seq % kPw;
      if (kind == 0) {
        uint64_t k = ++sends;
        uint32_t len = ParentSendLen(k);
        Pattern(buf + kParSrc + slot * size_t{kPm}, len, ParentSendKey(k));
        if (!post({++seq, IBV_WR_SEND, len, slot, 0, 0, false, 0}, 0, 0, 0))
          return;
      } else if (kind == 1) {
        uint64_t id = ++seq;
        uint32_t len = 1 + rng() % kPm;
        Pattern(buf + kParSrc + slot * size_t{kPm}, len, ParentWriteKey(id));
        uint64_t raddr = peer.addr + kChildWtgt + slot * size_t{kPm};
        if (!post({id, IBV_WR_RDMA_WRITE, len, slot, 0, 0, false, 0}, raddr,
                  0, 0))
          return;
        uint32_t rslot = seq % kPw;
        memset(buf + kParRdst + rslot * size_t{kPm}, 0xa5, len);
        if (!post({++seq, IBV_WR_RDMA_READ, len, rslot, 0, ParentWriteKey(id),
                   true, 0},
                  raddr, 0, 0))
          return;
      } else if (kind == 2) {
        uint32_t len = 1 + rng() % kPm;
        uint32_t roff = rng() % (kPm - len + 1);
        memset(buf + kParRdst + slot * size_t{kPm}, 0xa5, len);
        if (!post({++seq, IBV_WR_RDMA_READ, len, slot, roff, kChildRsrcKey,
                   false, 0},
                  peer.addr + kChildRsrc + roff, 0, 0))
          return;
      } else {
        bool faa = rng() % 2;
        ibv_wr_opcode op =
            faa ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
        if (!post({++seq, op, 8, slot, 0, 0, false, atomics},
                  peer.addr + kChildCounter, faa ? 1 : atomics, atomics + 1))
          return;
        atomics++;
      }
    }
  };
  auto on_wc = [&](const ibv_wc &wc) {
    const bool recv = wc.wr_id & kRecvBit;
    if (wc.status != IBV_WC_SUCCESS) {
      // Only a flush may end a WR once the peer is gone, but for the
      // oldest send outstanding: nobody answers it, and its transport
      // timeout ends it with RETRY_EXC_ERR, as on a fabric.
      if (wc.status == IBV_WC_WR_FLUSH_ERR)
        flushed++;
      else if (wc.status == IBV_WC_RETRY_EXC_ERR && killed && !recv &&
               !sq_err && !retry_exc)
        retry_exc++;
      else {
        other++;
        ADD_FAILURE() << (recv ? "receive" : "send") << " wr_id "
                      << (wc.wr_id & ~kRecvBit) << ": "
                      << ibv_wc_status_str(wc.status)
                      << (killed ? " after the kill" : " before the kill");
      }
      (recv ? rq_err : sq_err) = err = true;
    } else {
      ok++;
      if (recv ? rq_err : sq_err)
        fail("successful completion after an error on its queue");
      if (killed) after_kill_ok++;
    }
    if (recv) {
      if (rq.empty() || rq.front().first != wc.wr_id) {
        fail("receive completion out of order or unknown: " +
             std::to_string(wc.wr_id & ~kRecvBit));
        return;
      }
      uint32_t slot = rq.front().second;
      rq.pop_front();
      if (wc.status != IBV_WC_SUCCESS) return;
      uint64_t k = ++received;
      uint32_t len = ChildSendLen(k);
      bool imm = k % 2 == 0;
      if (wc.opcode != IBV_WC_RECV || wc.byte_len != len ||
          !!(wc.wc_flags & IBV_WC_WITH_IMM) != imm ||
          (imm && ntohl(wc.imm_data) != k) ||
          !IsPattern(buf + kParRcv + slot * size_t{kPm}, len,
                     ChildSendKey(k)))
        fail("child's message " + std::to_string(k) + " arrived wrong");
      if (!err) post_recv();
      return;
    }
    if (sq.empty() || sq.front().id != wc.wr_id) {
      fail("send completion out of order or unknown: " +
           std::to_string(wc.wr_id));
      return;
    }
    Wr w = sq.front();
    sq.pop_front();
    if (wc.status != IBV_WC_SUCCESS) return;
    bool good = wc.opcode == trdma_send_wc_opcode(w.op);
    if (w.op == IBV_WR_RDMA_READ)
      good = good && wc.byte_len == w.len &&
             IsPattern(buf + kParRdst + w.slot * size_t{kPm}, w.len, w.key,
                       w.roff);
    else if (IsAtomic(w.op))
      good = good && *reinterpret_cast<uint64_t *>(buf + kParAtom +
                                                   8 * w.slot) == w.old;
    if (!good)
      fail(std::string(OpName(w.op)) + (w.readback ? " (read-back)" : "") +
           " wr_id " + std::to_string(w.id) + " returned wrong data");
  };
  bool fatal = false;
  auto poll_all = [&] {
    ibv_wc wc[16];
    int n = ibv_poll_cq(cq, 16, wc);
    EXPECT_GE(n, 0);
    for (int i = 0; i < n; i++) on_wc(wc[i]);
    pollfd pfd = {ctx->async_fd, POLLIN, 0};
    if (poll(&pfd, 1, 0) > 0) {
      ibv_async_event ev;
      if (!ibv_get_async_event(ctx.get(), &ev)) {
        if (ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == qp)
          fatal = true;
        ibv_ack_async_event(&ev);
      }
    }
    return n;
  };
  fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);

  for (int i = 0; i < kPw; i++) post_recv();
  char ready;
  ASSERT_TRUE(ReadFull(sv[0], &ready, 1, 10000)) << board->why;

  // Traffic both ways until both sides saw plenty of it arrive.
  auto t0 = Clock::now();
  while (Ms(t0) < 20000 && !err &&
         (ok < 400 || received < 100 || board->received < 100)) {
    post_some();
    if (!poll_all()) usleep(20);
  }
  ASSERT_FALSE(err) << board->why;
  ASSERT_GE(received, 100u) << "traffic did not get going; child: "
                            << board->why;
  ASSERT_GE(board->received.load(), 100u);
  post_some();
  const size_t out_sq = sq.size(), out_rq = rq.size();
  auto tk = Clock::now();
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  killed = true;
  long fatal_ms = -1;
  // Keep posting until the QP fails; everything must come back.
  while (Ms(tk) < 10000 && !(fatal && sq.empty() && rq.empty())) {
    if (!err && !fatal) post_some();
    if (fatal && fatal_ms < 0) fatal_ms = Ms(tk);
    if (!poll_all()) usleep(50);
  }
  if (fatal && fatal_ms < 0) fatal_ms = Ms(tk);
  std::cout << "killed the peer with " << out_sq << " sends and " << out_rq
            << " receives outstanding; QP_FATAL after " << fatal_ms
            << " ms; " << ok << " ok (" << after_kill_ok
            << " after the kill), " << flushed << " flushed, " << retry_exc
            << " retries exceeded; " << received
            << " messages in, child verified " << board->received.load()
            << "\n";

  EXPECT_TRUE(fatal) << "no IBV_EVENT_QP_FATAL within 10 s of the kill";
  // The QP had requests on the wire: it fails after its transport timeout
  // (0.54 s), not later; 3 s leaves room for a slow guest.
  EXPECT_GE(fatal_ms, 0);
  EXPECT_LT(fatal_ms, 3000);
  EXPECT_TRUE(sq.empty()) << sq.size() << " sends never completed";
  EXPECT_TRUE(rq.empty()) << rq.size() << " receives never completed";
  EXPECT_GT(flushed, 0u);
  EXPECT_EQ(other, 0u);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(board->bad.load(), 0u) << "the child got wrong data";
  ibv_qp_attr qa;
  ibv_qp_init_attr qi;
  ASSERT_EQ(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);

  ASSERT_EQ(waitpid(pid, &child.st, 0), pid);
  child.reaped = true;
  EXPECT_TRUE(WIFSIGNALED(child.st) && WTERMSIG(child.st) == SIGKILL)
      << "child ended otherwise: " << board->why;
  // The child's objects are gone: what is left is the parent's own.
  Counts now = ResourcesBecome(own, 5000);
  EXPECT_EQ(now, own) << "now: " << Show(now) << " want: " << Show(own);

  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  ctx.reset();
  munmap(buf, kParLen);
  munmap(shared, sizeof(ChildBoard));
  close(sv[0]);
  now = ResourcesBecome(baseline, 5000);
  EXPECT_EQ(now, baseline) << "now: " << Show(now);
}

// --- 2. link down and up, blackholes ---------------------------------------

// The netdev goes down for 1.5 s while every opcode runs on two QP pairs
// whose timeout (8.6 s) is far longer: the port reports DOWN and comes back
// ACTIVE with its async events, traffic resumes, and no WR is lost, failed
// or doubled; every byte is exact.  (In a one-guest lab the connections
// ride lo, so whether the path is cut at all is printed, not assumed.)
TEST_F(FaultTest, LinkDownAndUpUnderTraffic) {
  Context ctx = Open();
  ASSERT_TRUE(ctx);
  ASSERT_EQ(PortState(ctx.get()), IBV_PORT_ACTIVE);
  Engine eng(ctx.get(), {});
  ASSERT_TRUE(eng.ok());
  eng.RunFor(1000);
  const uint64_t before = eng.stats().success;
  ASSERT_GT(before, 0u);
  const long r0 = TcpRetransSegs();
  uint64_t during;
  ibv_port_state down_state;
  {
    LinkDown down;
    ASSERT_TRUE(down.on());
    eng.RunFor(300);
    down_state = PortState(ctx.get());
    eng.RunFor(1200);
    during = eng.stats().success - before;
  }
  const uint64_t at_up = eng.stats().success;
  eng.RunUntil([&] { return eng.stats().success > at_up + 200; }, 10000);
  const uint64_t after = eng.stats().success - at_up;
  eng.RunFor(1000);
  ASSERT_TRUE(eng.Finish(20000));
  eng.CheckAtomicCounters();
  std::cout << "completions while " << NetdevName() << " was down: "
            << during << "; after it came up: " << after << "; TCP retrans "
            << TcpRetransSegs() - r0 << "\n"
            << eng.Summary() << "\n";
  EXPECT_NE(down_state, IBV_PORT_ACTIVE);
  EXPECT_EQ(PortState(ctx.get()), IBV_PORT_ACTIVE);
  EXPECT_GE(eng.stats().port_err, 1u);
  EXPECT_GE(eng.stats().port_active, 1u);
  EXPECT_GT(after, 200u) << "traffic did not resume";
  eng.ExpectNoFailure();
  eng.ExpectBalanced();
}

// Every trdma segment is dropped for 2 s, far less than the QP timeout
// (8.6 s): TCP retransmits, the QPs ride it out, traffic resumes, and no WR
// is lost, failed or doubled; every byte is exact.
TEST_F(FaultTest, BlackholeShorterThanTheTimeoutIsRiddenOut) {
  Context ctx = Open();
  ASSERT_TRUE(ctx);
  Engine eng(ctx.get(), {});
  ASSERT_TRUE(eng.ok());
  eng.RunFor(1000);
  const long r0 = TcpRetransSegs();
  uint64_t at_on, during;
  long dropped;
  {
    Blackhole bh;
    ASSERT_TRUE(bh.on());
    eng.RunFor(200);  // what was on the wire may still land
    at_on = eng.stats().success;
    eng.RunFor(1800);
    during = eng.stats().success - at_on;
    dropped = bh.Dropped();
  }
  const uint64_t at_off = eng.stats().success;
  auto t0 = Clock::now();
  eng.RunUntil([&] { return eng.stats().success > at_off + 200; }, 10000);
  const long resumed_ms = Ms(t0);
  eng.RunFor(1000);
  ASSERT_TRUE(eng.Finish(20000));
  eng.CheckAtomicCounters();
  const long retrans = TcpRetransSegs() - r0;
  // Segments dropped by netfilter on output never count as retransmitted
  // (RetransSegs counts what left); the rule's counter shows the drops.
  std::cout << "completions during the blackhole: " << during << "; "
            << dropped << " segments dropped; 200 more completions "
            << resumed_ms << " ms after it; TCP RetransSegs +" << retrans
            << "\n"
            << eng.Summary() << "\n";
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(during, 0u) << "completions while every segment is dropped?";
  EXPECT_LT(resumed_ms, 10000) << "traffic did not resume";
  eng.ExpectNoFailure();
  eng.ExpectBalanced();
}

// Blackholed for longer than the QP timeout (268 ms x 4 = 1.07 s): every
// QP, all of which have requests on the wire, fails its oldest WR with
// IBV_WC_RETRY_EXC_ERR and flushes the rest, with IBV_EVENT_QP_FATAL, no
// sooner than the timeout and within seconds of it; successful completions
// before that carry exact data, and every WR completes once.
TEST_F(FaultTest, BlackholeLongerThanTheTimeoutFailsEveryQp) {
  Context ctx = Open();
  ASSERT_TRUE(ctx);
  EngineOptions o;
  o.to = {16, 3, 7};
  o.force_err_ms = 15000;  // let each QP time out on its own
  Engine eng(ctx.get(), o);
  ASSERT_TRUE(eng.ok());
  eng.RunFor(1000);
  ASSERT_GT(eng.stats().success, 0u);
  long all_ms;
  auto t0 = Clock::now();
  {
    Blackhole bh;
    ASSERT_TRUE(bh.on());
    // Each QP's QP_FATAL too: the async event may be read after the
    // last completion (a busy host showed it).
    auto all_fatal = [&] {
      for (auto &e : eng.eps())
        if (!e->fatal_events) return false;
      return true;
    };
    eng.RunUntil(
        [&] {
          return eng.pairs_up() == 0 && !eng.Outstanding() && all_fatal();
        },
        20000);
    all_ms = Ms(t0);
  }
  std::cout << "all QPs failed and drained " << all_ms
            << " ms into the blackhole\n"
            << eng.Summary() << "\n";
  EXPECT_EQ(eng.pairs_up(), 0);
  EXPECT_EQ(eng.Outstanding(), 0u);
  EXPECT_GE(all_ms, 900);
  EXPECT_LT(all_ms, 10000);
  for (auto &e : eng.eps()) {
    EXPECT_EQ(e->first_sq_error, IBV_WC_RETRY_EXC_ERR)
        << "QP " << e->index << ": first failed send: "
        << (e->first_sq_error < 0
                ? "none"
                : ibv_wc_status_str(
                      static_cast<ibv_wc_status>(e->first_sq_error)));
    EXPECT_EQ(e->fatal_events, 1) << "QP " << e->index;
  }
  // One RETRY_EXC_ERR per QP, everything else flushed.
  EXPECT_EQ(eng.stats().errors, eng.eps().size()) << eng.Summary();
  EXPECT_EQ(eng.stats().error_status[IBV_WC_RETRY_EXC_ERR],
            eng.eps().size());
  ASSERT_TRUE(eng.Finish(5000));
  eng.ExpectBalanced();
}

// --- 3. loss, reorder, duplication, delay ----------------------------------

struct Phase {
  double mb_s;
  long retrans;
  uint64_t wrs;
};

// Every opcode for ms on two QP pairs, under the given netem on lo (none if
// empty); nothing may fail, every byte is checked.
Phase RunPhase(ibv_context *ctx, const std::string &netem, long ms,
               unsigned seed) {
  EngineOptions o;
  o.seed = seed;
  Engine eng(ctx, o);
  EXPECT_TRUE(eng.ok());
  if (!eng.ok()) return {};
  std::unique_ptr<Netem> qdisc;
  if (!netem.empty()) {
    qdisc = std::make_unique<Netem>(netem);
    EXPECT_TRUE(qdisc->on()) << "tc qdisc add dev lo root netem " << netem;
  }
  const long r0 = TcpRetransSegs();
  auto t0 = Clock::now();
  eng.RunFor(ms);
  const uint64_t bytes = eng.stats().bytes, wrs = eng.stats().success;
  const double secs = Ms(t0) / 1000.0;
  EXPECT_TRUE(eng.Finish(30000));
  const long retrans = TcpRetransSegs() - r0;
  qdisc.reset();
  eng.CheckAtomicCounters();
  eng.ExpectNoFailure();
  eng.ExpectBalanced();
  for (ibv_wr_opcode op : kAllOps)
    EXPECT_GT(eng.stats().op_success[op], 0u) << OpName(op) << " never ran";
  Phase ph = {bytes / secs / 1e6, retrans, wrs};
  std::cout << (netem.empty() ? "no netem" : "netem " + netem) << ": "
            << ph.mb_s << " MB/s verified, " << wrs << " WRs in " << secs
            << " s, TCP RetransSegs +" << retrans << "\n"
            << eng.Summary() << "\n";
  return ph;
}

TEST_F(FaultTest, NetemLossReorderDuplicateDelayOnLo) {
  ASSERT_EQ(Sh("command -v tc >/dev/null"), 0) << "no tc in the guest";
  ASSERT_EQ(Sh("modprobe sch_netem"), 0) << "no sch_netem in the guest";
  Context ctx = Open();
  ASSERT_TRUE(ctx);
  Phase clean = RunPhase(ctx.get(), "", 6000, 11);
  Phase lossy = RunPhase(
      ctx.get(), "loss 2% delay 5ms reorder 10% duplicate 1%", 15000, 12);
  EXPECT_EQ(ShOut("tc qdisc show dev lo").find("netem"), std::string::npos)
      << "netem left on lo";
  std::cout << "throughput under netem: " << lossy.mb_s << " MB/s vs "
            << clean.mb_s << " MB/s without; TCP retransmissions "
            << lossy.retrans << " vs " << clean.retrans << "\n";
  EXPECT_GT(lossy.wrs, 0u);
  EXPECT_GT(lossy.retrans, 0) << "2% loss without a retransmission?";
}

// --- 4. the device removed under traffic -----------------------------------

// What removing a device under traffic did (RemoveUnderTraffic).
struct Removal {
  std::optional<int> rc;  // the removing command's exit status
  long cmd_ms = -1, fatal_ms = -1;
  size_t outstanding = 0;  // WRs in flight when it started
  uint64_t ok_since = 0;   // completed successfully after that
  Stats st;
  int destroy_failures = -1;
  int post_after = 0;  // ibv_post_send's return once the device is gone
};

// Runs every opcode on two QP pairs of the device dev for 1.5 s, stops
// posting (no WR races the removal: what is outstanding is in flight) and
// runs cmd, which removes the device; polls until cmd returned, the
// process got IBV_EVENT_DEVICE_FATAL and every WR came back, then destroys
// every object.
Removal RemoveUnderTraffic(const std::string &dev, const std::string &cmd) {
  Removal r;
  Context ctx = OpenDevice(dev);
  EXPECT_TRUE(ctx) << "no device " << dev;
  if (!ctx) return r;
  Engine eng(ctx.get(), {});
  EXPECT_TRUE(eng.ok());
  if (!eng.ok()) return r;
  eng.RunFor(1500);
  EXPECT_GT(eng.stats().success, 0u);
  eng.set_posting(false);
  r.outstanding = eng.Outstanding();
  const uint64_t ok_before = eng.stats().success;
  auto t0 = Clock::now();
  pid_t pid = Spawn(cmd);
  EXPECT_GT(pid, 0);
  if (pid <= 0) return r;
  while (Ms(t0) < 20000 &&
         (!r.rc || !eng.stats().device_fatal || eng.Outstanding())) {
    eng.Step();
    if (!r.rc && (r.rc = Reap(pid))) r.cmd_ms = Ms(t0);
    if (r.fatal_ms < 0 && eng.stats().device_fatal) r.fatal_ms = Ms(t0);
  }
  if (!r.rc) {
    // Hung: leave it to the lab's timeout rather than block here.
    kill(pid, SIGKILL);
  }
  r.ok_since = eng.stats().success - ok_before;
  r.st = eng.stats();
  std::cout << cmd << ": rc " << (r.rc ? *r.rc : -999) << " after "
            << r.cmd_ms << " ms; DEVICE_FATAL after " << r.fatal_ms
            << " ms; " << r.outstanding << " WRs outstanding at the start, "
            << r.ok_since << " completed ok since, "
            << eng.Outstanding() << " never came back\n"
            << eng.Summary() << "\n";
  EXPECT_EQ(eng.Outstanding(), 0u) << "WRs lost with the device";
  if (!eng.eps().empty() && eng.eps()[0]->qp) {
    ibv_send_wr wr = {}, *bad;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    r.post_after = ibv_post_send(eng.eps()[0]->qp, &wr, &bad);
  }
  r.destroy_failures = eng.DestroyAll();
  return r;
}

// Checks what every removal must have done.
void ExpectCleanRemoval(const Removal &r) {
  ASSERT_TRUE(r.rc.has_value()) << "the removal hangs";
  EXPECT_LT(r.cmd_ms, 10000);
  EXPECT_GT(r.outstanding, 0u);
  EXPECT_EQ(r.st.device_fatal, 1u);
  EXPECT_EQ(r.st.errors, 0u) << "completions other than success or flush";
  EXPECT_EQ(r.st.bad, 0u) << "wrong data, or a WR completed twice";
  EXPECT_EQ(r.st.posted, r.st.success + r.st.errors + r.st.flushed);
  EXPECT_NE(r.post_after, 0) << "a post succeeded on a removed device";
  EXPECT_EQ(r.destroy_failures, 0) << "destroy after disassociation failed";
}

// A fresh context on the lab's device carries traffic without a failure.
void ExpectTrafficWorks() {
  Context ctx = OpenDevice(DevName());
  ASSERT_TRUE(ctx);
  auto t0 = Clock::now();
  while (PortState(ctx.get()) != IBV_PORT_ACTIVE && Ms(t0) < 5000)
    SleepMs(50);
  ASSERT_EQ(PortState(ctx.get()), IBV_PORT_ACTIVE);
  Engine eng(ctx.get(), {});
  ASSERT_TRUE(eng.ok());
  eng.RunFor(500);
  ASSERT_TRUE(eng.Finish(10000));
  EXPECT_GT(eng.stats().success, 0u);
  eng.ExpectNoFailure();
  eng.ExpectBalanced();
}

// `rdma link delete` while two QP pairs carry every opcode: it returns
// within seconds, the process gets IBV_EVENT_DEVICE_FATAL, every WR that
// was outstanding completes from the CQ rings (success or flush), and every
// object can still be destroyed.  The device is added again afterwards and
// carries traffic.  Nothing here uses a device opened before the removal.
TEST_F(FaultTest, DeviceRemovedUnderTraffic) {
  ASSERT_TRUE(DeviceExists());
  Removal r = RemoveUnderTraffic(DevName(), "rdma link delete " + DevName());
  ASSERT_NO_FATAL_FAILURE(ExpectCleanRemoval(r));
  EXPECT_EQ(*r.rc, 0);
  EXPECT_FALSE(DeviceExists());
  ASSERT_EQ(Sh(LinkAddCmd()), 0);
  ExpectTrafficWorks();
}

// The netdev under a device is unregistered (`ip link del`) while two QP
// pairs carry every opcode: the device goes away, the process gets
// IBV_EVENT_DEVICE_FATAL, every outstanding WR completes once (success or
// flush, data exact), every object can still be destroyed, nothing hangs.
// The lab's own device is untouched and still works.
TEST_F(FaultTest, NetdevUnregisteredUnderTraffic) {
  const std::string nd = "trdma-fx0", dev = "trdmafx";
  Sh("ip link del " + nd + " 2>/dev/null");
  ASSERT_EQ(Sh("ip link add " + nd + " type dummy && ip addr add "
               "10.99.7.1/24 dev " + nd + " && ip link set " + nd + " up"),
            0);
  ASSERT_EQ(Sh("rdma link add " + dev + " type trdma netdev " + nd), 0);
  // The IPv4 GID appears once the address is in the table.
  auto t0 = Clock::now();
  while (Ms(t0) < 5000) {
    Context c = OpenDevice(dev);
    ibv_gid g;
    if (c && RoceV2Gid(c.get(), &g) >= 0) break;
    SleepMs(100);
  }
  Removal r = RemoveUnderTraffic(dev, "ip link del " + nd);
  ASSERT_NO_FATAL_FAILURE(ExpectCleanRemoval(r));
  EXPECT_EQ(*r.rc, 0);
  EXPECT_FALSE(access(("/sys/class/infiniband/" + dev).c_str(), F_OK) == 0)
      << dev << " outlived its netdev";
  EXPECT_EQ(ShOut("rdma link show 2>/dev/null").find(dev), std::string::npos);
  Sh("ip link del " + nd + " 2>/dev/null");
  ExpectTrafficWorks();
}

// `rmmod trdma` while a process has QPs with WRs in flight.  trdma offers
// disassociate_ucontext, so ib_uverbs takes no reference on the module for
// an open context (6.1 ib_uverbs_open: module_dependent is false): rmmod
// must succeed at once rather than fail with EBUSY or wait for the process.
// The core disassociates the context (each QP flushes into its CQ ring,
// which stays mapped), the process gets IBV_EVENT_DEVICE_FATAL, polls every
// WR back once and destroys its objects after the module is gone.  Then
// `rdma link add` loads the module again and the device carries traffic.
TEST_F(FaultTest, RmmodUnderTraffic) {
  ASSERT_TRUE(DeviceExists());
  ASSERT_EQ(Sh("grep -q '^trdma ' /proc/modules"), 0);
  const std::string params = ShOut(
      "grep -H . /sys/module/trdma/parameters/* 2>/dev/null | sort");
  Removal r = RemoveUnderTraffic(DevName(), "rmmod trdma");
  ASSERT_NO_FATAL_FAILURE(ExpectCleanRemoval(r));
  EXPECT_EQ(*r.rc, 0) << "rmmod trdma with an application running failed";
  EXPECT_NE(Sh("grep -q '^trdma ' /proc/modules"), 0) << "module still loaded";
  EXPECT_FALSE(DeviceExists());
  // Back to what the suite expects: the module (autoloaded with its
  // defaults) and the device on the lab's netdev.
  ASSERT_EQ(Sh(LinkAddCmd()), 0) << "rdma link add after rmmod";
  EXPECT_EQ(ShOut("grep -H . /sys/module/trdma/parameters/* 2>/dev/null | "
                  "sort"),
            params)
      << "module parameters differ after the reload";
  ExpectTrafficWorks();
  // Nothing but what the MAD layer holds for QP1: a PD, a CQ, the QP.
  Counts now = ResourcesBecome({{"pd", 1}, {"cq", 1}, {"qp", 1},
                                {"cm_id", 0}, {"mr", 0}, {"ctx", 0},
                                {"srq", 0}},
                               5000);
  EXPECT_EQ(now["qp"] + now["cq"] + now["mr"] + now["pd"] + now["ctx"], 3)
      << Show(now);
}

// The receiving QP is moved to ERR while a 16 MiB SEND (lo slowed down to
// 100 Mbit/s by netem) is half placed in its oldest receive: that receive
// (taken by the receive path, no longer in the ring) completes first and
// the seven behind it after it, all flushed, in the order they were
// posted.  (Before the fix, the ring's seven were flushed at once and the
// taken one only when the connection was detached: out of order.)
TEST_F(FaultTest, ErrMidMessageFlushesReceivesInOrder) {
  constexpr size_t kL = 16 << 20;
  constexpr int kR = 8;
  Context ctx = Open();
  ASSERT_TRUE(ctx);
  ibv_pd *pd = ibv_alloc_pd(ctx.get());
  ASSERT_NE(pd, nullptr);
  uint8_t *src = MapBuffer(kL), *dst = MapBuffer(kL);
  ASSERT_TRUE(src && dst);
  Pattern(src, kL, 0x0dde);
  ibv_mr *smr = ibv_reg_mr(pd, src, kL, kAllAccess);
  ibv_mr *dmr = ibv_reg_mr(pd, dst, kL, kAllAccess);
  ASSERT_TRUE(smr && dmr);
  // lo at 100 Mbit/s: the SEND takes 1.3 s, long enough to cut it.
  ASSERT_EQ(Sh("modprobe sch_netem"), 0);
  Netem slow("rate 100mbit");
  ASSERT_TRUE(slow.on());
  bool caught = false;
  for (int attempt = 0; attempt < 5 && !caught; attempt++) {
    ibv_cq *scq = ibv_create_cq(ctx.get(), 16, nullptr, nullptr, 0);
    ibv_cq *rcq = ibv_create_cq(ctx.get(), 16, nullptr, nullptr, 0);
    ASSERT_TRUE(scq && rcq);
    ibv_qp *a = CreateRcQp(pd, scq, scq, {4, 4, 1, 1, 0});
    ibv_qp *b = CreateRcQp(pd, rcq, rcq, {4, kR, 1, 1, 0});
    ASSERT_TRUE(a && b);
    ASSERT_EQ(ConnectQp(ctx.get(), a, b->qp_num, {18, 7, 7}), 0);
    ASSERT_EQ(ConnectQp(ctx.get(), b, a->qp_num, {18, 7, 7}), 0);
    memset(dst, 0, kL);
    for (int i = 0; i < kR; i++) {
      // All into one buffer: only the first is ever written.
      ibv_sge sge = {Addr(dst), static_cast<uint32_t>(kL), dmr->lkey};
      ibv_recv_wr wr = {}, *bad;
      wr.wr_id = i;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ASSERT_EQ(ibv_post_recv(b, &wr, &bad), 0);
    }
    ibv_sge sge = {Addr(src), static_cast<uint32_t>(kL), smr->lkey};
    ibv_send_wr wr = {}, *bad;
    wr.wr_id = 100;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
    // Wait for the first bytes to land, then cut while the last are not
    // there yet.
    auto t0 = Clock::now();
    volatile uint8_t *first = dst, *last = dst + kL - 8;
    while (Ms(t0) < 5000 && !memcmp(const_cast<uint8_t *>(first),
                                    "\0\0\0\0\0\0\0\0", 8))
      ;
    SleepMs(100);
    ibv_qp_attr qa = {};
    qa.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(b, &qa, IBV_QP_STATE), 0);
    caught = !memcmp(const_cast<uint8_t *>(last), "\0\0\0\0\0\0\0\0", 8);
    std::vector<ibv_wc> wcs;
    t0 = Clock::now();
    while (wcs.size() < kR && Ms(t0) < 10000) {
      ibv_wc wc[16];
      int n = ibv_poll_cq(rcq, 16, wc);
      ASSERT_GE(n, 0);
      wcs.insert(wcs.end(), wc, wc + n);
      if (!n) SleepMs(1);
    }
    std::string got;
    for (auto &w : wcs)
      got += std::to_string(w.wr_id) + ":" + ibv_wc_status_str(w.status) +
             " ";
    std::cout << "attempt " << attempt << (caught ? ", mid-message" : ", "
                "the message was whole already") << ": receive completions "
              << got << "\n";
    ASSERT_EQ(wcs.size(), static_cast<size_t>(kR)) << got;
    for (int i = 0; i < kR; i++) {
      EXPECT_EQ(wcs[i].wr_id, static_cast<uint64_t>(i)) << got;
      if (caught) {
        EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR) << got;
      }
    }
    // The sender's SEND ends once (success if it got through, else the
    // connection's end fails it).
    int sends = 0;
    t0 = Clock::now();
    while (Ms(t0) < 15000 && !sends) {
      ibv_wc wc;
      int n = ibv_poll_cq(scq, 1, &wc);
      if (n > 0) {
        EXPECT_EQ(wc.wr_id, 100u);
        sends++;
      } else {
        qa.qp_state = IBV_QPS_ERR;
        if (Ms(t0) > 3000) ibv_modify_qp(a, &qa, IBV_QP_STATE);
        SleepMs(1);
      }
    }
    EXPECT_EQ(sends, 1);
    EXPECT_EQ(ibv_destroy_qp(a), 0);
    EXPECT_EQ(ibv_destroy_qp(b), 0);
    EXPECT_EQ(ibv_destroy_cq(scq), 0);
    EXPECT_EQ(ibv_destroy_cq(rcq), 0);
  }
  EXPECT_TRUE(caught) << "never caught the message half placed";
  EXPECT_EQ(ibv_dereg_mr(smr), 0);
  EXPECT_EQ(ibv_dereg_mr(dmr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  munmap(src, kL);
  munmap(dst, kL);
}

// --- 5. resource pressure --------------------------------------------------

// Drops CAP_IPC_LOCK (root would bypass RLIMIT_MEMLOCK).
bool DropIpcLock() {
  __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[2] = {};
  if (syscall(SYS_capget, &h, d)) return false;
  for (auto &x : d) {
    x.effective &= ~(1u << CAP_IPC_LOCK);
    x.permitted &= ~(1u << CAP_IPC_LOCK);
    x.inheritable &= ~(1u << CAP_IPC_LOCK);
  }
  return syscall(SYS_capset, &h, d) == 0;
}

// In a child without CAP_IPC_LOCK and with RLIMIT_MEMLOCK at 1 MiB: a
// registration within the limit works, one past it (alone or on top of the
// first) fails with ENOMEM and leaves no MR behind, and once the first is
// deregistered the whole limit is available again (nothing leaked).
TEST_F(FaultTest, MemlockLimitFailsRegistrationCleanly) {
  const Counts baseline = Resources();
  int pfd[2];
  ASSERT_EQ(pipe(pfd), 0);
  fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(pfd[0]);
    std::string out;
    auto check = [&](bool ok, const std::string &what) {
      if (!ok) out += what + " (errno " + std::to_string(errno) + ")\n";
    };
    rlimit rl = {1 << 20, 1 << 20};
    check(DropIpcLock(), "dropping CAP_IPC_LOCK");
    check(setrlimit(RLIMIT_MEMLOCK, &rl) == 0, "setrlimit");
    Context ctx = OpenDevice(DevName());
    ibv_pd *pd = ctx ? ibv_alloc_pd(ctx.get()) : nullptr;
    uint8_t *mem = MapBuffer(4 << 20);
    check(pd && mem, "device, pd or memory");
    if (pd && mem) {
      memset(mem, 1, 4 << 20);
      const long mrs0 = Resources()["mr"];
      ibv_mr *a = ibv_reg_mr(pd, mem, 768 << 10, IBV_ACCESS_LOCAL_WRITE);
      check(a, "768 KiB under a 1 MiB limit refused");
      errno = 0;
      ibv_mr *b = ibv_reg_mr(pd, mem + (1 << 20), 512 << 10,
                             IBV_ACCESS_LOCAL_WRITE);
      check(!b && errno == ENOMEM,
            "another 512 KiB (1.25 MiB pinned) not refused with ENOMEM");
      errno = 0;
      ibv_mr *c = ibv_reg_mr(pd, mem + (2 << 20), 2 << 20,
                             IBV_ACCESS_LOCAL_WRITE);
      check(!c && errno == ENOMEM, "2 MiB alone not refused with ENOMEM");
      check(Resources()["mr"] == mrs0 + 1,
            "failed registrations left MRs behind");
      check(!a || ibv_dereg_mr(a) == 0, "dereg");
      // The full limit is free again.
      ibv_mr *d = ibv_reg_mr(pd, mem, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
      check(d, "1 MiB after deregistering: pinned pages were leaked");
      check(!d || ibv_dereg_mr(d) == 0, "dereg");
      check(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
    }
    if (write(pfd[1], out.data(), out.size()) < 0) _exit(2);
    _exit(out.empty() ? 0 : 1);
  }
  close(pfd[1]);
  std::string out;
  char b[512];
  for (ssize_t n; (n = read(pfd[0], b, sizeof(b))) > 0;) out.append(b, n);
  close(pfd[0]);
  int st;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  EXPECT_EQ(out, "");
  Counts now = ResourcesBecome(baseline, 5000);
  EXPECT_EQ(now, baseline) << Show(now);
}

// Two QPs with their send completions on one CQ far too small for them,
// under live traffic (VerbsTest.CqOverflowRaisesCqError covers flushes of
// one QP): IBV_EVENT_CQ_ERR, the completions that fit are exactly the
// oldest ones of each QP, successful and intact; the receivers, on CQs of
// their own, get every message with exact data; other CQs and QPs of the
// context keep working, and everything can be destroyed.
TEST_F(FaultTest, CqTooSmallForItsQps) {
  Context ctx = Open();
  ASSERT_TRUE(ctx);
  ibv_pd *pd = ibv_alloc_pd(ctx.get());
  ASSERT_NE(pd, nullptr);
  ibv_cq *tiny = ibv_create_cq(ctx.get(), 4, nullptr, nullptr, 0);
  ibv_cq *big = ibv_create_cq(ctx.get(), 256, nullptr, nullptr, 0);
  ASSERT_TRUE(tiny && big);
  const int per_qp = tiny->cqe + 4;  // together far more than fits
  const size_t kLen = 8192;
  std::vector<uint8_t> mem(2 * 2 * 64 * kLen);
  ibv_mr *mr = ibv_reg_mr(pd, mem.data(), mem.size(), kAllAccess);
  ASSERT_NE(mr, nullptr);
  ibv_qp *req[2], *rsp[2];
  for (int i = 0; i < 2; i++) {
    req[i] = CreateRcQp(pd, tiny, big, {64, 4, 1, 1, 0});
    rsp[i] = CreateRcQp(pd, big, big, {4, 64, 1, 1, 0});
    ASSERT_TRUE(req[i] && rsp[i]);
    ASSERT_EQ(ConnectQp(ctx.get(), req[i], rsp[i]->qp_num, {14, 7, 7}), 0);
    ASSERT_EQ(ConnectQp(ctx.get(), rsp[i], req[i]->qp_num, {14, 7, 7}), 0);
  }
  auto src = [&](int q, int k) { return mem.data() + (q * 64 + k) * kLen; };
  auto dst = [&](int q, int k) {
    return mem.data() + ((2 + q) * 64 + k) * kLen;
  };
  for (int q = 0; q < 2; q++)
    for (int k = 0; k < per_qp; k++) {
      ibv_sge s = {Addr(dst(q, k)), static_cast<uint32_t>(kLen), mr->lkey};
      ibv_recv_wr wr = {}, *bad;
      wr.wr_id = (q << 16) | k;
      wr.sg_list = &s;
      wr.num_sge = 1;
      ASSERT_EQ(ibv_post_recv(rsp[q], &wr, &bad), 0);
    }
  for (int k = 0; k < per_qp; k++)
    for (int q = 0; q < 2; q++) {
      uint32_t len = 1 + (k * 977 + q * 131) % kLen;
      Pattern(src(q, k), len, (q << 16) | k);
      ibv_sge s = {Addr(src(q, k)), len, mr->lkey};
      ibv_send_wr wr = {}, *bad;
      wr.wr_id = (q << 16) | k;
      wr.opcode = IBV_WR_SEND;
      wr.sg_list = &s;
      wr.num_sge = 1;
      wr.send_flags = IBV_SEND_SIGNALED;
      ASSERT_EQ(ibv_post_send(req[q], &wr, &bad), 0);
    }
  // Every message arrives intact, whatever became of the requester's CQ.
  std::map<uint64_t, int> got;
  auto t0 = Clock::now();
  while (got.size() < 2u * per_qp && Ms(t0) < 10000) {
    ibv_wc wc;
    if (ibv_poll_cq(big, 1, &wc) != 1) {
      usleep(100);
      continue;
    }
    got[wc.wr_id]++;
    int q = wc.wr_id >> 16, k = wc.wr_id & 0xffff;
    uint32_t len = 1 + (k * 977 + q * 131) % kLen;
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.byte_len, len);
    EXPECT_TRUE(IsPattern(dst(q, k), len, wc.wr_id)) << "message " << q
                                                      << "/" << k;
  }
  EXPECT_EQ(got.size(), 2u * per_qp);
  for (auto &[id, n] : got) EXPECT_EQ(n, 1) << "receive " << id;
  EXPECT_TRUE(WaitAsyncEvent(ctx.get(), IBV_EVENT_CQ_ERR, 5000));
  // What fits: successes, each QP's oldest in order, none twice.
  std::vector<ibv_wc> wc(4 * per_qp);
  int n = ibv_poll_cq(tiny, wc.size(), wc.data());
  EXPECT_EQ(n, tiny->cqe);
  int next[2] = {0, 0};
  for (int i = 0; i < n; i++) {
    int q = wc[i].wr_id >> 16, k = wc[i].wr_id & 0xffff;
    ASSERT_TRUE(q == 0 || q == 1) << "wr_id " << wc[i].wr_id;
    EXPECT_EQ(k, next[q]++) << "QP " << q;
    EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc[i].opcode, IBV_WC_SEND);
    EXPECT_EQ(wc[i].qp_num, req[q]->qp_num);
  }
  // The rest of the context is unaffected.
  ibv_cq *cq2 = ibv_create_cq(ctx.get(), 16, nullptr, nullptr, 0);
  ASSERT_NE(cq2, nullptr);
  ibv_qp *x = CreateRcQp(pd, cq2, cq2, {4, 4, 1, 1, 0});
  ibv_qp *y = CreateRcQp(pd, cq2, cq2, {4, 4, 1, 1, 0});
  ASSERT_TRUE(x && y);
  ASSERT_EQ(ConnectQp(ctx.get(), x, y->qp_num, {14, 7, 7}), 0);
  ASSERT_EQ(ConnectQp(ctx.get(), y, x->qp_num, {14, 7, 7}), 0);
  Pattern(src(0, 0), 100, 99);
  ibv_sge rs = {Addr(dst(0, 0)), 100, mr->lkey}, ss = {Addr(src(0, 0)), 100,
                                                       mr->lkey};
  ibv_recv_wr rw = {}, *rbad;
  rw.wr_id = 1;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_EQ(ibv_post_recv(y, &rw, &rbad), 0);
  ibv_send_wr sw = {}, *sbad;
  sw.wr_id = 2;
  sw.opcode = IBV_WR_SEND;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.send_flags = IBV_SEND_SIGNALED;
  ASSERT_EQ(ibv_post_send(x, &sw, &sbad), 0);
  std::set<uint64_t> ids;
  t0 = Clock::now();
  while (ids.size() < 2 && Ms(t0) < 10000) {
    ibv_wc w;
    if (ibv_poll_cq(cq2, 1, &w) == 1) {
      EXPECT_EQ(w.status, IBV_WC_SUCCESS);
      ids.insert(w.wr_id);
    }
  }
  EXPECT_EQ(ids, (std::set<uint64_t>{1, 2}));
  EXPECT_TRUE(IsPattern(dst(0, 0), 100, 99));
  for (ibv_qp *q : {x, y, req[0], req[1], rsp[0], rsp[1]})
    EXPECT_EQ(ibv_destroy_qp(q), 0);
  for (ibv_cq *c : {cq2, tiny, big}) EXPECT_EQ(ibv_destroy_cq(c), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// --- RNR with requests behind the refused one --------------------------------

// A SEND that finds no receive is refused with an RNR NAK and retried
// (rnr_retry 7); requests already on the wire behind it must be dropped by
// the responder until the SEND comes again, then retransmitted.  Here an
// atomic, a READ and a WRITE follow the SEND in one post: once the receive
// is posted (100 ms later) all four complete successfully and in order, the
// atomic executed exactly once, and no segment counts as malformed.
TEST_F(FaultTest, RnrRetryWithAnAtomicQueuedBehind) {
  Context ctx = Open();
  ASSERT_TRUE(ctx);
  ibv_pd *pd = ibv_alloc_pd(ctx.get());
  ASSERT_NE(pd, nullptr);
  ibv_cq *cq = ibv_create_cq(ctx.get(), 64, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  std::vector<uint8_t> mem(64 << 10);
  ibv_mr *mr = ibv_reg_mr(pd, mem.data(), mem.size(), kAllAccess);
  ASSERT_NE(mr, nullptr);
  ibv_qp *a = CreateRcQp(pd, cq, cq, {8, 8, 1, 1, 0});
  ibv_qp *b = CreateRcQp(pd, cq, cq, {8, 8, 1, 1, 0});
  ASSERT_TRUE(a && b);
  ASSERT_EQ(ConnectQp(ctx.get(), a, b->qp_num, {14, 7, 7}), 0);
  ASSERT_EQ(ConnectQp(ctx.get(), b, a->qp_num, {14, 7, 7}), 0);
  const long malformed = Counter("malformed_segments");
  uint8_t *m = mem.data();
  uint64_t *target = reinterpret_cast<uint64_t *>(m + 4096);
  uint64_t *result = reinterpret_cast<uint64_t *>(m + 4104);
  *target = 5;
  *result = ~0ull;
  Pattern(m, 64, 1);             // the SEND
  Pattern(m + 12288, 256, 3);    // what the READ reads
  Pattern(m + 20480, 512, 4);    // what the WRITE writes
  ibv_sge sg[4] = {{Addr(m), 64, mr->lkey},
                   {Addr(result), 8, mr->lkey},
                   {Addr(m + 8192), 256, mr->lkey},
                   {Addr(m + 20480), 512, mr->lkey}};
  ibv_send_wr wr[4] = {};
  const ibv_wr_opcode ops[4] = {IBV_WR_SEND, IBV_WR_ATOMIC_FETCH_AND_ADD,
                                IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE};
  for (int i = 0; i < 4; i++) {
    wr[i].wr_id = i + 1;
    wr[i].opcode = ops[i];
    wr[i].sg_list = &sg[i];
    wr[i].num_sge = 1;
    wr[i].send_flags = IBV_SEND_SIGNALED;
    wr[i].next = i < 3 ? &wr[i + 1] : nullptr;
  }
  wr[1].wr.atomic.remote_addr = Addr(target);
  wr[1].wr.atomic.rkey = mr->rkey;
  wr[1].wr.atomic.compare_add = 1;
  wr[2].wr.rdma.remote_addr = Addr(m + 12288);
  wr[2].wr.rdma.rkey = mr->rkey;
  wr[3].wr.rdma.remote_addr = Addr(m + 24576);
  wr[3].wr.rdma.rkey = mr->rkey;
  ibv_send_wr *bad;
  ASSERT_EQ(ibv_post_send(a, wr, &bad), 0);
  SleepMs(100);
  ibv_sge rs = {Addr(m + 16384), 64, mr->lkey};
  ibv_recv_wr rw = {}, *rbad;
  rw.wr_id = 100;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_EQ(ibv_post_recv(b, &rw, &rbad), 0);

  std::vector<ibv_wc> sends, recvs;
  auto t0 = Clock::now();
  while (sends.size() + recvs.size() < 5 && Ms(t0) < 5000) {
    ibv_wc wc;
    if (ibv_poll_cq(cq, 1, &wc) == 1)
      (wc.qp_num == a->qp_num ? sends : recvs).push_back(wc);
    else
      usleep(100);
  }
  ASSERT_EQ(sends.size(), 4u);
  ASSERT_EQ(recvs.size(), 1u);
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(sends[i].wr_id, i + 1u);
    EXPECT_EQ(sends[i].status, IBV_WC_SUCCESS)
        << OpName(ops[i]) << ": " << ibv_wc_status_str(sends[i].status);
  }
  EXPECT_EQ(recvs[0].status, IBV_WC_SUCCESS)
      << ibv_wc_status_str(recvs[0].status);
  EXPECT_TRUE(IsPattern(m + 16384, 64, 1));
  EXPECT_EQ(*target, 6u) << "the atomic ran other than once";
  EXPECT_EQ(*result, 5u);
  EXPECT_TRUE(IsPattern(m + 8192, 256, 3));
  EXPECT_TRUE(IsPattern(m + 24576, 512, 4));
  EXPECT_EQ(Counter("malformed_segments"), malformed);
  EXPECT_FALSE(WaitAsyncEvent(ctx.get(), IBV_EVENT_QP_FATAL, 200));
  for (ibv_qp *q : {a, b}) EXPECT_EQ(ibv_destroy_qp(q), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// --- 6. memory pressure ----------------------------------------------------

// A field of /proc/meminfo, in kB (-1 if missing).  No allocation: the
// memory hog child calls it too.
long MeminfoKb(const char *field) {
  char buf[4096];
  int fd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char *p = strstr(buf, field);
  if (!p) return -1;
  p += strlen(field);
  while (*p == ':' || *p == ' ') p++;
  return atol(p);
}

// Reclaim's counters from /proc/vmstat, to tell apart how a squeeze went:
// refaults and major faults (the working set read back in, here over 9p),
// pages scanned and stolen, direct reclaim and compaction.
std::map<std::string, long> ReclaimCounters() {
  static const char *const kNames[] = {
      "pgmajfault",       "workingset_refault_file", "workingset_refault_anon",
      "pgscan_kswapd",    "pgscan_direct",           "pgsteal_kswapd",
      "pgsteal_direct",   "allocstall_normal",       "allocstall_movable",
      "compact_stall",    "compact_migrate_scanned", "thp_collapse_alloc"};
  std::map<std::string, long> m;
  std::ifstream in("/proc/vmstat");
  std::string k;
  long v;
  while (in >> k >> v)
    for (const char *n : kNames)
      if (k == n) m[k] = v;
  return m;
}

// "name delta ..." of the counters that moved between two ReclaimCounters().
std::string ReclaimDelta(const std::map<std::string, long> &a,
                         const std::map<std::string, long> &b) {
  std::string s;
  for (const auto &[k, v] : b)
    if (a.count(k) && v != a.at(k))
      s += " " + k + " " + std::to_string(v - a.at(k));
  return s.empty() ? " none moved" : s;
}

// Locks the process's executable file mappings (its text and its
// libraries') in memory; returns the bytes locked.  The squeeze is meant
// for trdma's allocations, not the test's own code: 6.12's reclaim evicts
// that text near the floor, and the lab reads it back over 9p page by
// page, so the traffic engine stalls on its own instructions
// (docs/perf/squeeze-612).  The hog shares the pages.
size_t LockText() {
  std::ifstream in("/proc/self/maps");
  std::string line;
  size_t locked = 0;
  while (std::getline(in, line)) {
    unsigned long lo, hi;
    char perms[5] = {};
    int path = 0;
    if (sscanf(line.c_str(), "%lx-%lx %4s %*s %*s %*s %n", &lo, &hi, perms,
               &path) < 3 ||
        perms[2] != 'x' || !path || line[path] != '/')
      continue;
    if (mlock(reinterpret_cast<void *>(lo), hi - lo) == 0) locked += hi - lo;
  }
  return locked;
}

bool SetOomScoreAdj(int v) {
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char s[16];
  int len = snprintf(s, sizeof(s), "%d", v);
  bool ok = write(fd, s, len) == len;
  close(fd);
  return ok;
}

// A child that takes anonymous memory (touched, 4 MiB at a time) until
// MemAvailable is down to floor_kb, then keeps it there, giving back 8 MiB
// and taking it again every 50 ms, so the kernel's own allocations keep
// meeting reclaim.  It is the OOM killer's first choice (oom_score_adj
// 1000) and dies with its parent.  Its memory is in base pages
// (MADV_NOHUGEPAGE): in huge pages it made the kernel compact memory and
// khugepaged collapse it near the floor, where the soft lockups of 6.12
// in the lab were found (kcompactd, khugepaged; docs/lab.md).
pid_t MemoryHog(long floor_kb) {
  fflush(nullptr);
  pid_t pid = fork();
  if (pid) return pid;
  SetOomScoreAdj(1000);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  constexpr size_t kChunk = 4 << 20;
  static void *chunks[4096];
  size_t n = 0, first = 0;
  unsigned salt = 0;
  for (;;) {
    long avail = MeminfoKb("MemAvailable");
    if (avail > floor_kb + static_cast<long>(kChunk >> 10) && n < 4096) {
      void *p = mmap(nullptr, kChunk, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        usleep(50000);
        continue;
      }
      madvise(p, kChunk, MADV_NOHUGEPAGE);
      for (size_t i = 0; i < kChunk; i += 4096)
        static_cast<uint8_t *>(p)[i] = static_cast<uint8_t>(++salt);
      chunks[n++] = p;
    } else {
      if (n - first > 2)
        for (int k = 0; k < 2; k++) munmap(chunks[first++], kChunk);
      // Compact the list now and then.
      if (first > 1024) {
        memmove(chunks, chunks + first, (n - first) * sizeof(void *));
        n -= first;
        first = 0;
      }
      usleep(50000);
    }
  }
}

// Every opcode on two QP pairs while a child holds the guest's memory down
// to MemAvailable ~ 1/32 of MemTotal (64 MiB of 2 GiB), churning at the
// floor: no WR fails, every byte is exact, the completions balance, the
// OOM killer is never needed (it would dump a Call Trace into dmesg, which
// fails the lab run), and the test process is shielded from it anyway
// (oom_score_adj -1000).  The test's own text is locked meanwhile
// (LockText).  Throughput with and without the squeeze is reported, and
// how reclaim went.
TEST_F(FaultTest, TrafficUnderMemoryPressure) {
  ASSERT_TRUE(SetOomScoreAdj(-1000));
  struct Restore {
    ~Restore() { SetOomScoreAdj(0); }
  } restore;
  const long total = MeminfoKb("MemTotal"), avail0 = MeminfoKb("MemAvailable");
  ASSERT_GT(total, 0);
  const long floor_kb = std::max(48L << 10, total / 32);
  Context ctx = Open();
  ASSERT_TRUE(ctx);
  EngineOptions o;
  o.seed = 21;
  Engine eng(ctx.get(), o);
  ASSERT_TRUE(eng.ok());
  eng.RunFor(500);
  // Unsqueezed, for comparison.
  uint64_t b0 = eng.stats().bytes;
  auto t0 = Clock::now();
  eng.RunFor(4000);
  const double clean_mb_s = (eng.stats().bytes - b0) / (Ms(t0) / 1e3) / 1e6;

  const size_t text_locked = LockText();
  struct Unlock {
    ~Unlock() { munlockall(); }
  } unlock;
  const auto vm0 = ReclaimCounters();
  const std::string mem0 =
      "MemFree " + std::to_string(MeminfoKb("MemFree") / 1024) +
      " MiB, Cached " + std::to_string(MeminfoKb("Cached") / 1024) +
      " MiB (Shmem " + std::to_string(MeminfoKb("Shmem") / 1024) + " MiB)";
  pid_t hog = MemoryHog(floor_kb);
  ASSERT_GT(hog, 0);
  struct Killer {
    pid_t pid;
    ~Killer() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } killer{hog};
  // Traffic goes on while the hog takes the memory.
  const uint64_t sq0 = eng.stats().bytes;
  t0 = Clock::now();
  // The sample that ended the wait is the one checked: the hog gives back
  // and takes 8 MiB every 50 ms, so a second read may find it just above.
  long hog_kb = 0;
  eng.RunUntil(
      [&] {
        hog_kb = MeminfoKb("MemAvailable");
        return hog_kb < floor_kb + (16 << 10);
      },
      60000);
  const long squeeze_ms = Ms(t0);
  ASSERT_LT(hog_kb, floor_kb + (16 << 10))
      << "the hog did not get MemAvailable down in 60 s (at " << hog_kb / 1024
      << " MiB, floor " << floor_kb / 1024 << " MiB, "
      << (eng.stats().bytes - sq0) / 1e6 << " MB verified meanwhile; "
      << mem0 << " before); "
      << "/proc/vmstat moved:" << ReclaimDelta(vm0, ReclaimCounters());
  // Squeezed: 10 s, MemAvailable sampled as it goes.
  long lo = hog_kb, hi = hog_kb;
  b0 = eng.stats().bytes;
  const uint64_t s0 = eng.stats().success;
  t0 = Clock::now();
  auto ts = Clock::now();
  while (Ms(t0) < 10000) {
    eng.Step();
    if (Ms(ts) >= 100) {
      long a = MeminfoKb("MemAvailable");
      lo = std::min(lo, a);
      hi = std::max(hi, a);
      ts = Clock::now();
    }
  }
  const double tight_mb_s = (eng.stats().bytes - b0) / (Ms(t0) / 1e3) / 1e6;
  const uint64_t tight_wrs = eng.stats().success - s0;
  const auto vm1 = ReclaimCounters();
  EXPECT_FALSE(Reap(hog).has_value()) << "the hog died (OOM-killed?)";
  ASSERT_TRUE(eng.Finish(30000));
  eng.CheckAtomicCounters();
  std::cout << "memory: MemTotal " << total / 1024 << " MiB, MemAvailable "
            << avail0 / 1024 << " MiB before (" << mem0
            << " as the hog started); the hog got it to "
            << hog_kb / 1024 << " MiB in " << squeeze_ms
            << " ms, held it at " << lo / 1024 << "-" << hi / 1024
            << " MiB for 10 s (floor " << floor_kb / 1024 << " MiB)\n"
            << "memory: " << clean_mb_s << " MB/s verified unsqueezed, "
            << tight_mb_s << " MB/s squeezed (" << tight_wrs << " WRs)\n"
            << "memory: " << (text_locked >> 10)
            << " KiB of the test's text locked; /proc/vmstat over squeeze and squeezed:"
            << ReclaimDelta(vm0, vm1) << "\n"
            << eng.Summary() << "\n";
  EXPECT_GT(tight_wrs, 0u) << "no traffic under memory pressure";
  eng.ExpectNoFailure();
  eng.ExpectBalanced();
  EXPECT_EQ(Sh("dmesg | grep -qi 'out of memory\\|oom-kill'"), 1)
      << "the OOM killer ran";
}

// --- soak --------------------------------------------------------------------

// The established trdma connections as "local-port peer-port" pairs.
std::vector<std::pair<std::string, std::string>> TrdmaConnections() {
  std::vector<std::pair<std::string, std::string>> v;
  std::istringstream in(
      ShOut("ss -Htn state established '( sport = :" + kPort +
            " or dport = :" + kPort + " )'"));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string rq, sq, local, peer;
    if (!(f >> rq >> sq >> local >> peer)) continue;
    v.emplace_back(local.substr(local.rfind(':') + 1),
                   peer.substr(peer.rfind(':') + 1));
  }
  return v;
}

// TRDMA_SOAK_SECONDS (60) of six QP pairs carrying every opcode and size
// while faults strike at random every 1.5-4 s: a connection reset (ss -K),
// a QP destroyed under traffic, a blackhole of 0.3-1.5 s, netem on lo for
// 2-4 s, the netdev down for 0.3-1 s.  Pairs that die are drained and
// replaced.  Every WR completes once (posted == completed + flushed), every
// byte is checked, only the lethal faults kill pairs, nothing hangs.
TEST_F(FaultTest, Soak) {
  const char *env = std::getenv("TRDMA_SOAK_SECONDS");
  const long secs = env && *env ? std::atol(env) : 60;
  const char *senv = std::getenv("TRDMA_SOAK_SEED");
  const unsigned seed =
      senv && *senv ? std::atoi(senv) : static_cast<unsigned>(time(nullptr));
  std::cout << "soak: " << secs << " s, seed " << seed
            << " (TRDMA_SOAK_SEED)\n";
  ASSERT_EQ(Sh("modprobe sch_netem"), 0);
  const Counts baseline = Resources();
  Context ctx = Open();
  ASSERT_TRUE(ctx);
  EngineOptions o;
  o.pairs = 6;
  o.max_msg = 32 << 10;
  o.recreate = true;
  o.verbose = true;
  o.seed = seed;
  auto eng = std::make_unique<Engine>(ctx.get(), o);
  ASSERT_TRUE(eng->ok());

  std::atomic<bool> stop{false}, destroy_request{false};
  std::atomic<int> faults{0}, lethal{0};
  std::mutex log_mu;
  std::map<std::string, int> kinds;
  auto t_start = Clock::now();
  auto log = [&](const std::string &what) {
    std::lock_guard<std::mutex> l(log_mu);
    kinds[what.substr(0, what.find(' '))]++;
    std::cout << "soak: " << Ms(t_start) << " ms: " << what << std::endl;
  };
  {
    Background injector([&] {
      std::mt19937 rng(seed ^ 0x5eed);
      auto nap = [&](long ms) {
        for (auto t0 = Clock::now(); Ms(t0) < ms && !stop;) SleepMs(20);
      };
      while (!stop) {
        nap(1500 + rng() % 2500);
        if (stop) break;
        switch (rng() % 5) {
          case 0: {
            auto conns = TrdmaConnections();
            if (conns.empty()) break;
            auto [l, p] = conns[rng() % conns.size()];
            if (Sh("ss -K state established '( sport = :" + l +
                   " and dport = :" + p + " )' >/dev/null") == 0) {
              lethal++;
              faults++;
              log("reset " + l + "->" + p);
            }
            break;
          }
          case 1:
            destroy_request = true;
            break;
          case 2: {
            long ms = 300 + rng() % 1200;
            Blackhole bh;
            if (!bh.on()) break;
            faults++;
            log("blackhole " + std::to_string(ms) + " ms");
            nap(ms);
            break;
          }
          case 3: {
            long ms = 2000 + rng() % 2000;
            Netem n("loss 2% delay 5ms reorder 10% duplicate 1%");
            if (!n.on()) break;
            faults++;
            log("netem " + std::to_string(ms) + " ms");
            nap(ms);
            break;
          }
          case 4: {
            long ms = 300 + rng() % 700;
            LinkDown d;
            if (!d.on()) break;
            faults++;
            log("linkdown " + std::to_string(ms) + " ms");
            nap(ms);
            break;
          }
        }
      }
    });
    while (Ms(t_start) < secs * 1000) {
      eng->Step();
      if (destroy_request.exchange(false) && eng->DestroyOneQp()) {
        lethal++;
        faults++;
        log("destroy-qp");
      }
    }
    stop = true;
  }
  eng->RunFor(1000);
  ASSERT_TRUE(eng->Finish(30000));
  eng->CheckAtomicCounters();
  const Stats &s = eng->stats();
  std::cout << "soak: posted " << s.posted << " completed "
            << s.success + s.errors << " flushed " << s.flushed
            << " bytes verified " << s.bytes << " faults " << faults << "\n"
            << "soak: " << eng->Summary() << "; pairs re-created "
            << s.pairs_recreated << "; lethal faults " << lethal << "\n";
  for (auto &[k, n] : kinds) std::cout << "soak: fault " << k << " x" << n
                                       << "\n";
  eng->ExpectBalanced();
  EXPECT_GT(s.bytes, 0u);
  // Only resets and destroyed QPs may kill a pair, each at most one.
  EXPECT_LE(s.pair_deaths, static_cast<uint64_t>(lethal.load()))
      << eng->Summary();
  for (auto &[st, n] : s.error_status)
    EXPECT_TRUE(st == IBV_WC_RETRY_EXC_ERR)
        << n << " x " << ibv_wc_status_str(static_cast<ibv_wc_status>(st));
  EXPECT_EQ(eng->DestroyAll(), 0);
  eng.reset();
  ctx.reset();
  Counts now = ResourcesBecome(baseline, 5000);
  EXPECT_EQ(now, baseline) << Show(now);
}

}  // namespace
