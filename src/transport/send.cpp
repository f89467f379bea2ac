// SPDX-License-Identifier: Apache-2.0
#include "transport/send.hpp"

#include <cstring>

namespace dpa::transport {

std::size_t send_all(Queue& queue, std::span<const TxRequest> packets) {
  constexpr int kStalledRounds = 16;
  std::size_t sent = 0;
  for (int stalled = 0; sent < packets.size() && stalled < kStalledRounds;) {
    const std::size_t taken = queue.send(packets.subspan(sent));
    sent += taken;
    if (taken == 0) {
      ++stalled;
      queue.flush();  // lets the device drain and sent buffers come back
    }
  }
  return sent;
}

bool send_datagram(Queue& queue, std::span<const std::byte> bytes, const Endpoint& to) {
  TxBuffer buffer;
  if (queue.allocate(std::span(&buffer, 1)) == 0) return false;
  bool sent = false;
  if (bytes.size() <= buffer.capacity) {
    std::memcpy(buffer.payload, bytes.data(), bytes.size());
    buffer.size = static_cast<std::uint32_t>(bytes.size());
    const TxRequest request{&buffer, to};
    sent = send_all(queue, std::span(&request, 1)) == 1;
    queue.flush();
  }
  queue.release(std::span(&buffer, 1));
  return sent;
}

}  // namespace dpa::transport
