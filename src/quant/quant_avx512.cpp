// AVX-512 kernels (F and BW): the AVX2 kernels' operations on 16 lanes instead of 8, so their
// results are bit-identical to them and to the scalar ones. This is the only translation unit
// compiled with -mavx512f -mavx512bw, and nothing here runs before avx512_kernels() has checked
// the CPU. Pointers may have any alignment; a tail shorter than 16 values uses masked loads and
// stores, which never touch the lanes outside the buffer.
#include <immintrin.h>

#include <bit>

#include "quant/quant.hpp"

namespace dpa::quant {
namespace {

constexpr std::size_t kLanes = 16;

// Reverses the bytes of every 32-bit lane: host order <-> big-endian wire order.
__m512i bswap32(__m512i v) {
  const __m512i order = _mm512_set4_epi32(0x0c0d0e0f, 0x08090a0b, 0x04050607, 0x00010203);
  return _mm512_shuffle_epi8(v, order);
}

// Lanes [0, count), count < 16.
__mmask16 tail_mask(std::size_t count) { return static_cast<__mmask16>((1U << count) - 1U); }

__m512i load(const void* p) { return _mm512_loadu_si512(p); }
void store(void* p, __m512i v) { _mm512_storeu_si512(p, v); }
__m512i load_tail(const void* p, __mmask16 mask) { return _mm512_maskz_loadu_epi32(mask, p); }
void store_tail(void* p, __mmask16 mask, __m512i v) { _mm512_mask_storeu_epi32(p, mask, v); }

// Integer max over the magnitude bits, as the other kernels (masked-off lanes read 0).
float max_abs(const float* in, std::size_t n, bool* non_finite) {
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  __m512i acc = _mm512_setzero_si512();
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc = _mm512_max_epi32(acc, _mm512_and_si512(load(in + i), magnitude));
  if (i < n) acc = _mm512_max_epi32(acc, _mm512_and_si512(load_tail(in + i, tail_mask(n - i)), magnitude));
  const auto max_bits = static_cast<std::uint32_t>(_mm512_reduce_max_epi32(acc));
  *non_finite = max_bits >= 0x7f800000U;
  return std::bit_cast<float>(max_bits);
}

void quantize(const float* in, std::size_t n, float scale, float limit, std::byte* out) {
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 hi = _mm512_set1_ps(limit);
  const __m512 lo = _mm512_set1_ps(-limit);
  // vmaxps/vminps return the second operand on NaN, so a NaN clamps to -limit (as AVX2's).
  const auto convert = [&](__m512i bits) {
    const __m512 x = _mm512_mul_ps(_mm512_castsi512_ps(bits), vscale);
    return bswap32(_mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(x, lo), hi)));
  };
  std::size_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const __m512i a = convert(load(in + i));
    const __m512i b = convert(load(in + i + kLanes));
    const __m512i c = convert(load(in + i + 2 * kLanes));
    const __m512i d = convert(load(in + i + 3 * kLanes));
    store(out + 4 * i, a);
    store(out + 4 * (i + kLanes), b);
    store(out + 4 * (i + 2 * kLanes), c);
    store(out + 4 * (i + 3 * kLanes), d);
  }
  for (; i + kLanes <= n; i += kLanes) store(out + 4 * i, convert(load(in + i)));
  if (i < n) {
    const __mmask16 mask = tail_mask(n - i);
    store_tail(out + 4 * i, mask, convert(load_tail(in + i, mask)));
  }
}

void dequantize(const std::byte* in, std::size_t n, float factor, float* out) {
  const __m512 vfactor = _mm512_set1_ps(factor);
  const auto convert = [&](__m512i wire) {
    return _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(bswap32(wire)), vfactor));
  };
  std::size_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const __m512i a = convert(load(in + 4 * i));
    const __m512i b = convert(load(in + 4 * (i + kLanes)));
    const __m512i c = convert(load(in + 4 * (i + 2 * kLanes)));
    const __m512i d = convert(load(in + 4 * (i + 3 * kLanes)));
    store(out + i, a);
    store(out + i + kLanes, b);
    store(out + i + 2 * kLanes, c);
    store(out + i + 3 * kLanes, d);
  }
  for (; i + kLanes <= n; i += kLanes) store(out + i, convert(load(in + 4 * i)));
  if (i < n) {
    const __mmask16 mask = tail_mask(n - i);
    store_tail(out + i, mask, convert(load_tail(in + 4 * i, mask)));
  }
}

void to_wire(const std::int32_t* in, std::size_t n, std::byte* out) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(out + 4 * i, bswap32(load(in + i)));
  if (i < n) {
    const __mmask16 mask = tail_mask(n - i);
    store_tail(out + 4 * i, mask, bswap32(load_tail(in + i, mask)));
  }
}

void from_wire(const std::byte* in, std::size_t n, std::int32_t* out) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(out + i, bswap32(load(in + 4 * i)));
  if (i < n) {
    const __mmask16 mask = tail_mask(n - i);
    store_tail(out + i, mask, bswap32(load_tail(in + 4 * i, mask)));
  }
}

constexpr Kernels kAvx512{"avx512", max_abs, quantize, dequantize, to_wire, from_wire};

}  // namespace

const Kernels* avx512_kernels() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? &kAvx512 : nullptr;
}

}  // namespace dpa::quant
