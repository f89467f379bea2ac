// SPDX-License-Identifier: Apache-2.0
// The c10d backend "dpa". Every c10d collective works on CPU and CUDA tensors, on torch 1.13 and
// 2.x, whatever the installed Gloo lacks:
// - all_reduce and reduce-scatter (SUM, AVG) of float32, float16, bfloat16 and int32 go through
//   the switch, and so do all-gather and broadcast of any type whose tensors are whole 32-bit
//   words, and their coalesced and list forms (reduce-scatter and all-gather as owned rounds,
//   docs/protocol.md §13);
// - every other collective, type or reduction goes to a Gloo group built from the same store,
//   with CUDA tensors staged through host copies (host_staging.hpp), AVG as a SUM then a
//   division, and the list forms Gloo lacks built from its flat ones.
// docs/pytorch.md has the matrix. The methods live in three files: this one's .cpp (set-up,
// lifecycle, the switch), collectives_composed.cpp and collectives_gloo.cpp.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "c10d/host_staging.hpp"
#include "cuda/host_buffer_pool.hpp"
#include "dpa/context.hpp"
#include "dpa/switch.hpp"
#include "job/torch_settings.hpp"
#include "run/dpa_work.hpp"
#include "run/execution_modes.hpp"
#include "run/serial_worker.hpp"
#include "run/torch_compat.hpp"

namespace dpa::torch_backend {

class ShardedStaging;
// Submits one sharded call's dpa operations in its turn.
using ShardedSubmit = std::function<std::vector<Handle>(const SubmitOrder::Turn&)>;

class ProcessGroupDpa final : public BackendBase {
 public:
  // `gloo` is a Gloo group over a prefixed view of the same store; it carries the delegated
  // collectives. Joins the dpa session (starting the embedded switch on rank 0 if none is set).
  ProcessGroupDpa(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                  std::chrono::milliseconds timeout, c10::intrusive_ptr<BackendBase> gloo);
  ~ProcessGroupDpa() override;

  // Finishes running operations, fails queued ones, leaves the session and, on the rank that
  // embeds the switch, stops it once every rank has closed. Idempotent.
  void close();
  // Closes every live dpa process group of this process (at interpreter exit).
  static void close_all();
  // The counters of every live group's embedded switch, summed; nullopt when no live group of
  // this process embeds one. Whatever group object a caller holds (torch wraps backends per
  // device type), the process's switch is counted once per group that runs one.
  [[nodiscard]] static std::optional<SwitchCounters> embedded_switch_totals();
  // The longest wait the switch reports pending over the live groups (Context::pending()).
  [[nodiscard]] static std::optional<PendingWait> pending_all();

  [[nodiscard]] std::string mode() const { return to_string(settings_.mode); }
  [[nodiscard]] std::uint32_t payload() const;
  // Values per packet (block) of an all_reduce of `elements` elements.
  [[nodiscard]] std::uint32_t payload_for(std::size_t elements) const;
  // The agreed job sizing ("threads=... window=..."); empty with a configured switch.
  [[nodiscard]] std::string sizing() const { return sizing_; }
  [[nodiscard]] std::string switch_address() const;
  [[nodiscard]] bool embeds_switch() const { return embedded_switch_ != nullptr; }
  // The embedded switch's counters summed over its threads; nullopt on a rank without one.
  [[nodiscard]] std::optional<SwitchCounters> switch_counters() const;
  // Whether this rank tags its packets and checks the switch's (DPA_AUTH, DPA_AUTH_KEY_FILE).
  [[nodiscard]] bool authenticated() const { return config_.auth_key.has_value(); }

  const std::string getBackendName() const override { return "dpa"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  // Waits for this process's outstanding dpa all_reduce operations, then a Gloo barrier.
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
#endif

 private:
  // Whether the switch reduces `tensors` with `op` (otherwise Gloo does).
  [[nodiscard]] bool switch_reduces(const std::vector<at::Tensor>& tensors,
                                    const c10d::ReduceOp& op) const;
  // all_reduce of `tensors` in place through the switch (switch_reduces must hold).
  c10::intrusive_ptr<DpaWork> allreduce_through_switch(const std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOp& op);
  // all_reduce of `tensors` in place on Gloo: host copies of CUDA tensors, AVG as SUM and a
  // division, types Gloo cannot reduce widened.
  c10::intrusive_ptr<c10d::Work> allreduce_on_gloo(const std::vector<at::Tensor>& tensors,
                                                   const c10d::ReduceOp& op, c10d::OpType type);
  // Either of the two; its work always has a future.
  c10::intrusive_ptr<c10d::Work> allreduce_any(const std::vector<at::Tensor>& tensors,
                                               const c10d::ReduceOp& op, c10d::OpType type);
  // Reduce-scatter of each flat input (world_size times its output's elements) into its output:
  // one all_reduce of copies of the inputs, of which this rank keeps its shard.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_flat(std::vector<at::Tensor> outputs,
                                                     const std::vector<at::Tensor>& inputs,
                                                     const c10d::ReduceOp& op, c10d::OpType type);
  // Gloo's all-gather into flat outputs, each world_size times its input, through views.
  c10::intrusive_ptr<c10d::Work> allgather_flat(std::vector<at::Tensor> outputs,
                                                const std::vector<at::Tensor>& inputs,
                                                const c10d::AllgatherOptions& opts);

  // The sharded collectives through the switch (collectives_switch.cpp). Whether every tensor
  // moves as whole 32-bit words (all-gather, broadcast through the switch).
  [[nodiscard]] bool switch_moves(const std::vector<at::Tensor>& tensors) const;
  // One sharded call's dpa operations on the host forms in `staging`, submitted in one turn by
  // `submit`; its work completes once they have and the results are written back.
  c10::intrusive_ptr<c10d::Work> run_on_switch(c10d::OpType type, std::unique_ptr<ShardedStaging> staging,
                                               const std::vector<at::Tensor>& inputs,
                                               std::vector<at::Tensor> outputs, ShardedSubmit submit);
  c10::intrusive_ptr<c10d::Work> reduce_scatter_through_switch(std::vector<at::Tensor> outputs,
                                                               const std::vector<at::Tensor>& inputs,
                                                               const c10d::ReduceOp& op, c10d::OpType type);
  c10::intrusive_ptr<c10d::Work> allgather_through_switch(std::vector<at::Tensor> outputs,
                                                          const std::vector<at::Tensor>& inputs, c10d::OpType type);
  c10::intrusive_ptr<c10d::Work> broadcast_through_switch(std::vector<at::Tensor> tensors, int root);

  // Lets barrier() wait for `work`.
  void track(const c10::intrusive_ptr<DpaWork>& work);
  void check_same_chunking_on_all_ranks(std::chrono::milliseconds timeout);
  void close_once();

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<BackendBase> gloo_;
  TorchSettings settings_;
  Config config_;
  std::unique_ptr<SoftwareSwitch> embedded_switch_;
  std::unique_ptr<Context> context_;        // the wide session (the only one with DPA_SWITCH)
  std::unique_ptr<Context> small_context_;  // small operations; shares context_'s submit order
  std::string sizing_;
  HostBufferPool pool_;
  std::unique_ptr<AllreduceRunner> runner_;
  std::unique_ptr<Executor> executor_;

  std::mutex outstanding_mutex_;
  std::deque<c10::weak_intrusive_ptr<DpaWork>> outstanding_;  // for barrier()
  // The sharded collectives' threads (collectives_switch.cpp): one submits the calls that wait
  // for their copies to the host, one completes every call, each in call order.
  std::mutex sharded_issue_mutex_;
  std::unique_ptr<SerialWorker> sharded_submitter_;
  std::unique_ptr<SerialWorker> sharded_completer_;

  // Shared by issuing calls, exclusive for close(): nothing is issued into a closing group.
  mutable std::shared_mutex lifecycle_mutex_;
  bool closed_ = false;
};

}  // namespace dpa::torch_backend
