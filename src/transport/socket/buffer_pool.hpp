// SPDX-License-Identifier: Apache-2.0
// Transmit buffers of the socket transport: slots of one size in chunks allocated up front (and
// grown by one chunk when every slot is held, which only happens while a caller warms up), a free
// list of slot indices, and a reference count per slot, so a buffer queued for sendmmsg stays
// intact after its owner released it (the DPDK transport gets the same from mbuf reference counts).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "transport/buffer.hpp"

namespace dpa::transport::socket {

class BufferPool {
 public:
  // The pool never holds more than this many slots: a caller that keeps allocating without
  // releasing gets "none left" instead of unbounded memory.
  static constexpr std::size_t kMaxSlots = std::size_t{1} << 16;

  BufferPool(std::size_t chunk_slots, std::uint32_t slot_bytes)
      : chunk_slots_(std::max<std::size_t>(chunk_slots, 1)), slot_bytes_(slot_bytes) {
    grow();
  }

  std::size_t allocate(std::span<TxBuffer> out) {
    std::size_t given = 0;
    for (TxBuffer& buffer : out) {
      if (free_.empty() && !grow()) break;
      const std::size_t slot = free_.back();
      free_.pop_back();
      references_[slot] = 1;
      // The slot index travels in the handle; +1 keeps a valid handle distinct from null.
      buffer = TxBuffer{payload_of(slot), 0, slot_bytes_, reinterpret_cast<void*>(slot + 1)};
      ++given;
    }
    return given;
  }

  // Drops the caller's references; a slot returns to the free list with its last reference.
  void release(std::span<TxBuffer> buffers) {
    for (TxBuffer& buffer : buffers) {
      if (buffer.native != nullptr) drop(buffer.native);
      buffer = TxBuffer{};
    }
  }

  // A queued send's reference, dropped once the kernel has the datagram.
  void hold(const void* native) { ++references_[slot_of(native)]; }
  void drop(const void* native) {
    const std::size_t slot = slot_of(native);
    if (--references_[slot] == 0) free_.push_back(slot);
  }

 private:
  static std::size_t slot_of(const void* native) { return reinterpret_cast<std::size_t>(native) - 1; }
  std::byte* payload_of(std::size_t slot) const {
    return chunks_[slot / chunk_slots_].get() + (slot % chunk_slots_) * slot_bytes_;
  }

  bool grow() {
    const std::size_t first = chunks_.size() * chunk_slots_;
    if (first + chunk_slots_ > kMaxSlots && !chunks_.empty()) return false;
    // Untouched pages cost no memory: a slot uses only the bytes its packets fill.
    chunks_.push_back(std::make_unique_for_overwrite<std::byte[]>(chunk_slots_ * slot_bytes_));
    references_.resize(first + chunk_slots_, 0);
    free_.reserve(first + chunk_slots_);
    for (std::size_t slot = first + chunk_slots_; slot-- > first;) free_.push_back(slot);
    return true;
  }

  std::size_t chunk_slots_;
  std::uint32_t slot_bytes_;
  std::vector<std::unique_ptr<std::byte[]>> chunks_;
  std::vector<std::uint32_t> references_;
  std::vector<std::size_t> free_;
};

}  // namespace dpa::transport::socket
