// SPDX-License-Identifier: Apache-2.0
// Gloo carries the collectives and types that do not go through the switch, but it lacks CUDA
// tensors for several collectives (a CPU-only torch has none), and torch 1.13's Gloo lacks
// bfloat16 and bool altogether. So dpa hands Gloo a form of each tensor it takes: a host copy of a
// CUDA tensor (taken in the caller's stream order), bfloat16 and bool reinterpreted as float16 and
// uint8 where values only move, widened to float32 and uint8 where they are reduced; and writes
// the results back in stream order. CPU tensors of Gloo's types pass through untouched. One path
// on every torch and device.
#pragma once

#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "run/torch_compat.hpp"

namespace dpa::torch_backend {

// What the collective does with a tensor's values.
enum class GlooUse : std::uint8_t {
  move,    // copies them (broadcast, gathers, scatter, all-to-all, send/recv): bits kept
  reduce,  // combines them (all_reduce, reduce): a type Gloo can add
};

// The Gloo forms of one collective's tensors, and what to write back once it has run.
class HostStaging {
 public:
  // A tensor the collective only reads; the list forms keep the lists' shapes.
  at::Tensor input(const at::Tensor& tensor, GlooUse use);
  std::vector<at::Tensor> inputs(const std::vector<at::Tensor>& tensors, GlooUse use);
  std::vector<std::vector<at::Tensor>> input_lists(const std::vector<std::vector<at::Tensor>>& lists, GlooUse use);
  // A tensor the collective writes (and may read): its Gloo form is written back.
  at::Tensor output(const at::Tensor& tensor, GlooUse use);
  std::vector<at::Tensor> outputs(const std::vector<at::Tensor>& tensors, GlooUse use);
  std::vector<std::vector<at::Tensor>> output_lists(const std::vector<std::vector<at::Tensor>>& lists, GlooUse use);

  // Whether any tensor written is a copy: then the collective must be finished with copy_back.
  [[nodiscard]] bool copied() const { return !written_.empty(); }
  // Writes the results into the caller's tensors, blocking until the copies are done.
  void copy_back() const;

 private:
  // (where the result goes: the caller's tensor or its reinterpreting view, its Gloo form)
  std::vector<std::pair<at::Tensor, at::Tensor>> written_;
};

// A Gloo collective's work, finished by the copies back and then `finish` (may be empty; it sees
// the caller's tensors): the work itself when there is nothing to finish, else a work whose
// future holds `outputs` after both.
c10::intrusive_ptr<c10d::Work> finish_gloo(int rank, c10d::OpType type,
                                           const c10::intrusive_ptr<c10d::Work>& gloo_work,
                                           HostStaging staging, std::vector<at::Tensor> outputs,
                                           std::function<void()> finish = {});

// Gloo's point-to-point works have no future: a recv into a Gloo form, written back into the
// caller's tensor when waited for (on the caller's current stream).
class StagedRecvWork final : public c10d::Work {
 public:
  StagedRecvWork(int rank, c10d::OpType type, c10::intrusive_ptr<c10d::Work> gloo_work,
                 HostStaging staging, at::Tensor output);

  bool isCompleted() override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout) override;
  void abort() override;

 private:
  c10::intrusive_ptr<c10d::Work> gloo_work_;
  HostStaging staging_;
  at::Tensor output_;
  std::once_flag copied_back_;
};

}  // namespace dpa::torch_backend
