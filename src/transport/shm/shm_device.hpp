// SPDX-License-Identifier: Apache-2.0
// Shared-memory device: queue q owns the segment of port base_port + q (or a free port of the
// fabric), driven by a std::thread; any thread may poll a queue, one at a time.
#pragma once

#include <memory>

#include "dpa/transport_config.hpp"
#include "transport/device.hpp"

namespace dpa::transport::shm {

// dpa::ConfigError naming the key for bad settings.
std::unique_ptr<Device> open_shm_device(const ShmTransportConfig& config, std::size_t queues);

}  // namespace dpa::transport::shm
