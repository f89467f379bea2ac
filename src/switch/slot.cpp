// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <bit>
#include <immintrin.h>

#include "protocol/byte_order.hpp"
#include "switch/slot.hpp"

namespace dpa::sw {

using protocol::Header;
namespace flag = protocol::flag;

namespace {

void accumulate_scalar(std::span<std::int32_t> acc, const std::byte* in, bool overwrite) {
  if (overwrite) {
    for (std::size_t i = 0; i < acc.size(); ++i) {
      acc[i] = static_cast<std::int32_t>(protocol::load_be32(in + 4 * i));
    }
    return;
  }
  for (std::size_t i = 0; i < acc.size(); ++i) {
    // Two's-complement wrap-around, as the switch ALU adds.
    acc[i] = static_cast<std::int32_t>(static_cast<std::uint32_t>(acc[i]) +
                                       protocol::load_be32(in + 4 * i));
  }
}

__attribute__((target("avx2"))) void accumulate_avx2(std::span<std::int32_t> acc,
                                                     const std::byte* in, bool overwrite) {
  const __m256i swap = _mm256_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12,
                                        3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12);
  std::size_t i = 0;
  auto* out = reinterpret_cast<__m256i*>(acc.data());
  const std::size_t vectors = acc.size() / 8;
  for (; i < vectors; ++i) {
    const __m256i wire = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 32 * i));
    const __m256i host = _mm256_shuffle_epi8(wire, swap);
    if (overwrite) {
      _mm256_storeu_si256(out + i, host);
    } else {
      _mm256_storeu_si256(out + i, _mm256_add_epi32(_mm256_loadu_si256(out + i), host));
    }
  }
  accumulate_scalar(acc.subspan(vectors * 8), in + vectors * 32, overwrite);
}

const bool kHaveAvx2 = __builtin_cpu_supports("avx2");

// Ticks compare in 32-bit wrap-around arithmetic, as a switch register does: correct for
// rounds open less than 2^32 ticks (about 78 hours).
bool straggler_timed_out(const SlotState& slot, const SessionLimits& limits, std::uint32_t now) {
  return static_cast<std::uint32_t>(now - slot.first_arrival) > limits.straggler_timeout_ticks;
}

bool reactive_completion(const SlotState& slot, const SessionLimits& limits, std::uint32_t now) {
  return straggler_timed_out(slot, limits, now) && slot.contributors >= slot.k;
}

// Records the first disagreement of a round; every later packet of the round gets it too.
SlotAction poison(SlotState& slot, protocol::ErrorCode code, std::uint32_t expected,
                  std::uint32_t offered, std::uint8_t rank) {
  slot.error = code;
  slot.error_expected = expected;
  slot.error_offered = offered;
  slot.error_rank = rank;
  return SlotAction::multicast_error;
}

}  // namespace

std::optional<Mismatch> find_mismatch(const SlotState& slot, const Header& h) {
  if (h.op_id != slot.op_id) return Mismatch{protocol::ErrorCode::op_mismatch, slot.op_id, h.op_id};
  const auto mode = static_cast<std::uint16_t>(h.flags & flag::kOwned);
  if (mode != slot.mode || (mode != 0 && h.owner() != slot.owner)) {
    return Mismatch{protocol::ErrorCode::mode_mismatch, mode_value(slot.mode, slot.owner),
                    mode_value(mode, h.owner())};
  }
  if ((h.flags & flag::kFloat) != slot.flags) {
    return Mismatch{protocol::ErrorCode::dtype_mismatch, slot.flags,
                    static_cast<std::uint32_t>(h.flags & flag::kFloat)};
  }
  if (h.op_length != slot.op_length) {
    return Mismatch{protocol::ErrorCode::length_mismatch, slot.op_length, h.op_length};
  }
  // Every rank derives a block's count from the same op_length and offset; a rank that sends
  // values into a round opened without any (or none into one with values) disagrees.
  if (h.count != slot.count) return Mismatch{protocol::ErrorCode::length_mismatch, slot.count, h.count};
  return std::nullopt;
}

void accumulate_be(std::span<std::int32_t> acc, const std::byte* be_values, bool overwrite) {
  if (kHaveAvx2) {
    accumulate_avx2(acc, be_values, overwrite);
  } else {
    accumulate_scalar(acc, be_values, overwrite);
  }
}

SlotAction step_slot(SlotState& slot, std::span<std::int32_t> values, const Header& h,
                     std::span<const std::byte> payload, std::uint64_t sender_bit,
                     const SessionLimits& limits, std::uint32_t now) {
  // Rounds are compared in 32-bit serial-number arithmetic, as a switch register would.
  const auto diff = static_cast<std::int32_t>(h.seq - slot.seq);
  const bool opened = slot.target != 0;

  if (h.has(flag::kSyn)) {
    if (diff != 0 || !opened) return SlotAction::unicast_syn;
    if (slot.error != protocol::ErrorCode::none) return SlotAction::unicast_error;
    if (slot.complete) return SlotAction::unicast_result;
    // A probe from a counted worker stands for its retransmission (workers retransmit with
    // header-only probes): reactive fastest-K may complete the round here.
    if ((slot.bitmap & sender_bit) != 0 && reactive_completion(slot, limits, now)) {
      slot.complete = true;
      return SlotAction::multicast_result;
    }
    return SlotAction::unicast_syn;
  }
  if (diff == 1) {
    // The first packet of the slot's next round resets it: a worker only moves a window entry
    // to this slot again after the slot's previous round completed. The opener's K is the
    // round's K, so every later packet is judged against the same value.
    const std::uint32_t generation = slot.generation;
    slot = SlotState{};
    slot.generation = generation;
    slot.seq = h.seq;
    slot.op_id = h.op_id;
    slot.offset = h.offset;
    slot.op_length = h.op_length;
    slot.count = h.count;
    slot.flags = h.flags & flag::kFloat;
    slot.mode = h.flags & flag::kOwned;
    slot.owner = slot.mode != 0 ? h.owner() : 0;
    slot.bitmap = sender_bit;
    slot.contributors = 1;
    slot.k = h.k != 0 ? h.k : limits.k;
    slot.target = h.has(flag::kCountToK) ? slot.k : limits.world_size;
    // Every rank needs the owner's values: a relayed round has no fastest-K (§13.3).
    if (slot.mode == flag::kFromOwner) slot.k = slot.target = limits.world_size;
    slot.exp_used = protocol::exp_to_wire(h.exp_used);
    slot.exp_max = protocol::exp_to_wire(h.exp_next);
    slot.first_arrival = now;
    // A header-only request (count 0, or a relayed round's from a rank other than the owner)
    // adds nothing; a round of count 0 has a result without values.
    if (!payload.empty()) accumulate_be(values, payload.data(), /*overwrite=*/true);
    slot.complete = slot.contributors >= slot.target;
    return slot.complete ? SlotAction::multicast_result : SlotAction::counted;
  }
  if (diff < 0) return SlotAction::unicast_old;
  // Ahead by more than one round, or a round the slot never opened in this generation.
  if (diff > 1 || !opened) return SlotAction::error_seq_ahead;

  if (slot.error != protocol::ErrorCode::none) return SlotAction::unicast_error;
  if (const std::optional<Mismatch> mismatch = find_mismatch(slot, h)) {
    // Every rank already has a completed round's result: the disagreeing packet only learns its
    // error, and a legitimate retransmission still gets the stored result.
    if (slot.complete) return SlotAction::unicast_mismatch;
    return poison(slot, mismatch->code, mismatch->expected, mismatch->offered, h.rank);
  }
  // A complete round's bitmap is frozen: a late contribution only fetches a copy.
  if (slot.complete) return SlotAction::unicast_result;

  if ((slot.bitmap & sender_bit) != 0) {
    // A retransmission from a counted worker: the round is stuck. Reactive fastest-K completes
    // it here once the straggler timeout has passed and K contributions are in.
    if (reactive_completion(slot, limits, now)) {
      slot.complete = true;
      return SlotAction::multicast_result;
    }
    return SlotAction::duplicate;
  }

  // The owner's values replace a relayed round's accumulators, whoever opened it (§13.3).
  if (!payload.empty()) accumulate_be(values, payload.data(), /*overwrite=*/slot.mode == flag::kFromOwner);
  slot.bitmap |= sender_bit;
  ++slot.contributors;
  slot.exp_max = std::max(slot.exp_max, protocol::exp_to_wire(h.exp_next));
  if (slot.contributors >= slot.target || reactive_completion(slot, limits, now)) {
    slot.complete = true;
    return SlotAction::multicast_result;
  }
  return SlotAction::counted;
}

Header reply_header(const SlotState& slot, SlotAction action, const Header& request,
                    std::uint32_t token) {
  Header r;
  r.session = request.session;
  r.token = token;
  r.op_id = slot.op_id;
  r.slot = request.slot;
  r.seq = slot.seq;
  r.offset = slot.offset;
  r.op_length = slot.op_length;
  r.rank = request.rank;
  r.k = slot.target;
  r.contributors = slot.contributors;
  r.exp_used = protocol::exp_from_wire(slot.exp_used);
  r.exp_next = protocol::exp_from_wire(slot.exp_max);
  r.bitmap = slot.bitmap;
  const std::uint16_t complete = slot.complete ? flag::kComplete : 0;
  switch (action) {
    case SlotAction::multicast_result:
      r.flags = flag::kResult | slot.flags | slot.mode;
      r.count = slot.count;
      break;
    case SlotAction::unicast_result:
      r.flags = flag::kResult | flag::kRetransmit | slot.flags | slot.mode | (request.flags & flag::kSyn);
      r.count = slot.count;
      break;
    case SlotAction::unicast_old:
      r.flags = flag::kOld | complete | slot.flags | slot.mode;
      break;
    case SlotAction::unicast_syn:
      r.flags = flag::kSyn | complete | slot.flags | slot.mode;
      break;
    case SlotAction::error_seq_ahead: {
      Header error = error_reply(request, protocol::ErrorCode::seq_ahead, slot.seq);
      error.token = token;
      return error;
    }
    case SlotAction::multicast_error:
      return poisoned_reply(slot, request, token);
    case SlotAction::unicast_error: {
      // The sender runs the request's operation: the error must name that one to reach it.
      Header error = poisoned_reply(slot, request, token);
      error.op_id = request.op_id;
      return error;
    }
    case SlotAction::unicast_mismatch: {
      // Shaped like a poisoned round's error, under the sender's own op_id, naming the sender.
      const Mismatch mismatch = find_mismatch(slot, request).value_or(Mismatch{});
      Header error = error_reply(request, mismatch.code, mismatch.expected);
      error.token = token;
      error.seq = slot.seq;
      error.bitmap = mismatch.offered;
      return error;
    }
    case SlotAction::counted:
    case SlotAction::duplicate:
      break;
  }
  return r;
}

std::uint64_t gone_waited_for(const SlotState& slot, const Header& probe, std::uint64_t sender_bit,
                             std::uint64_t members, std::uint64_t gone, const SessionLimits& limits) {
  const bool pending = probe.has(flag::kSyn) && probe.seq == slot.seq && slot.target != 0 && !slot.complete &&
                       slot.error == protocol::ErrorCode::none && (slot.bitmap & sender_bit) != 0;
  if (!pending || slot.k < limits.world_size) return 0;
  return members & ~slot.bitmap & gone;
}

Header rank_gone_reply(const SlotState& slot, const Header& probe, std::uint64_t gone, std::uint32_t silent_ms,
                       std::uint32_t token) {
  Header r = error_reply(probe, protocol::ErrorCode::rank_gone, silent_ms);
  r.token = token;
  r.seq = slot.seq;
  r.rank = static_cast<std::uint8_t>(std::countr_zero(gone));
  r.bitmap = gone;
  return r;
}

Header poisoned_reply(const SlotState& slot, const Header& request, std::uint32_t token) {
  Header r = error_reply(request, slot.error, slot.error_expected);
  r.token = token;
  r.op_id = slot.op_id;
  r.seq = slot.seq;
  r.rank = slot.error_rank;
  r.bitmap = slot.error_offered;
  return r;
}

Header error_reply(const Header& request, protocol::ErrorCode code, std::uint32_t expected) {
  Header r = request;
  // Keep the request's kind so the worker can tell a rejected JOIN or probe from a data error.
  r.flags = flag::kError | (request.flags & (flag::kJoin | flag::kSyn | flag::kFloat | flag::kOwned));
  r.error = code;
  r.offset = expected;
  r.count = 0;
  r.contributors = 0;
  r.bitmap = 0;
  return r;
}

}  // namespace dpa::sw
