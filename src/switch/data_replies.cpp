// SPDX-License-Identifier: Apache-2.0
#include "switch/data_replies.hpp"

#include <algorithm>
#include <bit>
#include <span>

#include "quant/quant.hpp"

namespace dpa::sw {

using protocol::Header;
using transport::Endpoint;

void send_result(ReplyBatch& batch, Session& session, const SlotState& slot, SlotAction action, const Header& request,
                 const Membership& members, std::uint32_t thread, const transport::RxPacket& packet) {
  // A round of no values (exponent priming) has a header-only result.
  const std::span<const std::int32_t> values =
      slot.count == 0 ? std::span<const std::int32_t>{} : session.values(request.slot);
  const auto bytes = static_cast<std::uint32_t>(protocol::kHeaderSize + 4 * values.size());
  const auto room = static_cast<std::uint32_t>(bytes + session.data_trailer_room());
  transport::TxBuffer* buffer = batch.reply_buffer(packet, room);
  if (buffer == nullptr) return;
  const Header reply = reply_header(slot, action, request, members.token);
  protocol::encode(reply, buffer->payload);
  quant::int32_to_wire(values.data(), values.size(), buffer->payload + protocol::kHeaderSize);
  if (action != SlotAction::multicast_result) {
    // An owned round's values go only to the ranks that take them; the others get the header (§13).
    const bool values_to_sender = Header::takes_values(slot.mode, slot.owner, request.rank);
    finish_reply(batch, *buffer, values_to_sender ? bytes : protocol::kHeaderSize, data_reply_key(session, request.rank));
    batch.send(*buffer, packet.from);
    return;
  }
  if (slot.mode == 0) {
    send_to_members(batch, session, buffer, bytes, members, thread);
    return;
  }
  std::uint64_t take_values = 0;
  for (std::uint32_t r = 0; r < protocol::kMaxWorld; ++r) {
    if (Header::takes_values(slot.mode, slot.owner, static_cast<std::uint8_t>(r))) take_values |= std::uint64_t{1} << r;
  }
  send_to_ranks(batch, session, buffer, bytes, members, thread, take_values);
  if (transport::TxBuffer* header = batch.next_buffer()) {
    protocol::encode(reply, header->payload);
    send_to_ranks(batch, session, header, protocol::kHeaderSize, members, thread, ~take_values);
  }
}

void send_poisoned(ReplyBatch& batch, const Session& session, const SlotState& slot, const Header& request,
                   const Membership& members, std::uint32_t thread, const Endpoint& from) {
  const Header error = reply_header(slot, SlotAction::multicast_error, request, members.token);
  if (transport::TxBuffer* buffer = batch.next_buffer()) {
    protocol::encode(error, buffer->payload);
    members.for_each_member([&](std::uint32_t) { ++batch.counters.errors_sent; });
    send_to_members(batch, session, buffer, protocol::kHeaderSize, members, thread);
  }
  if (request.op_id != slot.op_id) {
    ++batch.counters.errors_sent;
    send_header(batch, reply_header(slot, SlotAction::unicast_error, request, members.token), from,
                data_reply_key(session, request.rank));
  }
}

bool report_gone(ReplyBatch& batch, const Session& session, const SlotState& slot, const Header& probe,
                 std::uint64_t sender_bit, const Membership& members, std::uint32_t now_ticks, const Endpoint& from) {
  const SessionLimits& limits = session.limits();
  // The cheap conditions first: the liveness scan runs only for a probe of a pending round.
  if (gone_waited_for(slot, probe, sender_bit, members.joined, ~std::uint64_t{0}, limits) == 0) return false;
  const std::uint64_t gone =
      gone_waited_for(slot, probe, sender_bit, members.joined, members.gone(now_ticks, limits.liveness_ticks), limits);
  if (gone == 0) return false;
  const auto first = static_cast<std::uint32_t>(std::countr_zero(gone));
  std::uint32_t silent_ms = kLeftRank;
  if (((members.left.load(std::memory_order_relaxed) >> first) & 1) == 0) {
    const std::uint32_t silent = now_ticks - members.heard_ticks[first].load(std::memory_order_relaxed);
    silent_ms = static_cast<std::uint32_t>(
        std::min<std::uint64_t>((std::uint64_t{silent} << protocol::kTickShift) / 1'000'000, kLeftRank - 1));
  }
  ++batch.counters.errors_sent;
  send_header(batch, rank_gone_reply(slot, probe, gone, silent_ms, members.token), from, data_reply_key(session, probe.rank));
  return true;
}

}  // namespace dpa::sw
