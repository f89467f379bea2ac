// SPDX-License-Identifier: Apache-2.0
// Packet counters of a transport queue (one worker or switch thread's view of its device), and of
// a context: the sum over its threads' queues (Context::transport_counters).
#pragma once

#include <cstdint>

namespace dpa {

struct TransportCounters {
  std::uint64_t rx_packets = 0;
  std::uint64_t tx_packets = 0;
  std::uint64_t tx_errors = 0;       // packets the device or kernel refused
  std::uint64_t rx_dropped = 0;      // frames that were not ours (other protocols, bad headers)
  std::uint64_t rx_syscalls = 0;     // sockets only
  std::uint64_t tx_syscalls = 0;
  std::uint64_t tx_bursts = 0;       // DPDK: rte_eth_tx_burst calls that sent (tx_packets / tx_bursts: burst fill)
  std::uint64_t tx_unresolved = 0;   // DPDK: no MAC known for the destination yet (ARP sent)
  std::uint64_t rx_dispatched = 0;   // DPDK: handed to another queue by destination port
  std::uint64_t rx_bad_checksum = 0; // DPDK: IPv4 or UDP checksum wrong (NIC's verdict or computed); dropped
  // Time spent waiting with nothing to do: DPDK poll steps that found nothing, sockets blocked in
  // ppoll. A polling thread's busy time is its running time less this.
  std::uint64_t idle_ns = 0;
  std::uint64_t injected_drops = 0;  // fault injection only
  std::uint64_t injected_duplicates = 0;
  std::uint64_t injected_reorders = 0;
  std::uint64_t injected_delays = 0;

  TransportCounters& operator+=(const TransportCounters& other);
  // Field by field: what happened between an earlier reading `before` and this one.
  [[nodiscard]] TransportCounters since(const TransportCounters& before) const;
};

}  // namespace dpa
