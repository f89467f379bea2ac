// SPDX-License-Identifier: Apache-2.0
// Reusable host staging buffers. CUDA tensors are staged through page-locked (pinned) memory so
// that device copies run asynchronously on side streams; CPU tensors that need a dtype conversion
// or a contiguous copy use ordinary memory. Allocating pinned memory is slow, so released buffers
// go back to the pool and the next operation of a similar size takes them again.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include <ATen/ATen.h>

namespace dpa::torch_backend {

class HostBufferPool;

// A buffer on loan from the pool; returns itself when destroyed.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostBufferPool* pool, at::Tensor bytes, bool pinned);
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  // The first `count` elements of the buffer as a 1-D tensor of `type`.
  [[nodiscard]] at::Tensor view(at::ScalarType type, std::int64_t count) const;

 private:
  void release();

  HostBufferPool* pool_ = nullptr;
  at::Tensor bytes_;
  bool pinned_ = false;
};

class HostBufferPool {
 public:
  // Keeps at most this many idle buffers of each kind, so a burst of large operations does not
  // pin host memory for the lifetime of the process group.
  static constexpr std::size_t kMaxIdlePerKind = 8;

  HostBuffer acquire(std::size_t bytes, bool pinned);

 private:
  friend class HostBuffer;
  void give_back(at::Tensor bytes, bool pinned);

  std::mutex mutex_;
  std::vector<at::Tensor> idle_pinned_;
  std::vector<at::Tensor> idle_pageable_;
};

}  // namespace dpa::torch_backend
