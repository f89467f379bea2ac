// SPDX-License-Identifier: Apache-2.0
#include "c10d/host_staging.hpp"

#include <memory>

#include "run/future_work.hpp"

namespace dpa::torch_backend {
namespace {

// The type Gloo moves or reduces a tensor of `type` in (the same where Gloo has it). Gloo has
// no 16-bit integer: bfloat16's bits move as float16's, which Gloo copies without looking.
at::ScalarType gloo_type(at::ScalarType type, GlooUse use) {
  if (type == at::kBFloat16) return use == GlooUse::move ? at::kHalf : at::kFloat;
  if (type == at::kBool) return at::kByte;
  return type;
}

}  // namespace

at::Tensor HostStaging::input(const at::Tensor& tensor, GlooUse use) {
  if (!tensor.defined()) return tensor;
  at::Tensor form = tensor.is_cuda() ? tensor.to(at::kCPU) : tensor;  // blocking: stream order
  const at::ScalarType type = gloo_type(tensor.scalar_type(), use);
  if (type == tensor.scalar_type()) return form;
  // Same width: reinterpret the bits; wider: convert.
  return at::elementSize(type) == at::elementSize(tensor.scalar_type()) ? form.view(type)
                                                                        : form.to(type);
}

at::Tensor HostStaging::output(const at::Tensor& tensor, GlooUse use) {
  at::Tensor form = input(tensor, use);
  if (!tensor.defined() || form.is_same(tensor)) return form;
  const bool reinterpreted = at::elementSize(form.scalar_type()) == at::elementSize(tensor.scalar_type()) &&
                             form.scalar_type() != tensor.scalar_type();
  if (reinterpreted && !tensor.is_cuda()) return form;  // a view of the caller's memory
  written_.emplace_back(reinterpreted ? tensor.view(form.scalar_type()) : tensor, form);
  return form;
}

std::vector<at::Tensor> HostStaging::inputs(const std::vector<at::Tensor>& tensors, GlooUse use) {
  std::vector<at::Tensor> forms;
  forms.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) forms.push_back(input(tensor, use));
  return forms;
}

std::vector<std::vector<at::Tensor>> HostStaging::input_lists(const std::vector<std::vector<at::Tensor>>& lists,
                                                              GlooUse use) {
  std::vector<std::vector<at::Tensor>> forms;
  forms.reserve(lists.size());
  for (const auto& list : lists) forms.push_back(inputs(list, use));
  return forms;
}

std::vector<at::Tensor> HostStaging::outputs(const std::vector<at::Tensor>& tensors, GlooUse use) {
  std::vector<at::Tensor> forms;
  forms.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) forms.push_back(output(tensor, use));
  return forms;
}

std::vector<std::vector<at::Tensor>> HostStaging::output_lists(const std::vector<std::vector<at::Tensor>>& lists,
                                                               GlooUse use) {
  std::vector<std::vector<at::Tensor>> forms;
  forms.reserve(lists.size());
  for (const auto& list : lists) forms.push_back(outputs(list, use));
  return forms;
}

void HostStaging::copy_back() const {
  // Blocking: the Gloo forms may be freed as soon as this returns.
  for (const auto& [target, form] : written_) target.copy_(form, /*non_blocking=*/false);
}

c10::intrusive_ptr<c10d::Work> finish_gloo(int rank, c10d::OpType type,
                                           const c10::intrusive_ptr<c10d::Work>& gloo_work,
                                           HostStaging staging, std::vector<at::Tensor> outputs,
                                           std::function<void()> finish) {
  if (!staging.copied() && !finish) return gloo_work;
  auto copies = std::make_shared<HostStaging>(std::move(staging));
  return FutureWork::create(
      rank, type,
      then_on_devices(gloo_work->getFuture(), std::move(outputs),
                      [copies, finish = std::move(finish)] {
                        copies->copy_back();
                        if (finish) finish();
                      }));
}

StagedRecvWork::StagedRecvWork(int rank, c10d::OpType type, c10::intrusive_ptr<c10d::Work> gloo_work,
                               HostStaging staging, at::Tensor output)
    : c10d::Work(rank, type),
      gloo_work_(std::move(gloo_work)),
      staging_(std::move(staging)),
      output_(std::move(output)) {}

bool StagedRecvWork::isCompleted() { return gloo_work_->isCompleted(); }
std::exception_ptr StagedRecvWork::exception() const { return gloo_work_->exception(); }
int StagedRecvWork::sourceRank() const { return gloo_work_->sourceRank(); }
std::vector<at::Tensor> StagedRecvWork::result() { return {output_}; }
void StagedRecvWork::abort() { gloo_work_->abort(); }

bool StagedRecvWork::wait(std::chrono::milliseconds timeout) {
  gloo_work_->wait(timeout);
  std::call_once(copied_back_, [this] { staging_.copy_back(); });
  return true;
}

}  // namespace dpa::torch_backend
