// SPDX-License-Identifier: Apache-2.0
#include "c10d/process_group_dpa.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include <pybind11/pybind11.h>

#include "cuda/cuda_arch_check.hpp"
#include "dpa/host_port.hpp"
#include "job/embedded_switch.hpp"
#include "job/job_auth.hpp"
#include "job/job_sizing.hpp"
#include "job/session_join.hpp"
#include "run/fastest_k.hpp"
#include "run/tensor_allreduce.hpp"

namespace dpa::torch_backend {
namespace {

constexpr const char* kChunkingKey = "dpa/chunking";

std::mutex live_groups_mutex;
std::set<ProcessGroupDpa*> live_groups;

// Runs `teardown` with the GIL released when this thread holds it: teardown joins threads that
// may need the GIL to finish.
template <typename Teardown>
void without_gil(Teardown&& teardown) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release release;
    teardown();
  } else {
    teardown();
  }
}

std::optional<ReduceOp> dpa_reduce_op(const c10d::ReduceOp& op) {
  const c10d::ReduceOp::RedOpType type = op;
  if (type == c10d::ReduceOp::SUM) return ReduceOp::sum;
  if (type == c10d::ReduceOp::AVG) return ReduceOp::avg;
  return std::nullopt;
}

}  // namespace

ProcessGroupDpa::ProcessGroupDpa(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                 std::chrono::milliseconds timeout,
                                 c10::intrusive_ptr<BackendBase> gloo)
    : BackendBase(rank, size),
      store_(store),
      gloo_(std::move(gloo)),
      settings_(TorchSettings::from_env()),
      config_(Config::from_env()) {
  if (!gloo_) throw ConfigError("ProcessGroupDpa needs a Gloo process group for delegation");
  config_.rank = rank;
  config_.world_size = size;
  apply_process_group_timeout(config_, timeout);
  check_same_chunking_on_all_ranks(timeout);
  const AuthRequest auth = auth_request(config_);
  std::optional<Config> small;
  std::vector<RankPlacement> placements;
  if (!switch_configured()) {
    AgreedJob job = agree_job(*store_, config_, auth, timeout);
    sizing_ = job.sizing.to_text();
    job.sizing.configure_wide(config_);
    if (job.sizing.small_payload > 0) small = job.sizing.small_config(config_);
    embedded_switch_ = place_switch(config_, small, job, *store_, timeout);
    placements = std::move(job.placements);
  }
  join_together(*store_, config_, embedded_switch_.get(), placements, [&] {
    context_ = std::make_unique<Context>(config_);
    // One sequence of operations over both sessions: requests take one ticket, whichever
    // context their tensors go to.
    if (small) small_context_ = std::make_unique<Context>(*small, context_->submit_order());
  });
  runner_ = std::make_unique<AllreduceRunner>(*context_, small_context_.get(), pool_, settings_);
  executor_ = make_executor(settings_.mode, *runner_);
  sharded_submitter_ = std::make_unique<SerialWorker>("dpa-sharded-in");
  sharded_completer_ = std::make_unique<SerialWorker>("dpa-sharded-out");
  std::lock_guard lock(live_groups_mutex);
  live_groups.insert(this);
}

ProcessGroupDpa::~ProcessGroupDpa() {
  {
    std::lock_guard lock(live_groups_mutex);
    live_groups.erase(this);
  }
  // Python drops the last reference with the GIL held. Gloo's destructor joins its worker
  // threads, and a worker freeing the tensors of its last operation takes the GIL (the tensors
  // may have Python objects): holding it here deadlocks, so the whole teardown runs without it.
  without_gil([this] {
    close_once();
    gloo_.reset();
  });
}

void ProcessGroupDpa::check_same_chunking_on_all_ranks(std::chrono::milliseconds timeout) {
  // Chunking turns one all_reduce into several dpa operations; ranks that chunk differently
  // would submit different operation sequences and fail with confusing protocol errors.
  const std::string mine = to_string(settings_.mode) + ": " + settings_.chunking_signature();
  if (config_.rank == 0) {
    store_->set(kChunkingKey, std::vector<std::uint8_t>(mine.begin(), mine.end()));
    return;
  }
  store_->wait({kChunkingKey}, timeout);
  const std::vector<std::uint8_t> bytes = store_->get(kChunkingKey);
  const std::string rank0(bytes.begin(), bytes.end());
  if (settings_.chunking_signature() != rank0.substr(rank0.find(": ") + 2)) {
    throw ConfigError("rank " + std::to_string(config_.rank) + " runs DPA_TORCH_MODE " + mine +
                      " but rank 0 runs " + rank0 +
                      "; DPA_TORCH_MODE, DPA_TORCH_PIPELINE_CHUNKS and DPA_TORCH_PIPELINE_THRESH "
                      "must cut operations the same way on every rank");
  }
}

void ProcessGroupDpa::close() {
  // Worker threads may need the GIL (Python future callbacks) to finish; never hold it here.
  without_gil([this] { close_once(); });
}

void ProcessGroupDpa::close_once() {
  std::unique_lock lock(lifecycle_mutex_);
  if (closed_) return;
  closed_ = true;
  if (executor_) executor_->shutdown();
  executor_.reset();
  // The submitter first: the calls it submits queue their completion.
  if (sharded_submitter_) sharded_submitter_->shutdown();
  if (sharded_completer_) sharded_completer_->shutdown();
  runner_.reset();
  small_context_.reset();
  context_.reset();
  wait_for_all_ranks_closed(*store_, config_, embeds_switch());
  embedded_switch_.reset();
}

void ProcessGroupDpa::close_all() {
  std::lock_guard lock(live_groups_mutex);
  for (ProcessGroupDpa* group : live_groups) group->close();
}

std::optional<PendingWait> ProcessGroupDpa::pending_all() {
  std::lock_guard lock(live_groups_mutex);
  std::optional<PendingWait> longest;
  for (const ProcessGroupDpa* group : live_groups) {
    std::shared_lock lifecycle(group->lifecycle_mutex_);  // close() drops the contexts under the unique lock
    for (const Context* context : {group->context_.get(), group->small_context_.get()}) {
      const std::optional<PendingWait> wait = context != nullptr ? context->pending() : std::nullopt;
      if (wait && (!longest || wait->waited_ms > longest->waited_ms)) longest = wait;
    }
  }
  return longest;
}

std::uint32_t ProcessGroupDpa::payload() const { return context_ ? context_->payload() : 0; }

std::uint32_t ProcessGroupDpa::payload_for(std::size_t elements) const {
  return runner_ ? runner_->context_for(elements).payload() : 0;
}

std::optional<SwitchCounters> ProcessGroupDpa::switch_counters() const {
  std::shared_lock lifecycle(lifecycle_mutex_);  // close() stops the switch under the unique lock
  if (embedded_switch_ == nullptr) return std::nullopt;
  return embedded_switch_->counters();
}

std::optional<SwitchCounters> ProcessGroupDpa::embedded_switch_totals() {
  std::lock_guard lock(live_groups_mutex);
  std::optional<SwitchCounters> totals;
  for (const ProcessGroupDpa* group : live_groups) {
    if (const std::optional<SwitchCounters> counters = group->switch_counters()) {
      if (!totals) totals.emplace();
      *totals += *counters;
    }
  }
  return totals;
}

std::string ProcessGroupDpa::switch_address() const {
  return to_string(config_.switches);
}

bool ProcessGroupDpa::switch_reduces(const std::vector<at::Tensor>& tensors,
                                     const c10d::ReduceOp& op) const {
  return dpa_reduce_op(op) && !tensors.empty() &&
         std::all_of(tensors.begin(), tensors.end(), dpa_supports);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  return allreduce_any(tensors, opts.reduceOp, c10d::OpType::ALLREDUCE);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::allreduce_any(const std::vector<at::Tensor>& tensors,
                                                              const c10d::ReduceOp& op,
                                                              c10d::OpType type) {
  if (switch_reduces(tensors, op)) return allreduce_through_switch(tensors, op);
  return allreduce_on_gloo(tensors, op, type);
}

c10::intrusive_ptr<DpaWork> ProcessGroupDpa::allreduce_through_switch(
    const std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op) {
  std::shared_lock lifecycle(lifecycle_mutex_);
  TORCH_CHECK(!closed_, "dpa: all_reduce on a process group that was shut down");

  AllreduceRequest request;
  request.tensors = tensors;
  for (const at::Tensor& tensor : tensors) {
    require_cuda_kernels_for(tensor, rank_);
    request.caller_ready.push_back(runner_->mark_caller_stream(tensor));
  }
  const FastestK choice = resolve_fastest_k();
  request.options.op = *dpa_reduce_op(op);
  request.options.k = choice.k;
  request.options.preemptive = choice.preemptive;
  request.work = c10::make_intrusive<DpaWork>(rank_, c10d::OpType::ALLREDUCE, tensors);
  c10::intrusive_ptr<DpaWork> work = request.work;
  track(work);
  executor_->enqueue(std::move(request));
  return work;
}

void ProcessGroupDpa::track(const c10::intrusive_ptr<DpaWork>& work) {
  std::lock_guard lock(outstanding_mutex_);
  // Operations finish roughly in issue order, so pruning from the front keeps this to the ones
  // in flight.
  while (!outstanding_.empty()) {
    const c10::intrusive_ptr<DpaWork> oldest = outstanding_.front().lock();
    if (oldest && !oldest->isCompleted()) break;
    outstanding_.pop_front();
  }
  outstanding_.emplace_back(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDpa::barrier(const c10d::BarrierOptions& opts) {
  std::deque<c10::weak_intrusive_ptr<DpaWork>> pending;
  {
    std::lock_guard lock(outstanding_mutex_);
    pending.swap(outstanding_);
  }
  for (auto& weak : pending) {
    if (auto work = weak.lock()) work->wait_quietly();
  }
  return gloo_->barrier(opts);
}

}  // namespace dpa::torch_backend
