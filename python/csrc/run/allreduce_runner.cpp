// SPDX-License-Identifier: Apache-2.0
#include "run/allreduce_runner.hpp"

#include <stdexcept>
#include <string>
#include <utility>

#include <c10/core/impl/VirtualGuardImpl.h>

#include "run/fastest_k.hpp"

namespace dpa::torch_backend {
namespace {

std::string describe(const AllreduceRequest& request, int rank) {
  std::string text = "dpa all_reduce (" + std::string(to_string(request.options.op)) +
                     ") on rank " + std::to_string(rank) + " of ";
  for (std::size_t i = 0; i < request.tensors.size(); ++i) {
    const at::Tensor& tensor = request.tensors[i];
    if (i > 0) text += ", ";
    text += std::to_string(tensor.numel()) + " " +
            std::string(c10::toString(tensor.scalar_type())) + " on " + tensor.device().str();
  }
  return text;
}

}  // namespace

void DeviceResults::add(const TensorAllreduce& tensor) {
  if (!tensor.done_event()) return;
  results_on = tensor.results_stream();
  device_done.push_back(tensor.done_event());
}

std::size_t AllreduceRequest::largest_tensor_bytes() const {
  std::size_t largest = 0;
  for (const at::Tensor& tensor : tensors)
    largest = std::max(largest, static_cast<std::size_t>(tensor.nbytes()));
  return largest;
}

AllreduceRunner::AllreduceRunner(Context& wide, Context* small, HostBufferPool& pool,
                                 const TorchSettings& settings)
    : wide_(wide), small_(small), pool_(pool), settings_(settings) {}

Context& AllreduceRunner::context_for(std::size_t elements) const {
  return small_ != nullptr && elements < wide_.payload() ? *small_ : wide_;
}

void AllreduceRunner::fail(AllreduceRequest& request, std::exception_ptr error) const {
  std::string reason;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    reason = e.what();
  } catch (...) {
    reason = "unknown error";
  }
  request.work->fail(std::make_exception_ptr(
      std::runtime_error(describe(request, wide_.rank()) + " failed: " + reason)));
}

std::shared_ptr<c10::Event> AllreduceRunner::mark_caller_stream(const at::Tensor& tensor) {
  if (!tensor.is_cuda()) return nullptr;
  std::shared_ptr<c10::Event> event = side_streams_.for_device(tensor.device()).events->take();
  // The device-generic stream API: it compiles against a CPU-only torch, where this is never reached.
  event->record(c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(tensor.device()));
  return event;
}

std::optional<SideStreams> AllreduceRunner::side_streams_for(const at::Tensor& tensor) {
  if (!tensor.is_cuda()) return std::nullopt;
  return side_streams_.for_device(tensor.device());
}

void AllreduceRunner::retire(std::unique_ptr<TensorAllreduce> operation) {
  std::shared_ptr<c10::Event> done = operation->done_event();
  if (!done) return;  // a CPU tensor's: nothing left on a device
  const c10::Stream results_on = operation->results_stream();
  retirement_.retire(std::shared_ptr<TensorAllreduce>(std::move(operation)), std::move(done), results_on);
}

void AllreduceRunner::retire(std::shared_ptr<void> operation, std::shared_ptr<c10::Event> done,
                             c10::Stream recorded_on) {
  retirement_.retire(std::move(operation), std::move(done), recorded_on);
}

std::unique_ptr<TensorAllreduce> AllreduceRunner::start(const at::Tensor& tensor,
                                                        std::shared_ptr<c10::Event> ready,
                                                        std::size_t elements_per_chunk,
                                                        Context& context) {
  // Earlier operations whose copies to the device have ended give their buffers back first.
  retirement_.sweep();
  return std::make_unique<TensorAllreduce>(tensor, std::move(ready), elements_per_chunk, context,
                                           pool_, side_streams_for(tensor));
}

InFlight AllreduceRunner::stage_and_submit(AllreduceRequest& request, bool caller_waits) {
  InFlight in_flight;
  try {
    for (std::size_t i = 0; i < request.tensors.size(); ++i) {
      const auto elements = static_cast<std::size_t>(request.tensors[i].numel());
      in_flight.tensors.push_back(
          start(request.tensors[i], std::move(request.caller_ready[i]), 0, context_for(elements)));
      in_flight.tensors.back()->stage_in(0);
    }
  } catch (...) {
    in_flight.error = std::current_exception();
  }
  AllreduceOptions options = request.options;
  options.caller_waits = caller_waits;
  // The turn is taken even after a staging error, so later requests are not held up.
  try {
    const auto turn = submit_order().wait_turn(std::move(request.ticket));
    if (!in_flight.error) {
      for (std::size_t i = 0; i < in_flight.tensors.size(); ++i) {
        const auto elements = static_cast<std::size_t>(request.tensors[i].numel());
        in_flight.tensors[i]->submit(0, context_for(elements), turn, options);
      }
    }
  } catch (...) {
    if (!in_flight.error) in_flight.error = std::current_exception();
  }
  return in_flight;
}

void AllreduceRunner::complete(AllreduceRequest& request, InFlight& in_flight) {
  DeviceResults results;
  if (!in_flight.error) {
    try {
      for (auto& tensor : in_flight.tensors) {
        tensor->wait(0);
        tensor->stage_out(0);
        tensor->finish();
        record_last_stats(tensor->stats());
        results.add(*tensor);
      }
    } catch (...) {
      in_flight.error = std::current_exception();
    }
  }
  if (in_flight.error) {
    // Waits for anything dpa or the device still does with the buffers before failing.
    in_flight.tensors.clear();
    fail(request, in_flight.error);
    return;
  }
  for (auto& tensor : in_flight.tensors) retire(std::move(tensor));
  in_flight.tensors.clear();
  request.work->complete(results.results_on, std::move(results.device_done));
}

void AllreduceRunner::run_whole(AllreduceRequest& request) {
  InFlight in_flight = stage_and_submit(request, /*caller_waits=*/true);
  complete(request, in_flight);
}

void AllreduceRunner::run_chunked(AllreduceRequest& request) {
  DeviceResults results;
  try {
    // One thread runs the whole request, so it keeps the turn until its last chunk is submitted.
    const auto turn = submit_order().wait_turn(std::move(request.ticket));
    for (std::size_t i = 0; i < request.tensors.size(); ++i) {
      std::unique_ptr<TensorAllreduce> op = run_one_chunked(
          turn, request.tensors[i], std::move(request.caller_ready[i]), request.options);
      results.add(*op);
      retire(std::move(op));
    }
  } catch (...) {
    fail(request, std::current_exception());
    return;
  }
  request.work->complete(results.results_on, std::move(results.device_done));
}

std::unique_ptr<TensorAllreduce> AllreduceRunner::run_one_chunked(
    const SubmitOrder::Turn& turn, const at::Tensor& tensor, std::shared_ptr<c10::Event> ready,
    const AllreduceOptions& options) {
  const bool large = static_cast<std::size_t>(tensor.nbytes()) >= settings_.pipeline_threshold;
  const auto elements = static_cast<std::size_t>(tensor.numel());
  Context& context = context_for(elements);
  const std::size_t per_chunk =
      large ? chunk_elements(elements, settings_.pipeline_chunks, context.payload()) : 0;
  std::unique_ptr<TensorAllreduce> op = start(tensor, std::move(ready), per_chunk, context);
  // Chunk c+1 is staged while chunk c is on the network, and chunk c is copied out while
  // chunk c+1 is.
  op->stage_in(0);
  op->submit(0, context, turn, options);
  for (std::size_t c = 1; c < op->chunk_count(); ++c) {
    op->stage_in(c);
    op->submit(c, context, turn, options);
    op->wait(c - 1);
    op->stage_out(c - 1);
  }
  op->wait(op->chunk_count() - 1);
  op->stage_out(op->chunk_count() - 1);
  op->finish();
  record_last_stats(op->stats());
  return op;
}

}  // namespace dpa::torch_backend
