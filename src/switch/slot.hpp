// The per-slot aggregation state machine: the part of the protocol the Tofino program runs in
// its registers. Pure logic, no I/O, so the software switch, the tests and the microbenchmarks
// all drive this one function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "protocol/wire.hpp"

namespace dpa::sw {

// Register state of one slot (one register cell each on Tofino).
struct SlotState {
  std::uint32_t generation = 0;  // session join generation the state belongs to
  std::uint32_t seq = 0;         // round being aggregated; 0 before the first use
  std::uint32_t op_id = 0;
  std::uint32_t offset = 0;
  std::uint64_t bitmap = 0;      // contributors of the round
  std::uint64_t first_arrival_ns = 0;
  std::uint16_t count = 0;       // valid values of the round's block
  std::uint16_t flags = 0;       // data-type flag of the round (protocol::flag::kFloat)
  std::uint8_t contributors = 0;
  std::uint8_t target = 0;       // contributions that complete the round (N, or K)
  std::int8_t exp_used = protocol::kExpZero;
  std::int8_t exp_max = protocol::kExpZero;
  bool complete = false;
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
  error_op_mismatch, // same round, different operation id
  error_dtype_mismatch,
};

struct SessionLimits {
  std::uint8_t world_size = 1;
  std::uint8_t k = 1;  // contributions that may complete a round early (already resolved)
  std::uint32_t payload = 0;  // values per packet
  std::uint64_t straggler_timeout_ns = 0;
};

// Applies one packet (already validated: session, sender, slot range, length, K) to a slot.
// `values` are the slot's `payload` accumulators in host byte order; `payload` the packet's
// big-endian values (empty for SYN probes). `sender_bit` is 1 << rank.
SlotAction step_slot(SlotState& slot, std::span<std::int32_t> values,
                     const protocol::Header& header, std::span<const std::byte> payload,
                     std::uint64_t sender_bit, const SessionLimits& limits, std::uint64_t now_ns);

// Adds big-endian int32 values into host-order accumulators (wrapping), or stores them when
// `overwrite`. AVX2 when the CPU has it.
void accumulate_be(std::span<std::int32_t> acc, const std::byte* be_values, bool overwrite);

// The header of the reply `action` calls for (result, OLD, SYN or error).
protocol::Header reply_header(const SlotState& slot, SlotAction action,
                              const protocol::Header& request, std::uint32_t session);

// An ERROR reply: echoes the request, with the switch's expected value in `offset`.
protocol::Header error_reply(const protocol::Header& request, protocol::ErrorCode code,
                             std::uint32_t expected);

}  // namespace dpa::sw
