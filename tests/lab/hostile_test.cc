// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// Hostile peers and users: a raw TCP client that greets a QP properly and
// then sends garbage, truncated or overlong headers, unknown opcodes,
// lengths past any buffer and rkeys it was never given; a flood of
// connections that never finish their hello; an MR deregistered while the
// peer WRITEs into it or READs from it.  Each case must hurt only the QP it
// targets (tools/vm fails the run on any kernel report in dmesg), and the
// fixture's own QPs keep working.
#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <rdma/trdma-wire.h>

#include "lab_util.h"
#include "qp_fixture.h"

using namespace trdma_lab;

namespace {

class HostileTest : public DataPathTest {
 protected:
  // The fixture's QPs still move data.
  void ExpectFixtureWorks() { ExpectSendArrives(a_.qp, a_.cq, b_.qp, b_.cq); }

  // After an error took a_ and b_ down: the device still serves a new pair.
  void ExpectPdStillUsable() {
    ibv_qp *x = NewQp(a_.cq), *y = NewQp(a_.cq);
    ASSERT_TRUE(x && y);
    ASSERT_EQ(Connect(x, y), 0);
    ASSERT_EQ(Connect(y, x), 0);
    ibv_wc wc;
    while (ibv_poll_cq(a_.cq, 1, &wc) == 1) {
    }
    ExpectSendArrives(x, a_.cq, y, a_.cq);
    ibv_destroy_qp(x);
    ibv_destroy_qp(y);
  }

  // Reads from fd until trdma closes it (EOF or reset), for at most
  // timeout_ms.  Returns the bytes trdma sent before closing, or nullopt-like
  // -1 when it stayed open.
  static ssize_t ReadUntilClosed(int fd, int timeout_ms, std::string *got) {
    auto end = std::chrono::steady_clock::now() +
               std::chrono::milliseconds(timeout_ms);
    ssize_t total = 0;
    while (std::chrono::steady_clock::now() < end) {
      pollfd p = {fd, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n <= 0) return total;  // EOF, or ECONNRESET
      if (got) got->append(buf, n);
      total += n;
    }
    return -1;
  }

  static std::vector<uint8_t> Bth(uint8_t op, uint32_t qpn, uint32_t msn,
                                  uint32_t off, uint32_t len) {
    trdma_bth b = {};
    b.opcode = op;
    b.dest_qpn = htonl(qpn);
    b.msn = htonl(msn);
    b.offset = htonl(off);
    b.length = htonl(len);
    const uint8_t *p = reinterpret_cast<const uint8_t *>(&b);
    return std::vector<uint8_t>(p, p + sizeof(b));
  }

  static void Append(std::vector<uint8_t> &v, const void *p, size_t n) {
    v.insert(v.end(), static_cast<const uint8_t *>(p),
             static_cast<const uint8_t *>(p) + n);
  }
};

struct Input {
  std::string name;
  std::vector<uint8_t> bytes;
  bool half_close;  // then shut our write side (truncated input)
};

TEST_F(HostileTest, BadInputsCloseOnlyTheirConnection) {
  // Built per victim: they need its QPN.
  auto inputs = [&](uint32_t qpn) {
    std::vector<Input> v;
    std::mt19937 rng(7);
    std::vector<uint8_t> junk(4096);
    for (auto &c : junk) c = static_cast<uint8_t>(rng());
    junk[0] = 0x7f;  // surely not an opcode
    v.push_back({"random bytes", junk, false});
    auto h = Bth(TRDMA_OP_SEND_ONLY, qpn, 1001, 0, 8);
    v.push_back({"truncated header",
                 std::vector<uint8_t>(h.begin(), h.begin() + 10), true});
    v.push_back({"unknown opcode", Bth(0x1f, qpn, 1001, 0, 0), false});
    v.push_back({"segment longer than 64 KiB",
                 Bth(TRDMA_OP_SEND_ONLY, qpn, 1001, 0, 1 << 20), false});
    v.push_back({"another QP's QPN",
                 Bth(TRDMA_OP_SEND_ONLY, qpn + 1, 1001, 0, 0), false});
    v.push_back({"unexpected MSN",
                 Bth(TRDMA_OP_SEND_ONLY, qpn, 5000, 0, 0), false});
    auto reserved = Bth(TRDMA_OP_SEND_ONLY, qpn, 1001, 0, 0);
    reserved[2] = 1;
    v.push_back({"reserved field set", reserved, false});
    // A SEND longer than the 64-byte receive posted.
    auto send = Bth(TRDMA_OP_SEND_ONLY, qpn, 1001, 0, 4096);
    send.resize(send.size() + 4096, 0xab);
    v.push_back({"SEND past the receive buffer", send, false});
    // WRITE with an rkey never handed out, and with a real rkey past the
    // end of its region.
    for (int i = 0; i < 2; i++) {
      auto w = Bth(TRDMA_OP_WRITE_ONLY, qpn, 1001, 0, 16);
      trdma_reth r = {};
      if (i == 0) {
        r.va = htobe64(0x10000);
        r.rkey = htonl(0x7fffff01);
      } else {
        r.va = htobe64(reinterpret_cast<uintptr_t>(b_.buf.data()) + kBuf -
                       8);
        r.rkey = htonl(b_.mr->rkey);
      }
      r.dma_len = htonl(16);
      Append(w, &r, sizeof(r));
      w.resize(w.size() + 16, 0xcd);
      v.push_back({i ? "WRITE past its region" : "WRITE with a foreign rkey",
                   w, false});
    }
    // A READ of 1 GiB from a 9 MiB region.
    auto rd = Bth(TRDMA_OP_READ_REQUEST, qpn, 1001, 0, 0);
    trdma_reth rr = {};
    rr.va = htobe64(reinterpret_cast<uintptr_t>(b_.buf.data()));
    rr.rkey = htonl(b_.mr->rkey);
    rr.dma_len = htonl(1u << 30);
    Append(rd, &rr, sizeof(rr));
    v.push_back({"READ past its region", rd, false});
    // Response opcodes nobody asked for.
    auto ack = Bth(TRDMA_OP_READ_RESPONSE_ONLY, qpn, 77, 0, 8);
    trdma_aeth ae = {};
    ae.msn = htonl(77);
    Append(ack, &ae, sizeof(ae));
    ack.resize(ack.size() + 8, 0);
    v.push_back({"READ response to no READ", ack, false});
    return v;
  };

  // The victim's owner may use b_.mr's rkey: remote rights are the QP's.
  const size_t n = inputs(0).size();
  for (size_t i = 0; i < n; i++) {
    ibv_qp *victim = nullptr;
    int fd = RawPeer(&victim);
    ASSERT_GE(fd, 0);
    Input in = inputs(victim->qp_num)[i];
    SCOPED_TRACE(in.name);
    ibv_sge sge = {reinterpret_cast<uintptr_t>(b_.buf.data()), 64,
                   b_.mr->lkey};
    ibv_recv_wr rwr = {}, *rbad;
    rwr.wr_id = 200 + i;
    rwr.sg_list = &sge;
    rwr.num_sge = 1;
    ASSERT_EQ(ibv_post_recv(victim, &rwr, &rbad), 0);

    ASSERT_EQ(write(fd, in.bytes.data(), in.bytes.size()),
              static_cast<ssize_t>(in.bytes.size()));
    if (in.half_close) shutdown(fd, SHUT_WR);
    EXPECT_GE(ReadUntilClosed(fd, 5000, nullptr), 0)
        << "trdma kept the connection open";
    close(fd);
    ibv_qp_attr qa;
    ibv_qp_init_attr qi;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    do {
      ASSERT_EQ(ibv_query_qp(victim, &qa, IBV_QP_STATE, &qi), 0);
      if (qa.qp_state == IBV_QPS_ERR) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (std::chrono::steady_clock::now() < end);
    EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
    ASSERT_EQ(ibv_destroy_qp(victim), 0);
    // The victim's receive ended (flushed, or a length error): drain it
    // from b_'s CQ, which it shares.
    ibv_wc wc = Wait(b_.cq);
    EXPECT_EQ(wc.wr_id, 200 + i);
    EXPECT_NE(wc.status, IBV_WC_SUCCESS);
  }
  ExpectFixtureWorks();
}

// Connections that never finish their hello: each waits at most
// accept_timeout, none blocks a real connection meanwhile, all are closed.
TEST_F(HostileTest, HalfOpenFloodIsReapedAndHarmless) {
  const std::string param = "/sys/module/trdma/parameters/accept_timeout";
  const std::string old = ReadFile(param);
  ASSERT_EQ(Sh("echo 2 > " + param), 0);
  std::vector<int> fds;
  sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(TRDMA_DEFAULT_PORT);
  inet_pton(AF_INET, NetdevAddr().c_str(), &sa.sin_addr);
  for (int i = 0; i < 300; i++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)), 0)
        << "connection " << i << ": " << strerror(errno);
    if (i % 3 == 1) {  // half a hello
      trdma_hello h = {};
      h.magic = htonl(TRDMA_HELLO_MAGIC);
      ASSERT_EQ(write(fd, &h, 20), 20);
    } else if (i % 3 == 2) {  // a bogus one
      std::vector<uint8_t> b(sizeof(trdma_hello), 0xee);
      ASSERT_EQ(write(fd, b.data(), b.size()),
                static_cast<ssize_t>(b.size()));
    }
    fds.push_back(fd);
  }
  // Meanwhile, a real connection is made and carries data.
  ibv_qp *x = NewQp(a_.cq), *y = NewQp(b_.cq);
  ASSERT_TRUE(x && y);
  ASSERT_EQ(Connect(x, y), 0);
  ASSERT_EQ(Connect(y, x), 0);
  ExpectSendArrives(x, a_.cq, y, b_.cq);

  // Every flood connection is closed by trdma within the timeout (2 s),
  // plus slack for the lab's slow guest.
  int closed = 0;
  for (int fd : fds) {
    if (ReadUntilClosed(fd, 8000, nullptr) >= 0) closed++;
    close(fd);
  }
  EXPECT_EQ(closed, 300);
  EXPECT_EQ(Sh("echo " + old + " > " + param), 0);
  ibv_destroy_qp(x);
  ibv_destroy_qp(y);
  ExpectFixtureWorks();
}

// The responder deregisters the MR a stream of WRITEs or READs targets:
// requests served before complete, the first one after fails with
// IBV_WC_REM_ACCESS_ERR, the rest flush.  A READ whose response is already
// on the wire when its MR goes cannot be NAKed any more (the segment's
// length is announced): the responder closes the connection instead and
// the requester flushes with IBV_EVENT_QP_FATAL; nak_only says that this
// cannot happen (WRITEs: every chunk is checked before placement).
void DeregisterUnder(ibv_context *ctx, bool nak_only, ibv_pd *pd,
                     ibv_cq *cq,
                     const std::function<int(int, uint64_t, uint32_t)> &post) {
  std::vector<uint8_t> target(4 << 20, 0);
  ibv_mr *mr = ibv_reg_mr(pd, target.data(), target.size(),
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  const int kWrs = 200, kFirst = 20;
  int posted = 0, ok = 0, access = 0, flushed = 0, other = 0;
  auto take = [&](int n) {
    for (int i = 0; i < n; i++) {
      ibv_wc wc = {};
      auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      int n;
      while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 &&
             std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (n != 1) {
        ADD_FAILURE() << "completion " << i << " of this batch"
                      << " missing after 20 s";
        return;
      }
      if (wc.status == IBV_WC_SUCCESS)
        ok++;
      else if (wc.status == IBV_WC_REM_ACCESS_ERR)
        access++;
      else if (wc.status == IBV_WC_WR_FLUSH_ERR)
        flushed++;
      else
        other++;
    }
  };
  auto post_some = [&](int n) {
    for (int i = 0; i < n; i++, posted++) {
      uint64_t raddr =
          reinterpret_cast<uintptr_t>(target.data()) + (posted % 64) * 65536;
      ASSERT_EQ(post(posted, raddr, mr->rkey), 0);
    }
  };
  // Served while registered; then more in flight as it goes away.
  post_some(kFirst);
  take(kFirst / 2);
  post_some(kFirst);
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  post_some(kWrs - posted);
  take(posted - kFirst / 2);
  std::cout << (nak_only ? "WRITE" : "READ") << ": " << ok
            << " completed, " << access << " remote access errors, "
            << flushed << " flushed\n";
  EXPECT_EQ(other, 0);
  EXPECT_GE(ok, kFirst / 2);
  if (nak_only || access) {
    EXPECT_EQ(access, 1) << "the first request after it is refused";
  } else {
    EXPECT_TRUE(WaitAsyncEvent(ctx, IBV_EVENT_QP_FATAL, 5000))
        << "neither a NAK nor a lost connection";
  }
  EXPECT_EQ(ok + access + flushed, kWrs);
}

TEST_F(HostileTest, MrDeregisteredUnderRemoteWrites) {
  DeregisterUnder(ctx_.get(), true, pd_, a_.cq,
                  [&](int i, uint64_t raddr, uint32_t rkey) {
                    return PostSend(a_, i, IBV_WR_RDMA_WRITE,
                                    Sges(a_, 0, 65536, 1), raddr, rkey);
                  });
  ExpectPdStillUsable();
}

// A READ response can fail mid-segment once the MR is gone, also while
// the responder waits to send a NAK for a later request (it is in ERR
// then): the responder must still close the connection, or the requester
// waits forever for the rest of the segment (once a bug: about one run in
// six lost every outstanding WR; --gtest_repeat=40 is clean now).
TEST_F(HostileTest, MrDeregisteredUnderRemoteReads) {
  DeregisterUnder(ctx_.get(), false, pd_, a_.cq,
                  [&](int i, uint64_t raddr, uint32_t rkey) {
                    return PostSend(a_, i, IBV_WR_RDMA_READ,
                                    Sges(a_, 0, 65536, 1), raddr, rkey);
                  });
  ExpectPdStillUsable();
}

}  // namespace
