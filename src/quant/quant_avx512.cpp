// SPDX-License-Identifier: Apache-2.0
// AVX-512 kernels (F and BW): the operations quant_simd.hpp's kernels need, on 16 lanes. This is
// the only translation unit compiled with -mavx512f -mavx512bw, and nothing here runs before
// avx512_kernels() has checked the CPU.
#include <immintrin.h>

#include <cstdint>

#include "quant/quant_simd.hpp"

namespace dpa::quant {
namespace {

struct Avx512 {
  using Int = __m512i;
  using Float = __m512;
  using Mask = __mmask16;
  static constexpr std::size_t kLanes = 16;

  static Mask tail_mask(std::size_t count) { return static_cast<__mmask16>((1U << count) - 1U); }
  static Int load(const void* p) { return _mm512_loadu_si512(p); }
  static void store(void* p, Int v) { _mm512_storeu_si512(p, v); }
  static Int load_tail(const void* p, Mask mask) { return _mm512_maskz_loadu_epi32(mask, p); }
  static void store_tail(void* p, Mask mask, Int v) { _mm512_mask_storeu_epi32(p, mask, v); }
  static Int bswap32(Int v) {
    return _mm512_shuffle_epi8(v, _mm512_set4_epi32(0x0c0d0e0f, 0x08090a0b, 0x04050607, 0x00010203));
  }
  static Int set1_int(std::int32_t v) { return _mm512_set1_epi32(v); }
  static Int zero() { return _mm512_setzero_si512(); }
  static Int max_int(Int a, Int b) { return _mm512_max_epi32(a, b); }
  static Int and_int(Int a, Int b) { return _mm512_and_si512(a, b); }
  static std::uint32_t reduce_max(Int v) { return static_cast<std::uint32_t>(_mm512_reduce_max_epi32(v)); }
  static Float set1_float(float v) { return _mm512_set1_ps(v); }
  static Float mul(Float a, Float b) { return _mm512_mul_ps(a, b); }
  static Float div(Float a, Float b) { return _mm512_div_ps(a, b); }
  static Float max_float(Float a, Float b) { return _mm512_max_ps(a, b); }
  static Float min_float(Float a, Float b) { return _mm512_min_ps(a, b); }
  static Int to_int(Float v) { return _mm512_cvtps_epi32(v); }
  static Float to_float(Int v) { return _mm512_cvtepi32_ps(v); }
  static Float as_float(Int v) { return _mm512_castsi512_ps(v); }
  static Int as_int(Float v) { return _mm512_castps_si512(v); }
};

constexpr Kernels kAvx512 = simd::kernels<Avx512>("avx512");

}  // namespace

const Kernels* avx512_kernels() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? &kAvx512 : nullptr;
}

}  // namespace dpa::quant
