// SPDX-License-Identifier: Apache-2.0
// One tensor's all_reduce through dpa, cut into chunks that are each their own dpa operation.
//
// dpa reduces float32 and int32 in host memory. A CPU tensor of those types that is contiguous is
// reduced in place. Anything else goes through a host staging buffer: float16 and bfloat16 are
// widened to float32 on the way in and narrowed on the way out, non-contiguous tensors are packed,
// and CUDA tensors are copied device-to-host and back on side streams through pinned memory. The
// side streams first wait for the caller's stream as it was when the all_reduce was issued, and
// finish() only queues the copy back: done_event() marks its end (device_completion.hpp). CUDA
// float tensors have their block exponents computed and their results dequantised on the device
// where the extension has the kernels (cuda_blocks.hpp).
//
// Per chunk: stage_in, submit, wait, stage_out; then finish once. The steps of different chunks
// may interleave (stage chunk c+1 while chunk c is on the network), which is how the pipeline
// modes overlap copies with the network.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/util/Optional.h>

#include "cuda/cuda_blocks.hpp"
#include "cuda/device_completion.hpp"
#include "cuda/host_buffer_pool.hpp"
#include "dpa/context.hpp"

namespace dpa::torch_backend {

// Whether dpa can reduce this tensor (otherwise the backend hands it to Gloo).
bool dpa_supports(const at::Tensor& tensor);

// Elements per chunk when `count` elements are cut into at most `chunks` pieces; a multiple of
// the payload, so chunk boundaries fall on block boundaries. Every rank computes the same.
std::size_t chunk_elements(std::size_t count, int chunks, std::uint32_t payload);

class TensorAllreduce {
 public:
  // `elements_per_chunk` 0 means one chunk; `context` is the one that will reduce the chunks;
  // `streams` its device's side streams (CUDA tensors only), after `caller_ready` on the caller's.
  TensorAllreduce(const at::Tensor& tensor, std::shared_ptr<c10::Event> caller_ready,
                  std::size_t elements_per_chunk, const Context& context, HostBufferPool& pool,
                  std::optional<SideStreams> streams);
  // Waits for any chunk still on the network: dpa writes into the buffers this object owns; and,
  // unless done_event() has passed, for the device's copies.
  ~TensorAllreduce();
  TensorAllreduce(const TensorAllreduce&) = delete;
  TensorAllreduce& operator=(const TensorAllreduce&) = delete;

  [[nodiscard]] std::size_t chunk_count() const { return chunks_.size(); }

  void stage_in(std::size_t chunk);
  // In `turn` of the context's submit order.
  void submit(std::size_t chunk, Context& context, const SubmitOrder::Turn& turn,
              const AllreduceOptions& options);
  void wait(std::size_t chunk);  // throws the dpa::Error of a failed chunk
  // The chunk's dpa operation, once submitted.
  [[nodiscard]] Handle& handle(std::size_t chunk) { return chunks_.at(chunk).handle; }
  void stage_out(std::size_t chunk);
  // Queues what is left to write the result into the tensor; on the host (CPU tensors) it is
  // done on return, on a CUDA device once done_event() has passed.
  void finish();

  // CUDA tensors: the event after the last copy back, recorded by finish(); null for CPU ones.
  [[nodiscard]] const std::shared_ptr<c10::Event>& done_event() const { return done_; }
  // CUDA tensors: the stream the result is written on.
  [[nodiscard]] c10::Stream results_stream() const { return *h2d_stream_; }

  // All chunks as one operation: counts added, missed ranges in tensor element offsets.
  [[nodiscard]] const OpStats& stats() const { return stats_; }

 private:
  struct Chunk {
    std::size_t begin = 0;
    std::size_t count = 0;
    std::shared_ptr<c10::Event> staged_in;  // CUDA: the device-to-host copy is done
    Handle handle;
    bool in_flight = false;
  };

  // A contiguous CPU tensor of the wire's type: dpa reduces its memory, no copy or view made.
  [[nodiscard]] static bool reduced_in_place(const at::Tensor& tensor);
  // The other tensors: the 1-D (packed) view, the side streams and the staging buffer.
  void prepare_copies(const Context& context, HostBufferPool& pool, std::shared_ptr<c10::Event> caller_ready,
                      std::optional<SideStreams> streams);
  [[nodiscard]] at::Tensor host_chunk(const Chunk& chunk) const;
  [[nodiscard]] at::Tensor device_chunk(const Chunk& chunk) const;

  // The caller's tensor; detached (written outside autograd) unless reduced in place.
  at::Tensor tensor_;
  at::Tensor flat_;    // contiguous 1-D view of it, or a packed copy when it is not contiguous
  at::Tensor host_;    // what dpa reduces: tensor_ (in place), flat_, or a view of buffer_
  HostBuffer buffer_;
  DataType wire_type_ = DataType::float32;
  bool packed_ = false;  // flat_ is a copy, written back to tensor_ by finish()
  bool staged_ = false;  // host_ is a buffer, not flat_
  // Set for CUDA tensors (c10::optional: what torch 1.13's stream guards take).
  c10::optional<c10::Stream> d2h_stream_;
  c10::optional<c10::Stream> h2d_stream_;
  EventPool* events_ = nullptr;  // the device's (CUDA tensors)
  std::shared_ptr<c10::Event> done_;
#ifdef DPA_WITH_CUDA
  std::optional<CudaBlocks> cuda_blocks_;  // CUDA float tensors: block floating point on the GPU
#endif
  std::vector<Chunk> chunks_;
  OpStats stats_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace dpa::torch_backend
