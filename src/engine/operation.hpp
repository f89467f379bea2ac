// SPDX-License-Identifier: Apache-2.0
// One allreduce as the engine threads see it: what to reduce, how it is cut into blocks, and
// how the threads' results come together.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "dpa/context.hpp"
#include "dpa/types.hpp"

namespace dpa::detail {

class EngineRunner;

// What an operation delivers (docs/protocol.md §13 for the owned ones): an all-reduce's sums
// go to every rank; a reduce-scatter's shard s to rank s; an all-gather's shard s comes from
// rank s and goes to every rank; a broadcast's one shard from the root to every rank.
enum class Collective : std::uint8_t { all_reduce, reduce_scatter, all_gather, broadcast };
[[nodiscard]] constexpr std::string_view to_string(Collective collective) {
  switch (collective) {
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_gather: return "all_gather";
    case Collective::broadcast: return "broadcast";
    case Collective::all_reduce: break;
  }
  return "allreduce";
}

struct Operation {
  // all_reduce, broadcast: `in` and `out` hold `count` elements (in == out allowed). A
  // reduce-scatter reads `count` = N·shard_length elements and writes its shard_length; an
  // all-gather reads its shard_length and writes `count` = N·shard_length.
  const std::byte* in = nullptr;
  std::byte* out = nullptr;
  std::size_t count = 0;
  Collective collective = Collective::all_reduce;
  std::size_t shard_length = 0;  // elements per shard (count for an all-reduce or broadcast)
  std::uint8_t root = 0;         // broadcast: the rank whose values every rank receives
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

// How an operation's blocks are split: the operation's shards (one for an all-reduce or a
// broadcast) are each cut into blocks of `payload` values (§13.5: no block spans two owners);
// thread t takes a contiguous run of the blocks, and window entry e of that thread takes blocks
// e, e + W, e + 2W, ... of the run. Every rank computes the same plan, so the same block travels
// through the same slot on every rank.
struct BlockPlan {
  std::size_t payload = 0;  // values per block
  std::size_t shard_length = 0;  // elements per shard
  std::size_t shard_blocks = 0;  // blocks per shard
  std::size_t blocks = 0;   // in the whole operation
  std::size_t first_block = 0;  // this thread's run
  std::size_t thread_blocks = 0;

  // `shard_length` 0: one shard of `count` elements.
  BlockPlan(std::size_t count, std::size_t payload_values, std::size_t thread, std::size_t threads,
            std::size_t shard_length = 0);

  // The shard (its owner, for reduce-scatter and all-gather) of block b.
  [[nodiscard]] std::size_t shard_of(std::size_t b) const { return b / shard_blocks; }
  // First element of block b in the operation, and its number of elements.
  [[nodiscard]] std::size_t begin_of(std::size_t b) const {
    return shard_of(b) * shard_length + (b % shard_blocks) * payload;
  }
  [[nodiscard]] std::size_t length_of(std::size_t b) const {
    return std::min(payload, shard_length - (b % shard_blocks) * payload);
  }

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
