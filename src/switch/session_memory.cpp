// SPDX-License-Identifier: Apache-2.0
#include "switch/session_memory.hpp"

#include <fmt/format.h>

#include "dpa/error.hpp"
#include "protocol/auth.hpp"
#include "protocol/packet_mac.hpp"
#include "protocol/wire.hpp"
#include "switch/session.hpp"
#include "switch/slot.hpp"

namespace dpa::sw {

std::uint64_t session_memory_bytes(const SessionConfig& config) {
  const std::uint64_t per_slot = sizeof(SlotState) + std::uint64_t{config.payload} * sizeof(std::int32_t);
  return std::uint64_t{config.pool_size} * per_slot + sizeof(Session);
}

std::uint64_t memory_budget_bytes(const SwitchConfig& config) { return config.max_memory_mb << 20; }

std::uint64_t data_trailer_bytes(const SessionConfig& session) {
  if (!session.auth_key || !session.auth_data) return 0;
  return protocol::aes256gcm_available() ? protocol::kGcmTrailerSize : protocol::kTagSize;
}

std::uint64_t largest_packet_bytes(const SessionConfig& session) {
  return protocol::kHeaderSize + 4 * std::uint64_t{session.payload} + data_trailer_bytes(session);
}

void check_admission(const SwitchConfig& limits, std::size_t sessions_held, std::uint64_t bytes_held,
                     const SessionConfig& session) {
  if (sessions_held >= limits.max_sessions) {
    throw ConfigError(fmt::format("session {}: the switch already holds max_sessions {} sessions", session.id,
                                  limits.max_sessions));
  }
  const PacketLimit limit = packet_limit(limits.transport, "switch.");
  if (const std::uint64_t packet = largest_packet_bytes(session); packet > limit.bytes) {
    throw ConfigError(fmt::format(
        "session {}: payload {} needs {}-byte packets ({}-byte header, {} bytes of values{}), but {} carries at "
        "most {} bytes: lower the session's payload or raise the transport's limit",
        session.id, session.payload, packet, protocol::kHeaderSize, 4 * std::uint64_t{session.payload},
        session.auth_key && session.auth_data ? fmt::format(", {}-byte MAC trailer", data_trailer_bytes(session)) : std::string(),
        limit.setting,
        limit.bytes));
  }
  const std::uint64_t needed = session_memory_bytes(session);
  const std::uint64_t budget = memory_budget_bytes(limits);
  const std::uint64_t available = budget > bytes_held ? budget - bytes_held : 0;
  if (needed > available) {
    constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
    throw ConfigError(fmt::format(
        "session {}: pool_size {} x payload {} needs {} MiB of slot memory, but only {} MiB of max_memory_mb {} "
        "are free (lower pool_size or payload, or raise max_memory_mb)",
        session.id, session.pool_size, session.payload, (needed + kMiB - 1) / kMiB, available / kMiB,
        limits.max_memory_mb));
  }
}

}  // namespace dpa::sw
