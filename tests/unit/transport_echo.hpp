// SPDX-License-Identifier: Apache-2.0
// The far end of the transport tests: every packet a queue receives goes back to its sender
// from the same queue, copied into a fresh buffer. Runs in a thread (UDP, net_ring) or in a
// process of its own (net_memif, see transport_echo_peer.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "transport/device.hpp"

namespace dpa::transport::test {

inline void run_echo(std::vector<std::unique_ptr<Queue>>& queues, const std::atomic<bool>& stop,
                     std::chrono::nanoseconds poll) {
  std::array<RxPacket, 32> received;
  std::array<TxBuffer, 32> replies;
  std::array<TxRequest, 32> requests;
  while (!stop.load(std::memory_order_relaxed)) {
    for (auto& queue : queues) {
      const std::size_t n = queue->receive(received, poll);
      const std::size_t allocated = queue->allocate(std::span(replies.data(), n));
      for (std::size_t i = 0; i < allocated; ++i) {
        std::memcpy(replies[i].payload, received[i].data.data(), received[i].data.size());
        replies[i].size = static_cast<std::uint32_t>(received[i].data.size());
        requests[i] = TxRequest{&replies[i], received[i].from};
      }
      std::size_t taken = 0;
      for (int attempt = 0; taken < allocated && attempt < 1000; ++attempt) {
        taken += queue->send(std::span(requests.data() + taken, allocated - taken));
        queue->flush();
      }
      queue->release(std::span(replies.data(), allocated));
      queue->flush();
    }
  }
}

}  // namespace dpa::transport::test
