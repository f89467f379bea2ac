// SPDX-License-Identifier: Apache-2.0
#include "transport/factory.hpp"

#include "dpa/error.hpp"
#include "transport/shm/shm_device.hpp"
#include "transport/socket/udp_device.hpp"
#ifdef DPA_HAVE_DPDK
#include "transport/dpdk/dpdk_device.hpp"
#endif

namespace dpa::transport {

std::unique_ptr<Device> open_device(const TransportConfig& config, std::size_t queues) {
  if (const auto* udp = std::get_if<UdpTransportConfig>(&config)) return socket::open_udp_device(*udp, queues);
  if (const auto* shm = std::get_if<ShmTransportConfig>(&config)) return shm::open_shm_device(*shm, queues);
#ifdef DPA_HAVE_DPDK
  return dpdk::open_dpdk_device(std::get<DpdkTransportConfig>(config), queues);
#else
  throw ConfigError("dpdk: this build of dpa has no DPDK transport (libdpdk was not found by pkg-config "
                    "at configure time; install libdpdk-dev and reconfigure)");
#endif
}

}  // namespace dpa::transport
