// SPDX-License-Identifier: Apache-2.0
// The sharded collectives through the switch (docs/protocol.md §13): reduce-scatter (SUM, AVG of
// float32, float16, bfloat16 and int32), all-gather and broadcast (any type whose shard is whole
// 32-bit words). Each tensor is one dpa operation on its host form (sharded_staging.hpp). A call
// takes its place in the submit order when it is made, so it keeps its place among the all_reduce
// calls on every rank; it is submitted in that turn on the caller's thread where nothing needs to
// be waited for first (CPU tensors, small CUDA ones whose copies the caller waits for), else on
// the submitting thread once its copies to the host are done. The completing thread then waits for
// the network in call order, queues the copies back and completes the work, in stream order for
// CUDA tensors, as all_reduce's.
#include <algorithm>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "c10d/process_group_dpa.hpp"
#include "run/fastest_k.hpp"
#include "run/sharded_staging.hpp"

namespace dpa::torch_backend {
namespace {

std::size_t words_of(const at::Tensor& tensor) {
  return static_cast<std::size_t>(tensor.numel()) * tensor.element_size() / 4;
}

// Whether `tensor` moves as whole 32-bit words (all-gather, broadcast).
bool moves_as_words(const at::Tensor& tensor) {
  return (static_cast<std::size_t>(tensor.numel()) * tensor.element_size()) % 4 == 0;
}

std::string describe(c10d::OpType type, int rank, const std::vector<at::Tensor>& tensors) {
  std::string text = "dpa " + c10d::opTypeToString(type) + " on rank " + std::to_string(rank) + " of ";
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(tensors[i].numel()) + " " + std::string(c10::toString(tensors[i].scalar_type())) +
            " on " + tensors[i].device().str();
  }
  return text;
}

// The caller waits for the copies to the host of CUDA tensors up to this size, as a small
// all_reduce's does (execution_modes.cpp): a thread hop costs more than such a copy.
bool submits_on_caller(const std::vector<at::Tensor>& tensors, const TorchSettings& settings) {
  std::size_t largest = 0;
  bool cuda = false;
  for (const at::Tensor& tensor : tensors) {
    cuda = cuda || tensor.is_cuda();
    largest = std::max(largest, static_cast<std::size_t>(tensor.nbytes()));
  }
  return !cuda || (settings.cuda_inline_bytes > 0 && largest <= settings.cuda_inline_bytes);
}

}  // namespace

// One sharded collective call on its way through the switch.
class ShardedCall {
 public:
  ShardedCall(std::unique_ptr<ShardedStaging> staging, c10::intrusive_ptr<DpaWork> work,
              SubmitOrder::Ticket ticket, std::string what, ShardedSubmit submit)
      : staging_(std::move(staging)),
        work_(std::move(work)),
        ticket_(std::move(ticket)),
        what_(std::move(what)),
        submit_(std::move(submit)) {}

  // Waits for the inputs' copies and the call's turn, then submits. The turn is taken even
  // after an error, so later calls are not held up.
  void submit(const SubmitOrder& order) {
    try {
      staging_->wait_staged();
    } catch (...) {
      error_ = std::current_exception();
    }
    try {
      const SubmitOrder::Turn turn = order.wait_turn(std::move(ticket_));
      if (!error_) handles_ = submit_(turn);
    } catch (...) {
      if (!error_) error_ = std::current_exception();
    }
  }

  // Waits for every operation submitted (dpa writes into the staging buffers until then), then
  // writes the results back and completes the work.
  void complete(AllreduceRunner& runner) {
    for (Handle& handle : handles_) {
      try {
        record_last_stats(handle.wait());
      } catch (...) {
        if (!error_) error_ = std::current_exception();
      }
    }
    if (!error_) {
      try {
        staging_->write_back();
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    if (error_) {
      staging_.reset();  // waits for the device's copies before the buffers go back
      work_->fail(std::make_exception_ptr(std::runtime_error(what_ + " failed: " + reason(error_))));
      return;
    }
    const std::shared_ptr<c10::Event> done = staging_->done_event();
    const c10::optional<c10::Stream> results_on = staging_->results_stream();
    work_->complete(results_on, done ? std::vector<std::shared_ptr<c10::Event>>{done}
                                     : std::vector<std::shared_ptr<c10::Event>>{});
    if (done) runner.retire(std::shared_ptr<ShardedStaging>(std::move(staging_)), done, *results_on);
  }

 private:
  static std::string reason(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "unknown error";
    }
  }

  std::unique_ptr<ShardedStaging> staging_;
  c10::intrusive_ptr<DpaWork> work_;
  SubmitOrder::Ticket ticket_;
  std::string what_;
  ShardedSubmit submit_;
  std::vector<Handle> handles_;
  std::exception_ptr error_;
};

bool ProcessGroupDpa::switch_moves(const std::vector<at::Tensor>& tensors) const {
  return !tensors.empty() && std::all_of(tensors.begin(), tensors.end(), moves_as_words);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::run_on_switch(c10d::OpType type,
                                                              std::unique_ptr<ShardedStaging> staging,
                                                              const std::vector<at::Tensor>& inputs,
                                                              std::vector<at::Tensor> outputs,
                                                              ShardedSubmit submit) {
  std::shared_lock lifecycle(lifecycle_mutex_);
  TORCH_CHECK(!closed_, "dpa: a collective on a process group that was shut down");
  auto work = c10::make_intrusive<DpaWork>(rank_, type, outputs);
  track(work);
  const bool on_caller = submits_on_caller(inputs, settings_);
  std::shared_ptr<ShardedCall> call;
  {
    // The ticket and the submitting thread's queue in one order (execution_modes.cpp says why).
    std::lock_guard issuing(sharded_issue_mutex_);
    call = std::make_shared<ShardedCall>(std::move(staging), work, context_->submit_order().take_ticket(),
                                         describe(type, rank_, inputs), std::move(submit));
    if (!on_caller) {
      sharded_submitter_->post([this, call] {
        call->submit(context_->submit_order());
        sharded_completer_->post([this, call] { call->complete(*runner_); });
      });
    }
  }
  if (on_caller) {
    call->submit(context_->submit_order());
    sharded_completer_->post([this, call] { call->complete(*runner_); });
  }
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::reduce_scatter_through_switch(std::vector<at::Tensor> outputs,
                                                                            const std::vector<at::Tensor>& inputs,
                                                                            const c10d::ReduceOp& op,
                                                                            c10d::OpType type) {
  auto staging = std::make_unique<ShardedStaging>(*runner_);
  struct Shard {
    void* input;
    void* output;
    std::size_t count;
    DataType wire;
  };
  std::vector<Shard> shards;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    void* input = staging->input(inputs[i], ShardedValues::summed);
    void* output = staging->output(outputs[i], ShardedValues::summed);
    shards.push_back({input, output, static_cast<std::size_t>(outputs[i].numel()),
                      inputs[i].scalar_type() == at::kInt ? DataType::int32 : DataType::float32});
  }
  AllreduceOptions options;
  options.op = op == c10d::ReduceOp::AVG ? ReduceOp::avg : ReduceOp::sum;
  const FastestK choice = resolve_fastest_k();
  options.k = choice.k;
  options.preemptive = choice.preemptive;
  return run_on_switch(type, std::move(staging), inputs, std::move(outputs),
                       [this, shards, options](const SubmitOrder::Turn& turn) {
                         std::vector<Handle> handles;
                         for (const Shard& shard : shards) {
                           // A shard's blocks are no longer than the shard: small shards take the
                           // session of small packets, as small all_reduce calls do (the choice is
                           // the same on every rank).
                           handles.push_back(runner_->context_for(shard.count).reduce_scatter_async(
                               turn, shard.input, shard.output, shard.count, shard.wire, options));
                         }
                         return handles;
                       });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::allgather_through_switch(std::vector<at::Tensor> outputs,
                                                                       const std::vector<at::Tensor>& inputs,
                                                                       c10d::OpType type) {
  auto staging = std::make_unique<ShardedStaging>(*runner_);
  struct Shard {
    void* input;
    void* output;
    std::size_t words;
  };
  std::vector<Shard> shards;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    void* input = staging->input(inputs[i], ShardedValues::moved);
    void* output = staging->output(outputs[i], ShardedValues::moved);
    shards.push_back({input, output, words_of(inputs[i])});
  }
  return run_on_switch(type, std::move(staging), inputs, std::move(outputs),
                       [this, shards](const SubmitOrder::Turn& turn) {
                         std::vector<Handle> handles;
                         for (const Shard& shard : shards) {
                           handles.push_back(runner_->context_for(shard.words).all_gather_async(
                               turn, shard.input, shard.output, shard.words, AllreduceOptions{}));
                         }
                         return handles;
                       });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::broadcast_through_switch(std::vector<at::Tensor> tensors, int root) {
  auto staging = std::make_unique<ShardedStaging>(*runner_);
  struct Shard {
    void* data;
    std::size_t words;
  };
  std::vector<Shard> shards;
  for (const at::Tensor& tensor : tensors) {
    // Only the root's values travel; the other ranks' are overwritten.
    shards.push_back({staging->output(tensor, ShardedValues::moved, /*read_first=*/rank_ == root), words_of(tensor)});
  }
  return run_on_switch(c10d::OpType::BROADCAST, std::move(staging), tensors, tensors,
                       [this, shards, root](const SubmitOrder::Turn& turn) {
                         std::vector<Handle> handles;
                         for (const Shard& shard : shards) {
                           handles.push_back(runner_->context_for(shard.words).broadcast_async(
                               turn, shard.data, shard.words, root, AllreduceOptions{}));
                         }
                         return handles;
                       });
}

}  // namespace dpa::torch_backend
