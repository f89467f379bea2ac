// SPDX-License-Identifier: Apache-2.0
// The replies to an admitted data packet or probe once its slot has stepped (step_slot's
// SlotAction): the result, to the sender or every rank, a poisoned round's ERROR to every rank,
// and a pending probe's rank_gone ERROR. Queued in the thread's ReplyBatch.
#pragma once

#include <cstdint>

#include "protocol/wire.hpp"
#include "switch/reply_batch.hpp"
#include "switch/session.hpp"
#include "switch/slot.hpp"
#include "transport/buffer.hpp"
#include "transport/endpoint.hpp"

namespace dpa::sw {

// The result of `slot` (action multicast_result or unicast_result) for `request`: to every rank at
// the port of worker thread `thread`, or to the sender only. It goes out in the request's own
// buffer when the transport allows (the request has been read in full by now: step_slot added
// its values, `request` holds its header).
void send_result(ReplyBatch& batch, Session& session, const SlotState& slot, SlotAction action,
                 const protocol::Header& request, const Membership& members, std::uint32_t thread,
                 const transport::RxPacket& packet);

// A round the ranks disagree on: every rank of the generation learns it (at the thread that
// owns the slot), and the sender too under its own op_id when that differs from the round's.
void send_poisoned(ReplyBatch& batch, const Session& session, const SlotState& slot, const protocol::Header& request,
                   const Membership& members, std::uint32_t thread, const transport::Endpoint& from);

// A probe of a pending round that waits for a rank that left or went silent (§6.7): the
// prober learns which, instead of a pending reply, and fails the operation naming it. Returns
// whether it sent that ERROR.
bool report_gone(ReplyBatch& batch, const Session& session, const SlotState& slot, const protocol::Header& probe,
                 std::uint64_t sender_bit, const Membership& members, std::uint32_t now_ticks,
                 const transport::Endpoint& from);

}  // namespace dpa::sw
