// SPDX-License-Identifier: Apache-2.0
#include "run/future_work.hpp"

#include <algorithm>
#include <utility>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace dpa::torch_backend {

const c10::TypePtr& tensor_list_type() {
  static const c10::TypePtr type = c10::ListType::create(c10::TensorType::get());
  return type;
}

std::vector<c10::Device> cuda_devices(const std::vector<at::Tensor>& tensors) {
  std::vector<c10::Device> devices;
  for (const at::Tensor& tensor : tensors) {
    if (tensor.is_cuda() && std::find(devices.begin(), devices.end(), tensor.device()) == devices.end()) {
      devices.push_back(tensor.device());
    }
  }
  return devices;
}

c10::intrusive_ptr<c10::ivalue::Future> then_on_devices(
    const c10::intrusive_ptr<c10::ivalue::Future>& source, std::vector<at::Tensor> outputs,
    std::function<void()> finish) {
  std::vector<c10::Device> devices = cuda_devices(outputs);
  auto result = c10::make_intrusive<c10::ivalue::Future>(tensor_list_type(), devices);
  // A CUDA source runs its callbacks on fresh streams that wait for its results; a host one (a
  // Gloo collective on host copies) on whatever the thread has: take fresh streams here, so the
  // copies to the device never queue behind the caller's work on its default stream.
  source->addCallback([result, outputs = std::move(outputs), devices = std::move(devices),
                       finish = std::move(finish)](c10::ivalue::Future& done) mutable {
    if (done.hasError()) {
      result->setError(done.exception_ptr());
      return;
    }
    try {
      std::vector<c10::Stream> streams;
      if (done.devices().empty()) {
        for (const c10::Device& device : devices) {
          streams.push_back(c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device));
        }
      }
      c10::MultiStreamGuard on_streams(streams);
      finish();
      // Records, on the current streams, when the outputs are ready.
      result->markCompleted(c10::IValue(std::move(outputs)));
    } catch (...) {
      result->setError(std::current_exception());
    }
  });
  return result;
}

c10::intrusive_ptr<c10::ivalue::Future> completed_future(std::vector<at::Tensor> outputs) {
  auto result = c10::make_intrusive<c10::ivalue::Future>(tensor_list_type(), cuda_devices(outputs));
  result->markCompleted(c10::IValue(std::move(outputs)));
  return result;
}

c10::intrusive_ptr<FutureWork> FutureWork::create(int rank, c10d::OpType type,
                                                  c10::intrusive_ptr<c10::ivalue::Future> future) {
  auto work = c10::make_intrusive<FutureWork>(rank, type, future);
  // Weak: the future may outlive a work the caller dropped.
  future->addCallback([weak = c10::weak_intrusive_ptr<FutureWork>(work)](c10::ivalue::Future& done) {
    if (c10::intrusive_ptr<FutureWork> alive = weak.lock()) {
      alive->finish(done.hasError() ? done.exception_ptr() : nullptr);
    }
  });
  return work;
}

FutureWork::FutureWork(int rank, c10d::OpType type, c10::intrusive_ptr<c10::ivalue::Future> future)
    : c10d::Work(rank, type), future_(std::move(future)) {}

void FutureWork::synchronize() {
  // Complete by now (c10d calls it after the wait); makes the current streams wait for the events.
  future_->wait();
}

std::vector<at::Tensor> FutureWork::result() { return future_->value().toTensorVector(); }

c10::intrusive_ptr<c10::ivalue::Future> FutureWork::getFuture() { return future_; }

}  // namespace dpa::torch_backend
