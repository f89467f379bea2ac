// Fixed pool of transmit buffers for the socket transport: one allocation at start, a free list
// of slot indices afterwards (the kernel copies on sendmmsg, so a slot is reusable at once).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "transport/buffer.hpp"

namespace dpa::transport::socket {

class BufferPool {
 public:
  BufferPool(std::size_t slots, std::uint32_t slot_bytes)
      : slot_bytes_(slot_bytes), storage_(std::make_unique_for_overwrite<std::byte[]>(slots * slot_bytes)) {
    free_.reserve(slots);
    for (std::size_t slot = slots; slot-- > 0;) free_.push_back(slot);
  }

  std::size_t allocate(std::span<TxBuffer> out) {
    std::size_t given = 0;
    for (TxBuffer& buffer : out) {
      if (free_.empty()) break;
      const std::size_t slot = free_.back();
      free_.pop_back();
      // The slot index travels in the handle; +1 keeps a valid handle distinct from null.
      buffer = TxBuffer{storage_.get() + slot * slot_bytes_, 0, slot_bytes_,
                        reinterpret_cast<void*>(slot + 1)};
      ++given;
    }
    return given;
  }

  void release(std::span<TxBuffer> buffers) {
    for (TxBuffer& buffer : buffers) {
      if (buffer.native == nullptr) continue;
      free_.push_back(reinterpret_cast<std::size_t>(buffer.native) - 1);
      buffer = TxBuffer{};
    }
  }

 private:
  std::uint32_t slot_bytes_;
  std::unique_ptr<std::byte[]> storage_;
  std::vector<std::size_t> free_;
};

}  // namespace dpa::transport::socket
