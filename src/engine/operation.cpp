// SPDX-License-Identifier: Apache-2.0
#include "engine/operation.hpp"

#include <exception>
#include <utility>

#include "common/logging.hpp"
#include "engine/engine_runner.hpp"

namespace dpa::detail {

namespace {

// A callback's exception must not unwind the engine thread that runs it.
void run_completion(const Completion& callback, const OpStats& stats, std::exception_ptr error) {
  try {
    callback(stats, std::move(error));
  } catch (const std::exception& e) {
    log().error("an allreduce completion callback threw (ignored): {}", e.what());
  } catch (...) {
    log().error("an allreduce completion callback threw a non-std exception (ignored)");
  }
}

}  // namespace

void Operation::finish_part(const OpStats& part, std::exception_ptr part_error) {
  std::vector<Completion> callbacks;
  {
    std::lock_guard lock(mutex_);
    stats_ += part;
    if (part_error && !error_) {
      error_ = part_error;
      failed_.store(true, std::memory_order_release);
    }
    if (part_error && rejoin_needed != nullptr) rejoin_needed->store(true, std::memory_order_relaxed);
    if (--parts_remaining != 0) return;
    stats_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted).count();
    complete_ = true;
    done_.notify_all();
    callbacks.swap(completions_);
  }
  // Complete, so stats_ and error_ no longer change: read without the lock, which a callback
  // may need (Handle::done, wait).
  for (const Completion& callback : callbacks) run_completion(callback, stats_, error_);
}

void Operation::add_completion(Completion callback) {
  {
    std::lock_guard lock(mutex_);
    if (!complete_) {
      completions_.push_back(std::move(callback));
      return;
    }
  }
  run_completion(callback, stats_, error_);
}

void Operation::run_parts_here() {
  for (const std::weak_ptr<EngineRunner>& weak : waiter_may_run) {
    if (complete()) return;
    const std::shared_ptr<EngineRunner> runner = weak.lock();
    if (runner && !runner->run_here(*this) && runners_not_woken) runner->wake();
  }
}

bool Operation::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return done_.wait_for(lock, timeout, [this] { return complete_; });
}

bool Operation::complete() const {
  std::lock_guard lock(mutex_);
  return complete_;
}

const OpStats& Operation::result() const {
  std::lock_guard lock(mutex_);
  if (error_) std::rethrow_exception(error_);
  return stats_;
}

BlockPlan::BlockPlan(std::size_t count, std::size_t payload_values, std::size_t thread,
                     std::size_t threads, std::size_t shard_elements)
    : payload(payload_values),
      shard_length(shard_elements != 0 ? shard_elements : count),
      shard_blocks((shard_length + payload_values - 1) / payload_values),
      blocks(shard_length == 0 ? 0 : count / shard_length * shard_blocks) {
  first_block = blocks * thread / threads;
  thread_blocks = blocks * (thread + 1) / threads - first_block;
}

}  // namespace dpa::detail
