// SPDX-License-Identifier: Apache-2.0
#include "run/dpa_work.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "run/future_work.hpp"

namespace dpa::torch_backend {

DpaWork::DpaWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(tensor_list_type(), cuda_devices(outputs_))) {}

void DpaWork::complete(c10::optional<c10::Stream> results_on,
                       std::vector<std::shared_ptr<c10::Event>> device_done) {
  device_done_ = std::move(device_done);
  {
    // A CUDA future records, on the current stream, when its value is ready: the results'.
    c10::OptionalStreamGuard on_results_stream(results_on);
    // The future first: a thread woken by wait() may read it straight away.
    future_->markCompleted(c10::IValue(outputs_));
  }
  finish();
}

void DpaWork::synchronize() {
  for (const auto& done : device_done_) {
    const c10::Device device(done->device_type(), done->device_index());
    done->block(c10::impl::VirtualGuardImpl(device.type()).getStream(device));
  }
}

void DpaWork::fail(std::exception_ptr error) {
  future_->setError(error);
  finish(error);
}

void DpaWork::wait_quietly() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return completed_; });
}

bool DpaWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  // A zero timeout is c10d's "no timeout"; the operation itself is bounded by DPA_TIMEOUT_MS.
  if (timeout.count() == 0) {
    cv_.wait(lock, [this] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [this] { return completed_; })) {
    throw std::runtime_error("dpa: " + c10d::opTypeToString(retrieveOpType()) +
                             " did not complete within the wait() timeout of " +
                             std::to_string(timeout.count()) + " ms");
  }
  if (exception_) std::rethrow_exception(exception_);
  lock.unlock();
  synchronize();
  return true;
}

std::vector<at::Tensor> DpaWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> DpaWork::getFuture() { return future_; }

}  // namespace dpa::torch_backend
