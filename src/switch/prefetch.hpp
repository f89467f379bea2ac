// SPDX-License-Identifier: Apache-2.0
// Cache prefetches for the switch's data path. A packet's bytes are usually in another core's
// cache (the sender's, or the NIC's DMA in the last-level cache): asking for the next packets'
// lines while this one is handled overlaps those transfers instead of stalling on each line.
// Likewise for the reply buffer about to be written.
#pragma once

#include <cstddef>
#include <span>

namespace dpa::sw {

inline constexpr std::size_t kPrefetchAhead = 2;  // packets

inline void prefetch_read(std::span<const std::byte> bytes) {
  for (std::size_t offset = 0; offset < bytes.size(); offset += 64) __builtin_prefetch(bytes.data() + offset, 0, 3);
}

// Prefetches never fault: `at` may point before the buffer.
inline void prefetch_write(const std::byte* at, std::size_t bytes) {
  for (std::size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(at + offset, 1, 3);
}

}  // namespace dpa::sw
