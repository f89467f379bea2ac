// SPDX-License-Identifier: Apache-2.0
// Block floating point on a CUDA device, bit-identical to the host path: the exponents libdpa
// computes (quant::block_exponent) and the floats it writes (quant::dequantize, then the
// rounding torch's CPU conversion applies for float16/bfloat16 tensors). What stays on the host
// is the part that needs the exponent negotiated through the switch: scaling and rounding into
// int32 at send time. Every pointer is device memory; every call is queued on `stream` and
// throws std::runtime_error if the launch fails.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "dpa/block_float.hpp"

namespace dpa::quant::cuda {

enum class Element : std::uint8_t { float32, float16, bfloat16 };

// Blocks of `payload` values of the n values at `in` (the last block may be shorter): writes
// each block's exponent to exponents[block] and, unless `type` is float32 (then `widened` is
// unused and may be null), the values as float32 to `widened`.
void prepare_blocks(const void* in, Element type, std::size_t n, std::size_t payload,
                    float* widened, std::int8_t* exponents, cudaStream_t stream);

// The floats of a wire result (dpa/block_float.hpp): n big-endian int32 sums at `wire`, one
// WireBlock per block of `payload` values, written to `out` as `type`. Blocks marked missed
// (divisor 0) are left as `out` holds them. `wire` may be `out` itself when type is float32.
void finish_blocks(const std::byte* wire, const block_float::WireBlock* blocks, std::size_t n,
                   std::size_t payload, int world, void* out, Element type, cudaStream_t stream);

}  // namespace dpa::quant::cuda
