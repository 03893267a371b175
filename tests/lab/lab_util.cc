// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "lab_util.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include <rdma/trdma-wire.h>

namespace trdma_lab {

static std::string Env(const char *name, const char *dflt) {
  const char *v = std::getenv(name);
  return v && *v ? v : dflt;
}

std::string DevName() { return Env("TRDMA_DEV", "trdma0"); }
std::string NetdevName() { return Env("TRDMA_LAB_IF", "trdma-test0"); }
std::string NetdevAddr() { return Env("TRDMA_LAB_ADDR", "10.99.0.1"); }

bool DeviceExists() {
  return access(("/sys/class/infiniband/" + DevName()).c_str(), F_OK) == 0;
}

std::string LinkAddCmd() {
  return "rdma link add " + DevName() + " type trdma netdev " + NetdevName();
}

int Sh(const std::string &cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string ShOut(const std::string &cmd) {
  std::string out;
  FILE *f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

std::string ReadFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

ModuleParam::ModuleParam(const std::string &name, const std::string &value)
    : path_("/sys/module/trdma/parameters/" + name), old_(ReadFile(path_)) {
  ok_ = Sh("echo " + value + " > " + path_) == 0;
}

ModuleParam::~ModuleParam() { Sh("echo " + old_ + " > " + path_); }

Blackhole::Blackhole(const std::string &table) : table_(table) {
  const std::string port = std::to_string(TRDMA_DEFAULT_PORT);
  on_ = Sh("nft add table inet " + table_ + " && nft add chain inet " +
           table_ + " out '{ type filter hook output priority 0; }' && " +
           "nft add rule inet " + table_ + " out tcp sport " + port +
           " counter drop && nft add rule inet " + table_ +
           " out tcp dport " + port + " counter drop") == 0;
}

long Blackhole::Dropped() const {
  std::string out = ShOut("nft list table inet " + table_ + " 2>/dev/null");
  std::regex re("counter packets (\\d+)");
  long n = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end;
       ++it)
    n += std::stol((*it)[1]);
  return n;
}

bool Blackhole::Off() {
  bool ok = !on_ || Sh("nft delete table inet " + table_) == 0;
  on_ = false;
  return ok;
}

Context OpenDevice(const std::string &name) {
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  ibv_context *ctx = nullptr;
  for (int i = 0; list && i < n; i++)
    if (name == ibv_get_device_name(list[i])) ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  return Context(ctx);
}

bool WaitAsyncEvent(ibv_context *ctx, ibv_event_type type, int timeout_ms) {
  return WaitAsyncEventOf(ctx, type, nullptr, timeout_ms);
}

bool WaitAsyncEventOf(ibv_context *ctx, ibv_event_type type,
                      const void *element, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int fl = fcntl(ctx->async_fd, F_GETFL);
  fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd = {ctx->async_fd, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev)) continue;
    ibv_event_type got = ev.event_type;
    // The element is a union of pointers (QP, CQ, SRQ, WQ) for all but
    // port events.
    const void *of = ev.element.qp;
    ibv_ack_async_event(&ev);
    if (got == type && (!element || of == element)) return true;
  }
}

std::string StuckReport() {
  return ShOut(
      "ss -tanH '( sport = :4791 or dport = :4791 )' | awk '{n[$1]++} "
      "END {for (s in n) printf \"%s %d, \", s, n[s]; print \"\"}'; "
      "ss -ltnH 'sport = :4791'; "
      "nstat -asz TcpActiveOpens TcpPassiveOpens TcpAttemptFails "
      "TcpExtListenOverflows TcpExtListenDrops TcpExtTCPReqQFullDrop "
      "TcpExtTCPSynRetrans TcpExtTCPMemoryPressures TcpExtTCPAbortOnMemory "
      "| tail -n +2; grep -E '^(sockets|TCP):' /proc/net/sockstat; "
      "grep MemAvailable /proc/meminfo; rdma statistic show link " +
      DevName() +
      "/1 | tr ' ' '\\n' | paste - - | "
      "grep -E 'connect|refused|fatal|rnr|odp' | tr '\\n' ' '; echo; "
      // trdma's busy workers: running (no stack to read) or waiting where.
      "for p in $(pgrep kworker); do c=$(cat /proc/$p/comm); "
      "s=$(cut -d' ' -f3 /proc/$p/stat); case $s$c in I*) ;; "
      "*trdma*) echo \"$p $c $s\"; grep -v -e ret_from_fork -e kthread "
      "/proc/$p/stack;; esac; done 2>/dev/null; "
      "dmesg | grep trdma | tail -n 5");
}

long Counter(const std::string &name) {
  std::string out = ShOut("rdma statistic show link " + DevName() + "/1");
  size_t at = out.find(" " + name + " ");
  return at == std::string::npos ? -1
                                 : std::stol(out.substr(at + name.size() + 2));
}

}  // namespace trdma_lab
