// SPDX-License-Identifier: Apache-2.0
// CUDA float tensors with the block floating point on the GPU (docs/pytorch.md). Before
// an operation a kernel widens float16/bfloat16 to float32 and computes each block's exponent on
// the tensor's side stream, and the host receives both, so libdpa skips its own scan of the
// values; libdpa then delivers the raw wire result, which goes back to the device as it came
// off the network and a kernel dequantises it into the tensor. Bit-identical to the host path.
// Only in builds where torch has CUDA and nvcc was found (DPA_WITH_CUDA).
#pragma once

#ifdef DPA_WITH_CUDA

#include <cstddef>
#include <cstdint>

#include <ATen/ATen.h>
#include <c10/core/Stream.h>

#include "cuda/host_buffer_pool.hpp"
#include "dpa/context.hpp"
#include "quant/cuda/block_float_cuda.hpp"

namespace dpa::torch_backend {

class CudaBlocks {
 public:
  // Whether `tensor` goes this way: a CUDA float32/float16/bfloat16 tensor of at least
  // DPA_TORCH_CUDA_BLOCKS_MIN_BYTES, or of any size with DPA_TORCH_CUDA_BLOCKS=gpu, never with
  // DPA_TORCH_CUDA_BLOCKS=host.
  static bool applies(const at::Tensor& tensor);

  // `flat`: the contiguous tensor; `host`: its float32 staging buffer (pinned, flat's length);
  // blocks of `payload` values, as the context that reduces it cuts them, among `world` ranks.
  CudaBlocks(const at::Tensor& flat, const at::Tensor& host, std::uint32_t payload, int world,
             HostBufferPool& pool);

  // Elements [begin, begin + count) (begin on a block boundary) are a chunk of their own.
  // stage_in queues on `stream` the kernel and the copies of the chunk's values and exponents
  // to the host; options_for adds the libdpa options that use them; stage_out queues on
  // `stream` the copy of the chunk's wire result to the device and the kernel that finishes it.
  void stage_in(std::size_t begin, std::size_t count, c10::Stream stream);
  [[nodiscard]] AllreduceOptions options_for(std::size_t begin, AllreduceOptions options) const;
  void stage_out(std::size_t begin, std::size_t count, c10::Stream stream);

 private:
  [[nodiscard]] std::size_t blocks_of(std::size_t count) const;

  at::Tensor flat_;
  at::Tensor host_;
  quant::cuda::Element element_;
  std::uint32_t payload_;
  int world_;
  at::Tensor device_values_;  // float32 on the device: flat_ itself when it is float32
  // Per block: the wire result's WireBlock, then the exponent; on the host (pinned) and device.
  HostBuffer host_metadata_;
  at::Tensor host_wire_blocks_;  // bytes, 8 per block
  at::Tensor host_exponents_;    // int8
  at::Tensor device_wire_blocks_;
  at::Tensor device_exponents_;
};

}  // namespace dpa::torch_backend

#endif  // DPA_WITH_CUDA
