// The DPDK Environment Abstraction Layer is process-wide and starts once: the first DPDK device
// of a process starts it from its config; later devices share it.
#pragma once

#include <string>
#include <vector>

#include "dpa/transport_config.hpp"

namespace dpa::transport::dpdk {

// The EAL arguments a config stands for (argv[0] included).
std::vector<std::string> eal_arguments(const DpdkTransportConfig& config);

// Starts the EAL unless it is running; dpa::Error with DPDK's reason when it cannot start.
void start_eal(const DpdkTransportConfig& config);

}  // namespace dpa::transport::dpdk
