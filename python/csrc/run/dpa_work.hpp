// SPDX-License-Identifier: Apache-2.0
// The c10d::Work that a collective through the switch returns (all_reduce, the sharded ones). It completes from whichever thread finishes the
// operation, and carries a c10::ivalue::Future holding the output tensors (what DDP comm hooks
// need). A failure completes both with the error, so wait() and the future raise, never hang.
// CUDA results complete in stream order, as NCCL's do: the work completes once the network part
// is done and the copies back are queued; wait() then makes the caller's current stream wait
// for those copies, and so does the future (it is created for the tensors' devices).
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/util/Optional.h>

#include "run/torch_compat.hpp"

namespace dpa::torch_backend {

class DpaWork : public c10d::Work {
 public:
  DpaWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);

  // `results_on`: the stream the CUDA results are written on, `device_done` the events after
  // their last copies (both empty for CPU tensors).
  void complete(c10::optional<c10::Stream> results_on = c10::nullopt,
                std::vector<std::shared_ptr<c10::Event>> device_done = {});
  void fail(std::exception_ptr error);
  // Blocks until complete or failed, without raising: for draining at barrier and shutdown.
  void wait_quietly();

  bool wait(std::chrono::milliseconds timeout) override;
  // Makes the current streams wait for the CUDA results (c10d: what wait() also does).
  void synchronize() override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::vector<std::shared_ptr<c10::Event>> device_done_;  // written before completion
};

}  // namespace dpa::torch_backend
