// What a DPDK device's queues share: the ports, their addresses and offloads, the neighbour table
// and each queue's inbox for packets that arrived on another queue (software dispatch).
#pragma once

#include <rte_ethdev.h>
#include <rte_ring.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "transport/dpdk/neighbour_table.hpp"

namespace dpa::transport::dpdk {

struct PortState {
  struct Link {
    std::uint16_t port_id = 0;
    std::uint64_t mac = 0;
  };
  std::vector<Link> links;  // the device's ports, in config order
  std::array<std::int16_t, RTE_MAX_ETHPORTS> link_of_port{};  // port id -> index in links, or -1
  std::uint32_t local_ip = 0;      // host byte order
  std::uint16_t base_port = 0;     // queue q receives on base_port + q
  std::uint16_t queues = 0;
  std::uint32_t max_payload = 0;
  std::uint16_t burst = 32;
  std::uint64_t tx_flush_cycles = 0;
  bool checksum_offload = false;
  bool hardware_steering = false;  // rte_flow rules put each port's packets on its queue
  bool chained_transmit = false;   // the port sends chained mbufs (zero-copy multicast)
  NeighbourTable neighbours;
  std::vector<rte_ring*> inboxes;  // one per queue; multi-producer, single-consumer
  std::vector<std::atomic<bool>> opened;

  explicit PortState(std::size_t queue_count) : opened(queue_count) {}

  [[nodiscard]] bool owns(std::uint16_t udp_port) const {
    return udp_port >= base_port && udp_port - base_port < queues;
  }
};

}  // namespace dpa::transport::dpdk
