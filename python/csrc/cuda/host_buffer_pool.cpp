// SPDX-License-Identifier: Apache-2.0
#include "cuda/host_buffer_pool.hpp"

#include <algorithm>
#include <utility>

namespace dpa::torch_backend {

HostBuffer::HostBuffer(HostBufferPool* pool, at::Tensor bytes, bool pinned)
    : pool_(pool), bytes_(std::move(bytes)), pinned_(pinned) {}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      bytes_(std::move(other.bytes_)),
      pinned_(other.pinned_) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = std::exchange(other.pool_, nullptr);
    bytes_ = std::move(other.bytes_);
    pinned_ = other.pinned_;
  }
  return *this;
}

HostBuffer::~HostBuffer() { release(); }

void HostBuffer::release() {
  if (pool_ != nullptr && bytes_.defined()) pool_->give_back(std::move(bytes_), pinned_);
  pool_ = nullptr;
}

at::Tensor HostBuffer::view(at::ScalarType type, std::int64_t count) const {
  const std::int64_t bytes = count * static_cast<std::int64_t>(at::elementSize(type));
  return bytes_.narrow(0, 0, bytes).view(type);
}

HostBuffer HostBufferPool::acquire(std::size_t bytes, bool pinned) {
  const auto wanted = static_cast<std::int64_t>(std::max<std::size_t>(bytes, 1));
  {
    std::lock_guard lock(mutex_);
    auto& idle = pinned ? idle_pinned_ : idle_pageable_;
    // The smallest idle buffer that fits, so large buffers stay free for large operations.
    auto best = idle.end();
    for (auto it = idle.begin(); it != idle.end(); ++it) {
      if (it->numel() >= wanted && (best == idle.end() || it->numel() < best->numel())) best = it;
    }
    if (best != idle.end()) {
      at::Tensor bytes_tensor = std::move(*best);
      idle.erase(best);
      return {this, std::move(bytes_tensor), pinned};
    }
  }
  auto options = at::TensorOptions().dtype(at::kByte).device(at::kCPU).pinned_memory(pinned);
  return {this, at::empty({wanted}, options), pinned};
}

void HostBufferPool::give_back(at::Tensor bytes, bool pinned) {
  std::lock_guard lock(mutex_);
  auto& idle = pinned ? idle_pinned_ : idle_pageable_;
  idle.push_back(std::move(bytes));
  if (idle.size() > kMaxIdlePerKind) {
    // Drop the smallest: large buffers are the expensive ones to allocate again.
    idle.erase(std::min_element(
        idle.begin(), idle.end(),
        [](const at::Tensor& a, const at::Tensor& b) { return a.numel() < b.numel(); }));
  }
}

}  // namespace dpa::torch_backend
