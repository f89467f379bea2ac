// SPDX-License-Identifier: Apache-2.0
// The software switch: one thread per port (a queue of a UDP or DPDK device, on a std::thread or
// a DPDK lcore), each owning the slots of the worker threads that talk to its port, so no packet
// crosses threads and the data path takes no lock. Replies are built in transmit buffers of the
// queue; a result goes to every rank as one buffer (send_to_all), never as copies.
// This file holds the session table and each thread's loop; the stages a packet goes through are
// beside it, cut where the P4 program cuts them: admission (admit_data), the slot (step_slot),
// delivery (data_replies, join_replies, over a ReplyBatch).
#include "dpa/switch.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <variant>

#include <fmt/format.h>

#include "common/logging.hpp"
#include "dpa/error.hpp"
#include "protocol/auth.hpp"
#include "protocol/wire.hpp"
#include "switch/admit_data.hpp"
#include "switch/data_replies.hpp"
#include "switch/join_rate_limiter.hpp"
#include "switch/join_replies.hpp"
#include "switch/prefetch.hpp"
#include "switch/published_counters.hpp"
#include "switch/reply_batch.hpp"
#include "switch/session.hpp"
#include "switch/session_memory.hpp"
#include "switch/session_tally.hpp"
#include "switch/slot.hpp"
#include "transport/factory.hpp"
#include "transport/send.hpp"

namespace dpa {

namespace detail {

using protocol::ErrorCode;
using protocol::Header;
using transport::Endpoint;
namespace flag = protocol::flag;

namespace {

// Sessions by id. A table is immutable once published; add/remove publish a new one.
using SessionTable = std::map<std::uint32_t, sw::Session*>;

std::uint64_t steady_now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// Over shared memory a packet lends the receiver the switch's buffer until it reads it, so a rank
// that sleeps (a straggler under fastest-K) would pin one buffer per result multicast meanwhile,
// then every buffer, and stall the ranks that do read. It may hold a quarter of them; what goes
// beyond is dropped as a full socket buffer drops datagrams (it skips forward when it reads again).
TransportConfig with_receiver_backlog_limit(TransportConfig transport) {
  if (auto* shm = std::get_if<ShmTransportConfig>(&transport)) {
    shm->receiver_backlog_limit = std::max<std::uint32_t>(1, std::min(shm->buffers, shm->ring) / 4);
  }
  return transport;
}

}  // namespace

class SwitchImpl {
 public:
  explicit SwitchImpl(const SwitchConfig& config) : config_(config) {
    config_.validate();
    // Thread i drives queue i of the device: UDP port (or dpdk.local_port) + i.
    device_ = transport::open_device(with_receiver_backlog_limit(config_.transport),
                                     static_cast<std::size_t>(config_.threads));
    for (int i = 0; i < config_.threads; ++i) {
      queues_.push_back(device_->open_queue(static_cast<std::size_t>(i)));
      ports_.push_back(queues_.back()->local_endpoint().port);
    }
    publish(std::make_unique<SessionTable>());
    for (const SessionConfig& session : config_.sessions) add_session(session);
    published_ = std::make_unique<sw::PublishedCounters<SwitchThreadCounters>[]>(queues_.size());
    passed_epoch_ = std::make_unique<std::atomic<std::uint64_t>[]>(queues_.size());
    for (std::size_t i = 0; i < queues_.size(); ++i) {
      threads_.push_back(device_->launch(i, [this, i] {
        transport::name_this_thread("dpa-switch-" + std::to_string(i));
        run(i);
      }));
    }
    log().info("dpa-switch listening on {} ({} thread{}, {})", queues_[0]->local_endpoint().to_string(),
               ports_.size(), ports_.size() == 1 ? "" : "s", device_->properties().name);
    for (std::size_t i = 0; i < threads_.size(); ++i) log().info("thread {} runs on {}", i, threads_[i]->where());
  }

  ~SwitchImpl() { stop(); }

  void stop() {
    stop_.store(true, std::memory_order_relaxed);
    threads_.clear();  // waits for each run() to return
  }

  void add_session(const SessionConfig& config) {
    std::lock_guard lock(admin_mutex_);
    const SessionTable& current = *table_.load(std::memory_order_acquire);
    if (current.contains(config.id)) {
      throw ConfigError("session " + std::to_string(config.id) + " already exists");
    }
    config.validate();
    sw::check_admission(config_, sessions_.size(), bytes_held_, config);
    try {
      sessions_.push_back(std::make_unique<sw::Session>(config, static_cast<std::size_t>(config_.threads)));
    } catch (const std::bad_alloc&) {
      throw Error(fmt::format("session {}: cannot allocate {} MiB of slot memory (max_memory_mb {} exceeds "
                              "what this machine can give)",
                              config.id, sw::session_memory_bytes(config) >> 20, config_.max_memory_mb));
    }
    bytes_held_ += sw::session_memory_bytes(config);
    auto next = std::make_unique<SessionTable>(current);
    (*next)[config.id] = sessions_.back().get();
    publish(std::move(next));
    log().info("session {}: world {}, K {}, payload {}, slots [{}, {}), straggler timeout {} us",
               config.id, config.world_size, config.k == 0 ? config.world_size : config.k,
               config.payload, config.pool_base, config.pool_base + config.pool_size,
               config.straggler_timeout.count());
  }

  void remove_session(std::uint32_t id) {
    std::lock_guard lock(admin_mutex_);
    const SessionTable& current = *table_.load(std::memory_order_acquire);
    if (!current.contains(id)) throw ConfigError("unknown session " + std::to_string(id));
    const sw::Session* removed = current.at(id);
    auto next = std::make_unique<SessionTable>(current);
    next->erase(id);
    publish(std::move(next));
    wait_until_no_thread_reads_older_tables();
    const auto held = std::ranges::find_if(sessions_, [&](const auto& session) { return session.get() == removed; });
    bytes_held_ -= sw::session_memory_bytes((*held)->config());
    sessions_.erase(held);
    tables_.erase(tables_.begin(), tables_.end() - 1);
  }

  [[nodiscard]] std::uint16_t port() const { return ports_[0]; }

  void set_clock(std::uint32_t ticks) {
    if (!config_.manual_clock) throw ConfigError("set_clock: the switch runs on the steady clock (start it with manual_clock)");
    manual_ticks_.store(ticks, std::memory_order_relaxed);
  }

  [[nodiscard]] std::vector<std::uint32_t> session_ids() const {
    std::lock_guard lock(admin_mutex_);
    std::vector<std::uint32_t> ids;
    for (const auto& entry : *table_.load(std::memory_order_acquire)) ids.push_back(entry.first);
    return ids;
  }

  [[nodiscard]] std::vector<SwitchThreadCounters> thread_counters() const {
    std::vector<SwitchThreadCounters> threads;
    threads.reserve(queues_.size());
    for (std::size_t i = 0; i < queues_.size(); ++i) threads.push_back(published_[i].read());
    return threads;
  }

  [[nodiscard]] std::uint64_t joins_heard(std::uint32_t id) const {
    std::lock_guard lock(admin_mutex_);
    const SessionTable& current = *table_.load(std::memory_order_acquire);
    const auto found = current.find(id);
    if (found == current.end()) throw ConfigError("unknown session " + std::to_string(id));
    return found->second->joins_heard();
  }

  [[nodiscard]] SwitchCounters counters() const {
    SwitchCounters total;
    for (const SwitchThreadCounters& thread : thread_counters()) total += thread.counters;
    return total;
  }

  [[nodiscard]] std::vector<SessionStatus> session_status() const {
    std::lock_guard lock(admin_mutex_);
    std::vector<SessionStatus> status;
    for (const auto& [id, session] : *table_.load(std::memory_order_acquire)) {
      SessionStatus& entry = status.emplace_back();
      entry.config = session->config();
      if (const sw::Membership* members = session->membership()) {
        entry.generation = members->generation;
        entry.joined = members->joined;
        entry.data_mac = std::string(protocol::to_string(members->data_mac));
      }
      entry.counters = session->counters();
    }
    return status;
  }

 private:
  // Called with admin_mutex_ held (or from the constructor).
  void publish(std::unique_ptr<SessionTable> table) {
    table_.store(table.get(), std::memory_order_release);
    tables_.push_back(std::move(table));  // readers may still hold older tables
    epoch_.fetch_add(1, std::memory_order_acq_rel);
  }

  // Each switch thread reads the table once per received batch and announces, between
  // batches, the epoch it has seen (run()). Once every running thread announced the current
  // epoch, none holds an older table or a session only an older table lists. Threads announce
  // at least every kStopCheck, and the largest epoch when they exit, so this waits about that
  // long. Called with admin_mutex_ held.
  void wait_until_no_thread_reads_older_tables() {
    const std::uint64_t current = epoch_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < threads_.size(); ++i) {
      while (passed_epoch_[i].load(std::memory_order_acquire) < current) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }

  // One reading per received batch: steady nanoseconds for the control plane (join expiry,
  // idle sessions) and the straggler timer's ticks, which a test may set by hand.
  struct Clock {
    std::uint64_t ns = 0;
    std::uint32_t ticks = 0;
  };
  [[nodiscard]] Clock clock() const {
    const std::uint64_t ns = steady_now_ns();
    return {ns, config_.manual_clock ? manual_ticks_.load(std::memory_order_relaxed)
                                     : protocol::ticks_of_ns(ns)};
  }

  void run(std::size_t index) {
    transport::Queue& io = *queues_[index];
    sw::ReplyBatch batch(io, device_->properties().burst, static_cast<std::uint32_t>(index));
    constexpr auto kStopCheck = std::chrono::milliseconds(20);

    const bool spins = config_.busy_poll_threads == 0 || static_cast<int>(index) < config_.busy_poll_threads;
    const auto spin = spins ? std::chrono::nanoseconds(config_.busy_poll) : std::chrono::nanoseconds(0);
    // A packet whose buffer may carry the reply is fetched for writing: fetched for reading, its
    // lines would cross from the sender's core twice (shared, then owned); docs/benchmarks.md
    // "2026-12-06 (morning)".
    const bool for_writing = device_->properties().replies_in_place;
    const auto prefetch_received = [for_writing](std::span<const std::byte> packet) {
      for_writing ? sw::prefetch_write(packet.data(), packet.size()) : sw::prefetch_read(packet);
    };
    const std::uint64_t started_ns = steady_now_ns();
    while (!stop_.load(std::memory_order_relaxed)) {
      passed_epoch_[index].store(epoch_.load(std::memory_order_acquire), std::memory_order_release);
      std::size_t received = 0;
      // Opt-in busy polling before blocking, for machines with cores to spare.
      for (auto until = std::chrono::steady_clock::now() + spin;
           received == 0 && spin.count() > 0 && std::chrono::steady_clock::now() < until;) {
        received = io.receive(batch.rx, std::chrono::nanoseconds(0));
      }
      if (received == 0) received = io.receive(batch.rx, kStopCheck);
      if (received == 0) continue;
      const Clock now = clock();
      const SessionTable& sessions = *table_.load(std::memory_order_acquire);
      for (std::size_t i = 0; i < std::min(received, sw::kPrefetchAhead); ++i) prefetch_received(batch.rx[i].data);
      std::size_t handled_bytes = 0;
      for (std::size_t i = 0; i < received; ++i) {
        if (i + sw::kPrefetchAhead < received) prefetch_received(batch.rx[i + sw::kPrefetchAhead].data);
        batch.set_prefetch_bytes(batch.rx[i].data.size());
        handle(index, sessions, batch.rx[i], now, batch);
        handled_bytes += batch.rx[i].data.size();
        if (handled_bytes >= transport::kSendEveryBytes && batch.has_sends()) {
          batch.finish();
          handled_bytes = 0;
        }
      }
      batch.counters.rx_packets += received;
      batch.finish();
      const transport::QueueCounters transport = io.counters();
      batch.counters.busy_ns = steady_now_ns() - started_ns - transport.idle_ns;
      published_[index].publish({batch.counters, transport});
    }
    passed_epoch_[index].store(std::numeric_limits<std::uint64_t>::max(), std::memory_order_release);
  }

  void handle(std::size_t index, const SessionTable& sessions, const transport::RxPacket& packet,
              Clock now, sw::ReplyBatch& batch) {
    Header h;
    std::span<const std::byte> payload;
    if (protocol::decode(packet.data, h, payload) != protocol::DecodeStatus::ok ||
        h.has(flag::kReplyOnly)) {
      ++batch.counters.dropped_malformed;
      return;
    }
    const bool is_join = h.has(flag::kJoin);
    const auto found = sessions.find(h.session);
    if (found == sessions.end()) {
      ++batch.counters.dropped_unknown_session;
      if (is_join) sw::send_error(batch, h, ErrorCode::unknown_session, 0, packet.from, nullptr);
      return;
    }
    sw::Session& session = *found->second;
    SessionCounters& counted = session.thread_counters(index);
    sw::add_to_counter(counted.rx_packets);
    // Drops and errors happen in many places below: the session's share is what the thread's
    // counters gained while handling this packet.
    const std::uint64_t dropped_before = session_drops(batch.counters);
    const std::uint64_t errors_before = batch.counters.errors_sent;
    if (authentic(index, session, h, packet, now.ns, batch)) {
      dispatch(index, session, sw::SessionTally(batch.counters, counted), h, payload, packet, now, batch);
    }
    if (const std::uint64_t dropped = session_drops(batch.counters) - dropped_before; dropped != 0) {
      sw::add_to_counter(counted.dropped, dropped);
    }
    if (batch.counters.errors_sent != errors_before) {
      sw::add_to_counter(counted.errors_sent, batch.counters.errors_sent - errors_before);
    }
  }

  // Authenticated mode (protocol.md §6.6), before anything else of the session: in a session with
  // a key, admission packets (JOIN, LEAVE, KEEPALIVE) must carry their rank's tag, and so must
  // data packets and probes if it authenticates data; a tagged packet needs such a session.
  // Anything else is dropped and counted; a JOIN whose authentication differs from the session's
  // learns why (within its source's JOIN rate), untagged since its sender and the switch share no key.
  bool authentic(std::size_t index, const sw::Session& session, const Header& h, const transport::RxPacket& packet,
                 std::uint64_t now_ns, sw::ReplyBatch& batch) {
    const bool admission = h.has(flag::kJoin | flag::kLeave | flag::kKeepalive);
    const bool authenticated = admission ? session.admission_macs(0) != nullptr : session.authenticates_data();
    const bool tagged = h.has(flag::kAuth);
    if (!authenticated && !tagged) return true;
    // The generation's MAC, not the packet's flags, decides: a packet sealed with another MAC
    // (a SipHash tag in an AES-256-GCM generation) fails like a forgery.
    const protocol::PacketMacs* macs = admission ? session.admission_macs(h.rank) : session.data_macs(h.rank);
    if (authenticated && tagged && macs != nullptr && macs->request.verify(packet.data)) return true;
    ++batch.counters.dropped_bad_tag;
    if (h.has(flag::kJoin) && authenticated != tagged && index == 0 && join_limiter_.admit(packet.from, now_ns)) {
      sw::send_error(batch, h, ErrorCode::auth_mismatch, authenticated ? 1 : 0, packet.from, nullptr);
    }
    return false;
  }

  void dispatch(std::size_t index, sw::Session& session, const sw::SessionTally& count, const Header& h,
                std::span<const std::byte> payload, const transport::RxPacket& packet, Clock now, sw::ReplyBatch& batch) {
    const bool is_join = h.has(flag::kJoin);
    if (is_join) {
      handle_join(index, session, count, h, payload, packet.from, now, batch);
    } else if (h.has(flag::kLeave)) {
      if (index == 0 && payload.empty() && session.leave(h, packet.from)) {
        ++batch.counters.leaves;
      } else {
        ++batch.counters.dropped_unregistered;
      }
    } else if (h.has(flag::kKeepalive)) {
      if (index != 0 || !payload.empty()) {
        ++batch.counters.dropped_malformed;
      } else if (!session.keepalive(h, packet.from, now.ticks)) {
        ++batch.counters.dropped_unregistered;
      }
    } else {
      handle_data(index, session, count, h, payload, packet, now, batch);
    }
  }

  // The drops a packet of a known session can cause.
  static std::uint64_t session_drops(const SwitchCounters& counters) {
    return counters.dropped_malformed + counters.dropped_unregistered + counters.dropped_not_joined +
           counters.dropped_bad_token + counters.dropped_bad_tag + counters.joins_rate_limited;
  }

  void handle_join(std::size_t index, sw::Session& session, const sw::SessionTally& count, const Header& h,
                   std::span<const std::byte> payload, const Endpoint& from, Clock now, sw::ReplyBatch& batch) {
    const std::uint64_t now_ns = now.ns;
    // Before anything that answers: a storm's JOINs beyond its source's rate get no reply.
    if (index == 0 && !join_limiter_.admit(from, now_ns)) {
      ++batch.counters.joins_rate_limited;
      return;
    }
    const auto world = static_cast<std::uint32_t>(session.config().world_size);
    if (h.rank >= world) {
      ++batch.counters.dropped_unregistered;
      sw::send_error(batch, h, ErrorCode::rank_out_of_range, world, from, sw::reply_key(session, h.rank));
      return;
    }
    if (!session.registered(h.rank, from, /*check_port=*/true)) {
      ++batch.counters.dropped_unregistered;
      sw::send_error(batch, h, ErrorCode::not_registered, 0, from, sw::reply_key(session, h.rank));
      return;
    }
    protocol::JoinRequest request;
    if (index != 0 ||  // JOINs go to the first port
        !protocol::decode(payload.first(std::min<std::size_t>(payload.size(), 4u * h.count)),
                          request)) {
      ++batch.counters.dropped_malformed;
      return;
    }
    count(sw::Counted::joins);
    const sw::JoinOutcome outcome = session.join(h, request, from, now.ns, now.ticks);
    sw::reply_to_join(batch, session, outcome, h, from, join_limiter_, ports_);
  }

  // Admission of data packets and probes (docs/protocol.md §8.1), then the slot's step.
  void handle_data(std::size_t index, sw::Session& session, const sw::SessionTally& count, const Header& h,
                   std::span<const std::byte> payload, const transport::RxPacket& packet, Clock now,
                   sw::ReplyBatch& batch) {
    const Endpoint& from = packet.from;
    const sw::DataVerdict verdict = sw::admit_data(session, h, payload.size(), from, static_cast<std::uint32_t>(index),
                                                   static_cast<std::uint32_t>(ports_.size()));
    if (!verdict.admitted()) {
      if (verdict.dropped != nullptr) ++(batch.counters.*verdict.dropped);
      if (verdict.error == ErrorCode::session_taken_over) {
        sw::send_taken_over(batch, h, *session.membership(), from, sw::data_reply_key(session, h.rank));
      } else if (verdict.error != ErrorCode::none) {
        sw::send_error(batch, h, verdict.error, verdict.expected, from, sw::data_reply_key(session, h.rank));
      }
      return;
    }
    const sw::Membership* members = verdict.members;
    const std::uint32_t thread = verdict.thread;
    const bool probe = h.is_probe();
    const sw::SessionLimits& limits = session.limits();
    // Stamped once per batch (the clock is read per batch): a store per packet would take the
    // line, which every switch thread reads, away from the others each time.
    if (members->last_active_ns.load(std::memory_order_relaxed) != now.ns) {
      members->last_active_ns.store(now.ns, std::memory_order_relaxed);
    }

    sw::SlotState& slot = session.slot(h.slot);
    if (slot.generation != members->generation) slot = sw::SlotState{members->generation};
    const std::uint64_t sender_bit = std::uint64_t{1} << h.rank;
    const std::uint32_t seq_before = slot.seq;
    const std::uint8_t contributors_before = slot.contributors;
    const sw::SlotAction action =
        sw::step_slot(slot, session.values(h.slot), h, payload, sender_bit, limits, now.ticks);
    using sw::Counted;
    if (slot.seq != seq_before || slot.contributors != contributors_before) count(Counted::aggregated);

    using sw::SlotAction;
    switch (action) {
      case SlotAction::counted:
        return;
      case SlotAction::duplicate:
        count(Counted::duplicates);
        return;
      case SlotAction::multicast_result:
        count(slot.contributors == limits.world_size ? Counted::completed_full : Counted::completed_partial);
        sw::send_result(batch, session, slot, action, h, *members, thread, packet);
        return;
      case SlotAction::unicast_result:
        if (!probe && (slot.bitmap & sender_bit) == 0) count(Counted::late_contributions);
        count(probe ? Counted::syn_replies : Counted::retransmitted_results);
        sw::send_result(batch, session, slot, action, h, *members, thread, packet);
        return;
      case SlotAction::unicast_old:
        count(Counted::old_replies);
        sw::send_header(batch, sw::reply_header(slot, action, h, members->token), from,
                        sw::data_reply_key(session, h.rank));
        return;
      case SlotAction::unicast_syn:
        if (sw::report_gone(batch, session, slot, h, sender_bit, *members, now.ticks, from)) return;
        count(Counted::syn_replies);
        sw::send_header(batch, sw::reply_header(slot, action, h, members->token), from,
                        sw::data_reply_key(session, h.rank));
        return;
      case SlotAction::error_seq_ahead:
      case SlotAction::unicast_error:
      case SlotAction::unicast_mismatch:
        ++batch.counters.errors_sent;
        sw::send_header(batch, sw::reply_header(slot, action, h, members->token), from,
                        sw::data_reply_key(session, h.rank));
        return;
      case SlotAction::multicast_error:
        sw::send_poisoned(batch, session, slot, h, *members, thread, from);
        return;
    }
  }

  SwitchConfig config_;
  std::unique_ptr<transport::Device> device_;  // outlives the queues and threads below
  std::vector<std::unique_ptr<transport::Queue>> queues_;
  std::vector<std::uint16_t> ports_;
  std::vector<std::unique_ptr<transport::QueueThread>> threads_;  // thread i drives queues_[i]
  std::atomic<bool> stop_{false};
  std::atomic<std::uint32_t> manual_ticks_{0};
  sw::JoinRateLimiter join_limiter_;  // thread 0's: only it handles JOINs

  mutable std::mutex admin_mutex_;
  std::atomic<const SessionTable*> table_{nullptr};
  std::vector<std::unique_ptr<SessionTable>> tables_;
  std::vector<std::unique_ptr<sw::Session>> sessions_;
  std::uint64_t bytes_held_ = 0;  // sessions_' memory, within config_.max_memory_mb
  std::atomic<std::uint64_t> epoch_{0};  // tables published so far
  std::unique_ptr<std::atomic<std::uint64_t>[]> passed_epoch_;  // per thread: the epoch it has seen

  // Per thread, published once per received batch; read by counters() and the metrics endpoint.
  std::unique_ptr<sw::PublishedCounters<SwitchThreadCounters>[]> published_;
};

}  // namespace detail

SoftwareSwitch::SoftwareSwitch(const SwitchConfig& config)
    : impl_(std::make_unique<detail::SwitchImpl>(config)) {}
SoftwareSwitch::~SoftwareSwitch() = default;
void SoftwareSwitch::add_session(const SessionConfig& session) { impl_->add_session(session); }
void SoftwareSwitch::remove_session(std::uint32_t id) { impl_->remove_session(id); }
void SoftwareSwitch::stop() { impl_->stop(); }
std::uint16_t SoftwareSwitch::port() const { return impl_->port(); }
void SoftwareSwitch::set_clock(std::uint32_t ticks) { impl_->set_clock(ticks); }
std::vector<std::uint32_t> SoftwareSwitch::session_ids() const { return impl_->session_ids(); }
std::uint64_t SoftwareSwitch::joins_heard(std::uint32_t id) const { return impl_->joins_heard(id); }
SwitchCounters SoftwareSwitch::counters() const { return impl_->counters(); }
std::vector<SwitchThreadCounters> SoftwareSwitch::thread_counters() const { return impl_->thread_counters(); }
std::vector<SessionStatus> SoftwareSwitch::session_status() const { return impl_->session_status(); }

}  // namespace dpa
