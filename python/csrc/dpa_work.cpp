#include "dpa_work.hpp"

#include <stdexcept>
#include <string>
#include <utility>

namespace dpa::torch_backend {

DpaWork::DpaWork(int rank, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, c10d::OpType::ALLREDUCE),
      outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

void DpaWork::complete() {
  // The future first: a thread woken by wait() may read it straight away.
  future_->markCompleted(c10::IValue(outputs_));
  finish();
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
    throw std::runtime_error("dpa: all_reduce did not complete within the wait() timeout of " +
                             std::to_string(timeout.count()) + " ms");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

std::vector<at::Tensor> DpaWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> DpaWork::getFuture() { return future_; }

}  // namespace dpa::torch_backend
