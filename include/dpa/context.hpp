// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "dpa/block_float.hpp"
#include "dpa/config.hpp"
#include "dpa/error.hpp"
#include "dpa/submit_order.hpp"
#include "dpa/transport_counters.hpp"
#include "dpa/types.hpp"

namespace dpa {

struct AllreduceOptions {
  ReduceOp op = ReduceOp::sum;
  std::optional<int> k;            // fastest-K for this operation (default: Config::k)
  std::optional<bool> preemptive;  // default: Config::preemptive
  // If set, receives one contributor bitmap per block (ceil(count / payload()) entries): bit r
  // is set when rank r's values are in that block of the result; 0 marks a block this rank
  // missed. Lets a caller average or resynchronise by the true contributors.
  std::uint64_t* block_contributors = nullptr;
  // float32 only, for a caller that does the block floating point around libdpa (a GPU;
  // dpa/block_float.hpp). block_exponents: this rank's exponent of each block, computed by the
  // caller exactly as the rule there says, so libdpa skips its own scan of the input.
  // wire_result: one entry per block; `out` then receives the blocks' raw wire sums instead of
  // floats, for the caller to dequantise.
  const std::int8_t* block_exponents = nullptr;
  block_float::WireBlock* wire_result = nullptr;
  // The caller calls Handle::wait() right after submitting. An operation of one block then
  // starts in wait(), on the caller's thread (Config::waiter_runs, on a transport any thread may
  // poll), and no engine thread is woken for it: that saves a wake-up and a lock hand-off per
  // operation. wait() wakes the engine thread where it cannot run the part itself. Without a
  // wait() such an operation may not start. Context::allreduce sets it.
  bool caller_waits = false;
};

namespace detail {
struct Operation;
class ContextImpl;
}  // namespace detail

// What an operation's completion callback receives: the statistics and a null `error` on
// success; on failure the error (a dpa::Error, as wait() would throw it) and the statistics
// counted until then.
using Completion = std::function<void(const OpStats& stats, std::exception_ptr error)>;

// An operation in flight. Obtained from Context::allreduce_async; cheap to copy.
class Handle {
 public:
  Handle() = default;
  // Has `callback` called exactly once when the operation completes or fails; each registration
  // gets its own call. If the operation has already finished, it runs now, on this thread.
  // Otherwise it runs on the thread that finishes the operation's last part (a libdpa engine
  // thread, or a thread inside wait(): Config::waiter_runs), once wait() and
  // done() see it finished and with no libdpa lock held. That thread moves other operations'
  // packets: keep the callback short (hand long work to a thread of your own). It may read the
  // buffers and stats, signal other threads and use this Handle; it must not submit to, wait for
  // other operations of, or destroy a Context, since those may need the thread it runs on. An
  // exception it throws is logged and dropped.
  void on_complete(Completion callback);
  // Waits up to `timeout` for completion. Returns false if the operation is still running;
  // throws the operation's error if it failed.
  bool wait(std::chrono::milliseconds timeout);
  // Waits until the operation completes or fails (bounded by Config::timeout). With
  // Config::waiter_runs (the default on UDP sockets) the calling thread first runs the parts
  // that no engine thread has started yet, instead of sleeping while one wakes up.
  const OpStats& wait();
  [[nodiscard]] bool done() const;

 private:
  friend class detail::ContextImpl;
  explicit Handle(std::shared_ptr<detail::Operation> op) : op_(std::move(op)) {}
  std::shared_ptr<detail::Operation> op_;
};

// A member of one allreduce session. Creating it joins the session through the switch: every
// rank must create its context with an agreeing configuration (world size, threads, window,
// payload), or each one gets a ConfigError naming the setting that differs.
// Operations run in submission order, which must be the same on every rank; with submissions from
// several threads, SubmitOrder (submit_order.hpp) decides it.
class Context {
 public:
  // Submissions follow `order`: a context of its own by default; contexts given the same order
  // share one sequence of tickets (one stream of operations spread over several sessions).
  explicit Context(const Config& config, SubmitOrder order = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Reduces `count` elements of `in` across all ranks into `out` (in == out is allowed).
  // Blocks until done; throws dpa::Error on failure. Takes its place in submit_order() when
  // called.
  OpStats allreduce(const void* in, void* out, std::size_t count, DataType type,
                    const AllreduceOptions& options = {});
  // Submits and returns at once; the buffers must stay valid until the operation completes.
  // Takes its place in submit_order() when called (waiting for the turns of earlier tickets).
  Handle allreduce_async(const void* in, void* out, std::size_t count, DataType type,
                         const AllreduceOptions& options = {});
  // Submits in `turn`, a current turn of submit_order() (else dpa::Error).
  Handle allreduce_async(const SubmitOrder::Turn& turn, const void* in, void* out, std::size_t count,
                         DataType type, const AllreduceOptions& options = {});

  // The collectives of sharded training, through the switch (docs/protocol.md §13); each takes
  // its place in submit_order() like allreduce, and the _async forms keep their buffers busy
  // until completion.
  //
  // reduce_scatter: `in` holds world_size() shards of `shard_count` elements; `out` (shard_count
  // elements) receives this rank's shard of the sum (or average: options.op) over the ranks.
  // Fastest-K applies as to allreduce: a rank whose own contribution missed a block of its
  // shard receives the other ranks' sum for it (OpStats counts the block as partial).
  OpStats reduce_scatter(const void* in, void* out, std::size_t shard_count, DataType type,
                         const AllreduceOptions& options = {});
  Handle reduce_scatter_async(const void* in, void* out, std::size_t shard_count, DataType type,
                              const AllreduceOptions& options = {});
  Handle reduce_scatter_async(const SubmitOrder::Turn& turn, const void* in, void* out, std::size_t shard_count,
                              DataType type, const AllreduceOptions& options = {});
  // all_gather: `in` holds this rank's shard of `shard_words` 32-bit words (any data: the switch
  // relays the bytes); `out` (world_size() · shard_words words) receives shard r from rank r.
  // Every rank's shard is needed, so no fastest-K. Only options.caller_waits applies.
  OpStats all_gather(const void* in, void* out, std::size_t shard_words);
  Handle all_gather_async(const void* in, void* out, std::size_t shard_words);
  Handle all_gather_async(const SubmitOrder::Turn& turn, const void* in, void* out, std::size_t shard_words,
                          const AllreduceOptions& options = {});
  // broadcast: the root's `words` 32-bit words of `buffer` into every rank's `buffer`.
  OpStats broadcast(void* buffer, std::size_t words, int root);
  Handle broadcast_async(void* buffer, std::size_t words, int root);
  Handle broadcast_async(const SubmitOrder::Turn& turn, void* buffer, std::size_t words, int root,
                         const AllreduceOptions& options = {});

  template <typename T>
  OpStats allreduce(std::span<const T> in, std::span<T> out, const AllreduceOptions& options = {}) {
    check_sizes(in.size(), out.size());
    return allreduce(in.data(), out.data(), in.size(), data_type_of<T>(), options);
  }
  template <typename T>
  OpStats allreduce(std::span<T> inout, const AllreduceOptions& options = {}) {
    return allreduce(inout.data(), inout.data(), inout.size(), data_type_of<T>(), options);
  }

  [[nodiscard]] int rank() const;
  [[nodiscard]] int world_size() const;
  [[nodiscard]] std::uint32_t payload() const;  // values per packet agreed with the switch
  [[nodiscard]] const Config& config() const;
  [[nodiscard]] const SubmitOrder& submit_order() const;
  // The transport counters of the context's threads, summed, as of the end of their latest
  // operation parts: read them between operations (TransportCounters::since gives a difference).
  [[nodiscard]] TransportCounters transport_counters() const;
  // The switch server each worker thread talks to, [t] for thread t (Config::switch_of_thread):
  // which servers serve this context's operations.
  [[nodiscard]] std::vector<HostPort> thread_switches() const;
  // The running operation if the switch reports it pending (it holds this rank's contribution,
  // other ranks' are missing): which one, for how long, for which ranks. Any thread may ask.
  [[nodiscard]] std::optional<PendingWait> pending() const;

 private:
  template <typename T>
  static constexpr DataType data_type_of() {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, std::int32_t>,
                  "dpa reduces float and int32_t");
    return std::is_same_v<T, float> ? DataType::float32 : DataType::int32;
  }
  static void check_sizes(std::size_t in, std::size_t out);

  std::unique_ptr<detail::ContextImpl> impl_;
};

}  // namespace dpa
