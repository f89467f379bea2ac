// SPDX-License-Identifier: Apache-2.0
// One allreduce session on the software switch: its configuration, its slot pool, who has
// joined it from where, and the job token of its current join generation.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstddef>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "dpa/switch.hpp"
#include "protocol/auth.hpp"
#include "protocol/packet_mac.hpp"
#include "protocol/wire.hpp"
#include "switch/join_cookie.hpp"
#include "switch/slot.hpp"
#include "transport/endpoint.hpp"

namespace dpa::sw {

// One row of the identity table: the switch, not the header, decides who sent a packet. On
// Tofino this is one exact-match table keyed by (source IPv4, source UDP port).
struct Identity {
  std::uint64_t key = 0;  // address << 16 | port
  std::uint8_t rank = 0;
  std::uint8_t thread = 0;

  static std::uint64_t key_of(const transport::Endpoint& from) {
    return std::uint64_t{from.address} << 16 | from.port;
  }
};

// The members of one join generation. Immutable once published (but for the activity stamp
// and the leave flag); every switch thread reads it.
struct Membership {
  std::uint32_t generation = 0;
  std::uint32_t token = 0;           // job token of this generation
  std::uint32_t previous_token = 0;  // the generation it replaced (0: none)
  // The ranks of the replaced generation whose LEAVE freed the session (0: it went idle), so
  // that job's ranks learn why it was taken (session_taken_over's bitmap, protocol.md §4).
  std::uint64_t previous_left = 0;
  std::uint32_t threads = 0;         // worker threads per rank
  std::uint32_t window = 0;
  std::uint64_t joined = 0;          // rank bitmap
  std::array<std::uint32_t, protocol::kMaxWorld> nonces{};
  // Per-rank secrets, handed to each rank in its own JOIN ack (§6.4): a rejoin and a LEAVE must
  // carry the rank's, so the token alone (in every packet) cannot take the session.
  std::array<std::uint32_t, protocol::kMaxWorld> secrets{};
  std::array<std::array<transport::Endpoint, protocol::kMaxThreads>, protocol::kMaxWorld> endpoints{};
  std::vector<Identity> identities;  // sorted by key
  // How this generation authenticates data (protocol.md §6.6), told in its JOIN acks; with
  // AES-256-GCM, each rank's MACs of this generation (index: rank). SipHash uses the session's.
  protocol::DataMac data_mac = protocol::DataMac::none;
  std::vector<protocol::PacketMacs> data_macs;

  // Last accepted data or probe packet (steady ns), and the ranks that have left: either frees
  // the session for another job (see Session::held).
  mutable std::atomic<std::uint64_t> last_active_ns{0};
  mutable std::atomic<std::uint64_t> left{0};
  // Liveness (docs/protocol.md §6.7): the tick each rank was last heard from (its keepalives;
  // the generation's creation counts). Written by switch thread 0, read by every thread.
  mutable std::array<std::atomic<std::uint32_t>, protocol::kMaxWorld> heard_ticks{};

  // The ranks gone at `now_ticks`: left, or silent for more than `liveness_ticks`.
  [[nodiscard]] std::uint64_t gone(std::uint32_t now_ticks, std::uint32_t liveness_ticks) const;

  [[nodiscard]] bool has(std::uint32_t rank) const { return ((joined >> rank) & 1) != 0; }
  // Calls `visit(rank)` for every joined rank in order: one step per member, not per possible
  // rank (it runs for every multicast).
  template <typename Visit>
  void for_each_member(Visit&& visit) const {
    for (std::uint64_t rest = joined; rest != 0; rest &= rest - 1) {
      visit(static_cast<std::uint32_t>(std::countr_zero(rest)));
    }
  }
  [[nodiscard]] const Identity* identify(const transport::Endpoint& from) const;
};

// Outcome of a JOIN request.
struct JoinOutcome {
  enum class Kind : std::uint8_t {
    waiting,        // recorded; other ranks have not joined yet
    ack_sender,     // a retransmitted JOIN of a completed generation: acknowledge the sender
    ack_all,        // the join completed now: acknowledge every rank
    reject_sender,  // the request is invalid: error to the sender only
    reject_all,     // ranks disagree: error to every rank of the attempt
  };
  Kind kind = Kind::waiting;
  protocol::ErrorCode error = protocol::ErrorCode::none;
  std::uint32_t expected = 0;
  const Membership* members = nullptr;  // ack_*: the generation
  // reject_all: the rank that disagrees with the others, its address and its value, and the
  // thread-0 endpoints of every rank of the attempt.
  std::uint8_t culprit_rank = 0;
  std::uint32_t culprit_address = 0;
  std::uint32_t culprit_value = 0;
  std::vector<transport::Endpoint> notify;
  std::vector<std::uint8_t> notify_ranks;  // the rank of each notify entry
  // reject_sender with rank_contended: the source whose pending JOIN holds the rank.
  transport::Endpoint holder;
};

class Session {
 public:
  // Resolves worker addresses; keeps counters for each of the switch's `switch_threads` threads.
  explicit Session(const SessionConfig& config, std::size_t switch_threads = 1);
  ~Session();

  [[nodiscard]] const SessionConfig& config() const { return config_; }
  [[nodiscard]] const SessionLimits& limits() const { return limits_; }
  [[nodiscard]] std::uint32_t k_default() const { return limits_.k; }
  // Authenticated mode (protocol.md §6.6): rank r's admission MACs (SipHash-2-4 under its tag
  // keys); null when the session has no key.
  [[nodiscard]] const protocol::PacketMacs* admission_macs(std::uint32_t rank) const {
    return siphash_macs_.empty() ? nullptr : &siphash_macs_[rank];
  }
  // Whether data packets, probes and their replies carry a MAC (auth_data with a key).
  [[nodiscard]] bool authenticates_data() const { return config_.auth_data && !siphash_macs_.empty(); }
  // The MACs of rank r's data packets and probes in the current generation: its AES-256-GCM
  // MACs if the generation chose them (null for a rank outside it), else the SipHash ones (also
  // before any generation). Null if the session does not authenticate data.
  [[nodiscard]] const protocol::PacketMacs* data_macs(std::uint32_t rank) const {
    if (!authenticates_data()) return nullptr;
    const Membership* members = membership();
    if (members != nullptr && members->data_mac == protocol::DataMac::aes256gcm) {
      return rank < members->data_macs.size() ? &members->data_macs[rank] : nullptr;
    }
    return &siphash_macs_[rank];
  }
  // Room after the payload of a data reply for its trailer: the largest MAC a generation may
  // choose, since a new generation may change the MAC between building a reply and sealing it.
  [[nodiscard]] std::size_t data_trailer_room() const { return data_trailer_room_; }

  // Whether `from` is a registered address for `rank` (rank < world size is checked first).
  // The registered port, if any, is thread 0's: only JOINs (sent by thread 0) check it.
  [[nodiscard]] bool registered(std::uint32_t rank, const transport::Endpoint& from,
                                bool check_port) const;
  // Whether `address` is one of the session's worker hosts (every host if none is listed):
  // such a sender learns it has not joined; anyone else is dropped without a word.
  [[nodiscard]] bool registered_host(std::uint32_t address) const;

  [[nodiscard]] const Membership* membership() const {
    return membership_.load(std::memory_order_acquire);
  }

  // Slot `index` is absolute; callers check it lies in the pool first.
  [[nodiscard]] bool in_pool(std::uint32_t index) const {
    return index >= config_.pool_base && index - config_.pool_base < config_.pool_size;
  }
  SlotState& slot(std::uint32_t index) { return slots_[index - config_.pool_base]; }
  std::span<std::int32_t> values(std::uint32_t index) {
    return {values_.data() + static_cast<std::size_t>(index - config_.pool_base) * config_.payload,
            config_.payload};
  }

  // Handles a JOIN (§6 of docs/protocol.md). Called only from the switch thread that owns
  // port 0; `now_ns` is the steady clock. While the session hears JOINs beyond its budget, a JOIN
  // without a valid cookie (in `op_id`) is answered join_cookie (`expected`: its cookie) instead.
  JoinOutcome join(const protocol::Header& header, const protocol::JoinRequest& request,
                   const transport::Endpoint& from, std::uint64_t now_ns, std::uint32_t now_ticks);
  // Handles a LEAVE carrying the current token and the rank's secret (in `offset`) from a
  // member's thread 0: the generation stays in force but no longer holds the session against a
  // new job. Returns whether it applied.
  bool leave(const protocol::Header& header, const transport::Endpoint& from);
  // Handles a KEEPALIVE (§6.7) carrying the current token from a member's socket (the identity
  // table's rank must be the header's): the rank is heard at `now_ticks`. Returns whether it applied.
  bool keepalive(const protocol::Header& header, const transport::Endpoint& from, std::uint32_t now_ticks);

  // Switch thread `thread`'s counters of this session: only that thread adds to them
  // (add_to_counter), others read them (counters()).
  SessionCounters& thread_counters(std::size_t thread) { return thread_counters_[thread].counters; }
  [[nodiscard]] SessionCounters counters() const;  // summed over the threads
  // Ranks whose JOIN reached this session (bit r: rank r) since it was added, from any thread:
  // a job that cannot join asks which of its ranks never reached the switch.
  [[nodiscard]] std::uint64_t joins_heard() const { return joins_heard_.load(std::memory_order_relaxed); }

  // Replaced generations still allocated (freed kRetiredGenerationGrace after replacement, at
  // the next join). For tests.
  [[nodiscard]] std::size_t retired_generations() const { return retired_.size(); }

 private:
  struct PendingJoin {
    bool present = false;
    std::uint32_t nonce = 0;
    std::uint32_t threads = 0;
    std::uint32_t window = 0;
    transport::Endpoint from;
    std::array<std::uint16_t, protocol::kMaxThreads> ports{};
    std::uint64_t last_seen_ns = 0;
    // When this source first claimed the rank; a new nonce from the same source keeps it, so a
    // source that changes nonces with every JOIN never looks like a fresh claim.
    std::uint64_t claimed_ns = 0;
    // The rank repeated this JOIN: a live rank retries until acknowledged, so only confirmed
    // JOINs may form a generation or veto one, and a one-off stray can do neither.
    bool confirmed = false;
    // The data MACs the JOIN offers besides SipHash (its op_length) and the salt of the
    // generation's AES-256-GCM keys (its bitmap), protocol.md §6.6.
    std::uint32_t mac_offer = 0;
    std::uint64_t salt = 0;
  };

  // Admission under a storm (protocol.md §6.3): a budget of JOINs per session, a GCRA as in
  // JoinRateLimiter; beyond it the session asks for cookies for kCookieHoldNs.
  static constexpr std::uint64_t kJoinBudgetIntervalNs = 5'000'000;  // sustained: 200 JOINs per second
  static constexpr std::uint64_t kJoinBudgetBurst = 256;
  static constexpr std::uint64_t kCookieHoldNs = 2'000'000'000;
  // Counts a JOIN against the budget; whether the session asks for cookies now.
  bool wants_cookies(std::uint64_t now_ns);

  // A generation in use (not left, active within the idle timeout) refuses other jobs.
  [[nodiscard]] bool held(const Membership& current, std::uint64_t now_ns) const;
  void expire_pending(std::uint64_t now_ns);
  // Whether another source's entry for a rank keeps a JOIN from `from` out (§6.3 step 5): a
  // JOIN with a valid cookie is kept out only by a confirmed entry.
  [[nodiscard]] static bool holds_against(const PendingJoin& pending, const transport::Endpoint& from,
                                          std::uint64_t now_ns, bool cookie);
  // Every rank is pending: the ranks must agree on threads and window, else reject_all.
  JoinOutcome complete_join(std::uint64_t now_ns, std::uint32_t now_ticks);
  JoinOutcome reject_disagreement(protocol::ErrorCode code, std::uint32_t PendingJoin::*field);
  std::uint32_t fresh_token(std::uint32_t previous);

  SessionConfig config_;
  SessionLimits limits_;
  std::vector<transport::Endpoint> registered_;  // one per rank, one for all, or none
  // Per possible rank (kMaxWorld), or none: the SipHash MACs of admission, and of data in a
  // generation that did not choose AES-256-GCM.
  std::vector<protocol::PacketMacs> siphash_macs_;
  std::size_t data_trailer_room_ = 0;
  // Chooses the data MAC of a generation whose ranks sent pending_ (protocol.md §6.6) and, for
  // AES-256-GCM, derives each rank's MACs of it.
  void choose_data_mac(Membership& members) const;
  std::vector<SlotState> slots_;
  std::vector<std::int32_t> values_;
  struct alignas(64) ThreadCounters {  // a thread's own cache lines
    SessionCounters counters;
  };
  mutable std::vector<ThreadCounters> thread_counters_;  // mutable: read through atomic_ref

  // Switch threads read the current generation without a lock, one packet at a time, so a
  // replaced generation is freed only after kRetiredGenerationGrace: no thread still holds it
  // then, and a job that rejoins in a loop cannot grow the switch without bound.
  struct RetiredGeneration {
    std::unique_ptr<Membership> members;
    std::uint64_t retired_ns = 0;
  };
  static constexpr std::uint64_t kRetiredGenerationGrace = 10'000'000'000;  // ns
  void retire_current(std::uint64_t now_ns);

  std::atomic<const Membership*> membership_{nullptr};
  std::unique_ptr<Membership> current_;
  std::deque<RetiredGeneration> retired_;
  std::array<PendingJoin, protocol::kMaxWorld> pending_{};
  std::uint32_t next_generation_ = 1;
  JoinCookies cookies_;
  std::uint64_t join_budget_ready_ns_ = 0;
  std::uint64_t cookies_until_ns_ = 0;
  std::atomic<std::uint64_t> joins_heard_{0};
};

}  // namespace dpa::sw
