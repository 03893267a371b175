// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// Two-host fault program (tests/lab/run-2host): one RC QP on each host's
// trdma0, connected across the lab link, carrying every opcode both ways
// with every byte and every completion checked.  QPN, GID, rkey and buffer
// address go over a plain TCP socket (host 2 listens, host 1 connects),
// which also carries the end-of-run handshake.
//
//   trdma_xhost_fault serve|connect PEER MODE [SECONDS]
//
// MODE
//   run       traffic for SECONDS, then both sides drain: every WR
//             completes successfully, the atomics targets hold the peer's
//             count, the receives left are flushed; prints MB/s verified
//             and the TCP retransmissions (/proc/net/snmp) of the run.
//   victim    traffic until SIGKILLed; writes $XF_READY (a file) once
//             traffic flows both ways.
//   survivor  traffic until the peer dies: its QP must go to ERR with
//             IBV_EVENT_QP_FATAL, every outstanding WR must complete once
//             (a flush, or success for what the peer had taken), and what
//             arrived must be exact.
// Exit status 0 when every check held; each failed check prints "FAIL: ".
//
// What is checked: the k-th message that consumes a receive (SEND,
// SEND_WITH_IMM, WRITE_WITH_IMM, chosen by k) has a length and byte
// pattern named by k and the sending side; a WRITE is read back by a READ
// of the same bytes right after it; READs of the peer's fixed pattern;
// FETCH_ADD and CMP_SWAP on a counter only this side changes, each
// returning the number of atomics before it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "lab_util.h"

namespace {

using trdma_lab::Addr;
using trdma_lab::Clock;
using trdma_lab::IsAtomic;
using trdma_lab::IsPattern;
using trdma_lab::Ms;
using trdma_lab::OpName;
using trdma_lab::Pattern;
using trdma_lab::ReadFull;
using trdma_lab::SplitMix;
using trdma_lab::TcpRetransSegs;

int failures = 0;
void Fail(const std::string &what) {
  if (failures++ < 40) printf("FAIL: %s\n", what.c_str());
  fflush(stdout);
}
[[noreturn]] void Die(const std::string &what) {
  printf("FAIL: %s (errno %d %s)\n", what.c_str(), errno, strerror(errno));
  exit(2);
}

constexpr uint32_t kM = 64 << 10;  // largest message
constexpr int kW = 32;             // send window and receives posted
constexpr int kImmSlots = 4 * kW;  // WRITE_WITH_IMM targets (see below)
constexpr uint64_t kRecvBit = 1ull << 63;

// Buffer layout: sources | READ destinations | receives | WRITE targets
// (the peer's plain WRITEs) | WRITE_WITH_IMM targets | READ source |
// atomics target | atomics results.  The k-th WRITE_WITH_IMM lands in
// slot k % kImmSlots: message k + kImmSlots cannot be under way before the
// receiver has checked message k (its receive for it is not posted before
// that, and the sender's window is kW), so the data is not overwritten
// before it is checked.
constexpr size_t kSrc = 0, kRdst = kSrc + size_t{kW} * kM,
                 kRcv = kRdst + size_t{kW} * kM,
                 kWtgt = kRcv + size_t{kW} * kM,
                 kImm = kWtgt + size_t{kW} * kM,
                 kRsrc = kImm + size_t{kImmSlots} * kM, kCounter = kRsrc + kM,
                 kAtom = kCounter + 4096, kLen = kAtom + 4096;

// Side s (1 or 2: TRDMA_LAB_HOST of the sender) names its patterns.
uint64_t MsgKey(int s, uint64_t k) { return (uint64_t(s) << 44) | k; }
uint64_t WriteKey(int s, uint64_t id) { return (uint64_t(8 + s) << 44) | id; }
uint64_t RsrcKey(int s) { return uint64_t(16 + s) << 44; }
// The k-th receive-consuming message of a side: its opcode and length.
ibv_wr_opcode MsgOp(int s, uint64_t k) {
  switch (SplitMix(k ^ (s * 0x77)) % 3) {
    case 0:
      return IBV_WR_SEND;
    case 1:
      return IBV_WR_SEND_WITH_IMM;
    default:
      return IBV_WR_RDMA_WRITE_WITH_IMM;
  }
}
uint32_t MsgLen(int s, uint64_t k) {
  uint64_t r = SplitMix(k ^ (s * 0x1234567));
  // Mostly large, some small and odd sizes.
  switch (r % 4) {
    case 0:
      return (r >> 8) % 64;
    case 1:
      return (r >> 8) % (kM + 1);
    default:
      return kM - (r >> 8) % 8;
  }
}

// --- the control socket ----------------------------------------------------

constexpr int kCtlPort = 18611;

int Serve() {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(kCtlPort);
  if (bind(ls, reinterpret_cast<sockaddr *>(&a), sizeof(a)) || listen(ls, 1))
    Die("control socket: bind/listen");
  pollfd pfd = {ls, POLLIN, 0};
  if (poll(&pfd, 1, 60000) <= 0) Die("no peer within 60 s");
  int s = accept(ls, nullptr, nullptr);
  close(ls);
  if (s < 0) Die("accept");
  return s;
}

int Connect(const char *peer) {
  auto t0 = Clock::now();
  while (Ms(t0) < 60000) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons(kCtlPort);
    if (inet_pton(AF_INET, peer, &a.sin_addr) != 1) Die("peer address");
    if (!connect(s, reinterpret_cast<sockaddr *>(&a), sizeof(a))) return s;
    close(s);
    usleep(200000);
  }
  Die("could not reach the peer in 60 s");
}

struct Info {
  uint32_t qpn, rkey;
  uint64_t addr;
  uint8_t gid[16];
};

// End of a "run": what a side sent that the other must account for.
struct Done {
  uint64_t msgs, atomics;
};

// --- the QP ------------------------------------------------------------------

struct Wr {
  uint64_t id;
  ibv_wr_opcode op;
  uint32_t len, slot, roff;
  uint64_t key;  // READ: the pattern expected
  uint64_t old;  // atomics: the value returned
  bool readback;
};

class Side {
 public:
  Side(int me, int ctl) : me_(me), peer_side_(3 - me), ctl_(ctl) {}

  void Setup() {
    int n = 0;
    ibv_device **list = ibv_get_device_list(&n);
    for (int i = 0; list && i < n; i++)
      if (!strcmp(ibv_get_device_name(list[i]), "trdma0"))
        ctx_ = ibv_open_device(list[i]);
    if (list) ibv_free_device_list(list);
    if (!ctx_) Die("open trdma0");
    fcntl(ctx_->async_fd, F_SETFL,
          fcntl(ctx_->async_fd, F_GETFL) | O_NONBLOCK);
    pd_ = ibv_alloc_pd(ctx_);
    cq_ = ibv_create_cq(ctx_, 4 * kW, nullptr, nullptr, 0);
    void *p = mmap(nullptr, kLen, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!pd_ || !cq_ || p == MAP_FAILED) Die("pd/cq/buffer");
    buf_ = static_cast<uint8_t *>(p);
    Pattern(buf_ + kRsrc, kM, RsrcKey(me_));
    mr_ = ibv_reg_mr(pd_, buf_, kLen,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                         IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    if (!mr_) Die("ibv_reg_mr");
    ibv_qp_init_attr ia = {};
    ia.send_cq = ia.recv_cq = cq_;
    ia.qp_type = IBV_QPT_RC;
    ia.cap = {kW, kW, 1, 1, 0};
    qp_ = ibv_create_qp(pd_, &ia);
    if (!qp_) Die("ibv_create_qp");
    // The IPv4-mapped RoCE v2 GID.
    ibv_gid g;
    gi_ = trdma_lab::RoceV2Gid(ctx_, &g);
    if (gi_ < 0) Die("no IPv4 RoCE v2 GID");
    Info me = {qp_->qp_num, mr_->rkey, Addr(buf_), {}};
    memcpy(me.gid, g.raw, 16);
    if (write(ctl_, &me, sizeof(me)) != sizeof(me) ||
        !ReadFull(ctl_, &peer_, sizeof(peer_), 30000))
      Die("exchange with the peer");
    Connect();
    for (int i = 0; i < kW; i++) PostRecv();
    // Both QPs at RTS with receives posted before either sends.
    char c = 'r';
    if (write(ctl_, &c, 1) != 1 || !ReadFull(ctl_, &c, 1, 30000))
      Die("ready handshake");
  }

  void Connect() {
    ibv_qp_attr a = {};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;
    if (ibv_modify_qp(qp_, &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                          IBV_QP_ACCESS_FLAGS))
      Die("INIT");
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer_.qpn;
    a.rq_psn = 1000 + peer_.qpn;
    a.max_dest_rd_atomic = 8;
    a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.sgid_index = gi_;
    a.ah_attr.grh.hop_limit = 64;
    memcpy(a.ah_attr.grh.dgid.raw, peer_.gid, 16);
    if (ibv_modify_qp(qp_, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                          IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      Die("RTR");
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 20;  // 4.3 s x 8: far beyond what netem's loss causes
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 1000 + qp_->qp_num;
    a.max_rd_atomic = 8;
    if (ibv_modify_qp(qp_, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                          IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC))
      Die("RTS");
  }

  void PostRecv() {
    uint32_t slot = rseq_ % kW;
    ibv_sge sge = {Addr(buf_ + kRcv + slot * size_t{kM}), kM, mr_->lkey};
    ibv_recv_wr wr = {}, *bad;
    wr.wr_id = kRecvBit | rseq_++;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(qp_, &wr, &bad)) {
      Fail("ibv_post_recv failed");
      return;
    }
    rq_.push_back({wr.wr_id, slot});
    posted_++;
  }

  bool Post(const Wr &w, uint64_t raddr, uint64_t cmp_add, uint64_t swap,
            uint32_t imm) {
    ibv_sge sge = {};
    if (w.op == IBV_WR_RDMA_READ)
      sge = {Addr(buf_ + kRdst + w.slot * size_t{kM}), w.len, mr_->lkey};
    else if (IsAtomic(w.op))
      sge = {Addr(buf_ + kAtom + 8 * w.slot), 8, mr_->lkey};
    else
      sge = {Addr(buf_ + kSrc + w.slot * size_t{kM}), w.len, mr_->lkey};
    ibv_send_wr wr = {}, *bad;
    wr.wr_id = w.id;
    wr.opcode = w.op;
    wr.sg_list = &sge;
    wr.num_sge = w.len ? 1 : 0;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    if (IsAtomic(w.op)) {
      wr.wr.atomic.remote_addr = raddr;
      wr.wr.atomic.rkey = peer_.rkey;
      wr.wr.atomic.compare_add = cmp_add;
      wr.wr.atomic.swap = swap;
    } else {
      wr.wr.rdma.remote_addr = raddr;
      wr.wr.rdma.rkey = peer_.rkey;
    }
    if (ibv_post_send(qp_, &wr, &bad)) {
      if (!err_) Fail("ibv_post_send failed on a healthy QP");
      return false;
    }
    sq_.push_back(w);
    posted_++;
    op_posted_[w.op]++;
    return true;
  }

  // Fills the send window with the mix: messages (SEND, SEND_WITH_IMM,
  // WRITE_WITH_IMM by k), WRITE + READ-back, READ of the peer's pattern,
  // atomics.
  void PostSome() {
    while (!err_ && sq_.size() + 2 <= kW) {
      uint32_t slot = seq_ % kW;
      switch (rng_() % 5) {
        case 0:
        case 1: {
          uint64_t k = ++msgs_;
          ibv_wr_opcode op = MsgOp(me_, k);
          uint32_t len = MsgLen(me_, k);
          Pattern(buf_ + kSrc + slot * size_t{kM}, len, MsgKey(me_, k));
          uint64_t raddr = peer_.addr + kImm + (k % kImmSlots) * size_t{kM};
          if (!Post({++seq_, op, len, slot, 0, 0, 0, false}, raddr, 0, 0,
                    static_cast<uint32_t>(k)))
            return;
          break;
        }
        case 2: {
          uint64_t id = ++seq_;
          uint32_t len = 1 + rng_() % kM;
          Pattern(buf_ + kSrc + slot * size_t{kM}, len, WriteKey(me_, id));
          uint64_t raddr = peer_.addr + kWtgt + slot * size_t{kM};
          if (!Post({id, IBV_WR_RDMA_WRITE, len, slot, 0, 0, 0, false}, raddr,
                    0, 0, 0))
            return;
          uint32_t rslot = seq_ % kW;
          memset(buf_ + kRdst + rslot * size_t{kM}, 0xa5, len);
          if (!Post({++seq_, IBV_WR_RDMA_READ, len, rslot, 0,
                     WriteKey(me_, id), 0, true},
                    raddr, 0, 0, 0))
            return;
          break;
        }
        case 3: {
          uint32_t len = 1 + rng_() % kM;
          uint32_t roff = rng_() % (kM - len + 1);
          memset(buf_ + kRdst + slot * size_t{kM}, 0xa5, len);
          if (!Post({++seq_, IBV_WR_RDMA_READ, len, slot, roff,
                     RsrcKey(peer_side_), 0, false},
                    peer_.addr + kRsrc + roff, 0, 0, 0))
            return;
          break;
        }
        default: {
          bool faa = rng_() % 2;
          ibv_wr_opcode op =
              faa ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
          if (!Post({++seq_, op, 8, slot, 0, 0, atomics_, false},
                    peer_.addr + kCounter, faa ? 1 : atomics_, atomics_ + 1,
                    0))
            return;
          atomics_++;
        }
      }
    }
  }

  void OnWc(const ibv_wc &wc) {
    const bool recv = wc.wr_id & kRecvBit;
    if (wc.status != IBV_WC_SUCCESS) {
      if (wc.status == IBV_WC_WR_FLUSH_ERR) {
        flushed_++;
      } else if (wc.status == IBV_WC_RETRY_EXC_ERR && !recv && !sq_err_ &&
                 !retry_exc_) {
        // The oldest send a gone peer never answers: its transport timeout
        // ends it, as on a fabric; what follows it flushes.
        retry_exc_++;
        printf("send wr_id %llu: %s\n",
               static_cast<unsigned long long>(wc.wr_id & ~kRecvBit),
               ibv_wc_status_str(wc.status));
      } else {
        errors_++;
        printf("%s wr_id %llu: %s\n", recv ? "receive" : "send",
               static_cast<unsigned long long>(wc.wr_id & ~kRecvBit),
               ibv_wc_status_str(wc.status));
      }
      if (!err_) err_at_ = Clock::now();
      err_ = true;
      (recv ? rq_err_ : sq_err_) = true;
    } else {
      ok_++;
      if (recv ? rq_err_ : sq_err_)
        Fail("successful completion after an error on its queue");
    }
    if (recv) {
      auto it = rq_.begin();
      while (it != rq_.end() && it->first != wc.wr_id) ++it;
      if (it != rq_.begin()) {
        Fail(std::string("receive ") +
             std::to_string(wc.wr_id & ~kRecvBit) + " (" +
             ibv_wc_status_str(wc.status) + ") completed " +
             (it == rq_.end() ? "but is not outstanding"
                              : "before " +
                                    std::to_string(it - rq_.begin()) +
                                    " older ones") +
             "; oldest outstanding " +
             (rq_.empty() ? std::string("none")
                          : std::to_string(rq_.front().first & ~kRecvBit)));
        if (it == rq_.end()) return;
      }
      uint32_t slot = it->second;
      rq_.erase(it);
      if (wc.status != IBV_WC_SUCCESS) return;
      uint64_t k = ++received_;
      ibv_wr_opcode op = MsgOp(peer_side_, k);
      uint32_t len = MsgLen(peer_side_, k);
      const uint8_t *data =
          op == IBV_WR_RDMA_WRITE_WITH_IMM
              ? buf_ + kImm + (k % kImmSlots) * size_t{kM}
              : buf_ + kRcv + slot * size_t{kM};
      bool imm = op != IBV_WR_SEND;
      bool good =
          wc.opcode == (op == IBV_WR_RDMA_WRITE_WITH_IMM
                            ? IBV_WC_RECV_RDMA_WITH_IMM
                            : IBV_WC_RECV) &&
          wc.byte_len == len && !!(wc.wc_flags & IBV_WC_WITH_IMM) == imm &&
          (!imm || ntohl(wc.imm_data) == static_cast<uint32_t>(k)) &&
          wc.src_qp == peer_.qpn && IsPattern(data, len, MsgKey(peer_side_, k));
      if (!good) {
        Fail(std::string("peer's message ") + std::to_string(k) + " (" +
             OpName(op) + ", " + std::to_string(len) +
             " bytes) arrived wrong: opcode " + std::to_string(wc.opcode) +
             " byte_len " + std::to_string(wc.byte_len));
      } else {
        bytes_ += len;
        op_ok_[op == IBV_WR_RDMA_WRITE_WITH_IMM ? 100 : op]++;
      }
      if (!err_) PostRecv();
      return;
    }
    auto it = sq_.begin();
    while (it != sq_.end() && it->id != wc.wr_id) ++it;
    if (it != sq_.begin()) {
      Fail("send " + std::to_string(wc.wr_id) + " (" +
           ibv_wc_status_str(wc.status) + ") completed " +
           (it == sq_.end() ? "but is not outstanding"
                            : "before " + std::to_string(it - sq_.begin()) +
                                  " older ones") +
           "; oldest outstanding " +
           (sq_.empty() ? std::string("none") : std::to_string(sq_.front().id)));
      if (it == sq_.end()) return;
    }
    Wr w = *it;
    sq_.erase(it);
    if (wc.status != IBV_WC_SUCCESS) return;
    bool good = wc.opcode == trdma_send_wc_opcode(w.op);
    if (w.op == IBV_WR_RDMA_READ)
      good = good && wc.byte_len == w.len &&
             IsPattern(buf_ + kRdst + w.slot * size_t{kM}, w.len, w.key,
                       w.roff);
    else if (IsAtomic(w.op))
      good = good && *reinterpret_cast<uint64_t *>(buf_ + kAtom +
                                                   8 * w.slot) == w.old;
    if (!good)
      Fail(std::string(OpName(w.op)) + (w.readback ? " (read-back)" : "") +
           " wr_id " + std::to_string(w.id) + " returned wrong data");
    else if (w.op == IBV_WR_RDMA_READ || IsAtomic(w.op))
      bytes_ += w.len;
    op_ok_[w.op]++;
  }

  // Polls the CQ and the async events; returns the completions seen.
  int Poll() {
    ibv_wc wc[16];
    int n = ibv_poll_cq(cq_, 16, wc);
    if (n < 0) {
      Fail("ibv_poll_cq");
      return 0;
    }
    for (int i = 0; i < n; i++) OnWc(wc[i]);
    ibv_async_event ev;
    while (!ibv_get_async_event(ctx_, &ev)) {
      if (ev.event_type == IBV_EVENT_QP_FATAL) {
        if (!fatal_) fatal_at_ = Clock::now();
        fatal_++;
      } else {
        printf("async event %s\n", ibv_event_type_str(ev.event_type));
      }
      ibv_ack_async_event(&ev);
    }
    return n;
  }

  void Step() {
    PostSome();
    if (!Poll()) usleep(20);
  }

  // --- modes -----------------------------------------------------------------

  int Run(long secs) {
    const long r0 = TcpRetransSegs();
    auto t0 = Clock::now();
    while (Ms(t0) < secs * 1000 && !err_) Step();
    const double s = Ms(t0) / 1e3;
    const uint64_t bytes = bytes_;
    // Drain: own sends complete; keep serving the peer's until it says
    // how many messages it sent and they all arrived.
    auto td = Clock::now();
    while (!sq_.empty() && Ms(td) < 60000) Poll();
    if (!sq_.empty()) Fail(std::to_string(sq_.size()) + " sends never completed");
    const long retrans = TcpRetransSegs() - r0;
    Done mine = {msgs_, atomics_}, theirs = {};
    if (write(ctl_, &mine, sizeof(mine)) != sizeof(mine)) Fail("write done");
    fcntl(ctl_, F_SETFL, fcntl(ctl_, F_GETFL) | O_NONBLOCK);
    size_t got = 0;
    while (Ms(td) < 60000 && (got < sizeof(theirs) || received_ < theirs.msgs)) {
      Poll();
      if (got < sizeof(theirs)) {
        ssize_t n = read(ctl_, reinterpret_cast<char *>(&theirs) + got,
                         sizeof(theirs) - got);
        if (n > 0) got += n;
      }
    }
    if (got < sizeof(theirs)) Fail("the peer never said it was done");
    if (received_ != theirs.msgs)
      Fail("received " + std::to_string(received_) + " of the peer's " +
           std::to_string(theirs.msgs) + " messages");
    uint64_t counter = *reinterpret_cast<volatile uint64_t *>(buf_ + kCounter);
    if (counter != theirs.atomics)
      Fail("atomics target " + std::to_string(counter) + ", peer issued " +
           std::to_string(theirs.atomics));
    // Before the handshake: once the peer moves its QP to ERR, its
    // connection closes and this QP fails too.
    if (errors_ || retry_exc_ || fatal_)
      Fail("a WR failed or QP_FATAL during the run");
    // Neither side moves its QP to ERR before both are done.
    char c = 'f';
    fcntl(ctl_, F_SETFL, fcntl(ctl_, F_GETFL) & ~O_NONBLOCK);
    if (write(ctl_, &c, 1) != 1 || !ReadFull(ctl_, &c, 1, 30000))
      Fail("final handshake");
    ToErrAndDrain();
    Balance();
    printf("xhost: run %.1f s: %.2f MB/s verified (%llu bytes), %llu WRs ok, "
           "TCP RetransSegs +%ld (this host)\n",
           s, bytes / s / 1e6, static_cast<unsigned long long>(bytes),
           static_cast<unsigned long long>(ok_), retrans);
    PrintOps();
    for (ibv_wr_opcode op :
         {IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE,
          IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ,
          IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD})
      if (!op_ok_[op]) Fail(std::string(OpName(op)) + " never completed");
    return Destroy();
  }

  int Victim(const char *ready) {
    auto t0 = Clock::now();
    bool said = false;
    for (;;) {
      Step();
      if (err_ && Ms(err_at_) > 5000) Die("the QP failed before the kill");
      if (!said && ok_ > 500 && received_ > 100 && Ms(t0) > 2000) {
        said = true;
        FILE *f = fopen(ready, "w");
        if (f) {
          fprintf(f, "%llu\n", static_cast<unsigned long long>(ok_));
          fclose(f);
        }
        printf("xhost: victim: traffic flows (%llu ok, %llu messages in), "
               "waiting for SIGKILL\n",
               static_cast<unsigned long long>(ok_),
               static_cast<unsigned long long>(received_));
        fflush(stdout);
      }
    }
  }

  int Survivor() {
    fcntl(ctl_, F_SETFL, fcntl(ctl_, F_GETFL) | O_NONBLOCK);
    auto t0 = Clock::now();
    Clock::time_point gone_at{};
    bool gone = false;
    size_t out_sq = 0, out_rq = 0, err_sq = 0, err_rq = 0;
    uint64_t ok_at_gone = 0;
    while (Ms(t0) < 120000) {
      const bool was_err = err_;
      const size_t sq = sq_.size(), rq = rq_.size();
      Step();
      if (!was_err && err_) {
        // What was outstanding when the QP learnt it.
        err_sq = sq;
        err_rq = rq;
      }
      if (!gone) {
        char c;
        ssize_t n = read(ctl_, &c, 1);
        if (n == 0 || (n < 0 && errno != EAGAIN)) {
          // The peer's kernel closed its sockets: it is dead.
          gone = true;
          gone_at = Clock::now();
          out_sq = sq_.size();
          out_rq = rq_.size();
          ok_at_gone = ok_;
        }
      }
      if (gone && fatal_ && err_ && sq_.empty() && rq_.empty()) break;
      if (gone && Ms(gone_at) > 20000) break;
    }
    // Negative: the QP learnt it before the control socket did.
    long fatal_ms = fatal_ && gone
                        ? std::chrono::duration_cast<std::chrono::milliseconds>(
                              fatal_at_ - gone_at)
                              .count()
                        : -1;
    printf("xhost: survivor: peer gone (control socket closed) after %ld ms "
           "of traffic with %zu sends and %zu receives outstanding (%zu "
           "and %zu at the first failed completion); "
           "QP_FATAL x%d %ld ms after that; %llu ok (%llu since), %llu "
           "flushed, %llu other errors; %llu messages in, %llu bytes "
           "verified; posted %llu\n",
           gone ? std::chrono::duration_cast<std::chrono::milliseconds>(
                      gone_at - t0)
                      .count()
                : -1,
           out_sq, out_rq, err_sq, err_rq, fatal_, fatal_ms,
           static_cast<unsigned long long>(ok_),
           static_cast<unsigned long long>(ok_ - ok_at_gone),
           static_cast<unsigned long long>(flushed_),
           static_cast<unsigned long long>(errors_),
           static_cast<unsigned long long>(received_),
           static_cast<unsigned long long>(bytes_),
           static_cast<unsigned long long>(posted_));
    if (!gone) Fail("the peer never died");
    if (fatal_ != 1) Fail("QP_FATAL x" + std::to_string(fatal_) + ", want 1");
    if (fatal_ms > 3000) Fail("QP_FATAL came late");
    if (!sq_.empty() || !rq_.empty())
      Fail(std::to_string(sq_.size()) + " sends and " +
           std::to_string(rq_.size()) + " receives never completed");
    if (!flushed_) Fail("nothing flushed");
    if (errors_)
      Fail("completions other than success, flush and one retry exceeded");
    ibv_qp_attr qa;
    ibv_qp_init_attr qi;
    if (ibv_query_qp(qp_, &qa, IBV_QP_STATE, &qi) || qa.qp_state != IBV_QPS_ERR)
      Fail("the QP is not in ERR");
    Balance();
    return Destroy();
  }

  void ToErrAndDrain() {
    ibv_qp_attr a = {};
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(qp_, &a, IBV_QP_STATE);
    err_ = true;
    auto t0 = Clock::now();
    while ((!sq_.empty() || !rq_.empty()) && Ms(t0) < 10000) Poll();
    if (!sq_.empty() || !rq_.empty())
      Fail("WRs never completed after the move to ERR");
  }

  void Balance() {
    printf("xhost: posted %llu = %llu ok + %llu flushed + %llu retries "
           "exceeded + %llu errors\n",
           static_cast<unsigned long long>(posted_),
           static_cast<unsigned long long>(ok_),
           static_cast<unsigned long long>(flushed_),
           static_cast<unsigned long long>(retry_exc_),
           static_cast<unsigned long long>(errors_));
    if (posted_ != ok_ + flushed_ + retry_exc_ + errors_)
      Fail("completions do not balance");
  }

  void PrintOps() {
    printf("xhost: completed ok by opcode:");
    for (auto &[op, n] : op_ok_)
      printf(" %s %llu",
             op == 100 ? "recv(WRITE_WITH_IMM)"
                       : OpName(static_cast<ibv_wr_opcode>(op)),
             static_cast<unsigned long long>(n));
    printf("\n");
  }

  int Destroy() {
    int rv = ibv_destroy_qp(qp_) | ibv_dereg_mr(mr_) | ibv_destroy_cq(cq_) |
             ibv_dealloc_pd(pd_) | ibv_close_device(ctx_);
    if (rv) Fail("destroying the objects");
    munmap(buf_, kLen);
    printf("xhost: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
  }

 private:
  int me_, peer_side_, ctl_;
  ibv_context *ctx_ = nullptr;
  ibv_pd *pd_ = nullptr;
  ibv_cq *cq_ = nullptr;
  ibv_mr *mr_ = nullptr;
  ibv_qp *qp_ = nullptr;
  uint8_t *buf_ = nullptr;
  int gi_ = -1;
  Info peer_ = {};
  std::mt19937 rng_{12345};
  std::deque<Wr> sq_;
  std::deque<std::pair<uint64_t, uint32_t>> rq_;
  uint64_t seq_ = 0, rseq_ = 0, msgs_ = 0, atomics_ = 0, received_ = 0;
  uint64_t posted_ = 0, ok_ = 0, flushed_ = 0, errors_ = 0, bytes_ = 0;
  uint64_t retry_exc_ = 0;  // the one RETRY_EXC_ERR a gone peer may cause
  std::map<int, uint64_t> op_ok_, op_posted_;
  bool err_ = false, sq_err_ = false, rq_err_ = false;
  int fatal_ = 0;
  Clock::time_point err_at_{}, fatal_at_{};
};

}  // namespace

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr,
            "usage: %s serve|connect PEER run|victim|survivor [SECONDS]\n",
            argv[0]);
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string role = argv[1], mode = argv[3];
  const char *h = getenv("TRDMA_LAB_HOST");
  const int me = h && *h == '2' ? 2 : 1;
  int ctl = role == "serve" ? Serve() : Connect(argv[2]);
  int one = 1;
  setsockopt(ctl, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  Side side(me, ctl);
  side.Setup();
  if (mode == "run") return side.Run(argc > 4 ? atol(argv[4]) : 10);
  if (mode == "victim") {
    const char *ready = getenv("XF_READY");
    return side.Victim(ready ? ready : "/tmp/xf.ready");
  }
  if (mode == "survivor") return side.Survivor();
  fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
