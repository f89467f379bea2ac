// SPDX-License-Identifier: Apache-2.0
// Collectives that dpa composes from others (reduce-scatter from an all_reduce, AVG from a SUM,
// a CUDA collective run by Gloo on host copies) finish with a step of their own. Their work is a
// c10::ivalue::Future that completes after that step, and the step runs in stream order on the
// outputs' CUDA devices, as torch's Future::then does for DDP comm hooks.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include "run/torch_compat.hpp"

namespace dpa::torch_backend {

// The type of a future holding a list of tensors, made once: creating it allocates.
const c10::TypePtr& tensor_list_type();

// The CUDA devices of `tensors`: a future created for them completes in stream order.
std::vector<c10::Device> cuda_devices(const std::vector<at::Tensor>& tensors);

// A future of `outputs` that completes once `source` has and `finish` has run. On the outputs'
// CUDA devices `finish` runs on streams that first wait for `source`'s results (when `source`
// is a CUDA future) and the new future's completion is recorded on them, so whoever waits on it
// sees what `finish` wrote. An error of `source` or of `finish` fails the new future.
c10::intrusive_ptr<c10::ivalue::Future> then_on_devices(
    const c10::intrusive_ptr<c10::ivalue::Future>& source, std::vector<at::Tensor> outputs,
    std::function<void()> finish);

// A future of `outputs` that is already complete: for collectives finished on the caller.
c10::intrusive_ptr<c10::ivalue::Future> completed_future(std::vector<at::Tensor> outputs);

// The c10d::Work of a composed collective: completes with its future (c10d::Work's own state, so
// isCompleted, exception and wait(timeout) behave as for any backend). wait() raises the
// collective's error and makes the caller's current CUDA streams wait for the results.
class FutureWork final : public c10d::Work {
 public:
  static c10::intrusive_ptr<FutureWork> create(int rank, c10d::OpType type,
                                               c10::intrusive_ptr<c10::ivalue::Future> future);
  FutureWork(int rank, c10d::OpType type, c10::intrusive_ptr<c10::ivalue::Future> future);

  void synchronize() override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace dpa::torch_backend
