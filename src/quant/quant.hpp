// SPDX-License-Identifier: Apache-2.0
// Block floating point: fp32 <-> big-endian int32 for the switch, and int32 byte order.
//
// A block is scaled by 2^s with s = 31 - ceil(log2(world)) - e, where e is the block exponent
// negotiated through the switch (the max over contributors). The exponent is strict (|v| < 2^e),
// so a scaled value stays below 2^(31 - ceil(log2(world))) and, for world <= 128, never reaches
// the clamp to +-floor(INT32_MAX / world) that keeps the sum of `world` contributions inside
// int32 (the clamp remains for values that exceed the negotiated exponent: a straggler's). Values
// that are multiples of the quantum 2^-s (integers up to 2^(31 - ceil(log2(world))), powers of
// two, short mantissas) therefore sum exactly, and the power-of-two scale makes unscaling exact.
// docs/protocol.md §10 derives the error bound. Every kernel exists as a scalar, an AVX2 and an
// AVX-512 version with identical results; the widest the CPU has is chosen at run time (DPA_SIMD
// overrides).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dpa::quant {

// Exponent e of a block: the smallest e in [kExpMin, kExpMax] with |v| < 2^e for every v;
// kExpZero if every value is +-0; kExpNonFinite if any value is NaN, +-Inf or >= 2^kExpMax.
std::int8_t block_exponent(const float* values, std::size_t n);
// Whether no value is NaN or +-Inf: tells a block out of range from a non-finite one.
bool all_finite(const float* values, std::size_t n);

// log2 of the scale applied to a block with exponent `exp` when `world` ranks add it.
int scale_shift(std::int8_t exp, int world);
// Largest magnitude one contribution may have so that `world` of them fit int32.
std::int32_t contribution_limit(int world);

// Writes n big-endian int32 values: clamp(round_half_even(v * 2^scale_shift), +-limit).
// exp must be an ordinary exponent (not kExpZero / kExpNonFinite: callers send zeros then).
void quantize(const float* in, std::size_t n, std::int8_t exp, int world, std::byte* out);

// out[i] = float(sum_i) * 2^-scale_shift / divisor, where sum_i is the big-endian int32 at in:
// float(sum_i) rounds once, the power-of-two unscaling is exact and the division rounds once (a
// divisor that is a power of two is folded into the unscaling, which gives the same float), so
// AVG is the float32 sum divided by the contributor count, as a framework's sum-then-divide.
// exp == kExpZero writes zeros; exp == kExpNonFinite writes quiet NaNs.
void dequantize(const std::byte* in, std::size_t n, std::int8_t exp, int world,
                std::uint32_t divisor, float* out);

// int32 <-> big-endian int32. `divisor` > 1 divides (truncating towards zero) for AVG.
void int32_to_wire(const std::int32_t* in, std::size_t n, std::byte* out);
void int32_from_wire(const std::byte* in, std::size_t n, std::uint32_t divisor, std::int32_t* out);

// Which kernel set is active ("avx512", "avx2" or "scalar").
std::string_view active_kernels();

// Kernel sets, exposed so tests and benchmarks can compare them directly.
struct Kernels {
  std::string_view name;
  float (*max_abs)(const float* in, std::size_t n, bool* non_finite);
  void (*quantize)(const float* in, std::size_t n, float scale, float limit, std::byte* out);
  // out = float(in) * factor, then / divisor unless divisor is 1 (exactly: no division then).
  void (*dequantize)(const std::byte* in, std::size_t n, float factor, float divisor, float* out);
  void (*to_wire)(const std::int32_t* in, std::size_t n, std::byte* out);
  void (*from_wire)(const std::byte* in, std::size_t n, std::int32_t* out);
};
const Kernels& scalar_kernels();
const Kernels* avx2_kernels();    // nullptr when the CPU lacks AVX2
const Kernels* avx512_kernels();  // nullptr when the CPU lacks AVX-512 F and BW
// Select the active set: "auto" (default: the widest the CPU has), "scalar", "avx2" or "avx512".
// Returns false if unavailable.
bool select_kernels(std::string_view name);

}  // namespace dpa::quant
