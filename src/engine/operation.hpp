// SPDX-License-Identifier: Apache-2.0
// One allreduce as the engine threads see it: what to reduce, how it is cut into blocks, and
// how the threads' results come together.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "dpa/context.hpp"
#include "dpa/types.hpp"

namespace dpa::detail {

class EngineRunner;

struct Operation {
  const std::byte* in = nullptr;
  std::byte* out = nullptr;
  std::size_t count = 0;
  DataType type = DataType::int32;
  ReduceOp op = ReduceOp::sum;
  std::uint32_t op_id = 0;
  std::uint8_t k = 0;  // 0: the session's default
  bool preemptive = false;
  std::uint64_t* block_contributors = nullptr;  // optional, one bitmap per block
  const std::int8_t* block_exponents = nullptr;  // optional, float32: precomputed own exponents
  block_float::WireBlock* wire_result = nullptr;  // optional, float32: out gets the wire sums
  std::chrono::steady_clock::time_point submitted;
  // The context's flag: a failed part sets it, and the context rejoins the session before its
  // next operation, because the ranks' round counters may no longer line up.
  std::atomic<bool>* rejoin_needed = nullptr;

  // Called by each engine thread when its part is done (error empty on success); the last one
  // completes the operation and then, with no lock held, runs the completion callbacks.
  void finish_part(const OpStats& part, std::exception_ptr part_error);
  // Runs `callback` on completion (Handle::on_complete), or now if the operation is complete.
  void add_completion(Completion callback);
  // Waits up to `timeout`; returns true when complete.
  bool wait_for(std::chrono::milliseconds timeout);
  [[nodiscard]] bool complete() const;
  // Rethrows the first error of any part. Call after completion.
  const OpStats& result() const;
  // Whether a part has failed (the operation will): the other parts may stop early. Lock-free,
  // for the engines' packet loops.
  [[nodiscard]] bool failed() const { return failed_.load(std::memory_order_acquire); }

  int parts_remaining = 0;  // set before the parts are handed to the threads
  // The operation has logged that it waits long for other ranks (Config::pending_warn): once.
  std::atomic<bool> pending_warned{false};
  // Runners whose parts a waiting thread may run itself (Config::waiter_runs); set at submit.
  std::vector<std::weak_ptr<EngineRunner>> waiter_may_run;
  // Their threads were not woken at submit (AllreduceOptions::caller_waits): run_parts_here()
  // wakes each one whose part it cannot run.
  bool runners_not_woken = false;
  // Runs, on the calling thread, each of those parts that its runner's thread has not started.
  void run_parts_here();

 private:
  mutable std::mutex mutex_;
  std::condition_variable done_;
  bool complete_ = false;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
  OpStats stats_;
  std::vector<Completion> completions_;  // registered before completion, run once by it
};

// How an operation's blocks are split: thread t takes a contiguous run of blocks, and window
// entry e of that thread takes blocks e, e + W, e + 2W, ... of the run. Every rank computes the
// same plan, so the same block travels through the same slot on every rank.
struct BlockPlan {
  std::size_t payload = 0;  // values per block
  std::size_t blocks = 0;   // in the whole operation
  std::size_t first_block = 0;  // this thread's run
  std::size_t thread_blocks = 0;

  BlockPlan(std::size_t count, std::size_t payload_values, std::size_t thread, std::size_t threads);

  // Blocks carried by window entry e (of `window`).
  [[nodiscard]] std::size_t entry_blocks(std::size_t entry, std::size_t window) const {
    return thread_blocks > entry ? (thread_blocks - entry + window - 1) / window : 0;
  }
  // Global index of the j-th block of entry e.
  [[nodiscard]] std::size_t block_of(std::size_t entry, std::size_t j, std::size_t window) const {
    return first_block + entry + j * window;
  }
};

}  // namespace dpa::detail
