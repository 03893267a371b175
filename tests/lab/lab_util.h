// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// Helpers shared by the lab tests: the device and netdev under test, shell
// commands, and small verbs wrappers with RAII.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>

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
