#include "engine/operation.hpp"

namespace dpa::detail {

void Operation::finish_part(const OpStats& part, std::exception_ptr part_error) {
  std::lock_guard lock(mutex_);
  stats_ += part;
  if (part_error && !error_) error_ = part_error;
  if (part_error && rejoin_needed != nullptr) rejoin_needed->store(true, std::memory_order_relaxed);
  if (--parts_remaining == 0) {
    stats_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted).count();
    complete_ = true;
    done_.notify_all();
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
                     std::size_t threads)
    : payload(payload_values), blocks((count + payload_values - 1) / payload_values) {
  first_block = blocks * thread / threads;
  thread_blocks = blocks * (thread + 1) / threads - first_block;
}

}  // namespace dpa::detail
