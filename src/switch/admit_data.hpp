// SPDX-License-Identifier: Apache-2.0
// Admission of data packets and SYN probes (docs/protocol.md §8.1), as admission.p4 admits them
// on Tofino: from a decoded header and its source to a verdict, before any slot is touched. Pure
// (no I/O, nothing written), so the switch and the tests drive this one function, as they do
// step_slot.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dpa/switch.hpp"
#include "protocol/wire.hpp"
#include "switch/session.hpp"
#include "transport/endpoint.hpp"

namespace dpa::sw {

// What the switch does with a data packet or probe of a known session. A refused packet adds to
// a drop counter, gets an ERROR, or both (a sender that has not joined).
struct DataVerdict {
  // Admitted: the generation the packet belongs to, and the worker thread whose window holds the slot.
  const Membership* members = nullptr;
  std::uint32_t thread = 0;
  // Refused: the drop counter the packet adds to (null: none).
  std::uint64_t SwitchCounters::*dropped = nullptr;
  // Refused: the ERROR the sender gets, naming the switch's `expected` value (none: no reply).
  protocol::ErrorCode error = protocol::ErrorCode::none;
  std::uint32_t expected = 0;

  [[nodiscard]] bool admitted() const { return dropped == nullptr && error == protocol::ErrorCode::none; }
};

// The verdict on `header` (decoded, with `payload_bytes` of values after it) from `from`,
// received by switch thread `switch_thread` of `switch_threads`, for `session`: who sent it (the
// identity table, not the header), with which token, for which slot, at which port, of which
// length and K, in §8.1's order.
[[nodiscard]] DataVerdict admit_data(const Session& session, const protocol::Header& header,
                                     std::size_t payload_bytes, const transport::Endpoint& from,
                                     std::uint32_t switch_thread, std::uint32_t switch_threads);

}  // namespace dpa::sw
