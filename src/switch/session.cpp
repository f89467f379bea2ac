#include "switch/session.hpp"

#include <algorithm>

namespace dpa::sw {

using protocol::ErrorCode;

Session::Session(const SessionConfig& config)
    : config_(config),
      slots_(config.pool_size),
      values_(static_cast<std::size_t>(config.pool_size) * config.payload) {
  config_.validate();
  limits_.world_size = static_cast<std::uint8_t>(config.world_size);
  limits_.k = static_cast<std::uint8_t>(config.k == 0 ? config.world_size : config.k);
  limits_.payload = config.payload;
  limits_.straggler_timeout_ns =
      static_cast<std::uint64_t>(std::chrono::nanoseconds(config.straggler_timeout).count());
  for (const WorkerAddress& worker : config.workers) {
    registered_.push_back(transport::Endpoint::resolve(
        worker.host, worker.port, "session " + std::to_string(config.id) + " worker"));
  }
}

Session::~Session() = default;

bool Session::registered(std::uint32_t rank, const transport::Endpoint& from,
                         bool check_port) const {
  if (registered_.empty()) return true;
  const transport::Endpoint& allowed = registered_.size() == 1 ? registered_[0] : registered_[rank];
  return allowed.address == from.address &&
         (!check_port || allowed.port == 0 || allowed.port == from.port);
}

JoinOutcome Session::reject_all(ErrorCode code, std::uint32_t expected) {
  rejected_ = pending_;
  pending_ = Membership{};
  return {JoinOutcome::Kind::reject_all, code, expected, &rejected_};
}

JoinOutcome Session::join(const protocol::Header& header, const protocol::JoinRequest& request,
                          const transport::Endpoint& from) {
  using Kind = JoinOutcome::Kind;
  const std::uint32_t rank = header.rank;
  const std::uint64_t bit = std::uint64_t{1} << rank;

  if (request.world_size != static_cast<std::uint32_t>(config_.world_size)) {
    return {Kind::reject_sender, ErrorCode::world_size_mismatch,
            static_cast<std::uint32_t>(config_.world_size)};
  }
  if (request.payload != 0 && request.payload != config_.payload) {
    return {Kind::reject_sender, ErrorCode::payload_mismatch, config_.payload};
  }
  if (request.window == 0 ||
      std::uint64_t{request.threads} * 2 * request.window > config_.pool_size) {
    return {Kind::reject_sender, ErrorCode::pool_too_small, config_.pool_size};
  }

  const Membership* current = membership();
  if (current != nullptr && current->has(rank) && current->nonces[rank] == request.nonce) {
    return {Kind::ack_sender, ErrorCode::none, 0, current};
  }

  if ((pending_.joined & bit) != 0) {
    if (pending_.nonces[rank] == request.nonce) return {Kind::waiting};
    // The rank restarted while the join was under way: the ranks waiting so far belong to the
    // old attempt, so start over from this request.
    pending_ = Membership{};
  }
  if (pending_.joined == 0) {
    pending_.threads = request.threads;
    pending_.window = request.window;
  } else if (request.threads != pending_.threads) {
    pending_.joined |= bit;
    pending_.endpoints[rank][0] = from;
    return reject_all(ErrorCode::threads_mismatch, pending_.threads);
  } else if (request.window != pending_.window) {
    pending_.joined |= bit;
    pending_.endpoints[rank][0] = from;
    return reject_all(ErrorCode::window_mismatch, pending_.window);
  }

  pending_.joined |= bit;
  pending_.nonces[rank] = request.nonce;
  for (std::uint32_t t = 0; t < request.threads; ++t) {
    pending_.endpoints[rank][t] = {from.address, request.ports[t]};
  }
  const std::uint64_t everyone =
      config_.world_size == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << config_.world_size) - 1;
  if (pending_.joined != everyone) return {Kind::waiting};

  auto members = std::make_unique<Membership>(pending_);
  members->generation = next_generation_++;
  membership_.store(members.get(), std::memory_order_release);
  generations_.push_back(std::move(members));
  pending_ = Membership{};
  return {Kind::ack_all, ErrorCode::none, 0, membership()};
}

}  // namespace dpa::sw
