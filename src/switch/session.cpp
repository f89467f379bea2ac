// SPDX-License-Identifier: Apache-2.0
#include "switch/session.hpp"

#include "switch/counter_fields.hpp"
#include "switch/published_counters.hpp"
#include "switch/session_memory.hpp"

#include <algorithm>
#include <map>
#include <random>

namespace dpa::sw {

using protocol::ErrorCode;

namespace {

// A pending JOIN that its rank has not repeated for this long is forgotten: live ranks resend
// theirs at least every 100 ms, so only strays and dead ranks expire.
constexpr std::uint64_t kPendingJoinTtlNs = 1'000'000'000;
// How long an unconfirmed claim on a rank keeps other sources out: several of a live rank's
// retries (at most 100 ms apart), so a rank confirms its claim before anyone may displace it, and
// a source that never confirms (a stray, or a storm with a fresh nonce each time) gives way.
constexpr std::uint64_t kUnconfirmedClaimNs = 500'000'000;

JoinOutcome make_outcome(JoinOutcome::Kind kind, ErrorCode error = ErrorCode::none,
                         std::uint32_t expected = 0, const Membership* members = nullptr) {
  JoinOutcome outcome;
  outcome.kind = kind;
  outcome.error = error;
  outcome.expected = expected;
  outcome.members = members;
  return outcome;
}

}  // namespace

const Identity* Membership::identify(const transport::Endpoint& from) const {
  const std::uint64_t key = Identity::key_of(from);
  const auto found = std::lower_bound(identities.begin(), identities.end(), key,
                                      [](const Identity& row, std::uint64_t k) { return row.key < k; });
  return found != identities.end() && found->key == key ? &*found : nullptr;
}

std::uint64_t Membership::gone(std::uint32_t now_ticks, std::uint32_t liveness_ticks) const {
  std::uint64_t gone = left.load(std::memory_order_relaxed);
  for_each_member([&](std::uint32_t rank) {
    // 32-bit tick arithmetic, as the straggler timer: right across the wrap-around.
    const std::uint32_t heard = heard_ticks[rank].load(std::memory_order_relaxed);
    if (static_cast<std::uint32_t>(now_ticks - heard) > liveness_ticks) gone |= std::uint64_t{1} << rank;
  });
  return gone;
}

Session::Session(const SessionConfig& config, std::size_t switch_threads)
    : config_(config), thread_counters_(switch_threads) {
  config_.validate();
  slots_.resize(config_.pool_size);
  values_.resize(static_cast<std::size_t>(config_.pool_size) * config_.payload);
  limits_.world_size = static_cast<std::uint8_t>(config.world_size);
  limits_.k = static_cast<std::uint8_t>(config.k == 0 ? config.world_size : config.k);
  limits_.payload = config.payload;
  limits_.straggler_timeout_ticks =
      protocol::timeout_ticks(static_cast<std::uint64_t>(config.straggler_timeout.count()));
  limits_.liveness_ticks = protocol::timeout_ticks(
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(config.liveness_timeout).count()));
  for (const WorkerAddress& worker : config.workers) {
    registered_.push_back(transport::Endpoint::resolve(
        worker.host, worker.port, "session " + std::to_string(config.id) + " worker"));
  }
  // Keys for every rank the header can name, so that even a JOIN refused for its rank is
  // answered with a tag its sender can check.
  if (config_.auth_key) {
    for (std::uint32_t rank = 0; rank < protocol::kMaxWorld; ++rank) {
      siphash_macs_.push_back(protocol::siphash24_macs(protocol::tag_keys(protocol::derive_rank_key(*config_.auth_key, rank))));
    }
  }
  data_trailer_room_ = data_trailer_bytes(config_);
}

Session::~Session() = default;

SessionCounters Session::counters() const {
  SessionCounters total;
  for (ThreadCounters& thread : thread_counters_) {
    for (const auto& field : kSessionCounterFields) total.*field.member += read_counter(thread.counters.*field.member);
  }
  return total;
}

bool Session::registered(std::uint32_t rank, const transport::Endpoint& from,
                         bool check_port) const {
  if (registered_.empty()) return true;
  const transport::Endpoint& allowed = registered_.size() == 1 ? registered_[0] : registered_[rank];
  return allowed.address == from.address &&
         (!check_port || allowed.port == 0 || allowed.port == from.port);
}

bool Session::registered_host(std::uint32_t address) const {
  return registered_.empty() ||
         std::any_of(registered_.begin(), registered_.end(),
                     [address](const transport::Endpoint& worker) { return worker.address == address; });
}

bool Session::held(const Membership& current, std::uint64_t now_ns) const {
  if (current.left.load(std::memory_order_relaxed) != 0) return false;
  const std::uint64_t active = current.last_active_ns.load(std::memory_order_relaxed);
  const auto idle = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(config_.idle_timeout).count());
  return now_ns < active || now_ns - active < idle;
}

void Session::expire_pending(std::uint64_t now_ns) {
  for (PendingJoin& pending : pending_) {
    if (pending.present && now_ns - pending.last_seen_ns > kPendingJoinTtlNs) pending = PendingJoin{};
  }
}

bool Session::holds_against(const PendingJoin& pending, const transport::Endpoint& from,
                            std::uint64_t now_ns, bool cookie) {
  return pending.present && pending.from != from &&
         (pending.confirmed || (!cookie && now_ns - pending.claimed_ns < kUnconfirmedClaimNs));
}

bool Session::wants_cookies(std::uint64_t now_ns) {
  const std::uint64_t ready = std::max(join_budget_ready_ns_, now_ns);
  if (ready - now_ns >= kJoinBudgetBurst * kJoinBudgetIntervalNs) {
    cookies_until_ns_ = now_ns + kCookieHoldNs;
  } else {
    join_budget_ready_ns_ = ready + kJoinBudgetIntervalNs;
  }
  return now_ns < cookies_until_ns_;
}

std::uint32_t Session::fresh_token(std::uint32_t previous) {
  // Straight from the system's entropy (once per rank per generation, not per packet): the
  // tokens and rank secrets of keyless sessions are what an off-path sender must guess, and a
  // generator seeded with 32 bits would give all of them away after one was seen.
  std::random_device entropy;
  std::uint32_t token = 0;
  while (token == 0 || token == previous) token = static_cast<std::uint32_t>(entropy());
  return token;
}

JoinOutcome Session::reject_disagreement(ErrorCode code, std::uint32_t PendingJoin::*field) {
  // The value most ranks use is the reference (the lowest rank's on a tie); the first rank
  // that differs is named, so the message points at the misconfigured host.
  std::map<std::uint32_t, int> votes;
  for (const PendingJoin& pending : pending_) {
    if (pending.present) ++votes[pending.*field];
  }
  std::uint32_t reference = 0;
  int best = 0;
  for (const PendingJoin& pending : pending_) {
    if (pending.present && votes[pending.*field] > best) {
      best = votes[pending.*field];
      reference = pending.*field;
    }
  }
  JoinOutcome outcome = make_outcome(JoinOutcome::Kind::reject_all, code, reference);
  bool named = false;
  for (std::uint32_t r = 0; r < pending_.size(); ++r) {
    const PendingJoin& pending = pending_[r];
    if (!pending.present) continue;
    outcome.notify.push_back({pending.from.address, pending.ports[0]});
    outcome.notify_ranks.push_back(static_cast<std::uint8_t>(r));
    if (!named && pending.*field != reference) {
      named = true;
      outcome.culprit_rank = static_cast<std::uint8_t>(r);
      outcome.culprit_address = pending.from.address;
      outcome.culprit_value = pending.*field;
    }
  }
  pending_.fill(PendingJoin{});
  return outcome;
}

JoinOutcome Session::complete_join(std::uint64_t now_ns, std::uint32_t now_ticks) {
  const auto world = static_cast<std::uint32_t>(config_.world_size);
  for (std::uint32_t r = 0; r < world; ++r) {
    if (!pending_[r].present || !pending_[r].confirmed) return make_outcome(JoinOutcome::Kind::waiting);
  }
  for (std::uint32_t r = 1; r < world; ++r) {
    if (pending_[r].threads != pending_[0].threads) {
      return reject_disagreement(ErrorCode::threads_mismatch, &PendingJoin::threads);
    }
  }
  for (std::uint32_t r = 1; r < world; ++r) {
    if (pending_[r].window != pending_[0].window) {
      return reject_disagreement(ErrorCode::window_mismatch, &PendingJoin::window);
    }
  }

  const Membership* current = membership();
  auto members = std::make_unique<Membership>();
  members->generation = next_generation_++;
  members->previous_token = current != nullptr ? current->token : 0;
  members->previous_left = current != nullptr ? current->left.load(std::memory_order_relaxed) : 0;
  members->token = fresh_token(members->previous_token);
  for (std::uint32_t r = 0; r < world; ++r) members->secrets[r] = fresh_token(0);
  members->threads = pending_[0].threads;
  members->window = pending_[0].window;
  for (std::uint32_t r = 0; r < world; ++r) {
    const PendingJoin& pending = pending_[r];
    members->joined |= std::uint64_t{1} << r;
    members->nonces[r] = pending.nonce;
    for (std::uint32_t t = 0; t < pending.threads; ++t) {
      const transport::Endpoint endpoint{pending.from.address, pending.ports[t]};
      members->endpoints[r][t] = endpoint;
      members->identities.push_back(
          {Identity::key_of(endpoint), static_cast<std::uint8_t>(r), static_cast<std::uint8_t>(t)});
    }
  }
  std::sort(members->identities.begin(), members->identities.end(),
            [](const Identity& a, const Identity& b) { return a.key < b.key; });
  choose_data_mac(*members);
  members->last_active_ns.store(now_ns, std::memory_order_relaxed);
  for (auto& heard : members->heard_ticks) heard.store(now_ticks, std::memory_order_relaxed);
  membership_.store(members.get(), std::memory_order_release);
  retire_current(now_ns);
  current_ = std::move(members);
  pending_.fill(PendingJoin{});
  return make_outcome(JoinOutcome::Kind::ack_all, ErrorCode::none, 0, membership());
}

void Session::choose_data_mac(Membership& members) const {
  using protocol::DataMac;
  if (!authenticates_data()) return;
  // AES-256-GCM where this CPU and every rank's has it (each JOIN offers what its rank computes);
  // SipHash-2-4, which every rank computes, otherwise.
  const auto world = static_cast<std::uint32_t>(config_.world_size);
  bool every_rank_offers = true;
  for (std::uint32_t r = 0; r < world; ++r) {
    every_rank_offers = every_rank_offers && (pending_[r].mac_offer & protocol::offer_bit(DataMac::aes256gcm)) != 0;
  }
  if (!every_rank_offers || !protocol::aes256gcm_available()) {
    members.data_mac = DataMac::siphash24;
    return;
  }
  members.data_mac = DataMac::aes256gcm;
  members.data_macs.reserve(world);
  for (std::uint32_t r = 0; r < world; ++r) {
    members.data_macs.push_back(protocol::aes256gcm_macs(
        protocol::derive_rank_key(*config_.auth_key, r),
        {config_.id, members.generation, members.token, members.secrets[r], pending_[r].nonce, pending_[r].salt}));
  }
}

void Session::retire_current(std::uint64_t now_ns) {
  while (!retired_.empty() && now_ns - retired_.front().retired_ns >= kRetiredGenerationGrace) {
    retired_.pop_front();
  }
  if (current_ != nullptr) retired_.push_back({std::move(current_), now_ns});
}

JoinOutcome Session::join(const protocol::Header& header, const protocol::JoinRequest& request,
                          const transport::Endpoint& from, std::uint64_t now_ns, std::uint32_t now_ticks) {
  using Kind = JoinOutcome::Kind;
  const std::uint32_t rank = header.rank;
  joins_heard_.fetch_or(std::uint64_t{1} << rank, std::memory_order_relaxed);  // rank < world: checked by the caller

  if (request.world_size != static_cast<std::uint32_t>(config_.world_size)) {
    return make_outcome(Kind::reject_sender, ErrorCode::world_size_mismatch,
            static_cast<std::uint32_t>(config_.world_size));
  }
  if (request.payload != 0 && request.payload != config_.payload) {
    return make_outcome(Kind::reject_sender, ErrorCode::payload_mismatch, config_.payload);
  }
  if (request.window == 0 ||
      protocol::SlotLayout::pool_slots(request.threads, request.window) > config_.pool_size) {
    return make_outcome(Kind::reject_sender, ErrorCode::pool_too_small, config_.pool_size);
  }

  const Membership* current = membership();
  if (current != nullptr && current->has(rank) && current->nonces[rank] == request.nonce &&
      current->endpoints[rank][0] == from) {
    return make_outcome(Kind::ack_sender, ErrorCode::none, 0, current);  // the ack was lost
  }
  // While a job uses the session, only its own members may start a new generation (a rejoin
  // after a failed operation): they prove it with the current token and the rank's secret (in
  // `offset`, §6.4) from their own host. The token alone, which every packet carries, is not enough.
  const bool member_rejoin = current != nullptr && header.token == current->token &&
                             current->has(rank) && header.offset == current->secrets[rank] &&
                             current->endpoints[rank][0].address == from.address;
  if (current != nullptr && !member_rejoin && held(*current, now_ns)) {
    // A rank of the generation this one replaced learns why it cannot come back.
    if (current->previous_token != 0 && header.token == current->previous_token) {
      return make_outcome(Kind::reject_sender, ErrorCode::session_taken_over, current->generation);
    }
    return make_outcome(Kind::reject_sender, ErrorCode::session_busy, current->generation);
  }

  // Under a storm, only a JOIN that echoes the cookie its source was sent for this rank and
  // nonce goes on; the rest get their cookie and change nothing.
  const bool cookie = cookies_.valid(header.op_id, config_.id, rank, request.nonce, from, now_ns);
  if (wants_cookies(now_ns) && !cookie) {
    return make_outcome(Kind::reject_sender, ErrorCode::join_cookie,
                        cookies_.make(config_.id, rank, request.nonce, from, now_ns));
  }

  expire_pending(now_ns);
  PendingJoin& pending = pending_[rank];
  // First come holds the rank while it is alive: a confirmed entry, or a young unconfirmed one,
  // is not displaced by another source, so a storm cannot starve a rank that is joining. A JOIN
  // with a cookie is a confirmed one already and displaces an unconfirmed entry.
  if (holds_against(pending, from, now_ns, cookie)) {
    JoinOutcome refused = make_outcome(Kind::reject_sender, ErrorCode::rank_contended, rank);
    refused.holder = pending.from;
    return refused;
  }
  // A source is one rank's thread 0: its pending entry for another rank is dropped, so one
  // source holds at most one entry per session.
  for (PendingJoin& other : pending_) {
    if (&other != &pending && other.present && other.from == from) other = PendingJoin{};
  }
  if (!pending.present || pending.nonce != request.nonce || pending.from != from) {
    // A new request, or the rank restarted: its latest JOIN replaces what it sent before. A
    // cookie confirms a new claim; a source that changes nonce within its claim must repeat the
    // new one, so a storm that echoes cookies with a fresh nonce each time keeps no rank.
    const bool same_source = pending.present && pending.from == from;
    const std::uint64_t claimed_ns = same_source ? pending.claimed_ns : now_ns;
    pending = PendingJoin{true, request.nonce, request.threads, request.window, from, {}, now_ns, claimed_ns,
                          cookie && !same_source, header.op_length, header.bitmap};
    std::copy(request.ports, request.ports + request.threads, pending.ports.begin());
  } else {
    pending.confirmed = true;
  }
  pending.last_seen_ns = now_ns;
  return complete_join(now_ns, now_ticks);
}

bool Session::leave(const protocol::Header& header, const transport::Endpoint& from) {
  const Membership* current = membership();
  if (current == nullptr || header.token != current->token || !current->has(header.rank) ||
      header.offset != current->secrets[header.rank] || current->endpoints[header.rank][0] != from) {
    return false;
  }
  current->left.fetch_or(std::uint64_t{1} << header.rank, std::memory_order_relaxed);
  return true;
}

bool Session::keepalive(const protocol::Header& header, const transport::Endpoint& from, std::uint32_t now_ticks) {
  const Membership* current = membership();
  // From any thread's socket of the rank: with several switch servers, each hears the first
  // thread the rank talks to it with.
  const Identity* identity = current != nullptr ? current->identify(from) : nullptr;
  if (identity == nullptr || header.token != current->token || identity->rank != header.rank) return false;
  current->heard_ticks[header.rank].store(now_ticks, std::memory_order_relaxed);
  return true;
}

}  // namespace dpa::sw
