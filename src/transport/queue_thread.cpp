// SPDX-License-Identifier: Apache-2.0
#include "transport/queue_thread.hpp"

#include <pthread.h>

#include <array>
#include <cerrno>
#include <string_view>
#include <thread>

namespace dpa::transport {
namespace {

class StdQueueThread final : public QueueThread {
 public:
  StdQueueThread(std::function<void()> body, std::string where)
      : where_(std::move(where)), thread_(std::move(body)) {}
  ~StdQueueThread() override { thread_.join(); }
  [[nodiscard]] std::string where() const override { return where_; }

 private:
  std::string where_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<QueueThread> launch_std_thread(std::function<void()> body, std::string where) {
  return std::make_unique<StdQueueThread>(std::move(body), std::move(where));
}

void name_this_thread(const std::string& name) {
  // A thread its launcher has named keeps that name (DPDK's lcore-worker-N, which tools and
  // tests look for); a new thread carries the program's name until named.
  std::array<char, 16> current{};
  if (::pthread_getname_np(::pthread_self(), current.data(), current.size()) != 0) return;
  if (std::string_view(current.data()) != std::string_view(program_invocation_short_name).substr(0, 15)) return;
  // Longer names are refused (ERANGE), so they are cut; a name is a convenience, never an error.
  ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace dpa::transport
