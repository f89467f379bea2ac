// SPDX-License-Identifier: Apache-2.0
#include "cuda/cuda_blocks.hpp"

#ifdef DPA_WITH_CUDA

#include <c10/core/StreamGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <limits>
#include <string>

#include "dpa/env.hpp"
#include "dpa/error.hpp"

namespace dpa::torch_backend {
namespace {

constexpr std::size_t kWireBlockBytes = sizeof(block_float::WireBlock);
// Where the GPU's block floating point starts to pay with DPA_TORCH_CUDA_BLOCKS=auto (one H200
// shared by 4 ranks, per operation, host / GPU: 4 KiB 734 / 1122 us, 1 MiB 1133 / 1855 us,
// 16 MiB 7.6 / 7.6 ms, 64 MiB 30.3 / 28.9 ms).
constexpr std::size_t kDefaultGpuBlocksMinBytes = std::size_t{32} << 20;
static_assert(kWireBlockBytes == 8, "WireBlock travels to the device as 8 bytes");

// DPA_TORCH_CUDA_BLOCKS: "auto" (default: the GPU for tensors of at least
// DPA_TORCH_CUDA_BLOCKS_MIN_BYTES, the host below, where the kernels' launches and the extra
// copies of the exponents cost more than the host's scan of a few blocks), "gpu" (always) or
// "host" (never: quantised by libdpa on the host, as in builds without the kernels). Read once.
std::size_t gpu_blocks_min_bytes() {
  static const std::size_t min_bytes = [] {
    constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();
    const std::string value = env_string("DPA_TORCH_CUDA_BLOCKS").value_or("auto");
    if (value == "gpu") return std::size_t{0};
    if (value == "host") return kNever;
    if (value != "auto") {
      throw ConfigError("DPA_TORCH_CUDA_BLOCKS=" + value + ": expected auto, gpu or host");
    }
    return static_cast<std::size_t>(
        env_integer("DPA_TORCH_CUDA_BLOCKS_MIN_BYTES", 0, std::numeric_limits<std::int64_t>::max())
            .value_or(kDefaultGpuBlocksMinBytes));
  }();
  return min_bytes;
}

quant::cuda::Element element_of(at::ScalarType type) {
  switch (type) {
    case at::kHalf:
      return quant::cuda::Element::float16;
    case at::kBFloat16:
      return quant::cuda::Element::bfloat16;
    default:
      return quant::cuda::Element::float32;
  }
}

cudaStream_t native(c10::Stream stream) { return c10::cuda::CUDAStream(stream).stream(); }

}  // namespace

bool CudaBlocks::applies(const at::Tensor& tensor) {
  const auto type = tensor.scalar_type();
  return tensor.is_cuda() && (type == at::kFloat || type == at::kHalf || type == at::kBFloat16) &&
         static_cast<std::size_t>(tensor.nbytes()) >= gpu_blocks_min_bytes();
}

CudaBlocks::CudaBlocks(const at::Tensor& flat, const at::Tensor& host, std::uint32_t payload,
                       int world, HostBufferPool& pool)
    : flat_(flat),
      host_(host),
      element_(element_of(flat.scalar_type())),
      payload_(payload),
      world_(world) {
  const std::size_t blocks = blocks_of(static_cast<std::size_t>(flat.numel()));
  const auto wire_bytes = static_cast<std::int64_t>(blocks * kWireBlockBytes);
  const auto metadata_bytes = wire_bytes + static_cast<std::int64_t>(blocks);
  device_values_ =
      flat.scalar_type() == at::kFloat ? flat : at::empty_like(flat, flat.options().dtype(at::kFloat));
  host_metadata_ = pool.acquire(static_cast<std::size_t>(metadata_bytes), /*pinned=*/true);
  const at::Tensor host_bytes = host_metadata_.view(at::kByte, metadata_bytes);
  host_wire_blocks_ = host_bytes.narrow(0, 0, wire_bytes);
  host_exponents_ = host_bytes.narrow(0, wire_bytes, static_cast<std::int64_t>(blocks));
  const at::Tensor device_bytes = at::empty({metadata_bytes}, flat.options().dtype(at::kByte));
  device_wire_blocks_ = device_bytes.narrow(0, 0, wire_bytes);
  device_exponents_ = device_bytes.narrow(0, wire_bytes, static_cast<std::int64_t>(blocks));
}

std::size_t CudaBlocks::blocks_of(std::size_t count) const {
  return (count + payload_ - 1) / payload_;
}

void CudaBlocks::stage_in(std::size_t begin, std::size_t count, c10::Stream stream) {
  c10::StreamGuard on_stream(stream);
  const auto first = static_cast<std::int64_t>(begin / payload_);
  const auto blocks = static_cast<std::int64_t>(blocks_of(count));
  const auto b = static_cast<std::int64_t>(begin);
  const auto n = static_cast<std::int64_t>(count);
  at::Tensor values = device_values_.narrow(0, b, n);
  at::Tensor exponents = device_exponents_.narrow(0, first, blocks);
  quant::cuda::prepare_blocks(flat_.narrow(0, b, n).data_ptr(), element_, count, payload_,
                              element_ == quant::cuda::Element::float32
                                  ? nullptr
                                  : values.data_ptr<float>(),
                              static_cast<std::int8_t*>(exponents.data_ptr()), native(stream));
  host_.narrow(0, b, n).copy_(values, /*non_blocking=*/true);
  host_exponents_.narrow(0, first, blocks).copy_(exponents, /*non_blocking=*/true);
}

AllreduceOptions CudaBlocks::options_for(std::size_t begin, AllreduceOptions options) const {
  const std::size_t first = begin / payload_;
  options.block_exponents = static_cast<const std::int8_t*>(host_exponents_.data_ptr()) + first;
  options.wire_result = static_cast<block_float::WireBlock*>(host_wire_blocks_.data_ptr()) + first;
  return options;
}

void CudaBlocks::stage_out(std::size_t begin, std::size_t count, c10::Stream stream) {
  c10::StreamGuard on_stream(stream);
  const auto first = static_cast<std::int64_t>(begin / payload_);
  const auto wire_bytes = static_cast<std::int64_t>(blocks_of(count) * kWireBlockBytes);
  const auto b = static_cast<std::int64_t>(begin);
  const auto n = static_cast<std::int64_t>(count);
  // The wire sums are copied as the float32 bytes they occupy in the staging buffer.
  at::Tensor wire = device_values_.narrow(0, b, n);
  wire.copy_(host_.narrow(0, b, n), /*non_blocking=*/true);
  at::Tensor blocks =
      device_wire_blocks_.narrow(0, first * static_cast<std::int64_t>(kWireBlockBytes), wire_bytes);
  blocks.copy_(host_wire_blocks_.narrow(0, first * static_cast<std::int64_t>(kWireBlockBytes),
                                        wire_bytes),
               /*non_blocking=*/true);
  quant::cuda::finish_blocks(static_cast<const std::byte*>(wire.data_ptr()),
                             static_cast<const block_float::WireBlock*>(blocks.data_ptr()), count,
                             payload_, world_, flat_.narrow(0, b, n).data_ptr(), element_,
                             native(stream));
}

}  // namespace dpa::torch_backend

#endif  // DPA_WITH_CUDA
