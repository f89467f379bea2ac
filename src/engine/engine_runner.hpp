// SPDX-License-Identifier: Apache-2.0
// Runs one WorkerEngine on the thread that drives its queue (a std::thread for sockets, a DPDK
// lcore: Device::launch): the thread's operation queue, and the loop that moves packets between
// the engine and the queue (receive until the engine's next deadline, blocking on sockets and
// busy-polling under DPDK; optional busy polling on sockets too). The only part of the worker
// that knows threads, clocks and transport queues.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "dpa/config.hpp"
#include "engine/join.hpp"
#include "engine/operation.hpp"
#include "engine/worker_engine.hpp"
#include "transport/device.hpp"

namespace dpa::detail {

class EngineRunner {
 public:
  // Starts the thread on `device` (which outlives the runner) for `queue`, a queue of it.
  EngineRunner(std::uint32_t thread_index, const Config& config, const SessionInfo& session,
               std::unique_ptr<transport::Queue> queue, transport::Device& device);
  // Stops the thread; operations still queued or running fail with dpa::Error.
  ~EngineRunner();
  EngineRunner(const EngineRunner&) = delete;
  EngineRunner& operator=(const EngineRunner&) = delete;

  // Queues `op`'s part; `wake`: tells the runner's thread now (else a waiter runs it, or wakes
  // the thread: wake()).
  void submit(std::shared_ptr<Operation> op, bool wake = true);
  void wake();
  // Runs this runner's part of `op` on the calling thread when it is next in line and the
  // runner's thread has not taken it (a thread that waits for `op` anyway saves the two
  // hand-offs). Returns false, leaving the part to the runner's thread, otherwise.
  bool run_here(const Operation& op);
  // Stops the thread (idempotent); the queue stays open.
  void stop();
  // Thread 0's queue also carries the context's JOIN and LEAVE. Only after stop().
  [[nodiscard]] transport::Queue& queue() { return *queue_; }
  // Where the thread runs ("lcore 1 (core 2)", "a std::thread"), for the logs.
  [[nodiscard]] std::string where() const { return thread_ ? thread_->where() : "stopped"; }
  // The queue's counters as of the end of the last operation part (the queue itself is only
  // read by the thread that drives it).
  [[nodiscard]] transport::QueueCounters counters();
  // The running part if the switch reports it pending (WorkerEngine::pending); any thread.
  [[nodiscard]] std::optional<PendingWait> pending() const;

 private:
  void run();
  void execute(Operation& op);
  void finish_executing();
  // Hands the engine's packets to the queue and pushes them out.
  void send_outgoing();
  // Idle: sends the engine's keepalive when due (docs/protocol.md §6.7).
  void keep_alive_idle();
  std::size_t receive(std::chrono::nanoseconds wait, std::uint64_t now);

  const std::chrono::nanoseconds busy_poll_;
  std::unique_ptr<transport::Queue> queue_;  // declared before engine_: it holds the engine's buffers
  WorkerEngine engine_;
  std::vector<transport::RxPacket> rx_;

  std::mutex queue_mutex_;
  transport::QueueCounters counters_;  // guarded by queue_mutex_
  std::condition_variable queue_ready_;
  std::deque<std::shared_ptr<Operation>> operations_;
  bool executing_ = false;  // a part runs, on the runner's thread or a waiter's
  std::atomic<bool> stop_{false};
  std::unique_ptr<transport::QueueThread> thread_;
};

}  // namespace dpa::detail
