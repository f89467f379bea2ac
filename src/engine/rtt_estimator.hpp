// SPDX-License-Identifier: Apache-2.0
// RFC 6298 round-trip estimator: smoothed round trip (gain 1/8) and its mean deviation (gain
// 1/4), plus a slowly decaying peak. The timeout is the larger of srtt + 4·rttvar and the peak:
// on overcommitted cores round trips have a heavy tail (a descheduled thread stalls a round for
// many times the mean), which srtt + 4·rttvar forgets within a few samples and the peak keeps
// for about a hundred. Integer nanoseconds, no clock.
#pragma once

#include <algorithm>
#include <cstdint>

namespace dpa::detail {

class RttEstimator {
 public:
  void sample(std::uint64_t rtt_ns) {
    peak_ns_ = std::max(rtt_ns, peak_ns_ - peak_ns_ / kPeakDecay);
    if (srtt_ns_ == 0) {
      srtt_ns_ = rtt_ns;
      rttvar_ns_ = rtt_ns / 2;
      return;
    }
    const std::uint64_t deviation = rtt_ns > srtt_ns_ ? rtt_ns - srtt_ns_ : srtt_ns_ - rtt_ns;
    rttvar_ns_ = (3 * rttvar_ns_ + deviation) / 4;
    srtt_ns_ = (7 * srtt_ns_ + rtt_ns) / 8;
  }
  // 0 before the first sample: the caller's floor applies.
  [[nodiscard]] std::uint64_t rto_ns() const { return std::max(srtt_ns_ + 4 * rttvar_ns_, peak_ns_); }

 private:
  static constexpr std::uint64_t kPeakDecay = 128;  // the peak loses 1/128 per sample

  std::uint64_t srtt_ns_ = 0;
  std::uint64_t rttvar_ns_ = 0;
  std::uint64_t peak_ns_ = 0;
};

}  // namespace dpa::detail
