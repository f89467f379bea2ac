// SPDX-License-Identifier: Apache-2.0
#include "engine/reply_classifier.hpp"

namespace dpa::detail {

namespace flag = protocol::flag;

ReplyAction classify_reply(const EntryView& entry, const protocol::Header& h,
                           const ReplyScope& scope) {
  if (h.has(flag::kError)) {
    return {h.op_id == scope.op_id ? ReplyKind::fail : ReplyKind::ignore};
  }
  if (!entry.active) return {ReplyKind::ignore};
  const auto op_delta = static_cast<std::int32_t>(h.op_id - scope.op_id);
  // The round the reply speaks of, relative to the current one, from the 32-bit slot sequence.
  const auto seq_delta =
      static_cast<std::int32_t>(h.seq - protocol::SlotLayout::seq_of_round(entry.round));
  const bool current_parity = ((h.slot - scope.slot_base) & 1) == (entry.round & 1);
  const bool probe_reply = h.has(flag::kSyn) && !h.has(flag::kResult) && !h.has(flag::kOld) &&
                           !entry.probing && current_parity;
  const bool slot_behind = op_delta < 0 || h.seq == 0 || seq_delta < 0;
  if (probe_reply && op_delta <= 0 && (slot_behind || seq_delta == 0)) {
    // The switch's answer to a retransmission probe. A slot that is fresh (seq 0), still holds
    // an earlier operation or round, or has not counted this rank never saw the data packet.
    // Checked before the late-reply filters below, which would otherwise drop exactly these
    // replies and leave the lost packet to the give-up timeout.
    const bool counted = !slot_behind && ((h.bitmap >> scope.rank) & 1) != 0;
    return {counted ? ReplyKind::counted_wait : ReplyKind::resend_now};
  }
  if (op_delta < 0) return {ReplyKind::ignore};  // a late reply from an earlier operation
  if (!current_parity) {
    // A reply about the entry's other slot (to a stale or duplicated packet) cannot tell that
    // the current round is lost, which is always retrievable from its own slot. A result of a
    // later round there, or a later operation, means the current round is complete: ask for it
    // now. The result of the round before the current one is only a late copy (the answer to
    // a probe the multicast overtook) and says nothing about the current round.
    const std::int64_t rounds_ahead =
        2 * static_cast<std::int64_t>(seq_delta) + ((entry.round & 1) == 0 ? 1 : -1);
    const bool progress = (h.has(flag::kResult) && rounds_ahead > 0) || op_delta > 0;
    return {progress ? ReplyKind::expedite : ReplyKind::ignore};
  }
  if (op_delta > 0) return {ReplyKind::later_operation};
  if (h.seq == 0 || seq_delta < 0) return {ReplyKind::ignore};
  const std::uint64_t round = entry.round + 2 * static_cast<std::uint64_t>(seq_delta);
  if (round >= entry.end_round) return {ReplyKind::ignore};

  if (h.has(flag::kResult)) return {ReplyKind::deliver_result, round};
  if (!h.has(flag::kOld) && !h.has(flag::kSyn)) return {ReplyKind::keep_waiting, round};
  if (round == entry.round && entry.probing) return {ReplyKind::keep_waiting, round};
  if (h.has(flag::kComplete)) {
    return {scope.syn_disable ? ReplyKind::skip_complete : ReplyKind::fetch_complete, round};
  }
  return {ReplyKind::join_open, round};
}

}  // namespace dpa::detail
