// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// Helpers shared by the lab tests: the device and netdev under test, shell
// commands, and small verbs wrappers with RAII.
#pragma once

#include <infiniband/verbs.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "../common/wc_opcode.h"

namespace trdma_lab {

// An IPv4-mapped GID (::ffff:a.b.c.d), as trdma derives from an IPv4
// address; an EUI-64 link-local one can also have 0xff in bytes 10 and 11
// (a MAC whose third byte is 0xff).
inline bool IsV4MappedGid(const ibv_gid &g) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return !memcmp(g.raw, kPrefix, sizeof(kPrefix));
}

// The index and value of the device's IPv4-mapped RoCE v2 GID, -1 if none.
inline int RoceV2Gid(ibv_context *ctx, ibv_gid *gid) {
  for (int i = 0; i < 16; i++) {
    ibv_gid_entry e;
    if (ibv_query_gid_ex(ctx, 1, i, &e, 0)) continue;
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && IsV4MappedGid(e.gid)) {
      *gid = e.gid;
      return i;
    }
  }
  return -1;
}

using Clock = std::chrono::steady_clock;

// Milliseconds since a time point.
inline long Ms(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() -
                                                               since)
      .count();
}

// --- byte patterns: data any test can check where it lands ---------------

inline uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Byte j of the pattern named key is byte j % 8 of word j / 8.
inline uint64_t PatternWord(uint64_t key, size_t w) {
  return SplitMix((key << 20) ^ w);
}

inline void Pattern(uint8_t *p, size_t len, uint64_t key) {
  for (size_t i = 0; i < len; i += 8) {
    uint64_t v = PatternWord(key, i / 8);
    memcpy(p + i, &v, std::min<size_t>(8, len - i));
  }
}

// Whether p[0, len) holds bytes [off, off + len) of the pattern named key.
inline bool IsPattern(const uint8_t *p, size_t len, uint64_t key,
                      size_t off = 0) {
  size_t j = off;
  while (j < off + len) {
    uint64_t v = PatternWord(key, j / 8);
    const uint8_t *b = reinterpret_cast<const uint8_t *>(&v);
    size_t n = std::min<size_t>(8 - j % 8, off + len - j);
    if (memcmp(p + (j - off), b + j % 8, n)) return false;
    j += n;
  }
  return true;
}

inline uint64_t Addr(const void *p) { return reinterpret_cast<uintptr_t>(p); }

inline bool IsAtomic(ibv_wr_opcode op) {
  return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

inline const char *OpName(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_SEND:
      return "SEND";
    case IBV_WR_SEND_WITH_IMM:
      return "SEND_WITH_IMM";
    case IBV_WR_RDMA_WRITE:
      return "WRITE";
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return "WRITE_WITH_IMM";
    case IBV_WR_RDMA_READ:
      return "READ";
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return "CMP_AND_SWP";
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return "FETCH_AND_ADD";
    default:
      return "?";
  }
}

// Reads len bytes from fd within ms milliseconds; false on EOF, error or
// timeout.
inline bool ReadFull(int fd, void *p, size_t len, int ms) {
  auto t0 = Clock::now();
  size_t got = 0;
  while (got < len && Ms(t0) < ms) {
    pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    ssize_t n = read(fd, static_cast<char *>(p) + got, len - got);
    if (n <= 0) return false;
    got += n;
  }
  return got == len;
}

// A field of the "Tcp:" lines of /proc/net/snmp (RetransSegs, OutRsts);
// -1 when the kernel shows no such field.
inline long TcpSnmp(const std::string &field) {
  std::ifstream in("/proc/net/snmp");
  std::string line, names;
  while (std::getline(in, line)) {
    if (line.rfind("Tcp:", 0) != 0) continue;
    if (names.empty()) {
      names = line;
      continue;
    }
    std::istringstream n(names), v(line);
    std::string name, value;
    while (n >> name && v >> value)
      if (name == field) return std::stol(value);
  }
  return -1;
}

// TCP segments retransmitted since boot; -1 when the kernel shows none.
inline long TcpRetransSegs() { return TcpSnmp("RetransSegs"); }

// The functions below are in lab_util.cc; the ones above need no linking
// (tests/lab/xhost_fault.cc uses them without it).

// Name of the trdma device under test ($TRDMA_DEV, default "trdma0").
std::string DevName();
// Netdev the device is bound to ($TRDMA_LAB_IF, default "trdma-test0").
std::string NetdevName();
// IPv4 address of that netdev ($TRDMA_LAB_ADDR).
std::string NetdevAddr();
// Whether the device under test exists (it may have been deleted).
bool DeviceExists();
// The command that adds the device under test on its netdev.
std::string LinkAddCmd();

// Runs a shell command; returns its exit status (-1 if it did not exit).
int Sh(const std::string &cmd);
// Runs a shell command and returns what it wrote to stdout.
std::string ShOut(const std::string &cmd);
// The value of a port counter of the device under test, as `rdma
// statistic` shows it; -1 when there is no such counter.
long Counter(const std::string &name);
// What a wait that timed out may need explained, as text: the QP
// connections' TCP sockets by state, the listener's queue, TCP's counters
// of refused and retried connections and memory, the guest's free memory,
// trdma's connection counters and its last log lines.
std::string StuckReport();
// Reads a whole (sysfs) file, without the trailing newline.
std::string ReadFile(const std::string &path);

// Sets trdma's module parameter name to value for the life of the object,
// then back to what it was.  ok(): the value was written.
class ModuleParam {
 public:
  ModuleParam(const std::string &name, const std::string &value);
  ~ModuleParam();
  ModuleParam(const ModuleParam &) = delete;
  ModuleParam &operator=(const ModuleParam &) = delete;
  bool ok() const { return ok_; }

 private:
  std::string path_, old_;
  bool ok_;
};

// An nftables table (inet NAME) that drops every trdma TCP segment on
// output (both directions of a connection over lo), removed again when
// this goes.  on(): it was added.
class Blackhole {
 public:
  explicit Blackhole(const std::string &table = "trdma_fault");
  ~Blackhole() { Off(); }
  Blackhole(const Blackhole &) = delete;
  Blackhole &operator=(const Blackhole &) = delete;
  bool on() const { return on_; }
  // Segments dropped so far.
  long Dropped() const;
  // Removes the table; false where that failed.
  bool Off();

 private:
  std::string table_;
  bool on_ = false;
};

struct ContextCloser {
  void operator()(ibv_context *ctx) const { ibv_close_device(ctx); }
};
using Context = std::unique_ptr<ibv_context, ContextCloser>;

// Opens the named verbs device; null when it does not exist.
Context OpenDevice(const std::string &name);

// Waits up to timeout_ms for an async event of the given type; other events
// are acknowledged and skipped.  Returns true when it arrived.
bool WaitAsyncEvent(ibv_context *ctx, ibv_event_type type, int timeout_ms);
// The same, for the event of one QP, CQ or SRQ (element).
bool WaitAsyncEventOf(ibv_context *ctx, ibv_event_type type,
                      const void *element, int timeout_ms);

}  // namespace trdma_lab
