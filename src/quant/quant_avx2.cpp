// SPDX-License-Identifier: Apache-2.0
// AVX2 kernels: the operations quant_simd.hpp's kernels need, on 8 lanes. This is the only
// translation unit compiled with -mavx2, and nothing here runs before avx2_kernels() has checked
// the CPU.
#include <immintrin.h>

#include <cstdint>

#include "quant/quant_simd.hpp"

namespace dpa::quant {
namespace {

struct Avx2 {
  using Int = __m256i;
  using Float = __m256;
  using Mask = __m256i;  // all-ones in the lanes to touch
  static constexpr std::size_t kLanes = 8;

  static Mask tail_mask(std::size_t count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Int load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static void store(void* p, Int v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
  static Int load_tail(const void* p, Mask mask) { return _mm256_maskload_epi32(static_cast<const int*>(p), mask); }
  static void store_tail(void* p, Mask mask, Int v) { _mm256_maskstore_epi32(static_cast<int*>(p), mask, v); }
  static Int bswap32(Int v) {
    const __m256i order = _mm256_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12,  //
                                           3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12);
    return _mm256_shuffle_epi8(v, order);
  }
  static Int set1_int(std::int32_t v) { return _mm256_set1_epi32(v); }
  static Int zero() { return _mm256_setzero_si256(); }
  static Int max_int(Int a, Int b) { return _mm256_max_epi32(a, b); }
  static Int and_int(Int a, Int b) { return _mm256_and_si256(a, b); }
  static std::uint32_t reduce_max(Int v) {
    __m128i m = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    return static_cast<std::uint32_t>(_mm_cvtsi128_si32(m));
  }
  static Float set1_float(float v) { return _mm256_set1_ps(v); }
  static Float mul(Float a, Float b) { return _mm256_mul_ps(a, b); }
  static Float div(Float a, Float b) { return _mm256_div_ps(a, b); }
  static Float max_float(Float a, Float b) { return _mm256_max_ps(a, b); }
  static Float min_float(Float a, Float b) { return _mm256_min_ps(a, b); }
  static Int to_int(Float v) { return _mm256_cvtps_epi32(v); }
  static Float to_float(Int v) { return _mm256_cvtepi32_ps(v); }
  static Float as_float(Int v) { return _mm256_castsi256_ps(v); }
  static Int as_int(Float v) { return _mm256_castps_si256(v); }
};

constexpr Kernels kAvx2 = simd::kernels<Avx2>("avx2");

}  // namespace

const Kernels* avx2_kernels() { return __builtin_cpu_supports("avx2") ? &kAvx2 : nullptr; }

}  // namespace dpa::quant
