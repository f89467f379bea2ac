// Two DPDK ports of one process wired to each other by rings (net_ring, rte_eth_from_rings): what
// one sends on queue q the other receives on queue q, as mbuf pointers, nothing copied. A switch
// and a worker on the two ends see frames as a NIC's DMA would hand them over, so the switch's
// own per-core cost can be measured without a virtual device's copies (dpa-bench --ring-switch).
#pragma once

#include <cstddef>
#include <string>

#include "dpa/transport_config.hpp"

namespace dpa::transport::dpdk {

// Starts the EAL from `eal` (unless it runs) and creates the ports "net_ring_<a>" and
// "net_ring_<b>" with `queues` queue pairs each (rings of `ring_size` packets), unless they
// exist. Returns the two port names for dpdk.ports; dpa::Error when DPDK cannot make them.
struct RingPairNames {
  std::string a;
  std::string b;
};
RingPairNames create_ring_pair(const DpdkTransportConfig& eal, const std::string& a, const std::string& b,
                               std::size_t queues, unsigned ring_size = 4096);

}  // namespace dpa::transport::dpdk
