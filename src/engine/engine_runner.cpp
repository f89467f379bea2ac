// SPDX-License-Identifier: Apache-2.0
#include "engine/engine_runner.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "dpa/error.hpp"
#include "transport/send.hpp"

namespace dpa::detail {

namespace {

constexpr std::size_t kPrefetchAhead = 2;  // packets

void prefetch(std::span<const std::byte> bytes) {
  for (std::size_t offset = 0; offset < bytes.size(); offset += 64) __builtin_prefetch(bytes.data() + offset, 0, 3);
}

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

EngineRunner::EngineRunner(std::uint32_t thread_index, const Config& config,
                           const SessionInfo& session, std::unique_ptr<transport::Queue> queue,
                           transport::Device& device)
    : busy_poll_(config.busy_poll),
      queue_(std::move(queue)),
      engine_(thread_index, config, session, *queue_),
      rx_(64) {
  thread_ = device.launch(thread_index, [this, name = "dpa-engine-" + std::to_string(thread_index)] {
    transport::name_this_thread(name);
    run();
  });
}

EngineRunner::~EngineRunner() { stop(); }

void EngineRunner::stop() {
  {
    std::lock_guard lock(queue_mutex_);
    stop_.store(true, std::memory_order_relaxed);
  }
  queue_ready_.notify_all();
  thread_.reset();  // waits for run() to return
}

void EngineRunner::submit(std::shared_ptr<Operation> op, bool wake) {
  {
    std::lock_guard lock(queue_mutex_);
    operations_.push_back(std::move(op));
  }
  if (wake) queue_ready_.notify_one();
}

void EngineRunner::wake() {
  // The lock orders this after the push of whatever the thread is to find.
  { std::lock_guard lock(queue_mutex_); }
  queue_ready_.notify_one();
}

bool EngineRunner::run_here(const Operation& op) {
  std::shared_ptr<Operation> mine;
  {
    std::lock_guard lock(queue_mutex_);
    if (executing_ || stop_.load(std::memory_order_relaxed) || operations_.empty() ||
        operations_.front().get() != &op) {
      return false;
    }
    mine = std::move(operations_.front());
    operations_.pop_front();
    executing_ = true;
  }
  execute(*mine);
  finish_executing();
  return true;
}

std::optional<PendingWait> EngineRunner::pending() const { return engine_.pending(now_ns()); }

transport::QueueCounters EngineRunner::counters() {
  std::lock_guard lock(queue_mutex_);
  return counters_;
}

void EngineRunner::finish_executing() {
  bool wake = false;
  const transport::QueueCounters counters = queue_->counters();
  {
    std::lock_guard lock(queue_mutex_);
    counters_ = counters;
    executing_ = false;
    wake = !operations_.empty() || stop_.load(std::memory_order_relaxed);
  }
  // The runner's thread may have woken for a part submitted meanwhile (or for stop()) and found
  // a waiter running one.
  if (wake) queue_ready_.notify_one();
}

void EngineRunner::run() {
  while (true) {
    std::shared_ptr<Operation> op;
    {
      std::unique_lock lock(queue_mutex_);
      // After stop(), parts still queued fail at once (execute checks the flag); a part a waiter
      // runs ends first, so the thread never leaves the queue to nobody.
      const auto ready = [this] {
        return !executing_ && (!operations_.empty() || stop_.load(std::memory_order_relaxed));
      };
      // Idle, the thread still wakes for the engine's keepalives (none on most threads).
      const std::uint64_t keepalive = engine_.next_keepalive();
      const bool woken =
          keepalive == std::numeric_limits<std::uint64_t>::max()
              ? (queue_ready_.wait(lock, ready), true)
              : queue_ready_.wait_until(lock,
                                        std::chrono::steady_clock::time_point(std::chrono::nanoseconds(keepalive)),
                                        ready);
      if (!woken) {
        if (executing_) continue;  // a waiter runs a part: its loop sends the keepalives
        executing_ = true;
        lock.unlock();
        keep_alive_idle();
        finish_executing();
        continue;
      }
      if (operations_.empty()) return;
      op = std::move(operations_.front());
      operations_.pop_front();
      executing_ = true;
    }
    execute(*op);
    finish_executing();
  }
}

void EngineRunner::execute(Operation& op) {
  std::uint64_t now = now_ns();
  engine_.start(op, now);
  try {
    while (engine_.busy()) {
      if (stop_.load(std::memory_order_relaxed)) {
        throw Error("dpa context destroyed while an allreduce was running");
      }
      engine_.keepalive(now);
      send_outgoing();
      const std::uint64_t deadline = std::min(engine_.deadline_bound(), engine_.next_keepalive());
      const std::size_t received =
          receive(std::chrono::nanoseconds(deadline > now ? deadline - now : 0), now);
      now = now_ns();
      // A result's values were written by another core (the switch's, or a NIC's DMA): their
      // lines are asked for two packets ahead, so the transfers overlap the packets before.
      for (std::size_t i = 0; i < std::min<std::size_t>(received, kPrefetchAhead); ++i) prefetch(rx_[i].data);
      std::size_t handled_bytes = 0;
      for (std::size_t i = 0; i < received; ++i) {
        if (i + kPrefetchAhead < received) prefetch(rx_[i + kPrefetchAhead].data);
        engine_.on_packet(rx_[i], now);
        handled_bytes += rx_[i].data.size();
        if (handled_bytes >= transport::kSendEveryBytes && !engine_.outgoing().empty()) {
          send_outgoing();
          handled_bytes = 0;
        }
      }
      engine_.poll(now);
    }
    send_outgoing();
    // Idle from here until the next operation: nothing polls the queue, so nothing may wait in it.
    queue_->flush();
  } catch (...) {
    // The stop flag, or the transport failing (a receive error): the part fails with it.
    engine_.fail(std::current_exception());
  }
}

void EngineRunner::keep_alive_idle() {
  try {
    engine_.keepalive(now_ns());
    if (engine_.outgoing().empty()) return;  // the first call only starts the interval
    send_outgoing();
    queue_->flush();
  } catch (const std::exception&) {
    // A keepalive that cannot go is lost like any packet; the switch hears the next one.
    engine_.clear_outgoing();
  }
}

void EngineRunner::send_outgoing() {
  // What a full device queue leaves over is lost like any packet: the engine retransmits it.
  transport::send_all(*queue_, engine_.outgoing());
  // No flush: the transport sends a burst when it is full or, from the receive() calls of this
  // loop, when its oldest packet has waited the flush interval (DPDK tx_flush_us; sockets send
  // before they wait).
  engine_.clear_outgoing();
}

std::size_t EngineRunner::receive(std::chrono::nanoseconds wait, std::uint64_t now) {
  // Opt-in busy polling: spin on non-blocking receives before falling back to a blocking wait.
  const auto busy_poll = static_cast<std::uint64_t>(busy_poll_.count());
  const std::uint64_t spin_until =
      now + std::min(busy_poll, static_cast<std::uint64_t>(wait.count()));
  while (busy_poll > 0 && now_ns() < spin_until) {
    if (const std::size_t received = queue_->receive(rx_, std::chrono::nanoseconds(0))) {
      return received;
    }
  }
  const std::uint64_t spent = now_ns() - now;
  const auto remaining =
      static_cast<std::uint64_t>(wait.count()) > spent
          ? std::chrono::nanoseconds(wait.count() - static_cast<std::int64_t>(spent))
          : std::chrono::nanoseconds(0);
  return queue_->receive(rx_, remaining);
}

}  // namespace dpa::detail
