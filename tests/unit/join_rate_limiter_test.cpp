// SPDX-License-Identifier: Apache-2.0
// The switch's per-source JOIN rate limit, driven with a fake clock.
#include <gtest/gtest.h>

#include <cstdint>

#include "switch/join_rate_limiter.hpp"

namespace dpa::sw {
namespace {

using transport::Endpoint;

constexpr std::uint64_t kMs = 1'000'000;

TEST(JoinRateLimiter, AStormGetsItsBurstThenTheSustainedRate) {
  JoinRateLimiter limiter;
  const Endpoint storm{0x7f000001, 40312};
  int admitted = 0;
  // 1,000 JOINs in one second, one per millisecond.
  for (std::uint64_t ms = 0; ms < 1000; ++ms) admitted += limiter.admit(storm, ms * kMs) ? 1 : 0;
  const auto expected = static_cast<int>(JoinRateLimiter::kBurst + 1000 * kMs / JoinRateLimiter::kIntervalNs);
  EXPECT_LE(admitted, expected);
  EXPECT_GE(admitted, expected - 1);
  EXPECT_EQ(limiter.heard(storm), 1000u);
}

TEST(JoinRateLimiter, ALiveRankRetryingEvery100msIsNeverLimitedBesideAStorm) {
  JoinRateLimiter limiter;
  const Endpoint storm{0x7f000001, 40312};
  const Endpoint rank{0x7f000001, 50000};  // same address, its own port
  for (std::uint64_t ms = 0; ms < 5000; ++ms) {
    limiter.admit(storm, ms * kMs);
    // A rank's first retries come faster (from the retransmission timeout, doubling to 100 ms).
    if (ms < 8 || ms % 100 == 0) {
      EXPECT_TRUE(limiter.admit(rank, ms * kMs)) << "at " << ms << " ms";
    }
  }
}

TEST(JoinRateLimiter, TheTableIsBoundedAndAnEvictedSourceStartsAfresh) {
  JoinRateLimiter limiter;
  const Endpoint first{0x0a000001, 1};
  for (std::uint64_t i = 0; i < JoinRateLimiter::kBurst; ++i) EXPECT_TRUE(limiter.admit(first, 0));
  EXPECT_FALSE(limiter.admit(first, 0)) << "its burst is spent";
  // Many other sources, each heard later: the first source's entry is the least recent.
  for (std::uint16_t port = 2; port < 2 + JoinRateLimiter::kSources; ++port) {
    limiter.admit({0x0a000001, port}, 1 + port);
  }
  EXPECT_EQ(limiter.heard(first), 0u) << "evicted";
  EXPECT_TRUE(limiter.admit(first, 1000)) << "a full bucket again";
}

}  // namespace
}  // namespace dpa::sw
