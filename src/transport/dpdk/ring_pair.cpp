// SPDX-License-Identifier: Apache-2.0
#include "transport/dpdk/ring_pair.hpp"

#include <dlfcn.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ring.h>

#include <vector>

#include <fmt/format.h>

#include "dpa/error.hpp"
#include "transport/dpdk/eal.hpp"

namespace dpa::transport::dpdk {

RingPairNames create_ring_pair(const DpdkTransportConfig& eal, const std::string& a, const std::string& b,
                               std::size_t queues, unsigned ring_size, std::size_t b_to_a_shift) {
  start_eal(eal, queues);
  RingPairNames names{"net_ring_" + a, "net_ring_" + b};
  std::uint16_t existing = 0;
  if (rte_eth_dev_get_port_by_name(names.a.c_str(), &existing) == 0 &&
      rte_eth_dev_get_port_by_name(names.b.c_str(), &existing) == 0) {
    return names;
  }
  // rte_eth_from_rings lives in the net_ring driver, which the EAL loaded as a plugin: it is
  // looked up there rather than linked (a second copy of the driver would register twice).
  using FromRings = int (*)(const char*, rte_ring* const[], unsigned, rte_ring* const[], unsigned, unsigned);
  void* driver = dlopen("librte_net_ring.so.23", RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) driver = dlopen("librte_net_ring.so", RTLD_NOW);
  const auto from_rings = driver != nullptr ? reinterpret_cast<FromRings>(dlsym(driver, "rte_eth_from_rings")) : nullptr;
  if (from_rings == nullptr) {
    throw Error(fmt::format("dpdk: the net_ring driver (librte_net_ring) is not available: {}", dlerror()));
  }
  std::vector<rte_ring*> a_to_b(queues);
  std::vector<rte_ring*> b_to_a(queues);
  for (std::size_t q = 0; q < queues; ++q) {
    // Named by the port that receives from them (ring names are short: RTE_RING_NAMESIZE).
    const std::string forward = fmt::format("rx_{}_{}", b, q);
    const std::string backward = fmt::format("rx_{}_{}", a, q);
    // Single producer and consumer: each queue is one thread's on either end.
    a_to_b[q] = rte_ring_create(forward.c_str(), ring_size, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    b_to_a[q] = rte_ring_create(backward.c_str(), ring_size, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (a_to_b[q] == nullptr || b_to_a[q] == nullptr) {
      throw Error(fmt::format("dpdk: cannot create the rings {} and {}: {}", forward, backward, rte_strerror(rte_errno)));
    }
  }
  // b's TX queue q feeds a's RX queue q + shift: still one producer and one consumer per ring.
  std::vector<rte_ring*> b_transmits(queues);
  for (std::size_t q = 0; q < queues; ++q) b_transmits[q] = b_to_a[(q + b_to_a_shift) % queues];
  const auto count = static_cast<unsigned>(queues);
  if (from_rings(a.c_str(), b_to_a.data(), count, a_to_b.data(), count, SOCKET_ID_ANY) < 0 ||
      from_rings(b.c_str(), a_to_b.data(), count, b_transmits.data(), count, SOCKET_ID_ANY) < 0) {
    throw Error(fmt::format("dpdk: cannot create the ring ports {} and {}: {}", names.a, names.b,
                            rte_strerror(rte_errno)));
  }
  return names;
}

}  // namespace dpa::transport::dpdk
