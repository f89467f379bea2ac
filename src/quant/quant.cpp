// SPDX-License-Identifier: Apache-2.0
#include "quant/quant.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "protocol/wire.hpp"

namespace dpa::quant {
namespace {

using protocol::kExpMax;
using protocol::kExpMin;
using protocol::kExpNonFinite;
using protocol::kExpZero;

int ceil_log2(int world) {
  return static_cast<int>(std::bit_width(static_cast<unsigned>(world - 1)));
}

// The kernel set named `name`, or nullptr if unknown or unsupported by this CPU.
const Kernels* find_kernels(std::string_view name) {
  if (name == "auto") {
    if (const Kernels* avx512 = avx512_kernels()) return avx512;
    if (const Kernels* avx2 = avx2_kernels()) return avx2;
    return &scalar_kernels();
  }
  if (name == "scalar") return &scalar_kernels();
  if (name == "avx2") return avx2_kernels();
  if (name == "avx512") return avx512_kernels();
  return nullptr;
}

// DPA_SIMD, read once; an unset or empty variable means "auto".
const Kernels* initial_kernels() {
  const char* env = std::getenv("DPA_SIMD");
  const std::string_view requested = env != nullptr && *env != '\0' ? env : "auto";
  if (const Kernels* kernels = find_kernels(requested)) return kernels;
  const Kernels* fallback = find_kernels("auto");
  const bool known = requested == "avx2" || requested == "avx512";
  spdlog::warn("DPA_SIMD={}: {}; using the {} kernels", requested,
               known ? "this CPU lacks " + std::string(requested == "avx2" ? "AVX2" : "AVX-512 F and BW")
                     : std::string("expected auto, scalar, avx2 or avx512"),
               fallback->name);
  return fallback;
}

std::atomic<const Kernels*>& active_slot() {
  static std::atomic<const Kernels*> active{initial_kernels()};
  return active;
}

const Kernels& kernels() { return *active_slot().load(std::memory_order_acquire); }

// 2^e as a float: built from its bits in the normal range (a libm call per block costs more than
// the block's exponent arithmetic), std::ldexp outside it (subnormal, infinite).
float power_of_two(int e) {
  if (e >= -126 && e <= 127) return std::bit_cast<float>(static_cast<std::uint32_t>(e + 127) << 23);
  return std::ldexp(1.0f, e);
}

// The largest float <= value (> 0): clamping to it in the float domain keeps the rounded int32
// within +-value (float(value) itself may round up, e.g. INT32_MAX -> 2^31). The next float
// toward zero of a positive float is the one whose bits are one less.
float float_at_most(std::int32_t value) {
  const auto f = static_cast<float>(value);
  return static_cast<std::int64_t>(f) > value ? std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) - 1) : f;
}

}  // namespace

std::int8_t block_exponent(const float* values, std::size_t n) {
  bool non_finite = false;
  const float max = kernels().max_abs(values, n, &non_finite);
  if (non_finite || max >= power_of_two(kExpMax)) return kExpNonFinite;
  if (max == 0.0f) return kExpZero;
  // A normal max = 1.m * 2^(biased - 127) is below 2^(biased - 126), also when m == 0: the
  // strict bound leaves a power of two room, so it scales below the clamp (§10.1). Denormals,
  // like every normal below 2^kExpMin, get kExpMin.
  const auto biased = static_cast<int>(std::bit_cast<std::uint32_t>(max) >> 23);
  const int e = biased - 126;
  return static_cast<std::int8_t>(e < kExpMin ? kExpMin : e);
}

bool all_finite(const float* values, std::size_t n) {
  return std::all_of(values, values + n, [](float v) { return std::isfinite(v); });
}

int scale_shift(std::int8_t exp, int world) { return 31 - ceil_log2(world) - exp; }

std::int32_t contribution_limit(int world) { return INT32_MAX / world; }

void quantize(const float* in, std::size_t n, std::int8_t exp, int world, std::byte* out) {
  assert(exp != kExpZero && exp != kExpNonFinite);
  const float scale = power_of_two(scale_shift(exp, world));
  kernels().quantize(in, n, scale, float_at_most(contribution_limit(world)), out);
}

void dequantize(const std::byte* in, std::size_t n, std::int8_t exp, int world,
                std::uint32_t divisor, float* out) {
  if (exp == kExpZero || exp == kExpNonFinite) {
    const float fill = exp == kExpZero ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    std::fill_n(out, n, fill);
    return;
  }
  // Unscaling by 2^-s is exact while finite (float(sum) has 24 significant bits, 2^-s >=
  // 2^-127), so a power-of-two divisor joins the factor and every value costs one multiply; any
  // other divisor is a true division, which rounds float(sum) * 2^-s / divisor once, as
  // sum-then-divide does (a multiply by a rounded 2^-s / divisor would not: with divisor 7, the
  // average of seven equal integers v misses v for a fifth of all v).
  divisor = std::max(divisor, 1U);
  int unscale = -scale_shift(exp, world);
  float remaining = static_cast<float>(divisor);
  if (std::has_single_bit(divisor)) {
    unscale -= std::countr_zero(divisor);
    remaining = 1.0f;
  }
  kernels().dequantize(in, n, power_of_two(unscale), remaining, out);
}

void int32_to_wire(const std::int32_t* in, std::size_t n, std::byte* out) {
  kernels().to_wire(in, n, out);
}

void int32_from_wire(const std::byte* in, std::size_t n, std::uint32_t divisor, std::int32_t* out) {
  kernels().from_wire(in, n, out);
  if (divisor <= 1) return;
  // Division in double is exact here: |v| < 2^31 and the rounding error of v / d is below 1/d,
  // the distance from a non-integer quotient to the nearest integer, so truncation gives the
  // same quotient as integer division, and the loop vectorises.
  const auto d = static_cast<double>(divisor);
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = static_cast<std::int32_t>(static_cast<double>(out[i]) / d);
  }
}

std::string_view active_kernels() { return kernels().name; }

bool select_kernels(std::string_view name) {
  const Kernels* chosen = find_kernels(name);
  if (chosen == nullptr) return false;
  active_slot().store(chosen, std::memory_order_release);
  return true;
}

}  // namespace dpa::quant
