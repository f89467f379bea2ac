// SPDX-License-Identifier: Apache-2.0
// UDP socket device: a bind address; queue q is one non-blocking socket on bind_port + q.
#pragma once

#include <memory>

#include "dpa/transport_config.hpp"
#include "transport/device.hpp"

namespace dpa::transport::socket {

std::unique_ptr<Device> open_udp_device(const UdpTransportConfig& config, std::size_t queues);

// One UDP queue outside any device (tests, control channels).
std::unique_ptr<Queue> open_udp_queue(const UdpTransportConfig& config);

}  // namespace dpa::transport::socket
