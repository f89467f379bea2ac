// SPDX-License-Identifier: Apache-2.0
// The host forms of one sharded collective's tensors (reduce-scatter, all-gather, broadcast;
// docs/protocol.md §13), staged the way all_reduce's are (tensor_allreduce.hpp): a contiguous CPU
// tensor of the wire's form is used in place; any other CPU tensor is copied (packed, widened);
// a CUDA tensor is copied to pinned host memory on the device's side stream, after what the
// caller's stream had queued, converted on the device first where its values are widened. The
// results go back on the other side stream, without blocking the host: done_event() marks their
// end, and the buffers stay on loan until it has passed (AllreduceRunner::retire).
#pragma once

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/util/Optional.h>

#include "cuda/device_completion.hpp"
#include "cuda/host_buffer_pool.hpp"

namespace dpa::torch_backend {

class AllreduceRunner;

// What the switch does with a tensor's values, which decides its host form.
enum class ShardedValues : std::uint8_t {
  summed,  // reduce-scatter: float32 for the float types, int32 as is
  moved,   // all-gather, broadcast: the tensor's own bits, moved as 32-bit words
};

class ShardedStaging {
 public:
  explicit ShardedStaging(AllreduceRunner& runner);
  // Waits for the device's copies unless done_event() has passed: they use this object's buffers.
  ~ShardedStaging();
  ShardedStaging(const ShardedStaging&) = delete;
  ShardedStaging& operator=(const ShardedStaging&) = delete;

  // The host form of a tensor dpa reads, holding its values once wait_staged() returns.
  void* input(const at::Tensor& tensor, ShardedValues values);
  // The host form of a tensor dpa writes; `read_first` (broadcast: the root's values) stages its
  // values in as input() does.
  void* output(const at::Tensor& tensor, ShardedValues values, bool read_first = false);

  // Blocks until the inputs' copies to the host are done (CUDA tensors).
  void wait_staged() const;
  // Writes the host forms into the outputs: done on return for CPU tensors, queued on the side
  // stream for CUDA ones (done_event() then marks the end).
  void write_back();

  [[nodiscard]] const std::shared_ptr<c10::Event>& done_event() const { return done_; }
  // The stream the CUDA results are written on; nullopt for CPU tensors.
  [[nodiscard]] c10::optional<c10::Stream> results_stream() const { return h2d_stream_; }

 private:
  // nullopt where dpa uses the tensor itself (kept alive until done), else a buffer for its host
  // form, the side streams set up for a CUDA tensor.
  std::optional<at::Tensor> buffer_for(const at::Tensor& tensor, ShardedValues values);
  // A buffer of `count` elements of `type`, pinned for a CUDA tensor's copies.
  at::Tensor host_buffer(const at::Tensor& tensor, at::ScalarType type);
  // Copies the tensor's values into `host` (in `host`'s type).
  void stage_in(const at::Tensor& tensor, const at::Tensor& host);
  // The first CUDA tensor sets up the side streams, which wait for the caller's current stream.
  void use_device_of(const at::Tensor& tensor);

  AllreduceRunner& runner_;
  std::vector<HostBuffer> buffers_;
  std::vector<at::Tensor> in_place_;  // CPU tensors dpa reads or writes directly: kept alive
  std::vector<std::pair<at::Tensor, at::Tensor>> written_;  // (the caller's output, its host form)
  c10::optional<c10::Stream> d2h_stream_;
  c10::optional<c10::Stream> h2d_stream_;
  EventPool* events_ = nullptr;
  std::shared_ptr<c10::Event> caller_ready_;
  std::shared_ptr<c10::Event> staged_;  // after the last copy to the host
  std::shared_ptr<c10::Event> done_;    // after the last copy back
};

}  // namespace dpa::torch_backend
