// SPDX-License-Identifier: Apache-2.0
// What a DPDK device's queues share: the ports, their addresses and offloads, the neighbour table,
// each queue's inbox for packets that arrived on another queue (software dispatch) and the claims
// that let any thread poll any RX queue.
#pragma once

#include <rte_ethdev.h>
#include <rte_ring.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/dpdk/neighbour_table.hpp"

namespace dpa::transport::dpdk {

struct PortState {
  struct Link {
    std::uint16_t port_id = 0;
    std::uint64_t mac = 0;
    // net_memif maps a connection's rings in its control thread, and its rx_burst computes the
    // ring's address before it checks that the connection is up: polled while the peer connects,
    // it follows a ring at an unmapped address (a segfault seen in CI). Such a port is polled only
    // while it reports its link up, which memif does once the rings are mapped.
    bool poll_only_when_up = false;
  };
  std::vector<Link> links;  // the device's ports, in config order
  // Per link, for messages only: its name and driver, and what may keep it without link.
  std::vector<std::string> link_names, no_link_hints;
  std::array<std::int16_t, RTE_MAX_ETHPORTS> link_of_port{};  // port id -> index in links, or -1
  std::uint32_t local_ip = 0;      // host byte order
  std::uint16_t base_port = 0;     // queue q receives on base_port + q
  std::uint16_t queues = 0;
  std::uint32_t max_payload = 0;
  std::uint16_t burst = 32;
  std::uint64_t tx_flush_cycles = 0;
  bool checksum_offload = false;
  bool check_udp_checksum = true;  // received UDP checksums checked (dpdk.check_udp_checksum)
  bool software_udp_checksum = false;  // sent UDP checksums computed here (no offload; dpdk.software_udp_checksum)
  bool hardware_steering = false;  // rte_flow rules put each port's packets on its queue
  bool chained_transmit = false;   // the port sends chained mbufs (zero-copy multicast)
  NeighbourTable neighbours;
  // RX/TX queue pairs configured on every port (dpdk.queues), at least `queues`: thread t owns
  // RX queues t, t + queues, t + 2 * queues... and transmits on TX queue t.
  std::uint16_t port_queues = 0;
  std::vector<rte_ring*> inboxes;  // one per queue; multi-producer, single-consumer
  std::vector<std::atomic<bool>> opened;

  // Whoever polls an RX queue holds its claim for that rx_burst (DPDK's RX queues take one
  // poller at a time). Without hardware steering a reply may land on any RX queue, and the
  // thread that owns it may have finished its part of an operation while another waits for
  // that reply: every thread therefore also polls the other threads' RX queues, taking the
  // claim when it is free, and hands on what is not its own.
  struct alignas(64) RxClaim {
    std::atomic<bool> held{false};

    [[nodiscard]] bool try_take() {
      return !held.load(std::memory_order_relaxed) && !held.exchange(true, std::memory_order_acquire);
    }
    void give_back() { held.store(false, std::memory_order_release); }
  };
  std::unique_ptr<RxClaim[]> rx_claims;  // links.size() * port_queues, link-major
  bool shared_polling = false;           // several threads: every RX queue is polled under its claim

  explicit PortState(std::size_t queue_count) : opened(queue_count) {}

  [[nodiscard]] RxClaim& claim_of(std::size_t link, std::uint16_t rx_queue) const {
    return rx_claims[link * port_queues + rx_queue];
  }

  [[nodiscard]] bool owns(std::uint16_t udp_port) const {
    return udp_port >= base_port && udp_port - base_port < queues;
  }
};

[[nodiscard]] inline bool link_is_up(std::uint16_t port_id) {
  rte_eth_link link{};
  return rte_eth_link_get_nowait(port_id, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
}

}  // namespace dpa::transport::dpdk
