// SPDX-License-Identifier: Apache-2.0
// A device: one opened transport endpoint (Gloo's device): a socket address or a DPDK port.
// It reports what it can do and hands out one Queue per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "transport/queue.hpp"
#include "transport/queue_thread.hpp"

namespace dpa::transport {

struct DeviceProperties {
  std::string name;               // "udp 0.0.0.0", "dpdk net_memif0", ...
  std::uint32_t max_payload = 0;  // largest UDP payload a queue can send or receive
  std::size_t queues = 0;         // how many queues open_queue() accepts
  std::size_t burst = 0;          // packets one receive() returns at most (udp.batch, dpdk.burst)
  bool checksum_offload = false;  // IPv4/UDP checksums computed by the NIC
  bool flow_steering = false;     // replies reach their queue in hardware (rte_flow)
  bool zero_copy_multicast = false;  // send_to_all shares one payload (reference count)
  // Queue::take_for_reply hands out received packets' buffers, so a switch writes its replies
  // into the packets it received and fetches them from the sender's core for writing.
  bool replies_in_place = false;
  // Any thread may drive a queue, one thread at a time (a socket). Not under DPDK, whose queues
  // belong to pinned lcores with per-lcore mempool caches.
  bool any_thread_may_poll = false;
};

class Device {
 public:
  virtual ~Device() = default;

  [[nodiscard]] virtual DeviceProperties properties() const = 0;

  // Queue `index` (0 .. properties().queues - 1) listens on the device's base port + index;
  // each index opens once.
  virtual std::unique_ptr<Queue> open_queue(std::size_t index) = 0;

  // Starts the thread that drives queue `index` with `body` (a runner's loop): a std::thread on
  // sockets, a free worker lcore of the EAL under DPDK (see dpdk.cores).
  virtual std::unique_ptr<QueueThread> launch(std::size_t index, std::function<void()> body) = 0;
};

}  // namespace dpa::transport
