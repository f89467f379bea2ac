// SPDX-License-Identifier: Apache-2.0
// Runs all_reduce requests through dpa, in the two shapes the execution modes are built from:
// whole (each tensor one dpa operation, staged before its turn to submit) and chunked (each large
// tensor cut into pieces whose copies overlap the network).
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include "cuda/device_completion.hpp"
#include "cuda/host_buffer_pool.hpp"
#include "dpa/context.hpp"
#include "job/torch_settings.hpp"
#include "run/dpa_work.hpp"
#include "run/tensor_allreduce.hpp"

namespace dpa::torch_backend {

// One all_reduce call, captured on the calling thread.
struct AllreduceRequest {
  std::vector<at::Tensor> tensors;                      // each its own dpa operation, in this order
  std::vector<std::shared_ptr<c10::Event>> caller_ready;  // per tensor, CUDA only
  AllreduceOptions options;                             // op and the caller's fastest-K choice
  c10::intrusive_ptr<DpaWork> work;
  SubmitOrder::Ticket ticket;  // its place in the contexts' submit order, taken on the caller

  [[nodiscard]] std::size_t largest_tensor_bytes() const;
};

// A request whose tensors are submitted and not yet complete.
struct InFlight {
  std::vector<std::unique_ptr<TensorAllreduce>> tensors;
  std::exception_ptr error;
};

// What completes a request's work: CUDA results are ready on `results_on` once every event in
// `device_done` has passed.
struct DeviceResults {
  c10::optional<c10::Stream> results_on;
  std::vector<std::shared_ptr<c10::Event>> device_done;

  void add(const TensorAllreduce& tensor);
};

class AllreduceRunner {
 public:
  // Tensors of fewer than wide.payload() elements go to `small` when there is one
  // (job_sizing.hpp): the choice depends on the element count alone, so it agrees on all ranks.
  // `small` shares the submit order of `wide`.
  AllreduceRunner(Context& wide, Context* small, HostBufferPool& pool, const TorchSettings& settings);

  // Stages every tensor, then submits them in the request's turn. `caller_waits`: this thread
  // calls complete() next (AllreduceOptions::caller_waits), so a one-block operation runs there.
  InFlight stage_and_submit(AllreduceRequest& request, bool caller_waits);
  // Waits for the results, copies them out and completes the request's work.
  void complete(AllreduceRequest& request, InFlight& in_flight);
  void run_whole(AllreduceRequest& request);
  // Tensors of at least DPA_TORCH_PIPELINE_THRESH bytes go in DPA_TORCH_PIPELINE_CHUNKS pieces.
  void run_chunked(AllreduceRequest& request);

  // Where requests take their tickets, in all_reduce call order.
  [[nodiscard]] const SubmitOrder& submit_order() const { return wide_.submit_order(); }
  [[nodiscard]] const TorchSettings& settings() const { return settings_; }
  [[nodiscard]] Context& context_for(std::size_t elements) const;
  // For a CUDA tensor, an event on the calling thread's current stream: the copies that read the
  // tensor wait for it, so they see what the caller's stream had queued before the all_reduce.
  // Null for a CPU tensor.
  [[nodiscard]] std::shared_ptr<c10::Event> mark_caller_stream(const at::Tensor& tensor);
  // Completes a request's work with an error that says which operation failed and why.
  void fail(AllreduceRequest& request, std::exception_ptr error) const;

  // What the sharded collectives share with all_reduce: the staging buffers, the side streams of
  // a CUDA tensor's device (nullopt for a CPU tensor), and the retirement of operations whose
  // copies to the device still run.
  [[nodiscard]] HostBufferPool& pool() const { return pool_; }
  [[nodiscard]] std::optional<SideStreams> side_streams_for(const at::Tensor& tensor);
  void retire(std::shared_ptr<void> operation, std::shared_ptr<c10::Event> done, c10::Stream recorded_on);
  void sweep_retired() { retirement_.sweep(); }

 private:
  // Returns the finished operation, whose device copies may still run.
  std::unique_ptr<TensorAllreduce> run_one_chunked(const SubmitOrder::Turn& turn,
                                                   const at::Tensor& tensor,
                                                   std::shared_ptr<c10::Event> ready,
                                                   const AllreduceOptions& options);
  // Keeps the operation's buffers until its copies to the device have ended.
  void retire(std::unique_ptr<TensorAllreduce> operation);
  std::unique_ptr<TensorAllreduce> start(const at::Tensor& tensor, std::shared_ptr<c10::Event> ready,
                                         std::size_t elements_per_chunk, Context& context);

  Context& wide_;
  Context* small_;
  HostBufferPool& pool_;
  TorchSettings settings_;
  SideStreamsByDevice side_streams_;
  Retirement retirement_;  // destroyed first: it gives buffers back to pool_
};

}  // namespace dpa::torch_backend
