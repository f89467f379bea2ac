// SPDX-License-Identifier: Apache-2.0
#include "engine/worker_engine.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "common/logging.hpp"
#include "dpa/error.hpp"
#include "engine/float_blocks.hpp"
#include "quant/quant.hpp"

namespace dpa::detail {

using protocol::Header;
namespace flag = protocol::flag;

namespace {

// Rounds sent later that may complete first before a round counts as lost: completions follow
// the order of the last contributions, which each rank sends in the order its results came.
constexpr std::uint64_t kReorderRounds = 3;

std::uint64_t to_ns(std::chrono::nanoseconds d) { return static_cast<std::uint64_t>(d.count()); }

// Blocks between the one whose input is read first now (the next block's exponent, or the block
// itself for int32) and the one prefetched: replies move the entries through the input in block
// order, so that is about this many packets' time (a few microseconds) of lead on the memory.
constexpr std::size_t kPrefetchBlocks = 8;

// Asks for `bytes` of input from `at` into the cache; reads past the end are left out.
void prefetch_input(const std::byte* at, std::size_t bytes) {
  for (std::size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(at + offset, 0, 3);
}

// Reactive fastest-K completes a stuck slot when a retransmission arrives after the straggler
// timeout, so when K < N back-off stops at half that timeout: a slot then waits ~1.5x of it.
std::uint64_t fastest_k_max_rto(const Config& config, const SessionInfo& session) {
  std::uint64_t cap = to_ns(config.max_retransmit_timeout);
  if (session.straggler_timeout.count() > 0) {
    cap = std::min(cap, to_ns(session.straggler_timeout) / 2);
  }
  return std::max(cap, to_ns(config.retransmit_timeout));
}

constexpr std::uint64_t kSecondNs = 1'000'000'000;

std::uint64_t slow_probe(const Config& config) {
  return std::min(kSecondNs, to_ns(config.liveness_timeout) / 5);
}

// "rank 3" or "ranks 1, 3": the ranks of a bitmap.
std::string describe_ranks(std::uint64_t ranks) {
  std::string list;
  for (std::uint64_t rest = ranks; rest != 0; rest &= rest - 1) {
    list += (list.empty() ? "" : ", ") + std::to_string(std::countr_zero(rest));
  }
  return (std::popcount(ranks) == 1 ? "rank " : "ranks ") + list;
}

}  // namespace

WorkerEngine::WorkerEngine(std::uint32_t thread_index, const Config& config,
                           const SessionInfo& session, transport::Queue& queue)
    : index_(thread_index),
      config_(config),
      session_(session),
      request_nonces_(thread_index),
      layout_{session.pool_base, static_cast<std::uint32_t>(config.window)},
      max_rto_ns_(to_ns(config.max_retransmit_timeout)),
      fastest_k_max_rto_ns_(fastest_k_max_rto(config, session)),
      liveness_ns_(to_ns(config.liveness_timeout)),
      slow_probe_ns_(slow_probe(config)),
      pending_warn_ns_(to_ns(config.pending_warn)),
      scope_{.session = config.session,
             .token = session.token,
             .slot_base = layout_.slot(thread_index, 0, 0),
             .window = static_cast<std::uint32_t>(config.window),
             .rank = static_cast<std::uint8_t>(config.rank),
             .syn_disable = config.syn_disable},
      queue_(queue),
      lossless_(queue.lossless()),
      entries_(static_cast<std::size_t>(config.window)),
      data_send_ring_(std::bit_ceil(4 * entries_.size() + 64)) {
  // Each entry queues at most its data packet and its probe per step; more only when a batch
  // of replies moves one entry several times, which the vector absorbs once.
  tx_.reserve(2 * entries_.size());
  const auto switch_threads = static_cast<std::uint32_t>(session.switch_ports.size());
  for (std::uint32_t e = 0; e < entries_.size(); ++e) {
    const std::uint32_t owner = protocol::SlotLayout::switch_thread(
        thread_index, e, static_cast<std::uint32_t>(config.threads), switch_threads);
    entries_[e].switch_port = session.switch_ports[owner];
    if (std::ranges::find(switch_ports_, entries_[e].switch_port) == switch_ports_.end()) {
      switch_ports_.push_back(entries_[e].switch_port);
    }
  }
  // Thread t talks to server t mod S: threads 0 .. S-1 are the first of each server.
  if (thread_index < config.switches.size()) next_keepalive_ns_ = 0;
}

void WorkerEngine::keepalive(std::uint64_t now_ns) {
  if (now_ns < next_keepalive_ns_) return;
  const bool first_call = next_keepalive_ns_ == 0;
  next_keepalive_ns_ = now_ns + slow_probe_ns_;
  if (first_call) return;  // the JOIN that just formed the generation counts as hearing the rank
  if (keepalive_.native == nullptr) {
    renew(keepalive_);
    Header h;
    h.flags = flag::kKeepalive;
    h.session = config_.session;
    h.token = session_.token;
    h.rank = static_cast<std::uint8_t>(config_.rank);
    protocol::encode(h, keepalive_.payload);
    // An admission packet: sealed whenever the rank has a key, whether or not data is (§6.6).
    keepalive_.size = static_cast<std::uint32_t>(
        session_.tag_keys ? protocol::seal(session_.tag_keys->request, keepalive_.payload, protocol::kHeaderSize)
                          : protocol::kHeaderSize);
  }
  // Switch thread 0 (the first port) keeps the session's liveness, as it handles JOIN and LEAVE.
  tx_.push_back({&keepalive_, session_.switch_ports[0]});
}

std::optional<PendingWait> WorkerEngine::pending(std::uint64_t now_ns) const {
  const std::uint32_t op_id = pending_op_.load(std::memory_order_acquire);
  if (op_id == 0) return std::nullopt;
  const std::uint64_t since = pending_since_ns_.load(std::memory_order_relaxed);
  return PendingWait{op_id, now_ns > since ? (now_ns - since) / 1'000'000 : 0,
                     pending_ranks_.load(std::memory_order_relaxed)};
}

WorkerEngine::~WorkerEngine() {
  for (Entry& entry : entries_) {
    queue_.release(std::span(&entry.packet, 1));
    queue_.release(std::span(&entry.probe, 1));
  }
  queue_.release(std::span(&keepalive_, 1));
}

void WorkerEngine::renew(transport::TxBuffer& buffer) {
  if (buffer.native != nullptr) queue_.release(std::span(&buffer, 1));
  if (queue_.allocate(std::span(&buffer, 1)) == 0) {
    throw Error("rank " + std::to_string(config_.rank) + ", thread " + std::to_string(index_) +
                ": the transport queue has no transmit buffer left (a window of " +
                std::to_string(entries_.size()) +
                " holds up to twice as many, besides those in flight: raise dpdk.mbufs)");
  }
  const std::size_t largest =
      protocol::kHeaderSize + 4 * std::size_t{session_.payload} + (session_.data_macs ? session_.data_macs->request.trailer_size() : 0);
  if (buffer.capacity < largest) {
    throw ConfigError("payload " + std::to_string(session_.payload) + " needs " + std::to_string(largest) +
                      "-byte packets; the transport's buffers hold " + std::to_string(buffer.capacity));
  }
}

std::int64_t WorkerEngine::block_index(const Entry& entry, std::uint64_t round) const {
  return static_cast<std::int64_t>(round - entry.first_round) - (is_float() ? 1 : 0);
}

void WorkerEngine::start(Operation& op, std::uint64_t now_ns) {
  op_ = &op;
  scope_.op_id = op.op_id;
  earliest_deadline_ = kNever;  // the entries' first sends set it
  data_send_head_ = 0;
  data_send_count_ = 0;
  plan_ = BlockPlan(op.count, session_.payload, index_, static_cast<std::size_t>(config_.threads),
                    op.shard_length);
  stats_ = OpStats{};
  stats_.blocks = plan_.thread_blocks;
  const int k = op.k != 0 ? op.k : session_.k_default;
  op_waits_for_all_ = k >= session_.world_size;
  op_max_rto_ns_ = op_waits_for_all_ ? max_rto_ns_ : fastest_k_max_rto_ns_;
  // With K < N the straggler timeout bounds every timeout (reactive fastest-K runs on the
  // counted ranks' probes); with K = N a measured round trip above the back-off cap raises the
  // timeout with it, short of a quarter of the give-up timeout (which is checked at deadlines).
  op_rto_ceiling_ns_ = k < session_.world_size
                           ? op_max_rto_ns_
                           : std::max(to_ns(config_.retransmit_timeout), to_ns(config_.timeout) / 4);
  // On a lossless queue a timer expiry cannot repair a loss; it only finds a stalled peer (a
  // descheduled rank holds a round for a scheduler time slice, many round trips) or drives
  // reactive fastest-K. The timeout therefore starts at the back-off cap, where probes would
  // end up anyway: no spurious expiries, and K < N keeps its straggler-timeout clock.
  op_rto_floor_ns_ = to_ns(config_.retransmit_timeout);
  if (lossless_) op_rto_floor_ns_ = std::max(op_rto_floor_ns_, op_max_rto_ns_);
  op_rto_ceiling_ns_ = std::max(op_rto_ceiling_ns_, op_rto_floor_ns_);
  // A probe goes at least every slow_probe_ns_, so a live switch always answers well within
  // the liveness timeout (never below the first retransmission timeout).
  const std::uint64_t bound = std::max(slow_probe_ns_, to_ns(config_.retransmit_timeout));
  op_max_rto_ns_ = std::min(op_max_rto_ns_, bound);
  op_rto_floor_ns_ = std::min(op_rto_floor_ns_, bound);
  op_rto_ceiling_ns_ = std::min(op_rto_ceiling_ns_, bound);
  try {
    for (std::uint32_t e = 0; e < entries_.size(); ++e) start_entry(e, now_ns);
  } catch (...) {
    fail(std::current_exception());
    return;
  }
  if (op.failed()) {
    // Another thread's part already failed: consume this part's rounds without sending them.
    tx_.clear();
    end_part(nullptr);
    return;
  }
  finish_if_done();
}

void WorkerEngine::on_packet(const transport::RxPacket& packet, std::uint64_t now_ns) {
  if (op_ == nullptr) return;
  try {
    handle_packet(packet, now_ns);
    finish_if_done();
  } catch (...) {
    fail(std::current_exception());
  }
}

void WorkerEngine::poll(std::uint64_t now_ns) {
  if (op_ == nullptr) return;
  if (op_->failed()) {
    // Another thread's part of this operation failed: the operation fails whatever this part
    // does, so stop now rather than at this part's own timeout. The first error is reported.
    fail(nullptr);
    return;
  }
  try {
    check_timeouts(now_ns);
  } catch (...) {
    fail(std::current_exception());
  }
}

void WorkerEngine::fail(std::exception_ptr error) {
  if (op_ == nullptr) return;
  tx_.clear();
  end_part(error);
}

std::uint64_t WorkerEngine::next_deadline() const {
  std::uint64_t next = std::numeric_limits<std::uint64_t>::max();
  if (op_ == nullptr) return next;
  for (const Entry& entry : entries_) {
    if (entry.active) next = std::min(next, entry.deadline_ns);
  }
  return next;
}

void WorkerEngine::finish_if_done() {
  if (op_ != nullptr && active_entries_ == 0) end_part(nullptr);
}

void WorkerEngine::end_part(std::exception_ptr error) {
  pending_op_.store(0, std::memory_order_release);
  // Keep the round counters where every other rank will have them, so that a later operation
  // can still line up if a failure was local.
  for (std::uint32_t e = 0; e < entries_.size(); ++e) {
    if (entries_[e].active) {
      entries_[e].round = entries_[e].end_round;
      finish_entry(e);
    }
  }
  Operation& op = *op_;
  op_ = nullptr;
  op.finish_part(stats_, error);
}

void WorkerEngine::start_entry(std::uint32_t e, std::uint64_t now) {
  Entry& entry = entries_[e];
  entry.blocks = plan_.entry_blocks(e, entries_.size());
  entry.first_round = entry.round;
  entry.end_round = entry.round + entry.blocks + (is_float() && entry.blocks > 0 ? 1 : 0);
  entry.count_to_k = op_->preemptive;
  entry.probing = false;
  entry.exponent = protocol::kExpZero;
  entry.last_reply_ns = now;
  entry.heard_ns = now;
  entry.waiting_for = 0;
  entry.unaccepted_replies = 0;
  if (entry.blocks == 0) return;
  entry.active = true;
  ++active_entries_;
  begin_round(entry, now);
  build_data(e);
  queue_send(e, now);
}

void WorkerEngine::finish_entry(std::uint32_t e) {
  if (!entries_[e].active) return;
  entries_[e].active = false;
  --active_entries_;
}

void WorkerEngine::build_data(std::uint32_t e) {
  const Operation& op = *op_;
  Entry& entry = entries_[e];
  const std::size_t window = entries_.size();
  const std::int64_t j = block_index(entry, entry.round);
  const std::size_t payload = session_.payload;
  renew(entry.packet);
  entry.probe_built = false;
  std::byte* values = entry.packet.payload + protocol::kHeaderSize;

  Header h = request_header(e, entry.count_to_k ? flag::kCountToK : 0);
  const auto* in_floats = reinterpret_cast<const float*>(op.in);
  std::size_t valid = 0;
  bool carries_values = false;
  if (j < 0) {
    // Exponent priming: no values yet, only the exponent of the entry's first block.
    const std::size_t first = plan_.block_of(e, 0, window);
    h.offset = static_cast<std::uint32_t>(plan_.begin_of(first));
    h.exp_next = exponent_of(first);
  } else {
    const std::size_t block = plan_.block_of(e, static_cast<std::size_t>(j), window);
    const std::size_t begin = plan_.begin_of(block);
    valid = plan_.length_of(block);
    h.offset = static_cast<std::uint32_t>(begin);
    h.count = static_cast<std::uint16_t>(valid);
    // A relayed round's values come from its owner alone; the other ranks send the header (§13.3).
    carries_values = !h.has(flag::kFromOwner) || h.owner() == config_.rank;
    const std::size_t from = input_index(block);
    // The first read of each block's input misses the cache (a tensor larger than it, or just
    // written by another core): fetch the one the stream reaches kPrefetchBlocks packets later.
    if (carries_values) {
      const std::size_t first_read = is_float() ? from + window * payload : from;  // this entry's next block
      const std::size_t ahead = first_read + kPrefetchBlocks * payload;
      const std::size_t input_length = op.collective == Collective::all_gather ? plan_.shard_length : op.count;
      if (ahead < input_length) prefetch_input(op.in + 4 * ahead, 4 * std::min(payload, input_length - ahead));
    }
    if (is_float()) {
      h.exp_used = entry.exponent;
      if (entry.exponent != protocol::kExpZero && entry.exponent != protocol::kExpNonFinite) {
        quant::quantize(in_floats + from, valid, entry.exponent, session_.world_size, values);
      } else {
        std::memset(values, 0, 4 * valid);
      }
      if (static_cast<std::size_t>(j) + 1 < entry.blocks) {
        h.exp_next = exponent_of(plan_.block_of(e, static_cast<std::size_t>(j) + 1, window));
      }
    } else if (carries_values) {
      quant::int32_to_wire(reinterpret_cast<const std::int32_t*>(op.in) + from, valid, values);
    }
  }
  protocol::encode(h, entry.packet.payload);
  if (!carries_values) {
    finish_request(entry.packet, protocol::kHeaderSize);  // header only (§2, §13.3)
    return;
  }
  if (valid < payload) std::memset(values + 4 * valid, 0, 4 * (payload - valid));  // the shard's last block
  finish_request(entry.packet, protocol::kHeaderSize + 4 * payload);
}

std::uint16_t WorkerEngine::mode_flag() const {
  switch (op_->collective) {
    case Collective::reduce_scatter: return flag::kToOwner;
    case Collective::all_gather:
    case Collective::broadcast: return flag::kFromOwner;
    case Collective::all_reduce: break;
  }
  return 0;
}

std::uint8_t WorkerEngine::owner_of(std::size_t block) const {
  if (op_->collective == Collective::broadcast) return op_->root;
  return static_cast<std::uint8_t>(plan_.shard_of(block));
}

std::size_t WorkerEngine::input_index(std::size_t block) const {
  const std::size_t begin = plan_.begin_of(block);
  // An all-gather's input is this rank's shard alone.
  return op_->collective == Collective::all_gather ? begin - plan_.shard_of(block) * plan_.shard_length : begin;
}

std::size_t WorkerEngine::output_index(std::size_t block) const {
  const std::size_t begin = plan_.begin_of(block);
  // A reduce-scatter's output is this rank's shard alone.
  return op_->collective == Collective::reduce_scatter ? begin - plan_.shard_of(block) * plan_.shard_length
                                                       : begin;
}

void WorkerEngine::finish_request(transport::TxBuffer& buffer, std::size_t bytes) {
  buffer.size = static_cast<std::uint32_t>(
      session_.data_macs ? session_.data_macs->request.seal(buffer.payload, bytes, request_nonces_) : bytes);
}

std::int8_t WorkerEngine::exponent_of(std::size_t block) {
  return own_block_exponent(*op_, block, input_index(block), plan_.length_of(block), stats_);
}

Header WorkerEngine::request_header(std::uint32_t e, std::uint16_t flags) const {
  const Entry& entry = entries_[e];
  Header h;
  h.flags = static_cast<std::uint16_t>(flags | (is_float() ? flag::kFloat : 0));
  h.session = config_.session;
  h.token = session_.token;
  h.op_id = op_->op_id;
  h.op_length = static_cast<std::uint32_t>(op_->count);
  h.slot = layout_.slot(index_, e, entry.round);
  h.seq = protocol::SlotLayout::seq_of_round(entry.round);
  h.rank = static_cast<std::uint8_t>(config_.rank);
  h.k = op_->k;
  if (const std::uint16_t mode = mode_flag(); mode != 0) {
    // The owner of the round's block; the priming round's is its first block's.
    const std::int64_t j = std::clamp<std::int64_t>(block_index(entry, entry.round), 0,
                                                    static_cast<std::int64_t>(entry.blocks) - 1);
    h.flags = static_cast<std::uint16_t>(h.flags | mode);
    h.set_owner(owner_of(plan_.block_of(e, static_cast<std::size_t>(j), entries_.size())));
  }
  return h;
}

void WorkerEngine::build_probe(std::uint32_t e) {
  Entry& entry = entries_[e];
  renew(entry.packet);
  entry.probe_built = false;
  protocol::encode(request_header(e, flag::kSyn), entry.packet.payload);
  finish_request(entry.packet, protocol::kHeaderSize);
  ++stats_.syn_probes;
}

void WorkerEngine::send_retransmit_probe(std::uint32_t e, std::uint64_t now) {
  Entry& entry = entries_[e];
  // Every probe of a round is the same packet: built once, then the same buffer again.
  if (!entry.probe_built) {
    renew(entry.probe);
    protocol::encode(request_header(e, flag::kSyn), entry.probe.payload);
    finish_request(entry.probe, protocol::kHeaderSize);
    entry.probe_built = true;
  }
  set_deadline(entry, now + entry.rto_ns);
  tx_.push_back({&entry.probe, entry.switch_port});
}

void WorkerEngine::arm_rto(Entry& entry) const {
  std::uint64_t base = std::clamp(round_rtt_.rto_ns(), op_rto_floor_ns_, op_rto_ceiling_ns_);
  if (entry.round == entry.first_round) {
    // The first round also waits for the ranks' arrival skew, up to the back-off cap: a rank
    // later than that is probed for (header-only probes) rather than waited for, so that a
    // skewed operation (the first one after the join, a rank that computed longer) does not
    // leave the next operations' lost first packets to a long timer.
    base = std::max(base, std::min(first_round_rtt_.rto_ns(), op_max_rto_ns_));
  }
  entry.rto_cap_ns = std::max(base, op_max_rto_ns_);
  entry.rto_ns = std::min(base << backoff_shift_, entry.rto_cap_ns);
}

void WorkerEngine::queue_send(std::uint32_t e, std::uint64_t now) {
  Entry& entry = entries_[e];
  set_deadline(entry, now + entry.rto_ns);
  // The ring feeds loss detection by overtaking, which a lossless queue does without.
  if (!entry.probing && !lossless_) {
    entry.data_send = ++data_sends_;
    if (data_send_count_ == data_send_ring_.size()) {
      // Full: unroll into a ring twice the size (the window's retransmissions outgrew it).
      std::vector<DataSend> larger(2 * data_send_ring_.size());
      for (std::size_t i = 0; i < data_send_count_; ++i) {
        larger[i] = data_send_ring_[(data_send_head_ + i) & (data_send_ring_.size() - 1)];
      }
      data_send_ring_ = std::move(larger);
      data_send_head_ = 0;
    }
    data_send_ring_[(data_send_head_ + data_send_count_++) & (data_send_ring_.size() - 1)] = {entry.data_send, e};
  }
  tx_.push_back({&entry.packet, entry.switch_port});
}

void WorkerEngine::begin_round(Entry& entry, std::uint64_t now) {
  entry.sent_ns = now;
  arm_rto(entry);
  entry.data_resent = false;
  entry.probed = false;
  entry.expedited = false;
  entry.loss_probed = false;
  entry.counted_reply_ns = 0;
}

void WorkerEngine::move_to(std::uint32_t e, std::uint64_t round, std::uint64_t now) {
  Entry& entry = entries_[e];
  entry.round = round;
  entry.probing = false;
  begin_round(entry, now);
  if (round >= entry.end_round) {
    entry.round = entry.end_round;
    finish_entry(e);
    return;
  }
  build_data(e);
  queue_send(e, now);
}

void WorkerEngine::miss_blocks(std::uint32_t e, std::uint64_t from_round, std::uint64_t to_round) {
  const Operation& op = *op_;
  const Entry& entry = entries_[e];
  const std::size_t element = 4;  // int32 and float32 alike
  for (std::uint64_t round = from_round; round < to_round && round < entry.end_round; ++round) {
    const std::int64_t j = block_index(entry, round);
    if (j < 0) continue;
    const std::size_t block = plan_.block_of(e, static_cast<std::size_t>(j), entries_.size());
    const std::size_t begin = plan_.begin_of(block);
    const std::size_t valid = plan_.length_of(block);
    // The documented semantics of a missed block: the output holds this rank's own input. Of an
    // owned operation only the blocks this rank takes values of are its output.
    const bool output = Header::takes_values(mode_flag(), owner_of(block), static_cast<std::uint8_t>(config_.rank));
    if (output && op.collective != Collective::all_gather && op.in != op.out) {
      std::memcpy(op.out + output_index(block) * element, op.in + input_index(block) * element, valid * element);
    }
    ++stats_.blocks_missed;
    stats_.missed.push_back({begin, begin + valid});
    if (op.block_contributors != nullptr) op.block_contributors[block] = 0;
    if (op.wire_result != nullptr) op.wire_result[block] = block_float::WireBlock{};
  }
}

void WorkerEngine::deliver(std::uint32_t e, std::uint64_t round, const Header& h,
                           std::span<const std::byte> payload) {
  const Operation& op = *op_;
  Entry& entry = entries_[e];
  if (is_float()) entry.exponent = h.exp_next;
  const auto world = static_cast<std::uint32_t>(session_.world_size);
  const bool mine = ((h.bitmap >> config_.rank) & 1) != 0;
  // Reactive fastest-K: once a round of this entry completed without a straggler, later rounds
  // of the operation complete at the first K instead of waiting for the timeout again.
  if (h.contributors < world && mine) entry.count_to_k = true;
  const std::int64_t j = block_index(entry, round);
  if (j < 0) return;  // the priming round only carries the next exponent
  const std::size_t block = plan_.block_of(e, static_cast<std::size_t>(j), entries_.size());
  const std::size_t begin = plan_.begin_of(block);
  const std::size_t valid = plan_.length_of(block);
  if (h.offset != begin || h.count != valid) {
    throw ProtocolError("rank " + std::to_string(config_.rank) + ", operation " +
                        std::to_string(op.op_id) + ": the switch's block at slot " +
                        std::to_string(h.slot) + " covers elements [" + std::to_string(h.offset) +
                        ", +" + std::to_string(h.count) + ") but this rank expects [" +
                        std::to_string(begin) + ", +" + std::to_string(valid) +
                        "): ranks passed different element counts (size mismatch)");
  }
  if (op.block_contributors != nullptr) op.block_contributors[block] = h.bitmap;
  ++(h.contributors >= world ? stats_.blocks_full : stats_.blocks_partial);
  if (mine) ++stats_.contributed;
  if (stats_.min_contributors == 0 || h.contributors < stats_.min_contributors) {
    stats_.min_contributors = h.contributors;
  }
  // An owned round's values reach only the ranks that take them (§13); the others have the
  // header, which completes the round for them.
  const std::uint8_t owner = owner_of(block);
  if (!Header::takes_values(mode_flag(), owner, static_cast<std::uint8_t>(config_.rank))) return;
  if (payload.size() < 4 * valid) {
    throw ProtocolError("rank " + std::to_string(config_.rank) + ", operation " + std::to_string(op.op_id) +
                        ": the switch completed the block at element " + std::to_string(begin) +
                        " without its values, which this rank takes (owner rank " + std::to_string(owner) +
                        "): the switch does not implement owned rounds (docs/protocol.md §13)");
  }
  const std::size_t out = output_index(block);
  const std::uint32_t divisor =
      op.op == ReduceOp::avg ? std::max<std::uint32_t>(h.contributors, 1) : 1;
  if (is_float()) {
    store_block_result(op, block, out, valid, h.exp_used, session_.world_size, divisor, payload.data());
    if (h.exp_used == protocol::kExpNonFinite) ++stats_.blocks_non_finite;
  } else {
    quant::int32_from_wire(payload.data(), valid, divisor, reinterpret_cast<std::int32_t*>(op.out) + out);
  }
}

void WorkerEngine::handle_packet(const transport::RxPacket& packet, std::uint64_t now) {
  if (std::ranges::find(switch_ports_, packet.from) == switch_ports_.end()) return;
  Header h;
  std::span<const std::byte> payload;
  if (protocol::decode(packet.data, h, payload) != protocol::DecodeStatus::ok) return;
  // Authenticated data: a reply without this rank's tag is a forgery (or a misconfigured
  // switch); it is counted and changes nothing.
  if (session_.data_macs && !session_.data_macs->reply.verify(packet.data)) {
    ++stats_.replies_rejected;
    return;
  }
  const std::optional<std::uint32_t> e = reply_entry(h, scope_);
  if (!e) return;
  entries_[*e].heard_ns = now;
  apply(*e, classify_reply(entries_[*e].view(), h, scope_), h, payload, now);
}

void WorkerEngine::apply(std::uint32_t e, const ReplyAction& action, const Header& h,
                         std::span<const std::byte> payload, std::uint64_t now) {
  Entry& entry = entries_[e];
  if (action.accepted()) {
    entry.last_reply_ns = now;
    entry.unaccepted_replies = 0;
  } else {
    ++entry.unaccepted_replies;
    entry.last_unaccepted = h;
  }
  const std::uint64_t round = action.round;
  switch (action.kind) {
    case ReplyKind::ignore:
    case ReplyKind::keep_waiting:
      return;
    case ReplyKind::fail:
      throw_error_reply(h);
    case ReplyKind::counted_wait:
      // The give-up clock is not restarted: the round may still never complete.
      on_pending(e, h, now);
      return;
    case ReplyKind::resend_now:
      entry.counted_reply_ns = 0;
      entry.data_resent = true;
      ++stats_.retransmissions;
      queue_send(e, now);
      return;
    case ReplyKind::expedite:
      set_deadline(entry, now);
      entry.expedited = true;
      return;
    case ReplyKind::later_operation:
      // This entry's slot already serves a later operation: the others finished this one.
      miss_blocks(e, entry.round, entry.end_round);
      entry.round = entry.end_round;
      finish_entry(e);
      return;
    case ReplyKind::deliver_result:
      // A sample is a multicast result (a copy answers a probe, which left at a timer's whim)
      // of a round this rank's first request completed: neither a resend nor reactive
      // fastest-K, whose wait is the straggler timeout, took part.
      if (round == entry.round && !entry.data_resent && !entry.probed && !entry.probing &&
          !h.has(flag::kRetransmit) && h.contributors >= session_.world_size) {
        (round == entry.first_round ? first_round_rtt_ : round_rtt_).sample(now - entry.sent_ns);
        backoff_shift_ = 0;
      }
      if (round == entry.round && !entry.probing) {
        newest_completed_send_ = std::max(newest_completed_send_, entry.data_send);
      }
      miss_blocks(e, entry.round, round);
      deliver(e, round, h, payload);
      move_to(e, round + 1, now);
      return;
    case ReplyKind::skip_complete:
      miss_blocks(e, entry.round, round + 1);
      if (is_float()) entry.exponent = h.exp_next;
      move_to(e, round + 1, now);
      return;
    case ReplyKind::fetch_complete:
      // Fetch the stored result of the round the slot holds, then continue after it.
      miss_blocks(e, entry.round, round);
      entry.round = round;
      entry.probing = true;
      arm_rto(entry);
      build_probe(e);
      queue_send(e, now);
      return;
    case ReplyKind::join_open:
      // The slot's round is still open: join it with the exponent its contributors use.
      miss_blocks(e, entry.round, round);
      if (is_float()) entry.exponent = h.exp_used;
      move_to(e, round, now);
      return;
  }
}

void WorkerEngine::on_pending(std::uint32_t e, const Header& h, std::uint64_t now) {
  Entry& entry = entries_[e];
  entry.counted_reply_ns = now;
  const std::uint64_t world = session_.world_size >= 64 ? ~std::uint64_t{0}
                                                        : (std::uint64_t{1} << session_.world_size) - 1;
  entry.waiting_for = world & ~h.bitmap;
  // A K = N round completes only when the late ranks come, which may take minutes (a
  // checkpoint): once it has waited a slow probe interval, probe slowly, no faster than the
  // liveness timeout needs. Before that the back-off keeps its pace, so a switch that dies
  // during a short wait is still told from one that answers. Reactive fastest-K runs on the
  // probes and keeps its pace throughout.
  if (op_waits_for_all_ && now - entry.sent_ns >= slow_probe_ns_) {
    entry.rto_cap_ns = std::max(entry.rto_cap_ns, slow_probe_ns_);
    entry.rto_ns = std::max(entry.rto_ns, slow_probe_ns_);
    // The give-up is checked at deadlines: not a slow probe late.
    set_deadline(entry, std::min(now + entry.rto_ns, entry.last_reply_ns + to_ns(config_.timeout)));
  }
  const std::uint64_t since = pending_op_.load(std::memory_order_relaxed) == op_->op_id
                                  ? std::min(pending_since_ns_.load(std::memory_order_relaxed), entry.sent_ns)
                                  : entry.sent_ns;
  pending_since_ns_.store(since, std::memory_order_relaxed);
  pending_ranks_.store(entry.waiting_for, std::memory_order_relaxed);
  pending_op_.store(op_->op_id, std::memory_order_release);
  if (now - since >= pending_warn_ns_ && !op_->pending_warned.exchange(true, std::memory_order_relaxed)) {
    log().warn("rank {}: operation {} has waited {} s for {} (the switch at {} holds this rank's contribution; "
               "it fails after {} ms, DPA_TIMEOUT_MS or the process group's timeout)",
               config_.rank, op_->op_id, (now - since) / kSecondNs, describe_ranks(entry.waiting_for),
               entry.switch_port.to_string(), config_.timeout.count());
  }
}

void WorkerEngine::probe_overtaken(std::uint64_t now) {
  while (data_send_count_ > 0) {
    const DataSend oldest = data_send_ring_[data_send_head_];
    Entry& entry = entries_[oldest.entry];
    const bool outstanding =
        entry.active && !entry.probing && !entry.loss_probed && entry.data_send == oldest.number;
    // Sends are numbered in order: once the oldest outstanding one is not overtaken, none is.
    if (outstanding && newest_completed_send_ < oldest.number + kReorderRounds) return;
    if (outstanding) {
      entry.loss_probed = true;
      entry.expedited = true;
      set_deadline(entry, now);
    }
    data_send_head_ = (data_send_head_ + 1) & (data_send_ring_.size() - 1);
    --data_send_count_;
  }
}

void WorkerEngine::check_timeouts(std::uint64_t now) {
  probe_overtaken(now);
  // Nothing can be due before the bound: no scan of the window on most steps.
  if (now < earliest_deadline_) return;
  earliest_deadline_ = kNever;
  const std::uint64_t give_up = to_ns(config_.timeout);
  for (std::uint32_t e = 0; e < entries_.size(); ++e) {
    Entry& entry = entries_[e];
    if (!entry.active) continue;
    if (entry.deadline_ns > now) {
      earliest_deadline_ = std::min(earliest_deadline_, entry.deadline_ns);
      continue;
    }
    if (now - entry.last_reply_ns >= give_up) throw_timeout(e, now);
    if (now - entry.heard_ns >= liveness_ns_) throw_switch_silent(e, now);
    ++stats_.retransmissions;
    entry.probed = true;
    if (entry.expedited) {
      entry.expedited = false;  // not a timeout: no back-off
    } else {
      ++stats_.timeouts;
      backoff_shift_ = std::min(backoff_shift_ + 1, 6u);
      entry.rto_ns = std::min(entry.rto_ns * 2, entry.rto_cap_ns);
    }
    // Retransmit with a header-only probe: the switch answers with the result if the round is
    // complete, or says whether it counted this rank; the payload goes again only if it did not.
    // A skip-forward probe is already header-only. Both set the entry's next deadline.
    if (entry.probing) {
      queue_send(e, now);
    } else {
      send_retransmit_probe(e, now);
    }
    // The give-up and the liveness verdicts are due at their own times, not a probe late.
    set_deadline(entry, std::min({entry.deadline_ns, entry.last_reply_ns + give_up, entry.heard_ns + liveness_ns_}));
  }
}

void WorkerEngine::throw_timeout(std::uint32_t e, std::uint64_t now) const {
  const Entry& entry = entries_[e];
  const std::string where = " (operation " + std::to_string(op_->op_id) + ", thread " +
                            std::to_string(index_) + ", slot " +
                            std::to_string(layout_.slot(index_, e, entry.round)) + ", round " +
                            std::to_string(protocol::SlotLayout::seq_of_round(entry.round)) +
                            "; DPA_TIMEOUT_MS or the process group's timeout)";
  const std::string switch_at = "the switch at " + entry.switch_port.to_string();
  const std::string waited = std::to_string(config_.timeout.count()) + " ms";
  // The switch still answers (it counted this rank within the last two probes): the round
  // waits for other ranks, not for a dead switch.
  const bool switch_counted_us =
      entry.counted_reply_ns != 0 && now - entry.counted_reply_ns <= 2 * entry.rto_ns;
  const std::string cause =
      switch_counted_us
          ? switch_at + " holds this rank's contribution but the round waited " + waited + " for " +
                describe_ranks(entry.waiting_for) + where + ": other ranks did not send theirs; are"
          : "no reply from " + switch_at + " for " + waited + where +
                ": is dpa-switch running, and are";
  // Replies that kept coming but did not fit the round: the switch answers, about another state.
  std::string unaccepted;
  if (entry.unaccepted_replies != 0) {
    const Header& last = entry.last_unaccepted;
    unaccepted = " (" + std::to_string(entry.unaccepted_replies) +
                 " replies about this slot did not fit the round; the last: operation " +
                 std::to_string(last.op_id) + ", slot " + std::to_string(last.slot) + ", round " +
                 std::to_string(last.seq) + ", flags " + fmt::format("{:#06x}", last.flags) +
                 ", error " + std::string(protocol::to_string(last.error)) + ", contributors " +
                 std::to_string(last.contributors) + ")";
  }
  throw TimeoutError("rank " + std::to_string(config_.rank) + ": " + cause +
                     " all ranks alive and running the same operations?" + unaccepted);
}

void WorkerEngine::throw_switch_silent(std::uint32_t e, std::uint64_t now) const {
  const Entry& entry = entries_[e];
  throw TimeoutError("rank " + std::to_string(config_.rank) + ": no reply from the switch at " +
                     entry.switch_port.to_string() + " for " + std::to_string((now - entry.heard_ns) / 1'000'000) +
                     " ms (operation " + std::to_string(op_->op_id) + ", thread " + std::to_string(index_) +
                     ", slot " + std::to_string(layout_.slot(index_, e, entry.round)) +
                     "; DPA_LIVENESS_TIMEOUT_MS " + std::to_string(config_.liveness_timeout.count()) +
                     "): the switch is gone (is dpa-switch running, or did the rank that embeds it exit?)");
}

void WorkerEngine::throw_error_reply(const Header& h) const {
  std::string message = "rank " + std::to_string(config_.rank) + ", operation " +
                        std::to_string(op_->op_id) + ": the switch rejected a packet for slot " +
                        std::to_string(h.slot) + ": " + std::string(protocol::to_string(h.error));
  const std::string offender = "rank " + std::to_string(h.rank);
  switch (h.error) {
    // A poisoned round: `offset` holds the round's value, `bitmap` the offender's.
    case protocol::ErrorCode::op_mismatch:
      message += " (" + offender + " runs operation " + std::to_string(h.bitmap) +
                 ", the round holds operation " + std::to_string(h.offset) +
                 "; ranks must issue the same collectives in the same order)";
      break;
    case protocol::ErrorCode::length_mismatch:
      message += " (" + offender + " passed " + std::to_string(h.bitmap) +
                 " elements, another rank " + std::to_string(h.offset) + ")";
      break;
    case protocol::ErrorCode::dtype_mismatch: {
      const auto type_name = [](std::uint64_t flags) {
        return (flags & flag::kFloat) != 0 ? "float32" : "int32";
      };
      message += std::string(" (") + offender + " passed " + type_name(h.bitmap) + ", another rank " +
                 type_name(h.offset) + ")";
      break;
    }
    case protocol::ErrorCode::bad_length:
      message += " (the session expects " + std::to_string(h.offset) + " values per packet)";
      break;
    case protocol::ErrorCode::k_invalid:
      message += " (K " + std::to_string(h.k) + ", world size " + std::to_string(h.offset) + ")";
      break;
    case protocol::ErrorCode::rank_gone:
      // `bitmap`: every gone rank the round waits for; `offset`: how long the first was silent.
      message += h.offset == 0xffffffff
                     ? " (" + describe_ranks(h.bitmap) + ": rank " + std::to_string(h.rank) +
                           " left the job: its context or process group closed)"
                     : " (" + describe_ranks(h.bitmap) + ": the switch has not heard rank " +
                           std::to_string(h.rank) + " for " + std::to_string(h.offset) +
                           " ms: its process or host is gone)";
      break;
    case protocol::ErrorCode::session_taken_over:
      message += " (" + taken_over_reason(h) + ")";
      break;
    default:
      break;
  }
  throw ProtocolError(message);
}

}  // namespace dpa::detail
