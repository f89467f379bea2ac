// SPDX-License-Identifier: Apache-2.0
// DPDK device: one Ethernet port set up with one RX/TX queue pair per dpa queue (thread),
// a mempool per queue, replies steered to their queue by UDP destination port.
#pragma once

#include <memory>

#include "dpa/transport_config.hpp"
#include "transport/device.hpp"

namespace dpa::transport::dpdk {

// Starts the EAL if needed and sets the port up; dpa::ConfigError / dpa::Error naming the key.
std::unique_ptr<Device> open_dpdk_device(const DpdkTransportConfig& config, std::size_t queues);

}  // namespace dpa::transport::dpdk
