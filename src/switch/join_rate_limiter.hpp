// SPDX-License-Identifier: Apache-2.0
// Per-source rate limit of JOINs (docs/protocol.md §6.3): a storm from one socket gets a trickle
// through, while a live rank (one JOIN per 100 ms at most) is never limited.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "transport/endpoint.hpp"

namespace dpa::sw {

// A token bucket per source (address and port) in a fixed table, so no number of sources can
// grow the switch. A source that is not in the table takes the entry heard from least recently
// and starts with a full bucket: eviction only ever favours the evicted source. Used by the one
// switch thread that handles JOINs: no locks.
class JoinRateLimiter {
 public:
  static constexpr std::size_t kSources = 256;
  static constexpr std::uint64_t kIntervalNs = 50'000'000;  // sustained: 20 JOINs per second
  static constexpr std::uint64_t kBurst = 16;               // JOINs at once from a quiet source

  // Whether a JOIN from `from` at `now_ns` is within its source's rate; counts it either way.
  bool admit(const transport::Endpoint& from, std::uint64_t now_ns);
  // JOINs heard from `from` (admitted or not) since it took its table entry; 0 if it has none.
  [[nodiscard]] std::uint64_t heard(const transport::Endpoint& from) const;

 private:
  struct Source {
    std::uint64_t key = 0;      // Identity::key_of form: address << 16 | port; 0 = free
    std::uint64_t ready_ns = 0;  // the bucket is full again at this time (GCRA)
    std::uint64_t last_ns = 0;
    std::uint64_t heard = 0;
  };
  std::array<Source, kSources> sources_{};
};

}  // namespace dpa::sw
