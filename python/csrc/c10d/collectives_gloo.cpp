// SPDX-License-Identifier: Apache-2.0
// The ProcessGroupDpa collectives that Gloo carries (process_group_dpa.hpp): every tensor in its
// Gloo form (host_staging.hpp), AVG as a SUM and a division, the flat all-gather through views.
#include <algorithm>
#include <functional>
#include <utility>

#include "c10d/host_staging.hpp"
#include "c10d/process_group_dpa.hpp"
#include "run/future_work.hpp"

namespace dpa::torch_backend {
namespace {

bool is_avg(const c10d::ReduceOp& op) {
  const c10d::ReduceOp::RedOpType type = op;
  return type == c10d::ReduceOp::AVG;
}

// Gloo has no AVG: it sums, and this divides. Integer types divide as NCCL's AVG does
// (truncating).
c10d::ReduceOp gloo_op(const c10d::ReduceOp& op) {
  return is_avg(op) ? c10d::ReduceOp(c10d::ReduceOp::SUM) : op;
}

void divide_by(const at::Tensor& tensor, int world) {
  if (at::isFloatingType(tensor.scalar_type()) || at::isComplexType(tensor.scalar_type())) {
    tensor.div_(world);
  } else {
    tensor.div_(world, "trunc");
  }
}

std::function<void()> average_if(const c10d::ReduceOp& op, std::vector<at::Tensor> tensors, int world) {
  if (!is_avg(op)) return {};
  return [tensors = std::move(tensors), world] {
    for (const at::Tensor& tensor : tensors) divide_by(tensor, world);
  };
}

std::vector<at::Tensor> flattened(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> all;
  for (const auto& list : lists) all.insert(all.end(), list.begin(), list.end());
  return all;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::allreduce_on_gloo(const std::vector<at::Tensor>& tensors,
                                                                  const c10d::ReduceOp& op,
                                                                  c10d::OpType type) {
  HostStaging staging;
  std::vector<at::Tensor> forms = staging.outputs(tensors, GlooUse::reduce);
  c10d::AllreduceOptions opts;
  opts.reduceOp = gloo_op(op);
  c10::intrusive_ptr<c10d::Work> work = gloo_->allreduce(forms, opts);
  return finish_gloo(rank_, type, work, std::move(staging), tensors, average_if(op, tensors, size_));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  // Each tensor its own dpa operation, in one request.
  if (switch_reduces(tensors, opts.reduceOp)) return allreduce_through_switch(tensors, opts.reduceOp);
  HostStaging staging;
  std::vector<at::Tensor> forms = staging.outputs(tensors, GlooUse::reduce);
  c10d::AllreduceCoalescedOptions gloo_opts = opts;
  gloo_opts.reduceOp = gloo_op(opts.reduceOp);
  c10::intrusive_ptr<c10d::Work> work = gloo_->allreduce_coalesced(forms, gloo_opts);
  return finish_gloo(rank_, c10d::OpType::ALLREDUCE_COALESCED, work, std::move(staging), tensors,
                     average_if(opts.reduceOp, tensors, size_));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
  if (tensors.size() == 1 && opts.rootTensor == 0 && switch_moves(tensors)) {
    return broadcast_through_switch(tensors, static_cast<int>(opts.rootRank));
  }
  HostStaging staging;
  std::vector<at::Tensor> forms = staging.outputs(tensors, GlooUse::move);
  c10::intrusive_ptr<c10d::Work> work = gloo_->broadcast(forms, opts);
  return finish_gloo(rank_, c10d::OpType::BROADCAST, work, std::move(staging), tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::reduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOptions& opts) {
  HostStaging staging;
  std::vector<at::Tensor> forms = staging.outputs(tensors, GlooUse::reduce);
  c10d::ReduceOptions gloo_opts = opts;
  gloo_opts.reduceOp = gloo_op(opts.reduceOp);
  c10::intrusive_ptr<c10d::Work> work = gloo_->reduce(forms, gloo_opts);
  // Only the root's tensor holds the reduction.
  const c10d::ReduceOp op = rank_ == opts.rootRank ? opts.reduceOp : c10d::ReduceOp(c10d::ReduceOp::SUM);
  return finish_gloo(rank_, c10d::OpType::REDUCE, work, std::move(staging), tensors,
                     average_if(op, tensors, size_));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  if (inputs.size() == 1 && outputs.size() == 1 && switch_moves(inputs) &&
      static_cast<int>(outputs.front().size()) == size_ &&
      std::all_of(outputs.front().begin(), outputs.front().end(), [&](const at::Tensor& part) {
        return part.numel() == inputs.front().numel() && part.scalar_type() == inputs.front().scalar_type();
      })) {
    // Gathered into one flat tensor through the switch, then copied into the list.
    const at::Tensor flat = at::empty({inputs.front().numel() * size_}, inputs.front().options());
    std::vector<at::Tensor> pieces = flat.chunk(size_);
    c10::intrusive_ptr<c10d::Work> work = allgather_through_switch({flat}, inputs, c10d::OpType::ALLGATHER);
    std::vector<at::Tensor> parts = outputs.front();
    return FutureWork::create(rank_, c10d::OpType::ALLGATHER,
                              then_on_devices(work->getFuture(), parts, [parts, pieces = std::move(pieces)] {
                                for (std::size_t r = 0; r < parts.size(); ++r) parts[r].copy_(pieces[r].view_as(parts[r]));
                              }));
  }
  HostStaging staging;
  std::vector<at::Tensor> input_forms = staging.inputs(inputs, GlooUse::move);
  std::vector<std::vector<at::Tensor>> output_forms = staging.output_lists(outputs, GlooUse::move);
  c10::intrusive_ptr<c10d::Work> work = gloo_->allgather(output_forms, input_forms, opts);
  return finish_gloo(rank_, c10d::OpType::ALLGATHER, work, std::move(staging), flattened(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  return allgather_flat({output}, {input}, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::allgather_flat(std::vector<at::Tensor> outputs,
                                                               const std::vector<at::Tensor>& inputs,
                                                               const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
              "dpa: all_gather_into_tensor needs one output per input, got ", outputs.size(),
              " outputs and ", inputs.size(), " inputs");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& output = outputs[i];
    const at::Tensor& input = inputs[i];
    TORCH_CHECK(output.is_contiguous() && output.numel() == input.numel() * size_ &&
                    output.scalar_type() == input.scalar_type(),
                "dpa: rank ", rank_, ": all_gather_into_tensor needs a contiguous output of ",
                "world_size (", size_, ") times the input's elements (", input.numel(),
                ") of its type (", input.scalar_type(), "); the output has ", output.numel(),
                " elements of ", output.scalar_type(), output.is_contiguous() ? "" : ", not contiguous");
  }
  if (switch_moves(inputs)) return allgather_through_switch(std::move(outputs), inputs, c10d::OpType::_ALLGATHER_BASE);
  // Gloo's flat form is missing from torch 1.13, so gather into views of each output, rank by
  // rank: output_lists[r][i] is rank r's part of output i (Gloo's coalesced layout).
  HostStaging staging;
  std::vector<at::Tensor> input_forms;
  std::vector<std::vector<at::Tensor>> output_lists(static_cast<std::size_t>(size_));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& output = outputs[i];
    const at::Tensor& input = inputs[i];
    input_forms.push_back(staging.input(input, GlooUse::move));
    const at::Tensor output_form = staging.output(output, GlooUse::move);
    std::vector<at::Tensor> parts = output_form.view({-1}).chunk(size_);
    for (std::size_t r = 0; r < parts.size(); ++r) {
      output_lists[r].push_back(parts[r].view(input_forms.back().sizes()));
    }
  }
  c10::intrusive_ptr<c10d::Work> work;
  if (inputs.size() == 1) {
    std::vector<std::vector<at::Tensor>> slots(1);
    for (const auto& list : output_lists) slots.front().push_back(list.front());
    work = gloo_->allgather(slots, input_forms, opts);
  } else {
    work = gloo_->allgather_coalesced(output_lists, input_forms, opts);
  }
  return finish_gloo(rank_, c10d::OpType::_ALLGATHER_BASE, work, std::move(staging), outputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  HostStaging staging;
  std::vector<at::Tensor> input_forms = staging.inputs(inputs, GlooUse::move);
  std::vector<std::vector<at::Tensor>> output_forms = staging.output_lists(outputs, GlooUse::move);
  c10::intrusive_ptr<c10d::Work> work = gloo_->allgather_coalesced(output_forms, input_forms, opts);
  return finish_gloo(rank_, c10d::OpType::ALLGATHER_COALESCED, work, std::move(staging),
                     flattened(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  HostStaging staging;
  std::vector<at::Tensor> input_forms = staging.inputs(inputs, GlooUse::move);
  std::vector<std::vector<at::Tensor>> output_forms = staging.output_lists(outputs, GlooUse::move);
  c10::intrusive_ptr<c10d::Work> work = gloo_->gather(output_forms, input_forms, opts);
  return finish_gloo(rank_, c10d::OpType::GATHER, work, std::move(staging), flattened(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  HostStaging staging;
  std::vector<std::vector<at::Tensor>> input_forms = staging.input_lists(inputs, GlooUse::move);
  std::vector<at::Tensor> output_forms = staging.outputs(outputs, GlooUse::move);
  c10::intrusive_ptr<c10d::Work> work = gloo_->scatter(output_forms, input_forms, opts);
  return finish_gloo(rank_, c10d::OpType::SCATTER, work, std::move(staging), outputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  HostStaging staging;
  at::Tensor input_form = staging.input(input, GlooUse::move);
  at::Tensor output_form = staging.output(output, GlooUse::move);
  c10::intrusive_ptr<c10d::Work> work =
      gloo_->alltoall_base(output_form, input_form, output_split_sizes, input_split_sizes, opts);
  return finish_gloo(rank_, c10d::OpType::ALLTOALL_BASE, work, std::move(staging), {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                     int tag) {
  // Gloo's send keeps its tensor (here the Gloo form) until the send is done.
  HostStaging staging;
  std::vector<at::Tensor> forms = staging.inputs(tensors, GlooUse::move);
  return gloo_->send(forms, dst_rank, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                     int tag) {
  TORCH_CHECK(tensors.size() == 1, "dpa: recv takes one tensor, got ", tensors.size());
  HostStaging staging;
  std::vector<at::Tensor> forms = staging.outputs(tensors, GlooUse::move);
  c10::intrusive_ptr<c10d::Work> work = gloo_->recv(forms, src_rank, tag);
  if (!staging.copied()) return work;
  return c10::make_intrusive<StagedRecvWork>(rank_, c10d::OpType::RECV, work, std::move(staging),
                                             tensors.front());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::recvAnysource(std::vector<at::Tensor>& tensors,
                                                              int tag) {
  TORCH_CHECK(tensors.size() == 1, "dpa: recv takes one tensor, got ", tensors.size());
  HostStaging staging;
  std::vector<at::Tensor> forms = staging.outputs(tensors, GlooUse::move);
  c10::intrusive_ptr<c10d::Work> work = gloo_->recvAnysource(forms, tag);
  if (!staging.copied()) return work;
  return c10::make_intrusive<StagedRecvWork>(rank_, c10d::OpType::RECVANYSOURCE, work,
                                             std::move(staging), tensors.front());
}

void ProcessGroupDpa::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  gloo_->monitoredBarrier(opts, wait_all_ranks);
}

void ProcessGroupDpa::setSequenceNumberForGroup() { gloo_->setSequenceNumberForGroup(); }

uint64_t ProcessGroupDpa::getSequenceNumberForGroup() { return gloo_->getSequenceNumberForGroup(); }

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return allgather_flat(outputs, inputs, opts);
}
#endif

}  // namespace dpa::torch_backend
