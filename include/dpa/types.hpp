// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace dpa {

enum class DataType : std::uint8_t { int32, float32 };
enum class ReduceOp : std::uint8_t { sum, avg };

std::string_view to_string(DataType type);
std::string_view to_string(ReduceOp op);

// A run of elements [begin, end) of an operation.
struct ElementRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  friend bool operator==(const ElementRange&, const ElementRange&) = default;
};

// What happened to one allreduce, as seen by this rank.
struct OpStats {
  std::uint64_t blocks = 0;           // packets' worth of data in the operation
  std::uint64_t blocks_full = 0;      // results summed over all N ranks
  std::uint64_t blocks_partial = 0;   // results summed over fewer than N ranks (fastest-K)
  std::uint64_t blocks_missed = 0;    // blocks whose result this rank never received
  std::uint64_t blocks_non_finite = 0;  // float blocks that held NaN/Inf on some rank
  // Float blocks of this rank's input that are finite but reach 2^126 in magnitude: they cannot
  // be scaled into int32, travel as non-finite, and come back NaN (counted above as well).
  std::uint64_t blocks_out_of_range = 0;
  std::uint64_t contributed = 0;      // blocks whose result includes this rank's values
  std::uint64_t retransmissions = 0;  // packets sent again after a timeout
  std::uint64_t timeouts = 0;         // retransmission timer expiries
  std::uint64_t syn_probes = 0;       // SYN probes sent to fetch a missed result
  // Authenticated sessions: replies dropped because they lacked this rank's tag (forgeries).
  std::uint64_t replies_rejected = 0;
  std::uint32_t min_contributors = 0; // smallest contributor count of any received block
  // Element ranges whose output holds this rank's own input instead of a reduced result.
  std::vector<ElementRange> missed;
  double seconds = 0.0;               // wall time from submission to completion

  // Adds the statistics of another part of the same operation: counts add up, min_contributors
  // takes the smaller non-zero value, seconds the longer (the parts ran concurrently), missed
  // ranges join (merged where they overlap or touch). libdpa merges its threads' parts this way.
  OpStats& operator+=(const OpStats& other);
  // The same for a part that was submitted as an operation of its own covering the elements from
  // `element_offset` on (a chunk of a larger buffer): its missed ranges move by the offset first.
  OpStats& merge(const OpStats& part, std::size_t element_offset);
};

// An operation the switch reports pending (docs/protocol.md §8.2): it holds this rank's
// contribution to a round that waits for other ranks (Context::pending()).
struct PendingWait {
  std::uint32_t op_id = 0;         // the operation (1, 2, ... per context)
  std::uint64_t waited_ms = 0;     // since its oldest pending round was sent
  std::uint64_t waiting_for = 0;   // ranks whose contribution that round lacks (bit r = rank r)
};

}  // namespace dpa
