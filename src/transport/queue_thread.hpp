// SPDX-License-Identifier: Apache-2.0
// The thread that drives one queue (a runner's poll loop): a std::thread for sockets, a DPDK lcore
// pinned to its core for DPDK. Device::launch starts one; destroying it waits until the body has
// returned, so the body's owner makes it return first (a stop flag it polls).
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace dpa::transport {

class QueueThread {
 public:
  virtual ~QueueThread() = default;
  // Where it runs, for the logs: "lcore 2 (core 5)", "a std::thread", ...
  [[nodiscard]] virtual std::string where() const = 0;
};

// `body` on a new std::thread (the socket transport's threads, and DPDK's when no lcore is free;
// `where` then says why).
std::unique_ptr<QueueThread> launch_std_thread(std::function<void()> body, std::string where = "a std::thread");

// Names the calling thread for top, perf and gdb ("dpa-switch-0"; Linux keeps 15 characters),
// unless its launcher has named it (DPDK's lcores).
void name_this_thread(const std::string& name);

}  // namespace dpa::transport
