// SPDX-License-Identifier: Apache-2.0
// The one place that knows every transport: opens the device a TransportConfig names.
#pragma once

#include <cstddef>
#include <memory>

#include "dpa/transport_config.hpp"
#include "transport/device.hpp"

namespace dpa::transport {

// Opens a device with `queues` queues; ConfigError naming the key for bad settings, and for a
// DPDK section when this build has no DPDK.
std::unique_ptr<Device> open_device(const TransportConfig& config, std::size_t queues);

}  // namespace dpa::transport
