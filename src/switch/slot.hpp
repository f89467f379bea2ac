// SPDX-License-Identifier: Apache-2.0
// The per-slot aggregation state machine: the part of the protocol the Tofino program runs in
// its registers. Pure logic, no I/O, so the software switch, the tests and the microbenchmarks
// all drive this one function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "protocol/wire.hpp"

namespace dpa::sw {

// Register state of one slot (one register cell each on Tofino). All-zero is the fresh state a
// control plane leaves after clearing the registers: exponents are stored biased
// (protocol::exp_to_wire), so zero reads as "no exponent".
struct SlotState {
  std::uint32_t generation = 0;  // software switch only: lazy reset per join generation
  std::uint32_t seq = 0;         // round being aggregated; 0 before the first use
  std::uint32_t op_id = 0;
  std::uint32_t offset = 0;
  std::uint32_t op_length = 0;   // elements of the operation the round belongs to
  std::uint64_t bitmap = 0;      // contributors of the round, frozen once it completes
  std::uint32_t first_arrival = 0;  // ticks (protocol::kTickShift) of the opening packet
  std::uint16_t count = 0;       // valid values of the round's block
  std::uint16_t flags = 0;       // data-type flag of the round (protocol::flag::kFloat)
  std::uint16_t mode = 0;        // owned round (§13): kToOwner or kFromOwner, 0 for an all-reduce
  std::uint8_t owner = 0;        // owned round: the rank that takes or gives the values
  std::uint8_t contributors = 0;
  std::uint8_t k = 0;            // fastest-K of the round: the opener's, or the session default
  std::uint8_t target = 0;       // contributions that complete the round (N, or k)
  std::uint8_t exp_used = 0;     // biased exponent code
  std::uint8_t exp_max = 0;      // biased exponent code; unsigned max = signed max
  bool complete = false;
  protocol::ErrorCode error = protocol::ErrorCode::none;  // a poisoned round (rank mismatch)
  std::uint32_t error_expected = 0;  // the round's value the offender disagreed with
  std::uint32_t error_offered = 0;   // the offender's value
  std::uint8_t error_rank = 0;       // the offender
};

// What the switch does with a packet after the slot has seen it.
enum class SlotAction : std::uint8_t {
  counted,           // contribution added; the round is still open
  duplicate,         // a contribution already counted; nothing to send
  multicast_result,  // the round completed now: send the result to every rank
  unicast_result,    // round already complete: send a copy of the stored result to the sender
  unicast_old,       // the packet's round is behind the slot: tell the sender where the slot is
  unicast_syn,       // reply to a SYN probe with the slot's state (no values)
  error_seq_ahead,   // the packet's round is ahead of the slot by more than one
  multicast_error,   // the packet disagrees with the round (op, type, length): poisoned now
  unicast_error,     // a packet for a poisoned round: the round's error again
  unicast_mismatch,  // the packet disagrees with a completed round: its error to the sender only,
                     // the round and its stored result unchanged
};

// How a packet of the slot's current round disagrees with it (the first of op_id, mode and
// owner, type, op_length, count that differs), or nothing.
struct Mismatch {
  protocol::ErrorCode code = protocol::ErrorCode::none;
  std::uint32_t expected = 0;  // the round's value
  std::uint32_t offered = 0;   // the packet's
};
[[nodiscard]] std::optional<Mismatch> find_mismatch(const SlotState& slot, const protocol::Header& header);

struct SessionLimits {
  std::uint8_t world_size = 1;
  std::uint8_t k = 1;  // the session's default K (already resolved: N when configured as 0)
  std::uint32_t payload = 0;  // values per packet
  std::uint32_t straggler_timeout_ticks = 0;
  std::uint32_t liveness_ticks = 0;  // a rank not heard from for longer is gone (§6.7)
};

// An owned round's mode and owner as mode_mismatch reports them: the mode bit | the owner.
[[nodiscard]] constexpr std::uint32_t mode_value(std::uint16_t mode, std::uint8_t owner) {
  return mode == 0 ? 0u : std::uint32_t{mode} | owner;
}

// Applies one packet (already validated: session, sender, slot range, length, K) to a slot.
// `values` are the slot's `payload` accumulators in host byte order; `payload` the packet's
// big-endian values (empty for SYN probes). `sender_bit` is 1 << rank; `now` in ticks.
SlotAction step_slot(SlotState& slot, std::span<std::int32_t> values,
                     const protocol::Header& header, std::span<const std::byte> payload,
                     std::uint64_t sender_bit, const SessionLimits& limits, std::uint32_t now);

// Adds big-endian int32 values into host-order accumulators (wrapping), or stores them when
// `overwrite`. AVX2 when the CPU has it.
void accumulate_be(std::span<std::int32_t> acc, const std::byte* be_values, bool overwrite);

// The header of the reply `action` calls for (result, OLD, SYN or error). `token` is the
// generation's job token every reply carries.
protocol::Header reply_header(const SlotState& slot, SlotAction action,
                              const protocol::Header& request, std::uint32_t token);

// The ERROR about a poisoned round, as every rank receives it: the round's op_id, the
// offender's rank, the round's value in `offset` and the offender's in `bitmap`.
protocol::Header poisoned_reply(const SlotState& slot, const protocol::Header& request,
                                std::uint32_t token);

// A probe that finds its round pending (open, the prober counted) gets a SYN reply naming the
// counted ranks (docs/protocol.md §8.2 "Pending"). A round whose K is N cannot complete without
// the ranks it waits for: the result is those of them in `gone` (left or silent), for a
// rank_gone ERROR instead. 0 for any other probe, and for rounds that K < N may still complete.
[[nodiscard]] std::uint64_t gone_waited_for(const SlotState& slot, const protocol::Header& probe,
                                            std::uint64_t sender_bit, std::uint64_t members,
                                            std::uint64_t gone, const SessionLimits& limits);

// The rank_gone ERROR to the prober (§4): the round's seq, the prober's op_id, `rank` the lowest
// gone rank, `bitmap` every gone rank the round waits for, `offset` how long the switch has not
// heard that rank in ms (kLeftRank when it sent LEAVE).
inline constexpr std::uint32_t kLeftRank = 0xffffffff;
protocol::Header rank_gone_reply(const SlotState& slot, const protocol::Header& probe, std::uint64_t gone,
                                 std::uint32_t silent_ms, std::uint32_t token);

// An ERROR reply: echoes the request, with the switch's expected value in `offset`.
protocol::Header error_reply(const protocol::Header& request, protocol::ErrorCode code,
                             std::uint32_t expected);

}  // namespace dpa::sw
