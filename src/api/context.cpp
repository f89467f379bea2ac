// SPDX-License-Identifier: Apache-2.0
#include "dpa/context.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/logging.hpp"
#include "engine/join.hpp"
#include "engine/operation.hpp"
#include "engine/engine_runner.hpp"
#include "protocol/auth.hpp"
#include "protocol/wire.hpp"
#include "transport/factory.hpp"
#include "transport/fault_injector.hpp"

namespace dpa {

namespace detail {

// What a submission is beyond its buffers: which collective, and its shards (§13.5).
struct OperationShape {
  Collective collective = Collective::all_reduce;
  std::size_t shard_length = 0;  // 0: one shard of the whole count
  int root = 0;
};

class ContextImpl {
 public:
  ContextImpl(const Config& config, SubmitOrder order) : config_(config), order_(std::move(order)) {
    config_.validate();
    resolve_switches();
    connect(/*rejoining=*/{});
    log().info("rank {}/{} joined session {} at {} switch server(s) (payload {}, {} thread(s), window {})",
               config_.rank, config_.world_size, config_.session, switch_endpoints_.size(),
               sessions_[0].payload, config_.threads, config_.window);
  }

  ~ContextImpl() {
    for (auto& engine : engines_) engine->stop();
    // Frees the session for the next job now rather than after the switches' idle timeout.
    if (engines_.empty()) return;
    for (std::size_t s = 0; s < switch_endpoints_.size(); ++s) {
      leave_session(config_, sessions_[s], engines_[0]->queue(), switch_endpoints_[s]);
    }
  }

  // The turn makes this thread the only one submitting to this context (it belongs to one order).
  // `count` is the operation's elements (op_length): an all-reduce's or a broadcast's, or
  // world_size shards of a reduce-scatter or all-gather.
  Handle submit(const SubmitOrder::Turn& turn, const void* in, void* out, std::size_t count,
                DataType type, const AllreduceOptions& options, const OperationShape& shape = {}) {
    const std::string name(to_string(shape.collective));
    if (!order_.holds(turn)) {
      throw Error(name + "_async: the turn is not a current turn of this context's submit_order()");
    }
    if (count > 0 && (in == nullptr || out == nullptr)) {
      throw ConfigError(name + ": null buffer for " + std::to_string(count) + " elements");
    }
    if (count > std::numeric_limits<std::uint32_t>::max()) {
      throw ConfigError(name + ": count " + std::to_string(count) +
                        " exceeds the protocol's 32-bit element offsets; split the tensor");
    }
    if (shape.root < 0 || shape.root >= config_.world_size) {
      throw ConfigError(name + ": root " + std::to_string(shape.root) + " outside 0.." +
                        std::to_string(config_.world_size - 1));
    }
    const bool relayed = shape.collective == Collective::all_gather || shape.collective == Collective::broadcast;
    // A relayed round needs the owner's values on every rank: its K is N (§13.3).
    const int k = relayed ? config_.world_size : options.k.value_or(config_.k);
    if (k < 0 || k > config_.world_size) {
      throw ConfigError(name + ": k " + std::to_string(k) + " outside 0.." +
                        std::to_string(config_.world_size));
    }
    auto op = std::make_shared<Operation>();
    if (rejoin_needed_.load(std::memory_order_relaxed)) rejoin();
    check_block_float_options(count, type, options, shape);
    op->rejoin_needed = &rejoin_needed_;
    op->in = static_cast<const std::byte*>(in);
    op->out = static_cast<std::byte*>(out);
    op->count = count;
    op->collective = shape.collective;
    op->shard_length = shape.shard_length;
    op->root = static_cast<std::uint8_t>(shape.root);
    op->type = type;
    op->op = options.op;
    op->op_id = next_op_id_++;
    op->k = static_cast<std::uint8_t>(k);
    op->preemptive = options.preemptive.value_or(config_.preemptive);
    op->block_contributors = options.block_contributors;
    op->block_exponents = options.block_exponents;
    op->wire_result = options.wire_result;
    op->submitted = std::chrono::steady_clock::now();
    if (count == 0) {
      op->parts_remaining = 1;
      op->finish_part({}, nullptr);
      return Handle(op);
    }
    op->parts_remaining = static_cast<int>(engines_.size());
    if (waiter_may_run_) {
      op->waiter_may_run.assign(engines_.begin(), engines_.end());
    }
    // One block: one round trip, which the waiting caller starts sooner than a woken thread.
    // More blocks keep every engine thread busy at once.
    op->runners_not_woken = waiter_may_run_ && options.caller_waits && count <= payload();
    for (auto& engine : engines_) engine->submit(op, !op->runners_not_woken);
    last_op_ = op;
    return Handle(op);
  }

  // The options of a caller that does the block floating point itself (a GPU): float32 only,
  // and exponents that are exponents (a wrong but valid one cannot be told from the input
  // without the scan these options exist to skip).
  void check_block_float_options(std::size_t count, DataType type, const AllreduceOptions& options,
                                 const OperationShape& shape) const {
    if (options.block_exponents == nullptr && options.wire_result == nullptr) return;
    if (type != DataType::float32) {
      throw ConfigError("allreduce: block_exponents and wire_result apply to float32 only, not " +
                        std::string(to_string(type)));
    }
    if (options.block_exponents == nullptr) return;
    const std::size_t blocks = BlockPlan(count, payload(), 0, 1, shape.shard_length).blocks;
    for (std::size_t j = 0; j < blocks; ++j) {
      if (!block_float::is_exponent(options.block_exponents[j])) {
        throw ConfigError("allreduce: block_exponents[" + std::to_string(j) + "] = " +
                          std::to_string(options.block_exponents[j]) +
                          " is no block exponent (kExpZero, kExpMin..kExpMax or kExpNonFinite)");
      }
    }
  }

  [[nodiscard]] const Config& config() const { return config_; }
  // Every server agreed on the session's parameters (connect() checks), so server 0's stand.
  [[nodiscard]] std::uint32_t payload() const { return sessions_[0].payload; }
  [[nodiscard]] std::vector<HostPort> thread_switches() const {
    std::vector<HostPort> servers;
    for (int t = 0; t < config_.threads; ++t) servers.push_back(config_.switch_of_thread(t));
    return servers;
  }
  [[nodiscard]] TransportCounters transport_counters() const {
    TransportCounters total;
    for (const auto& engine : engines_) total += engine->counters();
    return total;
  }
  [[nodiscard]] const SubmitOrder& order() const { return order_; }
  // The longest pending wait over the threads, with the ranks it lacks.
  [[nodiscard]] std::optional<PendingWait> pending() const {
    std::optional<PendingWait> longest;
    for (const auto& engine : engines_) {
      const std::optional<PendingWait> wait = engine->pending();
      if (wait && (!longest || wait->waited_ms > longest->waited_ms)) longest = wait;
    }
    return longest;
  }

 private:
  // A data packet the transport cannot carry would be dropped on every send: say so instead.
  // An authenticated data packet carries its MAC's trailer after the payload.
  static void require_packet_fits(std::uint32_t payload, std::uint32_t max_packet, std::size_t trailer) {
    const std::size_t bytes = protocol::kHeaderSize + 4 * static_cast<std::size_t>(payload) + trailer;
    if (bytes > max_packet) {
      throw ConfigError("payload " + std::to_string(payload) + " needs " + std::to_string(bytes) +
                        "-byte packets; the transport carries at most " + std::to_string(max_packet) +
                        " (udp.max_payload, or dpdk.mtu and the device's frame limit)");
    }
  }

  // Two entries that resolve to one address (a name and its IP) would be one server serving
  // as two: refuse it as the config does for equal text.
  void resolve_switches() {
    for (const HostPort& address : config_.switches) {
      const transport::Endpoint endpoint =
          transport::Endpoint::resolve(address.host, address.port, "switch (DPA_SWITCH)");
      const auto same = std::ranges::find(switch_endpoints_, endpoint);
      if (same != switch_endpoints_.end()) {
        const HostPort& other = config_.switches[static_cast<std::size_t>(same - switch_endpoints_.begin())];
        throw ConfigError("switch: " + other.to_string() + " and " + address.to_string() + " are the same server " +
                          endpoint.to_string() + " (DPA_SWITCH): list each server once");
      }
      switch_endpoints_.push_back(endpoint);
    }
  }

  // Each server answers JOIN with its own generation, token and pool, but the parameters the
  // engines share (payload, world size, K, straggler timeout) must be one session's.
  void require_same_session(std::size_t s) const {
    const SessionInfo& first = sessions_[0];
    const SessionInfo& other = sessions_[s];
    const auto differ = [&](const std::string& what, auto a, auto b) {
      throw ConfigError("session " + std::to_string(config_.session) + " differs between the switch servers " +
                        config_.switches[0].to_string() + " (" + what + " " + std::to_string(a) + ") and " +
                        config_.switches[s].to_string() + " (" + what + " " + std::to_string(b) +
                        "): configure the session alike on every server of DPA_SWITCH");
    };
    if (other.payload != first.payload) differ("payload", first.payload, other.payload);
    if (other.world_size != first.world_size) differ("world size", first.world_size, other.world_size);
    if (other.k_default != first.k_default) differ("default K", first.k_default, other.k_default);
    if (other.straggler_timeout != first.straggler_timeout) {
      differ("straggler timeout (us)", first.straggler_timeout.count(), other.straggler_timeout.count());
    }
  }

  // Opens the device (one queue per thread), joins the session at every switch server through
  // thread 0's queue (where each server sends its acknowledgement) and starts the engines, thread
  // t with server t mod S's answer. A rejoin opens the device afresh: its queues went with the
  // old engines. `rejoining` holds the previous generation per server (empty for a first join).
  void connect(const std::vector<SessionInfo>& rejoining) {
    device_.reset();
    device_ = transport::open_device(config_.transport, static_cast<std::size_t>(config_.threads));
    std::vector<std::unique_ptr<transport::Queue>> queues;
    std::vector<std::uint16_t> ports;
    for (int t = 0; t < config_.threads; ++t) {
      auto queue = device_->open_queue(static_cast<std::size_t>(t));
      ports.push_back(queue->local_endpoint().port);
      transport::FaultOptions faults = config_.faults;
      faults.seed = config_.faults.seed + static_cast<std::uint64_t>(config_.rank) * 1000 +
                    static_cast<std::uint64_t>(t) + 100 * (sessions_.empty() ? 0 : sessions_[0].generation);
      queues.push_back(transport::with_faults(std::move(queue), faults));
    }

    const transport::DeviceProperties properties = device_->properties();
    const std::uint32_t max_packet = properties.max_payload;
    waiter_may_run_ = config_.waiter_runs && properties.any_thread_may_poll;
    if (config_.payload != 0) {
      require_packet_fits(config_.payload, max_packet, config_.auth_data ? protocol::kMaxTrailerSize : 0);
    }
    sessions_.clear();
    // One server after the other, in the same order on every rank, so each completes its join.
    for (std::size_t s = 0; s < switch_endpoints_.size(); ++s) {
      sessions_.push_back(join_session(config_, *queues[0], switch_endpoints_[s], ports,
                                       rejoining.empty() ? nullptr : &rejoining[s]));
      require_same_session(s);
    }
    if (sessions_[0].world_size != config_.world_size) {
      throw ConfigError("world_size " + std::to_string(config_.world_size) +
                        " differs from the session's " + std::to_string(sessions_[0].world_size));
    }
    require_packet_fits(sessions_[0].payload, max_packet,
                        sessions_[0].data_macs ? sessions_[0].data_macs->request.trailer_size() : 0);
    for (int t = 0; t < config_.threads; ++t) {
      const SessionInfo& session = sessions_[static_cast<std::size_t>(t) % sessions_.size()];
      engines_.push_back(std::make_shared<EngineRunner>(static_cast<std::uint32_t>(t), config_,
                                                        session, std::move(queues[t]), *device_));
      log().debug("rank {}: thread {} runs on {}", config_.rank, t, engines_.back()->where());
    }
  }

  // After a failed operation the ranks' round counters may disagree (a mismatch leaves them
  // at different rounds), so every rank that saw it fail starts a new join generation, which
  // resets the switch's slots and every rank's rounds. The current token and the rank's secret
  // prove to the switch that this job, not another one, asks for the new generation.
  void rejoin() {
    while (last_op_ && !last_op_->wait_for(std::chrono::milliseconds(100))) {
    }
    last_op_.reset();
    const std::vector<SessionInfo> previous = sessions_;
    engines_.clear();
    rejoin_needed_.store(false, std::memory_order_relaxed);
    log().info("rank {}: rejoining session {} after a failed operation", config_.rank,
               config_.session);
    connect(previous);
  }

  Config config_;
  // Op ids and queue order must match across ranks: submissions happen one at a time, in turns.
  SubmitOrder order_;
  std::vector<transport::Endpoint> switch_endpoints_;  // Config::switches, resolved
  std::unique_ptr<transport::Device> device_;  // outlives the engines and their queues
  std::vector<SessionInfo> sessions_;  // each server's JOIN answer, in switch_endpoints_ order
  std::vector<std::shared_ptr<EngineRunner>> engines_;
  bool waiter_may_run_ = false;  // Config::waiter_runs, on a device any thread may poll
  std::uint32_t next_op_id_ = 1;
  std::atomic<bool> rejoin_needed_{false};
  std::shared_ptr<Operation> last_op_;  // the engines run operations in submission order
};

}  // namespace detail

bool Handle::wait(std::chrono::milliseconds timeout) {
  if (!op_) throw Error("wait() on an empty dpa::Handle");
  if (!op_->wait_for(timeout)) return false;
  op_->result();
  return true;
}

const OpStats& Handle::wait() {
  if (!op_) throw Error("wait() on an empty dpa::Handle");
  op_->run_parts_here();
  // The engine fails an operation after Config::timeout without replies, so this ends.
  while (!op_->wait_for(std::chrono::hours(1))) {
  }
  return op_->result();
}

bool Handle::done() const { return op_ && op_->complete(); }

void Handle::on_complete(Completion callback) {
  if (!op_) throw Error("on_complete() on an empty dpa::Handle");
  if (!callback) throw Error("on_complete() with an empty callback");
  op_->add_completion(std::move(callback));
}

Context::Context(const Config& config, SubmitOrder order)
    : impl_(std::make_unique<detail::ContextImpl>(config, std::move(order))) {}
Context::~Context() = default;

OpStats Context::allreduce(const void* in, void* out, std::size_t count, DataType type,
                           const AllreduceOptions& options) {
  AllreduceOptions waited = options;
  waited.caller_waits = true;
  Handle handle = allreduce_async(in, out, count, type, waited);
  return handle.wait();
}

Handle Context::allreduce_async(const void* in, void* out, std::size_t count, DataType type,
                                const AllreduceOptions& options) {
  const SubmitOrder::Turn turn = impl_->order().wait_turn();
  return impl_->submit(turn, in, out, count, type, options);
}

Handle Context::allreduce_async(const SubmitOrder::Turn& turn, const void* in, void* out,
                                std::size_t count, DataType type, const AllreduceOptions& options) {
  return impl_->submit(turn, in, out, count, type, options);
}

namespace {

// The element count of a collective over world_size shards, checked before it is multiplied.
std::size_t sharded_count(std::string_view name, std::size_t shard, int world) {
  if (shard > std::numeric_limits<std::uint32_t>::max() / static_cast<std::size_t>(world)) {
    throw ConfigError(std::string(name) + ": " + std::to_string(world) + " shards of " + std::to_string(shard) +
                      " elements exceed the protocol's 32-bit element offsets; split the tensor");
  }
  return shard * static_cast<std::size_t>(world);
}

}  // namespace

OpStats Context::reduce_scatter(const void* in, void* out, std::size_t shard_count, DataType type,
                                const AllreduceOptions& options) {
  AllreduceOptions waited = options;
  waited.caller_waits = true;
  return reduce_scatter_async(in, out, shard_count, type, waited).wait();
}

Handle Context::reduce_scatter_async(const void* in, void* out, std::size_t shard_count, DataType type,
                                     const AllreduceOptions& options) {
  const SubmitOrder::Turn turn = impl_->order().wait_turn();
  return reduce_scatter_async(turn, in, out, shard_count, type, options);
}

Handle Context::reduce_scatter_async(const SubmitOrder::Turn& turn, const void* in, void* out,
                                     std::size_t shard_count, DataType type, const AllreduceOptions& options) {
  const std::size_t count = sharded_count("reduce_scatter", shard_count, world_size());
  return impl_->submit(turn, in, out, count, type, options,
                       {.collective = detail::Collective::reduce_scatter, .shard_length = shard_count});
}

OpStats Context::all_gather(const void* in, void* out, std::size_t shard_words) {
  AllreduceOptions waited;
  waited.caller_waits = true;
  return all_gather_async(impl_->order().wait_turn(), in, out, shard_words, waited).wait();
}

Handle Context::all_gather_async(const void* in, void* out, std::size_t shard_words) {
  const SubmitOrder::Turn turn = impl_->order().wait_turn();
  return all_gather_async(turn, in, out, shard_words);
}

Handle Context::all_gather_async(const SubmitOrder::Turn& turn, const void* in, void* out, std::size_t shard_words,
                                 const AllreduceOptions& options) {
  const std::size_t count = sharded_count("all_gather", shard_words, world_size());
  // This rank's own shard never crosses the network: it is copied here, the others arrive.
  std::byte* own = static_cast<std::byte*>(out) + 4 * shard_words * static_cast<std::size_t>(rank());
  if (shard_words > 0 && in != nullptr && out != nullptr && in != own) std::memmove(own, in, 4 * shard_words);
  AllreduceOptions relay;
  relay.caller_waits = options.caller_waits;
  return impl_->submit(turn, in, out, count, DataType::int32, relay,
                       {.collective = detail::Collective::all_gather, .shard_length = shard_words});
}

OpStats Context::broadcast(void* buffer, std::size_t words, int root) {
  AllreduceOptions waited;
  waited.caller_waits = true;
  return broadcast_async(impl_->order().wait_turn(), buffer, words, root, waited).wait();
}

Handle Context::broadcast_async(void* buffer, std::size_t words, int root) {
  const SubmitOrder::Turn turn = impl_->order().wait_turn();
  return broadcast_async(turn, buffer, words, root);
}

Handle Context::broadcast_async(const SubmitOrder::Turn& turn, void* buffer, std::size_t words, int root,
                                const AllreduceOptions& options) {
  AllreduceOptions relay;
  relay.caller_waits = options.caller_waits;
  return impl_->submit(turn, buffer, buffer, words, DataType::int32, relay,
                       {.collective = detail::Collective::broadcast, .root = root});
}

int Context::rank() const { return impl_->config().rank; }
int Context::world_size() const { return impl_->config().world_size; }
std::uint32_t Context::payload() const { return impl_->payload(); }
TransportCounters Context::transport_counters() const { return impl_->transport_counters(); }
std::vector<HostPort> Context::thread_switches() const { return impl_->thread_switches(); }
std::optional<PendingWait> Context::pending() const { return impl_->pending(); }
const Config& Context::config() const { return impl_->config(); }
const SubmitOrder& Context::submit_order() const { return impl_->order(); }

void Context::check_sizes(std::size_t in, std::size_t out) {
  if (in != out) {
    throw ConfigError("allreduce: input has " + std::to_string(in) + " elements but output has " +
                      std::to_string(out));
  }
}

}  // namespace dpa
