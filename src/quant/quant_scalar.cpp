// SPDX-License-Identifier: Apache-2.0
// Portable kernels. Each one mirrors its AVX2 counterpart operation for operation (including the
// NaN behaviour of the min/max clamp), so the two produce bit-identical results.
#include <bit>
#include <cmath>
#include <cstring>

#include "quant/quant.hpp"

namespace dpa::quant {
namespace {

std::uint32_t load_be32(const std::byte* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_bswap32(v);
}

void store_be32(std::uint32_t v, std::byte* p) {
  v = __builtin_bswap32(v);
  std::memcpy(p, &v, sizeof v);
}

// The maximum is taken over the magnitude bit patterns: for non-negative floats integer order is
// float order, and NaN patterns sort above infinity, so one integer max finds both.
float max_abs(const float* in, std::size_t n, bool* non_finite) {
  std::uint32_t max_bits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(in[i]) & 0x7fffffffU;
    max_bits = bits > max_bits ? bits : max_bits;
  }
  *non_finite = max_bits >= 0x7f800000U;
  return std::bit_cast<float>(max_bits);
}

void quantize(const float* in, std::size_t n, float scale, float limit, std::byte* out) {
  for (std::size_t i = 0; i < n; ++i) {
    float x = in[i] * scale;
    // Written as vmaxps/vminps compute them (first operand if the comparison holds, else the
    // second), so a NaN clamps to -limit on both paths.
    x = x > -limit ? x : -limit;
    x = x < limit ? x : limit;
    // lrintf rounds in the current mode (half to even by default), as vcvtps2dq does.
    store_be32(static_cast<std::uint32_t>(std::lrintf(x)), out + 4 * i);
  }
}

void dequantize(const std::byte* in, std::size_t n, float factor, float divisor, float* out) {
  const auto unscaled = [&](std::size_t i) {
    return static_cast<float>(static_cast<std::int32_t>(load_be32(in + 4 * i))) * factor;
  };
  // Two loops, so the common case (no division) has none in its body.
  if (divisor == 1.0f) {
    for (std::size_t i = 0; i < n; ++i) out[i] = unscaled(i);
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = unscaled(i) / divisor;
  }
}

void to_wire(const std::int32_t* in, std::size_t n, std::byte* out) {
  for (std::size_t i = 0; i < n; ++i) store_be32(static_cast<std::uint32_t>(in[i]), out + 4 * i);
}

void from_wire(const std::byte* in, std::size_t n, std::int32_t* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::int32_t>(load_be32(in + 4 * i));
}

constexpr Kernels kScalar{"scalar", max_abs, quantize, dequantize, to_wire, from_wire};

}  // namespace

const Kernels& scalar_kernels() { return kScalar; }

}  // namespace dpa::quant
