// SPDX-License-Identifier: Apache-2.0
#include "run/tensor_allreduce.hpp"

#include <algorithm>
#include <cstddef>
#include <utility>

#include <c10/core/StreamGuard.h>

#include "dpa/error.hpp"

namespace dpa::torch_backend {
namespace {

at::ScalarType wire_scalar_type(at::ScalarType type) {
  return type == at::kInt ? at::kInt : at::kFloat;
}

}  // namespace

bool dpa_supports(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.layout() != at::kStrided) return false;
  if (!tensor.device().is_cpu() && !tensor.device().is_cuda()) return false;
  const auto type = tensor.scalar_type();
  return type == at::kFloat || type == at::kHalf || type == at::kBFloat16 || type == at::kInt;
}

std::size_t chunk_elements(std::size_t count, int chunks, std::uint32_t payload) {
  const std::size_t parts = static_cast<std::size_t>(std::max(chunks, 1));
  const std::size_t per_chunk = (count + parts - 1) / parts;
  const std::size_t block = std::max<std::size_t>(payload, 1);
  return std::max<std::size_t>((per_chunk + block - 1) / block * block, block);
}

TensorAllreduce::TensorAllreduce(const at::Tensor& tensor, std::shared_ptr<c10::Event> caller_ready,
                                 std::size_t elements_per_chunk,
                                 [[maybe_unused]] const Context& context,
                                 HostBufferPool& pool, std::optional<SideStreams> streams)
    : tensor_(tensor), started_(std::chrono::steady_clock::now()) {
  const bool in_place = reduced_in_place(tensor_);
  if (!in_place) tensor_ = tensor_.detach();
  const at::ScalarType wire = wire_scalar_type(tensor_.scalar_type());
  wire_type_ = wire == at::kInt ? DataType::int32 : DataType::float32;
  const auto count = static_cast<std::size_t>(tensor_.numel());
  if (in_place) {
    // dpa reads and writes the caller's memory and nothing else touches it: no views to make
    // (each is a dispatched torch operation and an allocation, which a 4 KiB operation notices).
    host_ = tensor_;
  } else {
    prepare_copies(context, pool, std::move(caller_ready), std::move(streams));
  }

  const std::size_t step =
      elements_per_chunk == 0 ? std::max<std::size_t>(count, 1) : elements_per_chunk;
  for (std::size_t begin = 0; begin < count || chunks_.empty(); begin += step) {
    chunks_.push_back(Chunk{begin, std::min(step, count - begin), nullptr, Handle{}, false});
  }
}

bool TensorAllreduce::reduced_in_place(const at::Tensor& tensor) {
  return tensor.device().is_cpu() && tensor.is_contiguous() &&
         tensor.scalar_type() == wire_scalar_type(tensor.scalar_type());
}

void TensorAllreduce::prepare_copies([[maybe_unused]] const Context& context, HostBufferPool& pool,
                                     std::shared_ptr<c10::Event> caller_ready,
                                     std::optional<SideStreams> streams) {
  const bool cuda = tensor_.is_cuda();
  if (cuda) {
    if (!streams) throw Error("dpa: a CUDA tensor's all_reduce needs its device's side streams");
    d2h_stream_ = streams->to_host;
    h2d_stream_ = streams->to_device;
    events_ = streams->events;
    if (caller_ready) caller_ready->block(*d2h_stream_);
  }
  {
    // Packing a non-contiguous CUDA tensor is a device kernel: it runs on the side stream, after
    // the caller's pending work.
    c10::OptionalStreamGuard on_side_stream(d2h_stream_);
    packed_ = !tensor_.is_contiguous();
    flat_ = packed_ ? tensor_.contiguous().view({-1}) : tensor_.view({-1});
  }

  const at::ScalarType wire = wire_scalar_type(tensor_.scalar_type());
  staged_ = cuda || flat_.scalar_type() != wire;
  if (staged_) {
    buffer_ = pool.acquire(static_cast<std::size_t>(flat_.numel()) * at::elementSize(wire), /*pinned=*/cuda);
    host_ = buffer_.view(wire, flat_.numel());
#ifdef DPA_WITH_CUDA
    if (CudaBlocks::applies(flat_)) {
      c10::StreamGuard on_side_stream(*d2h_stream_);
      cuda_blocks_.emplace(flat_, host_, context.payload(), context.world_size(), pool);
    }
#endif
  } else {
    host_ = flat_;
  }
}

TensorAllreduce::~TensorAllreduce() {
  for (auto& chunk : chunks_) {
    if (!chunk.in_flight) continue;
    try {
      chunk.handle.wait();
    } catch (...) {
      // Already reported through wait(); here only the buffers' lifetime matters.
    }
  }
  if (h2d_stream_ && !(done_ && done_->query())) {
    // Device copies may still read or write the host buffer that goes back to the pool (an
    // operation that failed before finish(), or one destroyed before its copies ended).
    d2h_stream_->synchronize();
    h2d_stream_->synchronize();
  }
}

at::Tensor TensorAllreduce::host_chunk(const Chunk& chunk) const {
  return host_.narrow(0, static_cast<std::int64_t>(chunk.begin),
                      static_cast<std::int64_t>(chunk.count));
}

at::Tensor TensorAllreduce::device_chunk(const Chunk& chunk) const {
  return flat_.narrow(0, static_cast<std::int64_t>(chunk.begin),
                      static_cast<std::int64_t>(chunk.count));
}

void TensorAllreduce::stage_in(std::size_t index) {
  Chunk& chunk = chunks_.at(index);
  if (!staged_ || chunk.count == 0) return;
  if (d2h_stream_) {
    c10::StreamGuard on_side_stream(*d2h_stream_);
#ifdef DPA_WITH_CUDA
    if (cuda_blocks_) {
      cuda_blocks_->stage_in(chunk.begin, chunk.count, *d2h_stream_);
    } else {
      host_chunk(chunk).copy_(device_chunk(chunk), /*non_blocking=*/true);
    }
#else
    host_chunk(chunk).copy_(device_chunk(chunk), /*non_blocking=*/true);
#endif
    chunk.staged_in = events_->take();
    chunk.staged_in->record(*d2h_stream_);
  } else {
    host_chunk(chunk).copy_(device_chunk(chunk));
  }
}

void TensorAllreduce::submit(std::size_t index, Context& context, const SubmitOrder::Turn& turn,
                             const AllreduceOptions& options) {
  Chunk& chunk = chunks_.at(index);
  if (chunk.staged_in) synchronize(*chunk.staged_in, *d2h_stream_);
  // The address without a narrowed view: a view is a dispatched torch operation and an
  // allocation, a microsecond that a 4 KiB operation notices.
  void* data = chunk.count == 0 ? nullptr
                                : static_cast<std::byte*>(host_.data_ptr()) +
                                      chunk.begin * static_cast<std::size_t>(host_.element_size());
  AllreduceOptions chunk_options = options;
#ifdef DPA_WITH_CUDA
  if (cuda_blocks_) chunk_options = cuda_blocks_->options_for(chunk.begin, options);
#endif
  chunk.handle = context.allreduce_async(turn, data, data, chunk.count, wire_type_, chunk_options);
  chunk.in_flight = true;
}

void TensorAllreduce::wait(std::size_t index) {
  Chunk& chunk = chunks_.at(index);
  OpStats chunk_stats;
  try {
    chunk_stats = chunk.handle.wait();
  } catch (...) {
    chunk.in_flight = false;
    throw;
  }
  chunk.in_flight = false;
  stats_.merge(chunk_stats, chunk.begin);
}

void TensorAllreduce::stage_out(std::size_t index) {
  const Chunk& chunk = chunks_.at(index);
  if (!staged_ || chunk.count == 0) return;
  if (h2d_stream_) {
    c10::StreamGuard on_side_stream(*h2d_stream_);
#ifdef DPA_WITH_CUDA
    if (cuda_blocks_) {
      cuda_blocks_->stage_out(chunk.begin, chunk.count, *h2d_stream_);
      return;
    }
#endif
    device_chunk(chunk).copy_(host_chunk(chunk), /*non_blocking=*/true);
  } else {
    device_chunk(chunk).copy_(host_chunk(chunk));
  }
}

void TensorAllreduce::finish() {
  c10::OptionalStreamGuard on_side_stream(h2d_stream_);
  if (packed_) {
    tensor_.copy_(flat_.view(tensor_.sizes()), /*non_blocking=*/h2d_stream_.has_value());
  }
  if (h2d_stream_) {
    done_ = events_->take();
    done_->record(*h2d_stream_);
  }
  stats_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

}  // namespace dpa::torch_backend
