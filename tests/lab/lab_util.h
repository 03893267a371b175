// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// Helpers shared by the lab tests: the device and netdev under test, shell
// commands, and small verbs wrappers with RAII.
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

namespace trdma_lab {

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

// The functions below are in lab_util.cc; the ones above need no linking
// (tests/lab/xhost_fault.cc uses them without it).

// Name of the trdma device under test ($TRDMA_DEV, default "trdma0").
std::string DevName();
// Netdev the device is bound to ($TRDMA_LAB_IF, default "trdma-test0").
std::string NetdevName();
// IPv4 address of that netdev ($TRDMA_LAB_ADDR).
std::string NetdevAddr();

// Runs a shell command; returns its exit status (-1 if it did not exit).
int Sh(const std::string &cmd);
// Runs a shell command and returns what it wrote to stdout.
std::string ShOut(const std::string &cmd);
// The value of a port counter of the device under test, as `rdma
// statistic` shows it; -1 when there is no such counter.
long Counter(const std::string &name);
// Reads a whole (sysfs) file, without the trailing newline.
std::string ReadFile(const std::string &path);

struct ContextCloser {
  void operator()(ibv_context *ctx) const { ibv_close_device(ctx); }
};
using Context = std::unique_ptr<ibv_context, ContextCloser>;

// Opens the named verbs device; null when it does not exist.
Context OpenDevice(const std::string &name);

// Waits up to timeout_ms for an async event of the given type; other events
// are acknowledged and skipped.  Returns true when it arrived.
bool WaitAsyncEvent(ibv_context *ctx, ibv_event_type type, int timeout_ms);

}  // namespace trdma_lab
