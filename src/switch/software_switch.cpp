// SPDX-License-Identifier: Apache-2.0
// The software switch: one thread per port (a queue of a UDP or DPDK device, on a std::thread or
// a DPDK lcore), each owning the slots of the worker threads that talk to its port, so no packet
// crosses threads and the data path takes no lock. Replies are built in transmit buffers of the
// queue; a result goes to every rank as one buffer (send_to_all), never as copies.
#include "dpa/switch.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
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
#include "quant/quant.hpp"
#include "switch/join_rate_limiter.hpp"
#include "switch/published_counters.hpp"
#include "switch/session.hpp"
#include "switch/session_memory.hpp"
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

// A packet's bytes are usually in another core's cache (the sender's, or the NIC's DMA in the
// last-level cache): asking for the next packets' lines while this one is handled overlaps those
// transfers instead of stalling on each line. Likewise for the reply buffer about to be written.
constexpr std::size_t kPrefetchAhead = 2;  // packets

void prefetch_read(std::span<const std::byte> bytes) {
  for (std::size_t offset = 0; offset < bytes.size(); offset += 64) __builtin_prefetch(bytes.data() + offset, 0, 3);
}

// Prefetches never fault: `at` may point before the buffer.
void prefetch_write(const std::byte* at, std::size_t bytes) {
  for (std::size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(at + offset, 1, 3);
}

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

  // Per-thread state of one received batch: the replies it causes, built in transmit buffers of
  // the thread's queue and sent by finish(), after each transport::kSendEveryBytes of received
  // packets handled and at the batch's end. Every vector is sized once.
  class Batch {
   public:
    Batch(transport::Queue& queue, std::size_t batch)
        : rx(batch), queue_(queue), stash_(batch) {
      // Every data packet yields at most two replies (a poisoned round's multicast and the
      // sender's own error), each to at most every rank; the JOIN that forms a generation yields
      // one ack per rank. Only a batch with several such JOINs grows these (indices, not pointers,
      // refer into them).
      used_.reserve(2 * batch + protocol::kMaxWorld);
      sends_.reserve(2 * batch + protocol::kMaxWorld);
      endpoints_.reserve(2 * batch * protocol::kMaxWorld);
      unicast_.reserve(2 * batch + protocol::kMaxWorld);
    }
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;
    ~Batch() {
      queue_.release(used_);
      queue_.release(std::span(stash_.data() + stash_next_, stash_count_ - stash_next_));
    }

    // A transmit buffer for one reply, from a stash the queue refills a burst at a time; null
    // when the pool is empty (the reply is lost; the worker retransmits).
    transport::TxBuffer* next_buffer() {
      if (stash_next_ == stash_count_) {
        stash_count_ = queue_.allocate(stash_);
        stash_next_ = 0;
        if (stash_count_ == 0) {
          ++counters.tx_dropped;
          return nullptr;
        }
      }
      used_.push_back(stash_[stash_next_++]);
      // The next reply's buffer: its lines may sit in the core that read its last contents.
      // The line before the payload too: transports put their own headers there (DPDK's frame).
      if (stash_next_ < stash_count_) prefetch_write(stash_[stash_next_].payload - 64, prefetch_bytes_ + 64);
      return &used_.back();
    }
    // The buffer for a reply of `bytes` to `packet`: the packet's own when the queue gives it up
    // (written in place: its lines are already in this core's cache and nothing is allocated),
    // else next_buffer(). Once per packet: a second reply to it needs a buffer of its own.
    transport::TxBuffer* reply_buffer(const transport::RxPacket& packet, std::uint32_t bytes) {
      transport::TxBuffer own = queue_.take_for_reply(packet, bytes);
      if (own.payload == nullptr) return next_buffer();
      used_.push_back(own);
      return &used_.back();
    }
    void send(const transport::TxBuffer& buffer, const Endpoint& to) { send_to(buffer).push_back(to); }
    [[nodiscard]] bool has_sends() const { return !sends_.empty(); }
    // A buffer of this batch by position: next_buffer() may move them, positions stay.
    [[nodiscard]] std::size_t index_of(const transport::TxBuffer& buffer) const {
      return static_cast<std::size_t>(&buffer - used_.data());
    }
    transport::TxBuffer& buffer_at(std::size_t index) { return used_[index]; }
    // How much of each reply buffer to prefetch for writing: as much as the packet in hand,
    // whose reply is most often as long. Not the largest session's packet: with a 64 KB prefetch
    // for each 4 KB reply, a one-rank round trip took 8.9-9.3 us against 5.9-6.1 (the 2-core VM,
    // docs/benchmarks.md "2026-12-06 (afternoon)").
    void set_prefetch_bytes(std::size_t bytes) { prefetch_bytes_ = bytes; }
    // Adds destinations to the send of `buffer` started by send_to(): one buffer, many ranks.
    std::vector<Endpoint>& send_to(const transport::TxBuffer& buffer) {
      sends_.push_back({static_cast<std::uint32_t>(&buffer - used_.data()), endpoints_.size()});
      return endpoints_;
    }

    // Sends the batch's replies in order (runs of unicasts as one burst, each multicast as one
    // send_to_all) and releases their buffers. No flush: the queue's transmit bursts build up
    // over batches until full or until the transport's flush interval, counted by the receive()
    // calls of run().
    void finish() {
      for (std::size_t i = 0; i < sends_.size(); ++i) {
        const std::size_t end = i + 1 < sends_.size() ? sends_[i + 1].first : endpoints_.size();
        const transport::TxBuffer& buffer = used_[sends_[i].buffer];
        const std::span<const Endpoint> to(endpoints_.data() + sends_[i].first, end - sends_[i].first);
        if (to.size() == 1) {
          unicast_.push_back({&buffer, to[0]});
          continue;
        }
        send_unicasts();
        const std::size_t served = queue_.send_to_all(buffer, to);
        counters.tx_packets += served;
        counters.tx_dropped += to.size() - served;
      }
      send_unicasts();
      queue_.release(used_);
      used_.clear();
      sends_.clear();
      endpoints_.clear();
    }

    std::vector<transport::RxPacket> rx;
    SwitchCounters counters;

   private:
    struct Send {
      std::uint32_t buffer = 0;  // index in used_
      std::size_t first = 0;     // its destinations: endpoints_[first, next send's first)
    };

    void send_unicasts() {
      if (unicast_.empty()) return;
      const std::size_t sent = transport::send_all(queue_, unicast_);
      counters.tx_packets += sent;
      counters.tx_dropped += unicast_.size() - sent;
      unicast_.clear();
    }

    transport::Queue& queue_;
    std::vector<transport::TxBuffer> stash_;
    std::size_t stash_next_ = 0;
    std::size_t stash_count_ = 0;
    std::size_t prefetch_bytes_ = protocol::kHeaderSize;
    std::vector<transport::TxBuffer> used_;  // this batch's reply buffers (reserved: never moves)
    std::vector<Send> sends_;
    std::vector<Endpoint> endpoints_;
    std::vector<transport::TxRequest> unicast_;
  };

  void run(std::size_t index) {
    transport::Queue& io = *queues_[index];
    Batch batch(io, device_->properties().burst);
    constexpr auto kStopCheck = std::chrono::milliseconds(20);

    const bool spins = config_.busy_poll_threads == 0 || static_cast<int>(index) < config_.busy_poll_threads;
    const auto spin = spins ? std::chrono::nanoseconds(config_.busy_poll) : std::chrono::nanoseconds(0);
    // A packet whose buffer may carry the reply is fetched for writing: fetched for reading, its
    // lines would cross from the sender's core twice (shared, then owned); docs/benchmarks.md
    // "2026-12-06 (morning)".
    const bool for_writing = device_->properties().replies_in_place;
    const auto prefetch_received = [for_writing](std::span<const std::byte> packet) {
      for_writing ? prefetch_write(packet.data(), packet.size()) : prefetch_read(packet);
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
      for (std::size_t i = 0; i < std::min(received, kPrefetchAhead); ++i) prefetch_received(batch.rx[i].data);
      std::size_t handled_bytes = 0;
      for (std::size_t i = 0; i < received; ++i) {
        if (i + kPrefetchAhead < received) prefetch_received(batch.rx[i + kPrefetchAhead].data);
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

  // The key of replies to `rank` in an authenticated session (protocol.md §6.6); null otherwise.
  static const protocol::TagKey* reply_key(const sw::Session& session, std::uint32_t rank) {
    const protocol::RankTagKeys* keys = session.tag_keys(rank);
    return keys != nullptr ? &keys->reply : nullptr;
  }
  // The same for replies to data packets and probes: null unless the session authenticates data.
  static const protocol::TagKey* data_reply_key(const sw::Session& session, std::uint32_t rank) {
    const protocol::RankTagKeys* keys = session.data_tag_keys(rank);
    return keys != nullptr ? &keys->reply : nullptr;
  }
  using ReplyKeyOf = const protocol::TagKey* (*)(const sw::Session&, std::uint32_t);

  // Seals an encoded reply of `bytes` with `key` (null: an unauthenticated session) and sets its size.
  static void finish_reply(transport::TxBuffer& buffer, std::size_t bytes, const protocol::TagKey* key) {
    buffer.size = static_cast<std::uint32_t>(key != nullptr ? protocol::seal(*key, buffer.payload, bytes) : bytes);
  }

  void send_header(Batch& batch, const Header& header, const Endpoint& to, const protocol::TagKey* key) {
    transport::TxBuffer* buffer = batch.next_buffer();
    if (buffer == nullptr) return;
    protocol::encode(header, buffer->payload);
    finish_reply(*buffer, protocol::kHeaderSize, key);
    batch.send(*buffer, to);
  }

  void send_error(Batch& batch, const Header& request, ErrorCode code, std::uint32_t expected,
                  const Endpoint& to, const protocol::TagKey* key) {
    ++batch.counters.errors_sent;
    send_header(batch, sw::error_reply(request, code, expected), to, key);
  }

  // session_taken_over (protocol.md §4): `bitmap` names the ranks of the replaced job whose LEAVE
  // freed the session (0: it went idle), so that job learns why.
  void send_taken_over(Batch& batch, const Header& request, const sw::Membership& members, const Endpoint& to,
                       const protocol::TagKey* key) {
    ++batch.counters.errors_sent;
    Header error = sw::error_reply(request, ErrorCode::session_taken_over, members.generation);
    error.bitmap = members.previous_left;
    send_header(batch, error, to, key);
  }

  // Sends the encoded packet in `original` (`bytes`, not sealed) to each rank of `ranks` at
  // `to`, each copy sealed with its rank's key: an authenticated session's multicast is one
  // buffer per rank, since every rank's tag differs.
  void send_sealed_copies(Batch& batch, const sw::Session& session, ReplyKeyOf key_of, transport::TxBuffer* original,
                          std::size_t bytes, std::span<const std::uint8_t> ranks, std::span<const Endpoint> to) {
    const std::size_t index = batch.index_of(*original);
    for (std::size_t i = 1; i < ranks.size(); ++i) {
      transport::TxBuffer* copy = batch.next_buffer();  // may move `original`: found again by index
      if (copy == nullptr) break;
      std::memcpy(copy->payload, batch.buffer_at(index).payload, bytes);
      finish_reply(*copy, bytes, key_of(session, ranks[i]));
      batch.send(*copy, to[i]);
    }
    transport::TxBuffer& first = batch.buffer_at(index);
    finish_reply(first, bytes, key_of(session, ranks[0]));
    batch.send(first, to[0]);
  }

  void handle(std::size_t index, const SessionTable& sessions, const transport::RxPacket& packet,
              Clock now, Batch& batch) {
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
      if (is_join) send_error(batch, h, ErrorCode::unknown_session, 0, packet.from, nullptr);
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
      dispatch(index, session, counted, h, payload, packet, now, batch);
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
                 std::uint64_t now_ns, Batch& batch) {
    const bool admission = h.has(flag::kJoin | flag::kLeave | flag::kKeepalive);
    const protocol::RankTagKeys* keys = admission ? session.tag_keys(h.rank) : session.data_tag_keys(h.rank);
    const bool tagged = h.has(flag::kAuth);
    if (keys == nullptr && !tagged) return true;
    if (keys != nullptr && tagged && protocol::verify_tag(keys->request, packet.data)) return true;
    ++batch.counters.dropped_bad_tag;
    if (h.has(flag::kJoin) && (keys == nullptr) == tagged && index == 0 && join_limiter_.admit(packet.from, now_ns)) {
      send_error(batch, h, ErrorCode::auth_mismatch, keys != nullptr ? 1 : 0, packet.from, nullptr);
    }
    return false;
  }

  void dispatch(std::size_t index, sw::Session& session, SessionCounters& counted, const Header& h,
                std::span<const std::byte> payload, const transport::RxPacket& packet, Clock now, Batch& batch) {
    const bool is_join = h.has(flag::kJoin);
    if (is_join) {
      handle_join(index, session, h, payload, packet.from, now, batch);
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
      handle_data(index, session, counted, h, payload, packet, now, batch);
    }
  }

  // The drops a packet of a known session can cause.
  static std::uint64_t session_drops(const SwitchCounters& counters) {
    return counters.dropped_malformed + counters.dropped_unregistered + counters.dropped_not_joined +
           counters.dropped_bad_token + counters.dropped_bad_tag + counters.joins_rate_limited;
  }

  void handle_join(std::size_t index, sw::Session& session, const Header& h,
                   std::span<const std::byte> payload, const Endpoint& from, Clock now, Batch& batch) {
    const std::uint64_t now_ns = now.ns;
    // Before anything that answers: a storm's JOINs beyond its source's rate get no reply.
    if (index == 0 && !join_limiter_.admit(from, now_ns)) {
      ++batch.counters.joins_rate_limited;
      return;
    }
    const auto world = static_cast<std::uint32_t>(session.config().world_size);
    if (h.rank >= world) {
      ++batch.counters.dropped_unregistered;
      send_error(batch, h, ErrorCode::rank_out_of_range, world, from, reply_key(session, h.rank));
      return;
    }
    if (!session.registered(h.rank, from, /*check_port=*/true)) {
      ++batch.counters.dropped_unregistered;
      send_error(batch, h, ErrorCode::not_registered, 0, from, reply_key(session, h.rank));
      return;
    }
    protocol::JoinRequest request;
    if (index != 0 ||  // JOINs go to the first port
        !protocol::decode(payload.first(std::min<std::size_t>(payload.size(), 4u * h.count)),
                          request)) {
      ++batch.counters.dropped_malformed;
      return;
    }
    ++batch.counters.joins;
    sw::add_to_counter(session.thread_counters(index).joins);
    sw::JoinOutcome outcome = session.join(h, request, from, now.ns, now.ticks);
    using Kind = sw::JoinOutcome::Kind;
    switch (outcome.kind) {
      case Kind::waiting:
        return;
      case Kind::reject_sender:
        if (outcome.error == ErrorCode::session_busy) ++batch.counters.joins_refused;
        if (outcome.error == ErrorCode::rank_contended) {
          // The refused rank learns who holds its rank and how many JOINs that source sent.
          ++batch.counters.joins_contended;
          ++batch.counters.errors_sent;
          Header error = sw::error_reply(h, outcome.error, outcome.expected);
          const std::uint64_t heard = std::min<std::uint64_t>(join_limiter_.heard(outcome.holder), 0xffff);
          error.bitmap = heard << 48 | sw::Identity::key_of(outcome.holder);
          send_header(batch, error, from, reply_key(session, h.rank));
          return;
        }
        if (outcome.error == ErrorCode::session_taken_over) {
          send_taken_over(batch, h, *session.membership(), from, reply_key(session, h.rank));
          return;
        }
        send_error(batch, h, outcome.error, outcome.expected, from, reply_key(session, h.rank));
        return;
      case Kind::reject_all: {
        // Every rank of the attempt learns which rank disagrees, from which host, with what.
        Header error = sw::error_reply(h, outcome.error, outcome.expected);
        error.rank = outcome.culprit_rank;
        error.bitmap = std::uint64_t{outcome.culprit_value} << 32 | outcome.culprit_address;
        if (transport::TxBuffer* buffer = batch.next_buffer()) {
          protocol::encode(error, buffer->payload);
          batch.counters.errors_sent += outcome.notify.size();
          if (session.tag_keys(0) != nullptr) {
            send_sealed_copies(batch, session, reply_key, buffer, protocol::kHeaderSize, outcome.notify_ranks,
                               outcome.notify);
          } else {
            buffer->size = static_cast<std::uint32_t>(protocol::kHeaderSize);
            std::vector<Endpoint>& to = batch.send_to(*buffer);
            to.insert(to.end(), outcome.notify.begin(), outcome.notify.end());
          }
        }
        log().warn("session {}: join rejected: {} (rank {} at {} uses {}, the others {})",
                   h.session, protocol::to_string(outcome.error), outcome.culprit_rank,
                   Endpoint{outcome.culprit_address, 0}.to_string(), outcome.culprit_value,
                   outcome.expected);
        return;
      }
      case Kind::ack_sender:
      case Kind::ack_all:
        break;
    }
    const sw::Membership& members = *outcome.members;
    protocol::JoinReply reply;
    reply.payload = session.config().payload;
    reply.world_size = world;
    reply.k_default = session.k_default();
    reply.straggler_timeout_ticks = session.limits().straggler_timeout_ticks;
    reply.pool_base = session.config().pool_base;
    reply.pool_size = session.config().pool_size;
    reply.generation = members.generation;
    reply.token = members.token;
    reply.switch_ports = static_cast<std::uint32_t>(ports_.size());
    std::copy(ports_.begin(), ports_.end(), reply.ports);

    Header ack = h;
    ack.flags = flag::kJoin | flag::kResult;
    ack.op_id = session.data_mac();  // how data packets are authenticated (protocol.md §6.2, §6.6)
    ack.token = members.token;
    ack.count = static_cast<std::uint16_t>(reply.words());
    ack.bitmap = members.joined;
    ack.seq = members.generation;
    // Each rank's ack carries its own secret (§6.4), so the acks are N unicasts, not one buffer.
    const auto send_ack = [&](std::uint32_t rank, const Endpoint& to) {
      transport::TxBuffer* buffer = batch.next_buffer();
      if (buffer == nullptr) return;
      ack.rank = static_cast<std::uint8_t>(rank);  // the receiving rank, whose secret and tag it carries
      ack.offset = members.secrets[rank];
      protocol::encode(ack, buffer->payload);
      protocol::encode(reply, buffer->payload + protocol::kHeaderSize);
      finish_reply(*buffer, protocol::kHeaderSize + 4 * reply.words(), reply_key(session, rank));
      batch.send(*buffer, to);
    };
    if (outcome.kind == Kind::ack_sender) {
      send_ack(h.rank, from);
      return;
    }
    members.for_each_member([&](std::uint32_t r) { send_ack(r, members.endpoints[r][0]); });
    log().info("session {}: generation {} joined by {} ranks ({} threads, window {})", h.session,
               members.generation, world, members.threads, members.window);
  }

  // Admission of data packets and probes (docs/protocol.md §8.1), then the slot's step.
  void handle_data(std::size_t index, sw::Session& session, SessionCounters& counted, const Header& h,
                   std::span<const std::byte> payload, const transport::RxPacket& packet, Clock now,
                   Batch& batch) {
    const Endpoint& from = packet.from;
    const sw::Membership* members = session.membership();
    // A rank of the job this generation replaced, from whatever socket (a rejoining library binds
    // new ones): tell it why it stopped before the identity table would call it a stranger.
    if (members != nullptr && members->previous_token != 0 && h.token == members->previous_token &&
        session.registered_host(from.address)) {
      send_taken_over(batch, h, *members, from, data_reply_key(session, h.rank));
      return;
    }
    const sw::Identity* identity = members != nullptr ? members->identify(from) : nullptr;
    if (identity == nullptr) {
      if (session.registered_host(from.address)) {
        ++batch.counters.dropped_not_joined;
        send_error(batch, h, ErrorCode::not_joined, 0, from, data_reply_key(session, h.rank));
      } else {
        ++batch.counters.dropped_unregistered;
      }
      return;
    }
    if (h.token != members->token) {
      ++batch.counters.dropped_bad_token;
      return;
    }
    const protocol::SlotLayout layout{session.config().pool_base, members->window};
    if (!session.in_pool(h.slot) || layout.thread_of(h.slot) >= members->threads) {
      send_error(batch, h, ErrorCode::slot_out_of_range, session.config().pool_base, from, data_reply_key(session, h.rank));
      return;
    }
    const std::uint32_t thread = layout.thread_of(h.slot);
    if (identity->rank != h.rank || identity->thread != thread) {
      ++batch.counters.dropped_unregistered;
      return;
    }
    const bool probe = h.is_probe();
    const auto switch_threads = static_cast<std::uint32_t>(ports_.size());
    const std::uint32_t owner =
        protocol::SlotLayout::switch_thread(thread, layout.entry_of(h.slot), members->threads, switch_threads);
    if (owner != index || (probe && !payload.empty())) {
      ++batch.counters.dropped_malformed;  // the wrong port for the slot, or a probe with values
      return;
    }
    const std::uint32_t payload_values = session.config().payload;
    // A data request carries P values, except the exponent-priming request (count 0): header only.
    const std::size_t expected_bytes = h.count == 0 ? 0 : 4u * payload_values;
    if (!probe && (payload.size() != expected_bytes || h.count > payload_values)) {
      send_error(batch, h, ErrorCode::bad_length, payload_values, from, data_reply_key(session, h.rank));
      return;
    }
    const sw::SessionLimits& limits = session.limits();
    if (h.k > limits.world_size) {
      send_error(batch, h, ErrorCode::k_invalid, limits.world_size, from, data_reply_key(session, h.rank));
      return;
    }
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
    if (slot.seq != seq_before || slot.contributors != contributors_before) {
      ++batch.counters.aggregated;
      sw::add_to_counter(counted.aggregated);
    }

    using sw::SlotAction;
    switch (action) {
      case SlotAction::counted:
        return;
      case SlotAction::duplicate:
        ++batch.counters.duplicates;
        sw::add_to_counter(counted.duplicates);
        return;
      case SlotAction::multicast_result:
        if (slot.contributors == limits.world_size) {
          ++batch.counters.completed_full;
          sw::add_to_counter(counted.completed_full);
        } else {
          ++batch.counters.completed_partial;
          sw::add_to_counter(counted.completed_partial);
        }
        send_result(session, slot, action, h, *members, thread, packet, batch);
        return;
      case SlotAction::unicast_result:
        if (!probe && (slot.bitmap & sender_bit) == 0) {
          ++batch.counters.late_contributions;
          sw::add_to_counter(counted.late_contributions);
        }
        if (probe) {
          ++batch.counters.syn_replies;
          sw::add_to_counter(counted.syn_replies);
        } else {
          ++batch.counters.retransmitted_results;
          sw::add_to_counter(counted.retransmitted_results);
        }
        send_result(session, slot, action, h, *members, thread, packet, batch);
        return;
      case SlotAction::unicast_old:
        ++batch.counters.old_replies;
        sw::add_to_counter(counted.old_replies);
        send_header(batch, sw::reply_header(slot, action, h, members->token), from, data_reply_key(session, h.rank));
        return;
      case SlotAction::unicast_syn:
        if (report_gone(session, slot, h, sender_bit, *members, now.ticks, from, batch)) return;
        ++batch.counters.syn_replies;
        sw::add_to_counter(counted.syn_replies);
        send_header(batch, sw::reply_header(slot, action, h, members->token), from, data_reply_key(session, h.rank));
        return;
      case SlotAction::error_seq_ahead:
      case SlotAction::unicast_error:
      case SlotAction::unicast_mismatch:
        ++batch.counters.errors_sent;
        send_header(batch, sw::reply_header(slot, action, h, members->token), from, data_reply_key(session, h.rank));
        return;
      case SlotAction::multicast_error:
        send_poisoned(session, slot, h, *members, thread, from, batch);
        return;
    }
  }

  // A probe of a pending round that waits for a rank that left or went silent (§6.7): the
  // prober learns which, instead of a pending reply, and fails the operation naming it.
  bool report_gone(const sw::Session& session, const sw::SlotState& slot, const Header& probe,
                   std::uint64_t sender_bit, const sw::Membership& members, std::uint32_t now_ticks,
                   const Endpoint& from, Batch& batch) {
    const sw::SessionLimits& limits = session.limits();
    // The cheap conditions first: the liveness scan runs only for a probe of a pending round.
    if (sw::gone_waited_for(slot, probe, sender_bit, members.joined, ~std::uint64_t{0}, limits) == 0) return false;
    const std::uint64_t gone = sw::gone_waited_for(slot, probe, sender_bit, members.joined,
                                                   members.gone(now_ticks, limits.liveness_ticks), limits);
    if (gone == 0) return false;
    const auto first = static_cast<std::uint32_t>(std::countr_zero(gone));
    std::uint32_t silent_ms = sw::kLeftRank;
    if (((members.left.load(std::memory_order_relaxed) >> first) & 1) == 0) {
      const std::uint32_t silent = now_ticks - members.heard_ticks[first].load(std::memory_order_relaxed);
      silent_ms = static_cast<std::uint32_t>(std::min<std::uint64_t>(
          (std::uint64_t{silent} << protocol::kTickShift) / 1'000'000, sw::kLeftRank - 1));
    }
    ++batch.counters.errors_sent;
    send_header(batch, sw::rank_gone_reply(slot, probe, gone, silent_ms, members.token), from,
                data_reply_key(session, probe.rank));
    return true;
  }

  // A round the ranks disagree on: every rank of the generation learns it (at the thread that
  // owns the slot), and the sender too under its own op_id when that differs from the round's.
  void send_poisoned(const sw::Session& session, const sw::SlotState& slot, const Header& request,
                     const sw::Membership& members, std::uint32_t thread, const Endpoint& from, Batch& batch) {
    const Header error = sw::reply_header(slot, sw::SlotAction::multicast_error, request, members.token);
    if (transport::TxBuffer* buffer = batch.next_buffer()) {
      protocol::encode(error, buffer->payload);
      members.for_each_member([&](std::uint32_t) { ++batch.counters.errors_sent; });
      send_to_members(batch, session, buffer, protocol::kHeaderSize, members, thread);
    }
    if (request.op_id != slot.op_id) {
      ++batch.counters.errors_sent;
      send_header(batch, sw::reply_header(slot, sw::SlotAction::unicast_error, request, members.token),
                  from, data_reply_key(session, request.rank));
    }
  }

  // Sends the encoded packet in `buffer` (`bytes`) to every rank of the generation at the port of
  // worker thread `thread`: one shared buffer (send_to_all never copies it), or in an
  // authenticated session one sealed copy per rank.
  void send_to_members(Batch& batch, const sw::Session& session, transport::TxBuffer* buffer, std::size_t bytes,
                       const sw::Membership& members, std::uint32_t thread) {
    if (session.data_tag_keys(0) == nullptr) {
      buffer->size = static_cast<std::uint32_t>(bytes);
      std::vector<Endpoint>& to = batch.send_to(*buffer);
      members.for_each_member([&](std::uint32_t r) { to.push_back(members.endpoints[r][thread]); });
      return;
    }
    std::array<std::uint8_t, protocol::kMaxWorld> ranks{};
    std::array<Endpoint, protocol::kMaxWorld> to{};
    std::size_t count = 0;
    members.for_each_member([&](std::uint32_t r) {
      ranks[count] = static_cast<std::uint8_t>(r);
      to[count++] = members.endpoints[r][thread];
    });
    send_sealed_copies(batch, session, data_reply_key, buffer, bytes, std::span(ranks.data(), count),
                       std::span(to.data(), count));
  }

  // The result goes out in the request's own buffer when the transport allows (the request
  // has been read in full by now: step_slot added its values, `request` holds its header).
  void send_result(sw::Session& session, const sw::SlotState& slot, sw::SlotAction action,
                   const Header& request, const sw::Membership& members, std::uint32_t thread,
                   const transport::RxPacket& packet, Batch& batch) {
    // A round of no values (exponent priming) has a header-only result.
    const std::span<const std::int32_t> values =
        slot.count == 0 ? std::span<const std::int32_t>{} : session.values(request.slot);
    const auto bytes = static_cast<std::uint32_t>(protocol::kHeaderSize + 4 * values.size());
    const bool sealed = session.data_tag_keys(0) != nullptr;
    const auto room = static_cast<std::uint32_t>(bytes + (sealed ? protocol::kTagSize : 0));
    transport::TxBuffer* buffer = batch.reply_buffer(packet, room);
    if (buffer == nullptr) return;
    protocol::encode(sw::reply_header(slot, action, request, members.token), buffer->payload);
    quant::int32_to_wire(values.data(), values.size(), buffer->payload + protocol::kHeaderSize);
    if (action != sw::SlotAction::multicast_result) {
      finish_reply(*buffer, bytes, data_reply_key(session, request.rank));
      batch.send(*buffer, packet.from);
      return;
    }
    send_to_members(batch, session, buffer, bytes, members, thread);
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
