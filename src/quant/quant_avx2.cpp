// AVX2 kernels. This is the only translation unit compiled with -mavx2, and nothing here runs
// before avx2_kernels() has checked the CPU. Pointers may have any alignment (packet payloads sit
// at byte 40), so every access is an unaligned load/store; a tail shorter than 8 values uses
// masked loads/stores, which never touch the lanes outside the buffer.
#include <immintrin.h>

#include <bit>

#include "quant/quant.hpp"

namespace dpa::quant {
namespace {

constexpr std::size_t kLanes = 8;

// Reverses the bytes of every 32-bit lane: host order <-> big-endian wire order.
__m256i bswap32(__m256i v) {
  const __m256i order = _mm256_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12,  //
                                         3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12);
  return _mm256_shuffle_epi8(v, order);
}

// All-ones in lanes [0, count), count < 8.
__m256i tail_mask(std::size_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

__m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
void store(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
__m256i load_tail(const void* p, __m256i mask) {
  return _mm256_maskload_epi32(static_cast<const int*>(p), mask);
}
void store_tail(void* p, __m256i mask, __m256i v) {
  _mm256_maskstore_epi32(static_cast<int*>(p), mask, v);
}

// Same integer-max-over-magnitude-bits scheme as the scalar kernel (masked-off lanes read 0).
float max_abs(const float* in, std::size_t n, bool* non_finite) {
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
  __m256i acc = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    acc = _mm256_max_epi32(acc, _mm256_and_si256(load(in + i), magnitude));
  }
  if (i < n) {
    acc = _mm256_max_epi32(acc, _mm256_and_si256(load_tail(in + i, tail_mask(n - i)), magnitude));
  }
  __m128i m = _mm_max_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  const auto max_bits = static_cast<std::uint32_t>(_mm_cvtsi128_si32(m));
  *non_finite = max_bits >= 0x7f800000U;
  return std::bit_cast<float>(max_bits);
}

void quantize(const float* in, std::size_t n, float scale, float limit, std::byte* out) {
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 hi = _mm256_set1_ps(limit);
  const __m256 lo = _mm256_set1_ps(-limit);
  // vmaxps/vminps return the second operand on NaN, so a NaN clamps to -limit.
  const auto convert = [&](__m256i bits) {
    const __m256 x = _mm256_mul_ps(_mm256_castsi256_ps(bits), vscale);
    return bswap32(_mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(x, lo), hi)));
  };
  std::size_t i = 0;
  // Four independent vectors per iteration keep the multiply/convert ports busy.
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const __m256i a = convert(load(in + i));
    const __m256i b = convert(load(in + i + kLanes));
    const __m256i c = convert(load(in + i + 2 * kLanes));
    const __m256i d = convert(load(in + i + 3 * kLanes));
    store(out + 4 * i, a);
    store(out + 4 * (i + kLanes), b);
    store(out + 4 * (i + 2 * kLanes), c);
    store(out + 4 * (i + 3 * kLanes), d);
  }
  for (; i + kLanes <= n; i += kLanes) store(out + 4 * i, convert(load(in + i)));
  if (i < n) {
    const __m256i mask = tail_mask(n - i);
    store_tail(out + 4 * i, mask, convert(load_tail(in + i, mask)));
  }
}

void dequantize(const std::byte* in, std::size_t n, float factor, float* out) {
  const __m256 vfactor = _mm256_set1_ps(factor);
  const auto convert = [&](__m256i wire) {
    return _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(bswap32(wire)), vfactor));
  };
  std::size_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const __m256i a = convert(load(in + 4 * i));
    const __m256i b = convert(load(in + 4 * (i + kLanes)));
    const __m256i c = convert(load(in + 4 * (i + 2 * kLanes)));
    const __m256i d = convert(load(in + 4 * (i + 3 * kLanes)));
    store(out + i, a);
    store(out + i + kLanes, b);
    store(out + i + 2 * kLanes, c);
    store(out + i + 3 * kLanes, d);
  }
  for (; i + kLanes <= n; i += kLanes) store(out + i, convert(load(in + 4 * i)));
  if (i < n) {
    const __m256i mask = tail_mask(n - i);
    store_tail(out + i, mask, convert(load_tail(in + 4 * i, mask)));
  }
}

void to_wire(const std::int32_t* in, std::size_t n, std::byte* out) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(out + 4 * i, bswap32(load(in + i)));
  if (i < n) {
    const __m256i mask = tail_mask(n - i);
    store_tail(out + 4 * i, mask, bswap32(load_tail(in + i, mask)));
  }
}

void from_wire(const std::byte* in, std::size_t n, std::int32_t* out) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(out + i, bswap32(load(in + 4 * i)));
  if (i < n) {
    const __m256i mask = tail_mask(n - i);
    store_tail(out + i, mask, bswap32(load_tail(in + 4 * i, mask)));
  }
}

constexpr Kernels kAvx2{"avx2", max_abs, quantize, dequantize, to_wire, from_wire};

}  // namespace

const Kernels* avx2_kernels() { return __builtin_cpu_supports("avx2") ? &kAvx2 : nullptr; }

}  // namespace dpa::quant
