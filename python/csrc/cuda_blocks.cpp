#include "cuda_blocks.hpp"

#ifdef DPA_WITH_CUDA

#include <c10/core/StreamGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include "dpa/error.hpp"

namespace dpa::torch_backend {
namespace {

constexpr std::size_t kWireBlockBytes = sizeof(block_float::WireBlock);
static_assert(kWireBlockBytes == 8, "WireBlock travels to the device as 8 bytes");

// DPA_TORCH_CUDA_BLOCKS: "gpu" (default) or "host" (CUDA tensors quantised by libdpa on the
// host, as in builds without the kernels). Read once.
bool gpu_blocks_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("DPA_TORCH_CUDA_BLOCKS");
    const std::string_view value = env != nullptr ? env : "";
    if (value.empty() || value == "gpu") return true;
    if (value == "host") return false;
    throw ConfigError("DPA_TORCH_CUDA_BLOCKS=" + std::string(value) + ": expected gpu or host");
  }();
  return enabled;
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
         gpu_blocks_enabled();
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
