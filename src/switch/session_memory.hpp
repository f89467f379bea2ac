// SPDX-License-Identifier: Apache-2.0
// What a session costs the switch in memory, so that sessions can be admitted against the
// switch's budget (SwitchConfig::max_memory_mb) before anything is allocated, and whether its
// packets fit the switch's transport.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dpa/switch.hpp"

namespace dpa::sw {

// Bytes a session with this config holds: its slot states, its slot values and its fixed part.
// Exact in 64 bits for every pool_size and payload a SessionConfig can hold.
std::uint64_t session_memory_bytes(const SessionConfig& config);

// Bytes in SwitchConfig::max_memory_mb.
std::uint64_t memory_budget_bytes(const SwitchConfig& config);

// The trailer of the session's data packets: none, or when it authenticates data the largest a
// generation may choose (AES-256-GCM's where this CPU has it, protocol.md §6.6).
std::uint64_t data_trailer_bytes(const SessionConfig& session);
// The largest data packet of the session: header, payload and, when it authenticates, the trailer.
std::uint64_t largest_packet_bytes(const SessionConfig& session);

// Throws ConfigError, naming max_sessions or max_memory_mb and the session's pool_size and
// payload, unless `session` fits next to `sessions_held` sessions that hold `bytes_held` bytes;
// or naming the session, its packet size and the transport's limit if its largest packet does
// not fit the transport's buffers (it would be dropped on every send).
void check_admission(const SwitchConfig& limits, std::size_t sessions_held, std::uint64_t bytes_held,
                     const SessionConfig& session);

}  // namespace dpa::sw
