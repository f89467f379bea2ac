// SPDX-License-Identifier: Apache-2.0
#include "switch/admit_data.hpp"

namespace dpa::sw {

using protocol::ErrorCode;

namespace {

DataVerdict drop(std::uint64_t SwitchCounters::*counter) { return {.dropped = counter}; }

DataVerdict error(ErrorCode code, std::uint32_t expected) { return {.error = code, .expected = expected}; }

}  // namespace

DataVerdict admit_data(const Session& session, const protocol::Header& header, std::size_t payload_bytes,
                       const transport::Endpoint& from, std::uint32_t switch_thread, std::uint32_t switch_threads) {
  const Membership* members = session.membership();
  // A rank of the job this generation replaced, from whatever socket (a rejoining library binds
  // new ones): tell it why it stopped before the identity table would call it a stranger.
  if (members != nullptr && members->previous_token != 0 && header.token == members->previous_token &&
      session.registered_host(from.address)) {
    return error(ErrorCode::session_taken_over, members->generation);
  }
  const Identity* identity = members != nullptr ? members->identify(from) : nullptr;
  if (identity == nullptr) {
    if (session.registered_host(from.address)) {
      return {.dropped = &SwitchCounters::dropped_not_joined, .error = ErrorCode::not_joined};
    }
    return drop(&SwitchCounters::dropped_unregistered);
  }
  if (header.token != members->token) return drop(&SwitchCounters::dropped_bad_token);
  const protocol::SlotLayout layout{session.config().pool_base, members->window};
  if (!session.in_pool(header.slot) || layout.thread_of(header.slot) >= members->threads) {
    return error(ErrorCode::slot_out_of_range, session.config().pool_base);
  }
  const std::uint32_t thread = layout.thread_of(header.slot);
  if (identity->rank != header.rank || identity->thread != thread) return drop(&SwitchCounters::dropped_unregistered);
  const bool probe = header.is_probe();
  const std::uint32_t owner =
      protocol::SlotLayout::switch_thread(thread, layout.entry_of(header.slot), members->threads, switch_threads);
  if (owner != switch_thread || (probe && payload_bytes != 0)) {
    return drop(&SwitchCounters::dropped_malformed);  // the wrong port for the slot, or a probe with values
  }
  const std::uint32_t payload_values = session.config().payload;
  // A data request carries P values, except the exponent-priming request (count 0) and a
  // relayed round's request from a rank other than its owner (§13.3): header only.
  const bool header_only =
      header.count == 0 || (header.has(protocol::flag::kFromOwner) && header.rank != header.owner());
  const std::size_t expected_bytes = header_only ? 0 : 4u * payload_values;
  if (!probe && (payload_bytes != expected_bytes || header.count > payload_values)) {
    return error(ErrorCode::bad_length, payload_values);
  }
  const SessionLimits& limits = session.limits();
  if (header.k > limits.world_size) return error(ErrorCode::k_invalid, limits.world_size);
  if (!probe && header.has(protocol::flag::kOwned) && header.owner() >= limits.world_size) {
    return error(ErrorCode::mode_mismatch, limits.world_size);
  }
  return {.members = members, .thread = thread};
}

}  // namespace dpa::sw
