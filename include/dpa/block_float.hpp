// SPDX-License-Identifier: Apache-2.0
// Block floating point as a caller sees it when it prepares or finishes a float32 operation's
// blocks itself (a GPU: AllreduceOptions::block_exponents and wire_result). A block is `payload`
// consecutive values of the operation (the last one may be shorter). docs/protocol.md §10.
#pragma once

#include <cstdint>

namespace dpa::block_float {

// The exponent of a block: the smallest e in [kExpMin, kExpMax] with |v| < 2^e for every value
// (strict: a block whose largest magnitude is 2^k gets k + 1, so it sums without clamping);
// kExpZero if every value is +-0; kExpNonFinite if a value is NaN, +-Inf or >= 2^kExpMax.
inline constexpr std::int8_t kExpZero = -128;
inline constexpr std::int8_t kExpNonFinite = 127;
inline constexpr int kExpMin = -96;
inline constexpr int kExpMax = 126;

[[nodiscard]] constexpr bool is_exponent(std::int8_t e) {
  return e == kExpZero || e == kExpNonFinite || (e >= kExpMin && e <= kExpMax);
}

// One block of a wire result. The output holds the block's big-endian int32 sums s; libdpa's own
// float result is (float(s) * 2^-(31 - ceil(log2(world)) - exponent)) / float(divisor) in float32
// arithmetic: float(s) rounds, the power-of-two multiply is exact, the division rounds once (no
// fused multiply-add; dividing by a power of two may be folded into the multiply, which gives
// the same float). kExpZero gives zeros, kExpNonFinite quiet NaNs. divisor 0 marks a block this
// rank missed: its output holds the rank's own input values (float32), as without wire_result.
struct WireBlock {
  std::uint32_t divisor = 0;  // contributors for AVG, 1 for SUM; 0: missed
  std::int8_t exponent = kExpZero;
};

}  // namespace dpa::block_float
