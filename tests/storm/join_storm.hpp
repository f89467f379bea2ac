// SPDX-License-Identifier: Apache-2.0
// A JOIN storm, as an attacker on a worker host would send it (issue 51, docs/security.md): many
// UDP sockets sending well-formed JOINs to a session at a fixed total rate, for a bounded time.
// Used by join_storm_test and by the dpa-join-storm tool (scripts/dpa-attack-table.sh).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"

namespace dpa::storm {

struct StormSettings {
  std::string switch_host = "127.0.0.1";
  std::uint16_t switch_port = 4242;
  std::uint32_t session = 1;
  std::uint32_t world_size = 4;
  std::uint32_t threads = 1;  // what the JOINs announce
  std::uint32_t window = 8;
  int sockets = 1000;
  double rate = 2000;  // JOINs per second over all sockets
  std::chrono::milliseconds duration{20000};
  // fresh: every JOIN a new nonce, ranks in turn. repeat: socket i repeats one nonce for `rank`
  // (a process that behaves like a rank without being one).
  enum class Mode { fresh, repeat } mode = Mode::fresh;
  int rank = 0;  // repeat: the rank every socket claims
};

// Opens the sockets, then sends the storm on a thread of its own until the duration ends or stop().
class JoinStorm {
 public:
  explicit JoinStorm(StormSettings settings);
  ~JoinStorm();  // stops and joins the thread
  JoinStorm(const JoinStorm&) = delete;
  JoinStorm& operator=(const JoinStorm&) = delete;

  void stop();
  void wait();  // until the duration ends
  [[nodiscard]] std::uint64_t sent() const { return sent_.load(std::memory_order_relaxed); }

 private:
  void run();

  StormSettings settings_;
  std::vector<detail::UniqueFd> sockets_;  // opened by the constructor: a failure throws there
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> sent_{0};
  std::thread thread_;
};

}  // namespace dpa::storm
