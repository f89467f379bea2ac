// SPDX-License-Identifier: Apache-2.0
// The ProcessGroupDpa collectives built from others (process_group_dpa.hpp): the reduce-scatter
// forms (through the switch's owned rounds where it reduces the tensors, collectives_switch.cpp;
// otherwise one all_reduce on Gloo of which each rank keeps its shard), and the list form of
// all-to-all from the flat one.
#include <numeric>
#include <utility>

#include "c10d/process_group_dpa.hpp"
#include "run/future_work.hpp"

namespace dpa::torch_backend {
namespace {

at::Tensor concatenated(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) flat.push_back(tensor.reshape({-1}));
  return at::cat(flat);
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::reduce_scatter_flat(
    std::vector<at::Tensor> outputs, const std::vector<at::Tensor>& inputs, const c10d::ReduceOp& op,
    c10d::OpType type) {
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
              "dpa: reduce_scatter needs one output per input, got ", outputs.size(),
              " outputs and ", inputs.size(), " inputs");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& input = inputs[i];
    const at::Tensor& output = outputs[i];
    TORCH_CHECK(input.numel() == output.numel() * size_ && input.scalar_type() == output.scalar_type() &&
                    input.device() == output.device(),
                "dpa: rank ", rank_, ": reduce_scatter needs an input of world_size (", size_,
                ") times the output's elements (", output.numel(), ") of its type (",
                output.scalar_type(), ") on its device (", output.device(), "); the input has ",
                input.numel(), " elements of ", input.scalar_type(), " on ", input.device());
  }
  if (switch_reduces(inputs, op)) return reduce_scatter_through_switch(std::move(outputs), inputs, op, type);
  std::vector<at::Tensor> reduced;
  std::vector<at::Tensor> shards;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& input = inputs[i];
    const at::Tensor& output = outputs[i];
    // all_reduce works in place: on a copy, so the input stays as the caller left it.
    reduced.push_back(input.reshape({-1}).clone(at::MemoryFormat::Contiguous));
    shards.push_back(reduced.back().narrow(0, rank_ * output.numel(), output.numel()));
  }
  c10::intrusive_ptr<c10d::Work> work = allreduce_any(reduced, op, type);
  return FutureWork::create(
      rank_, type,
      then_on_devices(work->getFuture(), outputs, [outputs, shards = std::move(shards)] {
        for (std::size_t i = 0; i < outputs.size(); ++i) outputs[i].copy_(shards[i].view_as(outputs[i]));
      }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
              "dpa: reduce_scatter takes one output and one input list, got ", outputs.size(),
              " and ", inputs.size());
  TORCH_CHECK(static_cast<int>(inputs.front().size()) == size_, "dpa: rank ", rank_,
              ": reduce_scatter needs one input per rank (", size_, "), got ", inputs.front().size());
  for (const at::Tensor& part : inputs.front()) {
    TORCH_CHECK(part.numel() == outputs.front().numel() && part.scalar_type() == outputs.front().scalar_type(),
                "dpa: rank ", rank_, ": reduce_scatter's inputs must each match the output (",
                outputs.front().numel(), " elements of ", outputs.front().scalar_type(), "), got ",
                part.numel(), " of ", part.scalar_type());
  }
  return reduce_scatter_flat(outputs, {concatenated(inputs.front())}, opts.reduceOp,
                             c10d::OpType::REDUCE_SCATTER);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  return reduce_scatter_flat({output}, {input}, opts.reduceOp, c10d::OpType::_REDUCE_SCATTER_BASE);
}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return reduce_scatter_flat(outputs, inputs, opts.reduceOp, c10d::OpType::_REDUCE_SCATTER_BASE);
}
#endif

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::alltoall(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "dpa: rank ", rank_, ": all_to_all needs one input and one output per rank (", size_,
              "), got ", inputs.size(), " inputs and ", outputs.size(), " outputs");
  // The flat form with one element per row: the split sizes are the tensors' element counts.
  at::Tensor input = concatenated(inputs);
  std::vector<int64_t> input_splits;
  std::vector<int64_t> output_splits;
  for (const at::Tensor& tensor : inputs) input_splits.push_back(tensor.numel());
  for (const at::Tensor& tensor : outputs) {
    TORCH_CHECK(tensor.scalar_type() == input.scalar_type(), "dpa: rank ", rank_,
                ": all_to_all needs one type for every tensor, got ", input.scalar_type(), " and ",
                tensor.scalar_type());
    output_splits.push_back(tensor.numel());
  }
  at::Tensor output =
      at::empty({std::accumulate(output_splits.begin(), output_splits.end(), int64_t{0})}, input.options());
  // Each output's piece of the flat result, taken now: Gloo moves from the split vectors.
  std::vector<at::Tensor> pieces = output.split_with_sizes(output_splits);
  c10::intrusive_ptr<c10d::Work> work = alltoall_base(output, input, output_splits, input_splits, opts);
  return FutureWork::create(
      rank_, c10d::OpType::ALLTOALL,
      then_on_devices(work->getFuture(), outputs, [outputs, pieces = std::move(pieces)] {
        for (std::size_t r = 0; r < outputs.size(); ++r) outputs[r].copy_(pieces[r].view_as(outputs[r]));
      }));
}

}  // namespace dpa::torch_backend
