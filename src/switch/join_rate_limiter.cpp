// SPDX-License-Identifier: Apache-2.0
#include "switch/join_rate_limiter.hpp"

#include <algorithm>

namespace dpa::sw {

namespace {

std::uint64_t key_of(const transport::Endpoint& from) {
  return std::uint64_t{from.address} << 16 | from.port;
}

}  // namespace

bool JoinRateLimiter::admit(const transport::Endpoint& from, std::uint64_t now_ns) {
  const std::uint64_t key = key_of(from);
  auto found = std::ranges::find(sources_, key, &Source::key);
  if (found == sources_.end()) {
    found = std::ranges::min_element(sources_, {}, &Source::last_ns);
    *found = Source{key, now_ns, now_ns, 0};
  }
  Source& source = *found;
  source.last_ns = now_ns;
  ++source.heard;
  // Generic cell rate algorithm: each admitted JOIN moves ready_ns one interval on; a source may
  // run up to kBurst intervals ahead of the clock.
  const std::uint64_t ready = std::max(source.ready_ns, now_ns);
  if (ready - now_ns >= kBurst * kIntervalNs) return false;
  source.ready_ns = ready + kIntervalNs;
  return true;
}

std::uint64_t JoinRateLimiter::heard(const transport::Endpoint& from) const {
  const auto found = std::ranges::find(sources_, key_of(from), &Source::key);
  return found == sources_.end() ? 0 : found->heard;
}

}  // namespace dpa::sw
