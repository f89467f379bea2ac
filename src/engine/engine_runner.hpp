// Runs one WorkerEngine on a std::thread: the thread's operation queue, and the loop that moves
// packets between the engine and its transport (blocking receive until the engine's next
// deadline; optional busy polling). The only part of the worker that knows threads, clocks and
// transport::Transport.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dpa/config.hpp"
#include "engine/join.hpp"
#include "engine/operation.hpp"
#include "engine/worker_engine.hpp"
#include "transport/transport.hpp"

namespace dpa::detail {

class EngineRunner {
 public:
  EngineRunner(std::uint32_t thread_index, const Config& config, const SessionInfo& session,
               std::unique_ptr<transport::Transport> transport);
  // Stops the thread; operations still queued or running fail with dpa::Error.
  ~EngineRunner();
  EngineRunner(const EngineRunner&) = delete;
  EngineRunner& operator=(const EngineRunner&) = delete;

  void submit(std::shared_ptr<Operation> op);
  // Stops the thread (idempotent); the transport stays open.
  void stop();
  // Thread 0's transport also carries the context's JOIN and LEAVE. Only after stop().
  [[nodiscard]] transport::Transport& transport() { return *transport_; }

 private:
  void run();
  void execute(Operation& op);
  void flush();
  std::size_t receive(std::chrono::nanoseconds wait, std::uint64_t now);

  const std::chrono::nanoseconds busy_poll_;
  WorkerEngine engine_;
  std::unique_ptr<transport::Transport> transport_;
  std::vector<transport::RxPacket> rx_;

  std::mutex queue_mutex_;
  std::condition_variable queue_ready_;
  std::deque<std::shared_ptr<Operation>> queue_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dpa::detail
