// SPDX-License-Identifier: Apache-2.0
// One thread block per data block in both kernels: a data block is one packet's payload
// (hundreds to thousands of values), so each CTA reduces its own maximum without atomics.
// Arithmetic uses the _rn intrinsics and is built without fused multiply-add and with
// denormals (CMake / setup.py: -fmad=false -ftz=false), as the host kernels do.
#include "quant/cuda/block_float_cuda.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <type_traits>
#include <string>

namespace dpa::quant::cuda {
namespace {

using block_float::kExpMax;
using block_float::kExpMin;
using block_float::kExpNonFinite;
using block_float::kExpZero;
using block_float::WireBlock;

constexpr unsigned kThreads = 256;
constexpr std::uint32_t kMagnitude = 0x7fffffffU;
constexpr std::uint32_t kExpMaxBits = static_cast<std::uint32_t>(kExpMax + 127) << 23;  // 2^kExpMax

// bfloat16 as its bits: widening and narrowing are done here, to torch's CPU rounding.
struct Bf16 {
  std::uint16_t bits;
};

__device__ float widen(float v) { return v; }
__device__ float widen(__half v) { return __half2float(v); }
__device__ float widen(Bf16 v) { return __uint_as_float(static_cast<std::uint32_t>(v.bits) << 16); }

// Round to nearest even, as c10's float -> Half / BFloat16 conversions on the CPU do. NaN never
// reaches these (non-finite blocks are filled with nan_of).
template <typename T>
__device__ T narrow(float v);
template <>
__device__ float narrow<float>(float v) { return v; }
template <>
__device__ __half narrow<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ Bf16 narrow<Bf16>(float v) {
  const std::uint32_t bits = __float_as_uint(v);
  return Bf16{static_cast<std::uint16_t>((bits + 0x7fffU + ((bits >> 16) & 1U)) >> 16)};
}

// The quiet NaN quant::dequantize writes (0x7fc00000), as torch's CPU conversions narrow it.
template <typename T>
__device__ T nan_of();
template <>
__device__ float nan_of<float>() { return __uint_as_float(0x7fc00000U); }
template <>
__device__ __half nan_of<__half>() { return __ushort_as_half(0x7e00); }
template <>
__device__ Bf16 nan_of<Bf16>() { return Bf16{0x7fc0}; }

// quant::block_exponent from the largest magnitude's bit pattern: a normal 1.m * 2^(biased - 127)
// is below 2^(biased - 126) (strict, also when m == 0). Every denormal, and every normal below
// 2^kExpMin, gets kExpMin (kExpMin > -126).
__device__ std::int8_t exponent_of_max(std::uint32_t max_bits) {
  if (max_bits >= kExpMaxBits) return kExpNonFinite;  // also NaN and Inf: they sort above
  if (max_bits == 0) return kExpZero;
  const int e = static_cast<int>(max_bits >> 23) - 126;
  return static_cast<std::int8_t>(e < kExpMin ? kExpMin : e);
}

template <typename T>
__global__ void prepare_kernel(const T* in, std::size_t n, std::size_t payload, float* widened,
                               std::int8_t* exponents) {
  const std::size_t begin = static_cast<std::size_t>(blockIdx.x) * payload;
  const std::size_t end = begin + payload < n ? begin + payload : n;
  std::uint32_t max_bits = 0;
  for (std::size_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float v = widen(in[i]);
    if constexpr (!std::is_same_v<T, float>) widened[i] = v;
    max_bits = max(max_bits, __float_as_uint(v) & kMagnitude);
  }
  for (unsigned offset = 16; offset > 0; offset /= 2) {
    max_bits = max(max_bits, __shfl_down_sync(0xffffffffU, max_bits, offset));
  }
  __shared__ std::uint32_t warp_max[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = max_bits;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (unsigned w = 1; w < kThreads / 32; ++w) max_bits = max(max_bits, warp_max[w]);
  exponents[blockIdx.x] = exponent_of_max(max_bits);
}

// 2^k exactly, k in [-149, 127], normal or denormal.
__device__ float exact_power_of_two(int k) {
  return k >= -126 ? __uint_as_float(static_cast<std::uint32_t>(k + 127) << 23)
                   : __uint_as_float(1U << (k + 149));
}

template <typename T>
__global__ void finish_kernel(const std::uint32_t* wire, const WireBlock* blocks, std::size_t n,
                              std::size_t payload, int shift_base, T* out) {
  const WireBlock block = blocks[blockIdx.x];
  if (block.divisor == 0) return;  // missed: out holds this rank's own input
  const std::size_t begin = static_cast<std::size_t>(blockIdx.x) * payload;
  const std::size_t end = begin + payload < n ? begin + payload : n;
  if (block.exponent == kExpZero || block.exponent == kExpNonFinite) {
    const T fill = block.exponent == kExpZero ? narrow<T>(0.0f) : nan_of<T>();
    for (std::size_t i = begin + threadIdx.x; i < end; i += kThreads) out[i] = fill;
    return;
  }
  // quant::dequantize: float(sum) * 2^-shift is exact; a power-of-two divisor joins that factor,
  // any other is one IEEE division, so the result is float(sum) * 2^-shift / divisor rounded once.
  int unscale = block.exponent - shift_base;
  std::uint32_t divisor = block.divisor;
  if ((divisor & (divisor - 1)) == 0) {
    unscale -= __ffs(static_cast<int>(divisor)) - 1;
    divisor = 1;
  }
  const float factor = exact_power_of_two(unscale);
  const float d = __uint2float_rn(divisor);
  for (std::size_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const auto sum = static_cast<std::int32_t>(__byte_perm(wire[i], 0, 0x0123));
    const float unscaled = __fmul_rn(__int2float_rn(sum), factor);
    out[i] = narrow<T>(divisor == 1 ? unscaled : __fdiv_rn(unscaled, d));
  }
}

void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("dpa CUDA block floating point: ") + kernel +
                             " failed to launch: " + cudaGetErrorString(status));
  }
}

unsigned grid_of(std::size_t n, std::size_t payload) {
  return static_cast<unsigned>((n + payload - 1) / payload);
}

// ceil(log2(world)), as quant::scale_shift takes it.
int ceil_log2(int world) { return world <= 1 ? 0 : 32 - __builtin_clz(static_cast<unsigned>(world - 1)); }

template <typename T>
void launch_prepare(const void* in, std::size_t n, std::size_t payload, float* widened,
                    std::int8_t* exponents, cudaStream_t stream) {
  prepare_kernel<<<grid_of(n, payload), kThreads, 0, stream>>>(static_cast<const T*>(in), n,
                                                                payload, widened, exponents);
  check_launch("prepare_blocks");
}

template <typename T>
void launch_finish(const std::byte* wire, const WireBlock* blocks, std::size_t n,
                   std::size_t payload, int world, void* out, cudaStream_t stream) {
  finish_kernel<<<grid_of(n, payload), kThreads, 0, stream>>>(
      reinterpret_cast<const std::uint32_t*>(wire), blocks, n, payload, 31 - ceil_log2(world),
      static_cast<T*>(out));
  check_launch("finish_blocks");
}

}  // namespace

void prepare_blocks(const void* in, Element type, std::size_t n, std::size_t payload,
                    float* widened, std::int8_t* exponents, cudaStream_t stream) {
  if (n == 0) return;
  switch (type) {
    case Element::float32:
      return launch_prepare<float>(in, n, payload, widened, exponents, stream);
    case Element::float16:
      return launch_prepare<__half>(in, n, payload, widened, exponents, stream);
    case Element::bfloat16:
      return launch_prepare<Bf16>(in, n, payload, widened, exponents, stream);
  }
}

void finish_blocks(const std::byte* wire, const WireBlock* blocks, std::size_t n,
                   std::size_t payload, int world, void* out, Element type, cudaStream_t stream) {
  if (n == 0) return;
  switch (type) {
    case Element::float32:
      return launch_finish<float>(wire, blocks, n, payload, world, out, stream);
    case Element::float16:
      return launch_finish<__half>(wire, blocks, n, payload, world, out, stream);
    case Element::bfloat16:
      return launch_finish<Bf16>(wire, blocks, n, payload, world, out, stream);
  }
}

}  // namespace dpa::quant::cuda
