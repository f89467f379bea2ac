// SPDX-License-Identifier: Apache-2.0
// A JOIN's outcome (Session::join) turned into replies: the refusal to the sender, the
// disagreement to every rank of the attempt, or the acks that hand each rank the generation and
// its own secret (docs/protocol.md §6). Queued in the thread's ReplyBatch.
#pragma once

#include <cstdint>
#include <span>

#include "protocol/wire.hpp"
#include "switch/join_rate_limiter.hpp"
#include "switch/reply_batch.hpp"
#include "switch/session.hpp"
#include "transport/endpoint.hpp"

namespace dpa::sw {

// Replies to the JOIN `request` from `from` whose outcome is `outcome`. `limiter` tells a
// contended rank how many JOINs the holder of its rank sent; `switch_ports` are the switch's
// ports, one per switch thread, which the acks list.
void reply_to_join(ReplyBatch& batch, const Session& session, const JoinOutcome& outcome,
                   const protocol::Header& request, const transport::Endpoint& from,
                   const JoinRateLimiter& limiter, std::span<const std::uint16_t> switch_ports);

}  // namespace dpa::sw
