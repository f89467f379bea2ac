// The c10d::Work that a dpa all_reduce returns. It completes from whichever thread finishes the
// operation, and carries a c10::ivalue::Future holding the output tensors (what DDP comm hooks
// need). A failure completes both with the error, so wait() and the future raise, never hang.
#pragma once

#include <chrono>
#include <exception>
#include <vector>

#include <ATen/core/ivalue.h>

#include "torch_compat.hpp"

namespace dpa::torch_backend {

class DpaWork : public c10d::Work {
 public:
  DpaWork(int rank, std::vector<at::Tensor> outputs);

  void complete();
  void fail(std::exception_ptr error);
  // Blocks until complete or failed, without raising: for draining at barrier and shutdown.
  void wait_quietly();

  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace dpa::torch_backend
