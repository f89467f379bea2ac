// SPDX-License-Identifier: Apache-2.0
// The sharded collectives through the switch (docs/protocol.md §13): reduce-scatter (SUM, AVG of
// float32, float16, bfloat16 and int32), all-gather and broadcast (any type whose shard is whole
// 32-bit words). Each tensor is one dpa operation on a host form: the tensor's own memory where it
// is a contiguous CPU tensor of the wire's type, else a copy taken in the caller's stream order;
// the results are written back in stream order on the outputs' devices (then_on_devices). The
// operations of one call are submitted in one turn of the submit order, so they keep their place
// among the all_reduce calls on every rank.
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include "fastest_k.hpp"
#include "future_work.hpp"
#include "process_group_dpa.hpp"

namespace dpa::torch_backend {
namespace {

// A host tensor holding `tensor`'s values: itself for a contiguous CPU tensor, else a copy
// (blocking for a CUDA tensor: it reads what the caller's stream has queued).
at::Tensor host_contiguous(const at::Tensor& tensor) {
  at::Tensor host = tensor.is_cuda() ? tensor.to(at::kCPU) : tensor;
  return host.reshape({-1}).contiguous();
}

// What a reduce-scatter's values are summed as: float32 for the float types, int32 as is.
at::Tensor reduce_form(const at::Tensor& tensor) {
  at::Tensor host = host_contiguous(tensor);
  return host.scalar_type() == at::kInt ? host : host.to(at::kFloat);
}

std::size_t words_of(const at::Tensor& tensor) {
  return static_cast<std::size_t>(tensor.numel()) * tensor.element_size() / 4;
}

// Whether `tensor` moves as whole 32-bit words (all-gather, broadcast).
bool moves_as_words(const at::Tensor& tensor) {
  return (static_cast<std::size_t>(tensor.numel()) * tensor.element_size()) % 4 == 0;
}

// The dpa operations of one collective call: completes `done` (on a thread of torch's inter-op
// pool, never on the libdpa engine thread that finished the last one) once all have, with the
// first error. Holds the host forms until then.
class SwitchOperations : public std::enable_shared_from_this<SwitchOperations> {
 public:
  explicit SwitchOperations(std::vector<at::Tensor> keep)
      : keep_(std::move(keep)), done_(c10::make_intrusive<c10::ivalue::Future>(tensor_list_type())) {}

  // Call once per operation, after submitting all of them.
  void watch(std::vector<Handle> handles) {
    remaining_.store(static_cast<int>(handles.size()));
    for (Handle& handle : handles) {
      handle.on_complete([self = shared_from_this()](const OpStats& stats, std::exception_ptr error) {
        if (!error) record_last_stats(stats);
        {
          std::lock_guard lock(self->mutex_);
          if (error && !self->error_) self->error_ = error;
        }
        if (self->remaining_.fetch_sub(1) != 1) return;
        at::launch([self] {
          if (self->error_) {
            self->done_->setError(self->error_);
          } else {
            self->done_->markCompleted(c10::IValue(c10::List<at::Tensor>(self->keep_)));
          }
        });
      });
    }
  }
  [[nodiscard]] const c10::intrusive_ptr<c10::ivalue::Future>& done() const { return done_; }

 private:
  std::vector<at::Tensor> keep_;  // the host forms dpa reads and writes
  c10::intrusive_ptr<c10::ivalue::Future> done_;
  std::atomic<int> remaining_{0};
  std::mutex mutex_;
  std::exception_ptr error_;
};

}  // namespace

bool ProcessGroupDpa::switch_moves(const std::vector<at::Tensor>& tensors) const {
  return !tensors.empty() && std::all_of(tensors.begin(), tensors.end(), moves_as_words);
}

template <typename Submit>
c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::run_on_switch(c10d::OpType type, std::vector<at::Tensor> host_forms,
                                                              std::vector<at::Tensor> outputs,
                                                              std::function<void()> write_back, Submit submit) {
  std::shared_lock lifecycle(lifecycle_mutex_);
  TORCH_CHECK(!closed_, "dpa: a collective on a process group that was shut down");
  auto operations = std::make_shared<SwitchOperations>(std::move(host_forms));
  std::vector<Handle> handles;
  {
    // Both sessions share one submit order (process_group_dpa.cpp).
    const SubmitOrder::Turn turn = context_->submit_order().wait_turn();
    handles = submit(turn);
  }
  {
    std::lock_guard lock(outstanding_mutex_);
    last_sharded_ = handles.back();
  }
  operations->watch(handles);
  return FutureWork::create(rank_, type,
                            then_on_devices(operations->done(), std::move(outputs),
                                            write_back ? std::move(write_back) : [] {}));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::reduce_scatter_through_switch(std::vector<at::Tensor> outputs,
                                                                            const std::vector<at::Tensor>& inputs,
                                                                            const c10d::ReduceOp& op,
                                                                            c10d::OpType type) {
  std::vector<at::Tensor> forms;   // per tensor: input, output
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (caller's output, its host form)
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor input = reduce_form(inputs[i]);
    const at::Tensor& output = outputs[i];
    const bool direct = !output.is_cuda() && output.is_contiguous() && output.scalar_type() == input.scalar_type();
    at::Tensor result = direct ? output.view({-1}) : at::empty({output.numel()}, input.options());
    if (!direct) written.emplace_back(output, result);
    forms.push_back(input);
    forms.push_back(result);
  }
  AllreduceOptions options;
  options.op = op == c10d::ReduceOp::AVG ? ReduceOp::avg : ReduceOp::sum;
  const FastestK choice = resolve_fastest_k();
  options.k = choice.k;
  options.preemptive = choice.preemptive;
  return run_on_switch(
      type, forms, outputs,
      written.empty() ? std::function<void()>{} : [written] {
        for (const auto& [output, form] : written) output.copy_(form.view(output.sizes()));
      },
      [&](const SubmitOrder::Turn& turn) {
        std::vector<Handle> handles;
        for (std::size_t i = 0; i < forms.size(); i += 2) {
          const at::Tensor& result = forms[i + 1];
          // A shard's blocks are no longer than the shard: small shards take the session of
          // small packets, as small all_reduce calls do (the choice is the same on every rank).
          Context& context = runner_->context_for(static_cast<std::size_t>(result.numel()));
          handles.push_back(context.reduce_scatter_async(
              turn, forms[i].data_ptr(), result.data_ptr(), static_cast<std::size_t>(result.numel()),
              result.scalar_type() == at::kInt ? DataType::int32 : DataType::float32, options));
        }
        return handles;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::allgather_through_switch(std::vector<at::Tensor> outputs,
                                                                       const std::vector<at::Tensor>& inputs,
                                                                       c10d::OpType type) {
  std::vector<at::Tensor> forms;
  std::vector<std::pair<at::Tensor, at::Tensor>> written;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor input = host_contiguous(inputs[i]);
    const at::Tensor& output = outputs[i];
    const bool direct = !output.is_cuda() && output.is_contiguous();
    at::Tensor result = direct ? output.view({-1}) : at::empty({output.numel()}, input.options());
    if (!direct) written.emplace_back(output, result);
    forms.push_back(input);
    forms.push_back(result);
  }
  return run_on_switch(
      type, forms, outputs,
      written.empty() ? std::function<void()>{} : [written] {
        for (const auto& [output, form] : written) output.copy_(form.view(output.sizes()));
      },
      [&](const SubmitOrder::Turn& turn) {
        std::vector<Handle> handles;
        for (std::size_t i = 0; i < forms.size(); i += 2) {
          AllreduceOptions in_turn;
          const std::size_t words = words_of(forms[i]);
          handles.push_back(runner_->context_for(words).all_gather_async(turn, forms[i].data_ptr(),
                                                                          forms[i + 1].data_ptr(), words, in_turn));
        }
        return handles;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::broadcast_through_switch(std::vector<at::Tensor> tensors, int root) {
  std::vector<at::Tensor> forms;
  std::vector<std::pair<at::Tensor, at::Tensor>> written;
  for (const at::Tensor& tensor : tensors) {
    const bool direct = !tensor.is_cuda() && tensor.is_contiguous();
    at::Tensor form = direct ? tensor.view({-1}) : host_contiguous(tensor);
    if (!direct) written.emplace_back(tensor, form);
    forms.push_back(form);
  }
  return run_on_switch(
      c10d::OpType::BROADCAST, forms, tensors,
      written.empty() ? std::function<void()>{} : [written] {
        for (const auto& [tensor, form] : written) tensor.copy_(form.view(tensor.sizes()));
      },
      [&](const SubmitOrder::Turn& turn) {
        std::vector<Handle> handles;
        for (const at::Tensor& form : forms) {
          AllreduceOptions in_turn;
          const std::size_t words = words_of(form);
          handles.push_back(runner_->context_for(words).broadcast_async(turn, form.data_ptr(), words, root, in_turn));
        }
        return handles;
      });
}

}  // namespace dpa::torch_backend
