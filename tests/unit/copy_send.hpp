// SPDX-License-Identifier: Apache-2.0
// Tests that send bytes they own: one Queue::send() call with each packet copied into a
// transmit buffer of the queue, then a flush (the data path builds packets in place instead).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "transport/queue.hpp"

namespace dpa::transport::testing {

struct Outgoing {
  const std::byte* data = nullptr;
  std::uint32_t size = 0;
  Endpoint to;
};

// Returns how many packets the queue took; packets larger than its buffers are not offered.
inline std::size_t send_copies(Queue& queue, std::span<const Outgoing> packets) {
  std::vector<TxBuffer> buffers(packets.size());
  const std::size_t allocated = queue.allocate(buffers);
  std::vector<TxRequest> requests;
  for (std::size_t i = 0; i < allocated && packets[i].size <= buffers[i].capacity; ++i) {
    std::memcpy(buffers[i].payload, packets[i].data, packets[i].size);
    buffers[i].size = packets[i].size;
    requests.push_back({&buffers[i], packets[i].to});
  }
  const std::size_t taken = queue.send(requests);
  queue.flush();
  queue.release(std::span(buffers.data(), allocated));
  return taken;
}

}  // namespace dpa::transport::testing
