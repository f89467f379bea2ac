// SPDX-License-Identifier: Apache-2.0
// The execution modes of DPA_TORCH_MODE: where and how all_reduce requests run.
//
//   worksteal (default)  a pool of DPA_TORCH_WORKERS threads takes requests from one FIFO queue;
//                        one request's copies overlap another's network time. A CPU request of
//                        at most DPA_TORCH_INLINE_BYTES with nothing queued runs on the caller.
//   pipeline             one thread runs requests in order, cutting large tensors into chunks
//                        whose copies overlap the network (intra-operation overlap).
//   hybrid               one thread that picks per request: chunked like pipeline for large
//                        tensors, otherwise staged and submitted at once and finished by the
//                        completion callback of its last dpa operation (Handle::on_complete), so
//                        small requests overlap each other.
//   simple               everything on the calling thread; all_reduce returns a completed work.
//
// Whatever the mode, dpa operations are submitted in call order: each request takes a ticket of
// the contexts' dpa::SubmitOrder when all_reduce is called and submits in that ticket's turn.
#pragma once

#include <memory>

#include "job/torch_settings.hpp"
#include "run/allreduce_runner.hpp"

namespace dpa::torch_backend {

class Executor {
 public:
  virtual ~Executor() = default;
  // Takes the request's submission ticket, then runs it (now or later).
  virtual void enqueue(AllreduceRequest request) = 0;
  // Lets running requests finish, fails queued ones, joins the threads. Idempotent.
  virtual void shutdown() = 0;
};

std::unique_ptr<Executor> make_executor(ExecutionMode mode, AllreduceRunner& runner);

}  // namespace dpa::torch_backend
