#include "engine/thread_engine.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "api/logging.hpp"
#include "dpa/error.hpp"
#include "quant/quant.hpp"

namespace dpa::detail {

using protocol::Header;
namespace flag = protocol::flag;

namespace {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

std::uint64_t to_ns(std::chrono::nanoseconds d) { return static_cast<std::uint64_t>(d.count()); }

// Reactive fastest-K completes a stuck slot when a retransmission arrives after the straggler
// timeout, so when K < N back-off stops at half that timeout: a slot then waits ~1.5x of it.
std::uint64_t fastest_k_max_rto(const Config& config, const SessionInfo& session) {
  std::uint64_t cap = to_ns(config.max_retransmit_timeout);
  if (session.straggler_timeout.count() > 0) cap = std::min(cap, to_ns(session.straggler_timeout) / 2);
  return std::max(cap, to_ns(config.retransmit_timeout));
}

}  // namespace

ThreadEngine::ThreadEngine(std::uint32_t thread_index, const Config& config,
                           const SessionInfo& session,
                           std::unique_ptr<transport::Transport> transport)
    : index_(thread_index),
      config_(config),
      session_(session),
      layout_{session.pool_base, static_cast<std::uint32_t>(config.window)},
      slot_base_(layout_.slot(thread_index, 0, 0)),
      switch_port_(session.switch_ports[thread_index % session.switch_ports.size()]),
      max_rto_ns_(to_ns(config.max_retransmit_timeout)),
      fastest_k_max_rto_ns_(fastest_k_max_rto(config, session)),
      transport_(std::move(transport)),
      entries_(static_cast<std::size_t>(config.window)),
      packet_memory_(entries_.size() * (protocol::kHeaderSize + 4 * session.payload)),
      probe_memory_(entries_.size() * protocol::kHeaderSize),
      rx_(64) {
  tx_.reserve(entries_.size());
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    entries_[e].packet = packet_memory_.data() + e * (protocol::kHeaderSize + 4 * session.payload);
    entries_[e].probe = probe_memory_.data() + e * protocol::kHeaderSize;
  }
  thread_ = std::thread([this] { run(); });
}

ThreadEngine::~ThreadEngine() { stop(); }

void ThreadEngine::stop() {
  {
    std::lock_guard lock(queue_mutex_);
    stop_.store(true, std::memory_order_relaxed);
  }
  queue_ready_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ThreadEngine::submit(std::shared_ptr<Operation> op) {
  {
    std::lock_guard lock(queue_mutex_);
    queue_.push_back(std::move(op));
  }
  queue_ready_.notify_one();
}

void ThreadEngine::run() {
  while (true) {
    std::shared_ptr<Operation> op;
    {
      std::unique_lock lock(queue_mutex_);
      queue_ready_.wait(lock, [this] { return stop_.load(std::memory_order_relaxed) || !queue_.empty(); });
      if (queue_.empty()) return;
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    execute(*op);
  }
}

std::int64_t ThreadEngine::block_index(const Operation& op, const Entry& entry,
                                       std::uint64_t round) const {
  return static_cast<std::int64_t>(round - entry.first_round) - (is_float(op) ? 1 : 0);
}

void ThreadEngine::execute(Operation& op) {
  const auto payload = static_cast<std::size_t>(session_.payload);
  plan_ = BlockPlan(op.count, payload, index_, static_cast<std::size_t>(config_.threads));
  stats_ = OpStats{};
  stats_.blocks = plan_.thread_blocks;
  const int k = op.k != 0 ? op.k : session_.k_default;
  op_max_rto_ns_ = k < session_.world_size ? fastest_k_max_rto_ns_ : max_rto_ns_;
  std::exception_ptr error;
  std::uint64_t now = now_ns();
  for (std::uint32_t e = 0; e < entries_.size(); ++e) start_entry(op, e, now);
  try {
    while (active_entries_ > 0) {
      if (stop_.load(std::memory_order_relaxed)) {
        throw Error("dpa context destroyed while an allreduce was running");
      }
      if (!tx_.empty()) {
        transport_->send(tx_);
        tx_.clear();
      }
      std::uint64_t next_deadline = std::numeric_limits<std::uint64_t>::max();
      for (const Entry& entry : entries_) {
        if (entry.active) next_deadline = std::min(next_deadline, entry.deadline_ns);
      }
      const std::uint64_t wait = next_deadline > now ? next_deadline - now : 0;
      const std::size_t received = receive(std::chrono::nanoseconds(wait), now);
      now = now_ns();
      for (std::size_t i = 0; i < received; ++i) handle_packet(op, rx_[i], now);
      check_timeouts(op, now);
    }
    if (!tx_.empty()) transport_->send(tx_);
  } catch (...) {
    error = std::current_exception();
    // Keep the round counters where every other rank will have them, so that a later
    // operation can still line up if this failure was local.
    for (std::uint32_t e = 0; e < entries_.size(); ++e) {
      if (entries_[e].active) {
        entries_[e].round = entries_[e].end_round;
        finish_entry(e);
      }
    }
  }
  tx_.clear();
  op.finish_part(stats_, error);
}

std::size_t ThreadEngine::receive(std::chrono::nanoseconds wait, std::uint64_t now) {
  // Opt-in busy polling: spin on non-blocking receives before falling back to ppoll.
  const std::uint64_t spin_until = now + to_ns(config_.busy_poll);
  while (config_.busy_poll.count() > 0 && now_ns() < std::min(spin_until, now + to_ns(wait))) {
    if (const std::size_t received = transport_->receive(rx_, std::chrono::nanoseconds(0))) {
      return received;
    }
  }
  const std::uint64_t spent = now_ns() - now;
  const auto remaining = std::chrono::nanoseconds(wait.count() > static_cast<std::int64_t>(spent)
                                                      ? wait.count() - static_cast<std::int64_t>(spent)
                                                      : 0);
  return transport_->receive(rx_, remaining);
}

void ThreadEngine::start_entry(Operation& op, std::uint32_t e, std::uint64_t now) {
  Entry& entry = entries_[e];
  entry.blocks = plan_.entry_blocks(e, entries_.size());
  entry.first_round = entry.round;
  entry.end_round = entry.round + entry.blocks + (is_float(op) && entry.blocks > 0 ? 1 : 0);
  entry.count_to_k = op.preemptive;
  entry.probing = false;
  entry.exponent = protocol::kExpZero;
  entry.last_reply_ns = now;
  if (entry.blocks == 0) return;
  entry.active = true;
  ++active_entries_;
  entry.rto_ns = initial_rto();
  entry.sent_ns = now;
  entry.retransmitted = false;
  entry.expedited = false;
  entry.counted_reply_ns = 0;
  build_data(op, e);
  queue_send(e, now);
}

void ThreadEngine::finish_entry(std::uint32_t e) {
  if (!entries_[e].active) return;
  entries_[e].active = false;
  --active_entries_;
}

void ThreadEngine::build_data(Operation& op, std::uint32_t e) {
  Entry& entry = entries_[e];
  const std::size_t window = entries_.size();
  const std::int64_t j = block_index(op, entry, entry.round);
  const std::size_t payload = session_.payload;
  std::byte* values = entry.packet + protocol::kHeaderSize;

  Header h = request_header(op, e, entry.count_to_k ? flag::kCountToK : 0);
  const auto* in_floats = reinterpret_cast<const float*>(op.in);
  std::size_t valid = 0;
  if (j < 0) {
    // Exponent priming: no values yet, only the exponent of the entry's first block.
    const std::size_t first = plan_.block_of(e, 0, window) * payload;
    h.offset = static_cast<std::uint32_t>(first);
    h.exp_next = quant::block_exponent(in_floats + first, std::min(payload, op.count - first));
  } else {
    const std::size_t begin = plan_.block_of(e, static_cast<std::size_t>(j), window) * payload;
    valid = std::min(payload, op.count - begin);
    h.offset = static_cast<std::uint32_t>(begin);
    h.count = static_cast<std::uint16_t>(valid);
    if (is_float(op)) {
      h.exp_used = entry.exponent;
      if (entry.exponent != protocol::kExpZero && entry.exponent != protocol::kExpNonFinite) {
        quant::quantize(in_floats + begin, valid, entry.exponent, session_.world_size, values);
      } else {
        std::memset(values, 0, 4 * valid);
      }
      if (static_cast<std::size_t>(j) + 1 < entry.blocks) {
        const std::size_t next =
            plan_.block_of(e, static_cast<std::size_t>(j) + 1, window) * payload;
        h.exp_next = quant::block_exponent(in_floats + next, std::min(payload, op.count - next));
      }
    } else {
      quant::int32_to_wire(reinterpret_cast<const std::int32_t*>(op.in) + begin, valid, values);
    }
  }
  std::memset(values + 4 * valid, 0, 4 * (payload - valid));
  protocol::encode(h, entry.packet);
  entry.packet_size = static_cast<std::uint32_t>(protocol::kHeaderSize + 4 * payload);
}

Header ThreadEngine::request_header(const Operation& op, std::uint32_t e, std::uint16_t flags) const {
  const Entry& entry = entries_[e];
  Header h;
  h.flags = static_cast<std::uint16_t>(flags | (is_float(op) ? flag::kFloat : 0));
  h.session = config_.session;
  h.token = session_.token;
  h.op_id = op.op_id;
  h.op_length = static_cast<std::uint32_t>(op.count);
  h.slot = layout_.slot(index_, e, entry.round);
  h.seq = protocol::SlotLayout::seq_of_round(entry.round);
  h.rank = static_cast<std::uint8_t>(config_.rank);
  h.k = op.k;
  return h;
}

void ThreadEngine::build_probe(Operation& op, std::uint32_t e) {
  Entry& entry = entries_[e];
  protocol::encode(request_header(op, e, flag::kSyn), entry.packet);
  entry.packet_size = protocol::kHeaderSize;
  ++stats_.syn_probes;
}

void ThreadEngine::send_retransmit_probe(const Operation& op, std::uint32_t e, std::uint64_t now) {
  Entry& entry = entries_[e];
  protocol::encode(request_header(op, e, flag::kSyn), entry.probe);
  entry.deadline_ns = now + entry.rto_ns;
  tx_.push_back({entry.probe, static_cast<std::uint32_t>(protocol::kHeaderSize), switch_port_});
}

void ThreadEngine::sample_rtt(std::uint64_t rtt_ns) {
  backoff_shift_ = 0;
  if (srtt_ns_ == 0) {
    srtt_ns_ = rtt_ns;
    rttvar_ns_ = rtt_ns / 2;
    return;
  }
  const std::uint64_t deviation = rtt_ns > srtt_ns_ ? rtt_ns - srtt_ns_ : srtt_ns_ - rtt_ns;
  rttvar_ns_ = (3 * rttvar_ns_ + deviation) / 4;
  srtt_ns_ = (7 * srtt_ns_ + rtt_ns) / 8;
}

std::uint64_t ThreadEngine::initial_rto() const {
  const std::uint64_t floor = to_ns(config_.retransmit_timeout);
  return std::clamp((srtt_ns_ + 4 * rttvar_ns_) << backoff_shift_, floor,
                    std::max(floor, op_max_rto_ns_));
}

void ThreadEngine::queue_send(std::uint32_t e, std::uint64_t now) {
  Entry& entry = entries_[e];
  entry.deadline_ns = now + entry.rto_ns;
  tx_.push_back({entry.packet, entry.packet_size, switch_port_});
}

void ThreadEngine::move_to(Operation& op, std::uint32_t e, std::uint64_t round, std::uint64_t now) {
  Entry& entry = entries_[e];
  entry.round = round;
  entry.probing = false;
  entry.rto_ns = initial_rto();
  entry.sent_ns = now;
  entry.retransmitted = false;
  entry.expedited = false;
  entry.counted_reply_ns = 0;
  if (round >= entry.end_round) {
    entry.round = entry.end_round;
    finish_entry(e);
    return;
  }
  build_data(op, e);
  queue_send(e, now);
}

void ThreadEngine::miss_blocks(Operation& op, std::uint32_t e, std::uint64_t from_round,
                               std::uint64_t to_round) {
  const Entry& entry = entries_[e];
  const std::size_t payload = session_.payload;
  const std::size_t element = 4;  // int32 and float32 alike
  for (std::uint64_t round = from_round; round < to_round && round < entry.end_round; ++round) {
    const std::int64_t j = block_index(op, entry, round);
    if (j < 0) continue;
    const std::size_t begin =
        plan_.block_of(e, static_cast<std::size_t>(j), entries_.size()) * payload;
    const std::size_t valid = std::min(payload, op.count - begin);
    // The documented semantics of a missed block: the output holds this rank's own input.
    if (op.in != op.out) std::memcpy(op.out + begin * element, op.in + begin * element, valid * element);
    ++stats_.blocks_missed;
    stats_.missed.push_back({begin, begin + valid});
    if (op.block_contributors != nullptr) op.block_contributors[begin / payload] = 0;
  }
}

void ThreadEngine::deliver(Operation& op, std::uint32_t e, std::uint64_t round, const Header& h,
                           std::span<const std::byte> payload) {
  Entry& entry = entries_[e];
  if (is_float(op)) entry.exponent = h.exp_next;
  const auto world = static_cast<std::uint32_t>(session_.world_size);
  const bool mine = ((h.bitmap >> config_.rank) & 1) != 0;
  // Reactive fastest-K: once a round of this entry completed without a straggler, later rounds
  // of the operation complete at the first K instead of waiting for the timeout again.
  if (h.contributors < world && mine) entry.count_to_k = true;
  const std::int64_t j = block_index(op, entry, round);
  if (j < 0) return;  // the priming round only carries the next exponent
  const std::size_t begin =
      plan_.block_of(e, static_cast<std::size_t>(j), entries_.size()) * session_.payload;
  const std::size_t valid = std::min<std::size_t>(session_.payload, op.count - begin);
  if (h.offset != begin || h.count != valid) {
    throw ProtocolError("rank " + std::to_string(config_.rank) + ", operation " +
                        std::to_string(op.op_id) + ": the switch's block at slot " +
                        std::to_string(h.slot) + " covers elements [" + std::to_string(h.offset) +
                        ", +" + std::to_string(h.count) + ") but this rank expects [" +
                        std::to_string(begin) + ", +" + std::to_string(valid) +
                        "): ranks passed different element counts (size mismatch)");
  }
  const std::uint32_t divisor = op.op == ReduceOp::avg ? std::max<std::uint32_t>(h.contributors, 1) : 1;
  if (is_float(op)) {
    quant::dequantize(payload.data(), valid, h.exp_used, session_.world_size, divisor,
                      reinterpret_cast<float*>(op.out) + begin);
    if (h.exp_used == protocol::kExpNonFinite) ++stats_.blocks_non_finite;
  } else {
    quant::int32_from_wire(payload.data(), valid, divisor, reinterpret_cast<std::int32_t*>(op.out) + begin);
  }
  if (op.block_contributors != nullptr) op.block_contributors[begin / session_.payload] = h.bitmap;
  ++(h.contributors >= world ? stats_.blocks_full : stats_.blocks_partial);
  if (mine) ++stats_.contributed;
  if (stats_.min_contributors == 0 || h.contributors < stats_.min_contributors) {
    stats_.min_contributors = h.contributors;
  }
}

void ThreadEngine::handle_packet(Operation& op, const transport::RxPacket& packet, std::uint64_t now) {
  if (packet.from != switch_port_) return;
  Header h;
  std::span<const std::byte> payload;
  if (protocol::decode(packet.data, h, payload) != protocol::DecodeStatus::ok) return;
  if (h.session != config_.session || h.token != session_.token || h.has(flag::kJoin)) return;
  if (h.slot < slot_base_ || h.slot - slot_base_ >= entries_.size() * 2) return;
  const std::uint32_t e = (h.slot - slot_base_) / 2;
  const std::uint32_t parity = (h.slot - slot_base_) & 1;
  Entry& entry = entries_[e];
  if (h.has(flag::kError)) {
    if (h.op_id == op.op_id) fail_on_error_reply(op, h);
    return;
  }
  if (!entry.active) return;
  const auto op_delta = static_cast<std::int32_t>(h.op_id - op.op_id);
  // The round the reply speaks of, relative to the current one, from the 32-bit slot sequence.
  const auto seq_delta =
      static_cast<std::int32_t>(h.seq - protocol::SlotLayout::seq_of_round(entry.round));
  const bool probe_reply = h.has(flag::kSyn) && !h.has(flag::kResult) && !h.has(flag::kOld) &&
                           !entry.probing && parity == (entry.round & 1);
  const bool slot_behind = op_delta < 0 || h.seq == 0 || seq_delta < 0;
  if (probe_reply && op_delta <= 0 && (slot_behind || seq_delta == 0)) {
    // The switch's answer to a retransmission probe. A slot that is fresh (seq 0), still holds
    // an earlier operation or round, or has not counted this rank never saw the data packet:
    // send it again now. Checked before the late-reply filters below, which would otherwise
    // drop exactly these replies and leave the lost packet to the give-up timeout.
    const bool counted = !slot_behind && ((h.bitmap >> config_.rank) & 1) != 0;
    entry.counted_reply_ns = counted ? now : 0;
    if (!counted) {
      ++stats_.retransmissions;
      queue_send(e, now);
    }
    return;
  }
  if (op_delta < 0) return;  // a late reply from an earlier operation
  if (parity != (entry.round & 1)) {
    // A reply about the entry's other slot (to a stale or duplicated packet): it cannot tell
    // that this entry's current round is lost, which is always retrievable from its own slot.
    // A newer result there means the current round is complete: ask for it now.
    if (h.has(flag::kResult) || op_delta > 0) {
      entry.deadline_ns = now;
      entry.expedited = true;
    }
    return;
  }
  if (op_delta > 0) {
    // This entry's slot already serves a later operation: the others finished this one.
    miss_blocks(op, e, entry.round, entry.end_round);
    entry.round = entry.end_round;
    finish_entry(e);
    return;
  }
  if (h.seq == 0 || seq_delta < 0) return;
  const std::uint64_t round = entry.round + 2 * static_cast<std::uint64_t>(seq_delta);
  if (round >= entry.end_round) return;
  entry.last_reply_ns = now;

  if (h.has(flag::kResult)) {
    if (h.count * 4u > payload.size()) return;
    if (round == entry.round && !entry.retransmitted && !entry.probing) sample_rtt(now - entry.sent_ns);
    miss_blocks(op, e, entry.round, round);
    deliver(op, e, round, h, payload);
    move_to(op, e, round + 1, now);
    return;
  }
  if (!h.has(flag::kOld) && !h.has(flag::kSyn)) return;
  if (round == entry.round && entry.probing) return;  // still the probed round: keep waiting
  if (h.has(flag::kComplete)) {
    if (config_.syn_disable) {
      miss_blocks(op, e, entry.round, round + 1);
      if (is_float(op)) entry.exponent = h.exp_next;
      move_to(op, e, round + 1, now);
      return;
    }
    // Fetch the stored result of the round the slot holds, then continue after it.
    miss_blocks(op, e, entry.round, round);
    entry.round = round;
    entry.probing = true;
    entry.rto_ns = initial_rto();
    build_probe(op, e);
    queue_send(e, now);
    return;
  }
  // The slot's round is still open: join it with the exponent its contributors use.
  miss_blocks(op, e, entry.round, round);
  if (is_float(op)) entry.exponent = h.exp_used;
  move_to(op, e, round, now);
}

void ThreadEngine::check_timeouts(Operation& op, std::uint64_t now) {
  const std::uint64_t give_up = to_ns(config_.timeout);
  for (std::uint32_t e = 0; e < entries_.size(); ++e) {
    Entry& entry = entries_[e];
    if (!entry.active || entry.deadline_ns > now) continue;
    if (now - entry.last_reply_ns >= give_up) {
      const std::string where =
          " (operation " + std::to_string(op.op_id) + ", thread " + std::to_string(index_) +
          ", slot " + std::to_string(layout_.slot(index_, e, entry.round)) + ", round " +
          std::to_string(protocol::SlotLayout::seq_of_round(entry.round)) + ")";
      const std::string switch_at = "the switch at " + switch_port_.to_string();
      const std::string waited = std::to_string(config_.timeout.count()) + " ms";
      // The switch still answers (it counted this rank within the last two probes): the round
      // waits for other ranks, not for a dead switch.
      const bool switch_counted_us =
          entry.counted_reply_ns != 0 && now - entry.counted_reply_ns <= 2 * entry.rto_ns;
      const std::string cause =
          switch_counted_us
              ? switch_at + " holds this rank's contribution but the round stayed open for " +
                    waited + where + ": other ranks did not send theirs; are"
              : "no reply from " + switch_at + " for " + waited + where +
                    ": is dpa-switch running, and are";
      throw TimeoutError("rank " + std::to_string(config_.rank) + ": " + cause +
                         " all ranks alive and running the same operations?");
    }
    ++stats_.retransmissions;
    entry.retransmitted = true;
    if (entry.expedited) {
      entry.expedited = false;  // not a timeout: no back-off
    } else {
      ++stats_.timeouts;
      backoff_shift_ = std::min(backoff_shift_ + 1, 6u);
      entry.rto_ns =
          std::min(entry.rto_ns * 2, std::max(op_max_rto_ns_, to_ns(config_.retransmit_timeout)));
    }
    // Retransmit with a header-only probe: the switch answers with the result if the round is
    // complete, or says whether it counted this rank; the payload goes again only if it did not.
    // A skip-forward probe is already header-only.
    if (entry.probing) {
      queue_send(e, now);
    } else {
      send_retransmit_probe(op, e, now);
    }
  }
}

void ThreadEngine::fail_on_error_reply(const Operation& op, const Header& h) const {
  std::string message = "rank " + std::to_string(config_.rank) + ", operation " +
                        std::to_string(op.op_id) + ": the switch rejected a packet for slot " +
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
    case protocol::ErrorCode::session_taken_over:
      message += " (generation " + std::to_string(h.offset) +
                 " of another job now holds the session; this job was idle longer than the "
                 "session's idle_timeout_ms)";
      break;
    default:
      break;
  }
  throw ProtocolError(message);
}

}  // namespace dpa::detail
