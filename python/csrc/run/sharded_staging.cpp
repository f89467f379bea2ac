// SPDX-License-Identifier: Apache-2.0
#include "run/sharded_staging.hpp"

#include <c10/core/StreamGuard.h>

#include "dpa/error.hpp"
#include "run/allreduce_runner.hpp"

namespace dpa::torch_backend {
namespace {

at::ScalarType host_type_of(const at::Tensor& tensor, ShardedValues values) {
  if (values == ShardedValues::moved) return tensor.scalar_type();
  return tensor.scalar_type() == at::kInt ? at::kInt : at::kFloat;
}

bool used_in_place(const at::Tensor& tensor, at::ScalarType host_type) {
  return tensor.device().is_cpu() && tensor.is_contiguous() && tensor.scalar_type() == host_type;
}

}  // namespace

ShardedStaging::ShardedStaging(AllreduceRunner& runner) : runner_(runner) {
  // Earlier operations whose copies to the device have ended give their buffers back first.
  runner_.sweep_retired();
}

ShardedStaging::~ShardedStaging() {
  if (d2h_stream_ && !(done_ && done_->query())) {
    d2h_stream_->synchronize();
    h2d_stream_->synchronize();
  }
}

void ShardedStaging::use_device_of(const at::Tensor& tensor) {
  if (d2h_stream_) {
    if (d2h_stream_->device() != tensor.device()) {
      throw Error("dpa: the tensors of one collective are on " + d2h_stream_->device().str() + " and " +
                  tensor.device().str() + "; they must share a device");
    }
    return;
  }
  const std::optional<SideStreams> streams = runner_.side_streams_for(tensor);
  d2h_stream_ = streams->to_host;
  h2d_stream_ = streams->to_device;
  events_ = streams->events;
  caller_ready_ = runner_.mark_caller_stream(tensor);
  // Both side streams: the copies in read what the caller queued, the copies back must land
  // after anything the caller queued that writes the outputs.
  caller_ready_->block(*d2h_stream_);
  caller_ready_->block(*h2d_stream_);
}

at::Tensor ShardedStaging::host_buffer(const at::Tensor& tensor, at::ScalarType type) {
  buffers_.push_back(runner_.pool().acquire(static_cast<std::size_t>(tensor.numel()) * at::elementSize(type),
                                            /*pinned=*/tensor.is_cuda()));
  return buffers_.back().view(type, tensor.numel());
}

void ShardedStaging::stage_in(const at::Tensor& tensor, const at::Tensor& host) {
  if (!tensor.is_cuda()) {
    host.copy_(tensor.reshape({-1}));
    return;
  }
  c10::StreamGuard on_side_stream(*d2h_stream_);
  // The caller may free the tensor before the copy has run: the allocator waits for this stream.
  tensor.record_stream(*d2h_stream_);
  // Packing and widening are device kernels on the side stream, so only the host form's bytes
  // cross to the host.
  at::Tensor flat = tensor.reshape({-1});
  if (flat.scalar_type() != host.scalar_type()) flat = flat.to(host.scalar_type());
  host.copy_(flat, /*non_blocking=*/true);
  staged_ = events_->take();
  staged_->record(*d2h_stream_);
}

std::optional<at::Tensor> ShardedStaging::buffer_for(const at::Tensor& tensor, ShardedValues values) {
  const at::ScalarType type = host_type_of(tensor, values);
  if (used_in_place(tensor, type)) {
    in_place_.push_back(tensor);
    return std::nullopt;
  }
  if (tensor.is_cuda()) use_device_of(tensor);
  return host_buffer(tensor, type);
}

void* ShardedStaging::input(const at::Tensor& tensor, ShardedValues values) {
  const std::optional<at::Tensor> host = buffer_for(tensor, values);
  if (!host) return tensor.data_ptr();
  stage_in(tensor, *host);
  return host->data_ptr();
}

void* ShardedStaging::output(const at::Tensor& tensor, ShardedValues values, bool read_first) {
  const std::optional<at::Tensor> host = buffer_for(tensor, values);
  if (!host) return tensor.data_ptr();
  if (read_first) stage_in(tensor, *host);
  written_.emplace_back(tensor, *host);
  return host->data_ptr();
}

void ShardedStaging::wait_staged() const {
  if (staged_) synchronize(*staged_, *d2h_stream_);
}

void ShardedStaging::write_back() {
  if (!h2d_stream_) {
    for (const auto& [output, host] : written_) output.copy_(host.view(output.sizes()));
    return;
  }
  c10::StreamGuard on_side_stream(*h2d_stream_);
  for (const auto& [output, host] : written_) {
    output.record_stream(*h2d_stream_);
    if (output.is_contiguous() && output.scalar_type() == host.scalar_type()) {
      output.view({-1}).copy_(host, /*non_blocking=*/true);
    } else {
      // Only the host form's bytes cross to the device; narrowing and unpacking run there.
      at::Tensor on_device = at::empty({host.numel()}, output.options().dtype(host.scalar_type()));
      on_device.copy_(host, /*non_blocking=*/true);
      output.copy_(on_device.view(output.sizes()));
    }
  }
  done_ = events_->take();
  done_->record(*h2d_stream_);
}

}  // namespace dpa::torch_backend
