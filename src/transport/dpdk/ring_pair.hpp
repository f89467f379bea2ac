// SPDX-License-Identifier: Apache-2.0
// Two DPDK ports of one process wired to each other by rings (net_ring, rte_eth_from_rings): what
// one sends on queue q the other receives on queue q, as mbuf pointers, nothing copied. A switch
// and a worker on the two ends see frames as a NIC's DMA would hand them over, so the switch's
// own per-core cost can be measured without a virtual device's copies (dpa-bench --ring-switch,
// --ring-hand-off).
#pragma once

#include <cstddef>
#include <string>

#include "dpa/transport_config.hpp"

namespace dpa::transport::dpdk {

// Starts the EAL from `eal` (unless it runs) and creates the ports "net_ring_<a>" and
// "net_ring_<b>" with `queues` queue pairs each (rings of `ring_size` packets), unless they
// exist. What a sends on queue q, b receives on queue q; what b sends on queue q, a receives on
// queue (q + `b_to_a_shift`) mod `queues`: a shift of 1 lands every packet from b on a queue
// other than the one its UDP port steers to, as on a NIC that spreads packets by a hash, so a's
// threads must hand them to their owners (docs/dpdk.md, "Several threads"). Returns the two
// port names for dpdk.ports; dpa::Error when DPDK cannot make them.
struct RingPairNames {
  std::string a;
  std::string b;
};
RingPairNames create_ring_pair(const DpdkTransportConfig& eal, const std::string& a, const std::string& b,
                               std::size_t queues, unsigned ring_size = 4096, std::size_t b_to_a_shift = 0);

}  // namespace dpa::transport::dpdk
