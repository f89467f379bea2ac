// SPDX-License-Identifier: Apache-2.0
// The SIMD kernels once, over a vector width: quant_avx2.cpp and quant_avx512.cpp each define the
// operations of their instruction set as a traits type V and instantiate these templates with it
// (only those two translation units include this header, each compiled for its instruction set).
// Every kernel does, lane for lane, what the scalar kernel does, so all sets are bit-identical.
// Pointers may have any alignment (packet payloads sit at byte 40): every access is an unaligned
// load/store, and a tail shorter than V::kLanes values uses masked loads/stores, which never touch
// the lanes outside the buffer.
//
// V provides: Int and Float vector types, kLanes, Mask and tail_mask(count < kLanes), load, store,
// load_tail, store_tail, bswap32 (host <-> big-endian in every 32-bit lane), set1_int, zero,
// max_int, and_int, reduce_max (of the lanes, as uint32), set1_float, mul, div, max_float,
// min_float, to_int (round to nearest even), to_float, as_float, as_int.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "quant/quant.hpp"

namespace dpa::quant::simd {

// Integer max over the magnitude bits, as the scalar kernel (masked-off lanes read 0).
template <class V>
float max_abs(const float* in, std::size_t n, bool* non_finite) {
  const typename V::Int magnitude = V::set1_int(0x7fffffff);
  typename V::Int acc = V::zero();
  std::size_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) acc = V::max_int(acc, V::and_int(V::load(in + i), magnitude));
  if (i < n) acc = V::max_int(acc, V::and_int(V::load_tail(in + i, V::tail_mask(n - i)), magnitude));
  const std::uint32_t max_bits = V::reduce_max(acc);
  *non_finite = max_bits >= 0x7f800000U;
  return std::bit_cast<float>(max_bits);
}

template <class V>
void quantize(const float* in, std::size_t n, float scale, float limit, std::byte* out) {
  const typename V::Float vscale = V::set1_float(scale);
  const typename V::Float hi = V::set1_float(limit);
  const typename V::Float lo = V::set1_float(-limit);
  // vmaxps/vminps return the second operand on NaN, so a NaN clamps to -limit.
  const auto convert = [&](typename V::Int bits) {
    const typename V::Float x = V::mul(V::as_float(bits), vscale);
    return V::bswap32(V::to_int(V::min_float(V::max_float(x, lo), hi)));
  };
  constexpr std::size_t kLanes = V::kLanes;
  std::size_t i = 0;
  // Four independent vectors per iteration keep the multiply/convert ports busy.
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const auto a = convert(V::load(in + i));
    const auto b = convert(V::load(in + i + kLanes));
    const auto c = convert(V::load(in + i + 2 * kLanes));
    const auto d = convert(V::load(in + i + 3 * kLanes));
    V::store(out + 4 * i, a);
    V::store(out + 4 * (i + kLanes), b);
    V::store(out + 4 * (i + 2 * kLanes), c);
    V::store(out + 4 * (i + 3 * kLanes), d);
  }
  for (; i + kLanes <= n; i += kLanes) V::store(out + 4 * i, convert(V::load(in + i)));
  if (i < n) {
    const auto mask = V::tail_mask(n - i);
    V::store_tail(out + 4 * i, mask, convert(V::load_tail(in + i, mask)));
  }
}

// out = float(sum) * factor, divided by `divisor` when kDivide (the scalar kernel's two loops).
template <class V, bool kDivide>
void dequantize_with(const std::byte* in, std::size_t n, float factor, float divisor, float* out) {
  const typename V::Float vfactor = V::set1_float(factor);
  const typename V::Float vdivisor = V::set1_float(divisor);
  const auto convert = [&](typename V::Int wire) {
    const typename V::Float unscaled = V::mul(V::to_float(V::bswap32(wire)), vfactor);
    if constexpr (kDivide) return V::as_int(V::div(unscaled, vdivisor));
    return V::as_int(unscaled);
  };
  constexpr std::size_t kLanes = V::kLanes;
  std::size_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const auto a = convert(V::load(in + 4 * i));
    const auto b = convert(V::load(in + 4 * (i + kLanes)));
    const auto c = convert(V::load(in + 4 * (i + 2 * kLanes)));
    const auto d = convert(V::load(in + 4 * (i + 3 * kLanes)));
    V::store(out + i, a);
    V::store(out + i + kLanes, b);
    V::store(out + i + 2 * kLanes, c);
    V::store(out + i + 3 * kLanes, d);
  }
  for (; i + kLanes <= n; i += kLanes) V::store(out + i, convert(V::load(in + 4 * i)));
  if (i < n) {
    const auto mask = V::tail_mask(n - i);
    V::store_tail(out + i, mask, convert(V::load_tail(in + 4 * i, mask)));
  }
}

template <class V>
void dequantize(const std::byte* in, std::size_t n, float factor, float divisor, float* out) {
  if (divisor == 1.0f) return dequantize_with<V, false>(in, n, factor, divisor, out);
  dequantize_with<V, true>(in, n, factor, divisor, out);
}

template <class V>
void to_wire(const std::int32_t* in, std::size_t n, std::byte* out) {
  std::size_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::store(out + 4 * i, V::bswap32(V::load(in + i)));
  if (i < n) {
    const auto mask = V::tail_mask(n - i);
    V::store_tail(out + 4 * i, mask, V::bswap32(V::load_tail(in + i, mask)));
  }
}

template <class V>
void from_wire(const std::byte* in, std::size_t n, std::int32_t* out) {
  std::size_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::store(out + i, V::bswap32(V::load(in + 4 * i)));
  if (i < n) {
    const auto mask = V::tail_mask(n - i);
    V::store_tail(out + i, mask, V::bswap32(V::load_tail(in + 4 * i, mask)));
  }
}

template <class V>
constexpr Kernels kernels(std::string_view name) {
  return Kernels{name, max_abs<V>, quantize<V>, dequantize<V>, to_wire<V>, from_wire<V>};
}

}  // namespace dpa::quant::simd
