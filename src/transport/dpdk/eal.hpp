// SPDX-License-Identifier: Apache-2.0
// The DPDK Environment Abstraction Layer is process-wide and starts once: the first DPDK device
// of a process starts it from its config; later devices share it. Its worker lcores, one per
// thread (or per core of dpdk.cores), are handed to the threads that drive queues (a runner's
// loop) one at a time; each busy-polls on a core of its own (docs/dpdk.md, "Cores").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dpa/transport_config.hpp"
#include "transport/queue_thread.hpp"

namespace dpa::transport::dpdk {

// dpdk.cores: no pinning at all.
inline constexpr std::string_view kFloatingCores = "none";

// dpdk.cores as a list: "2-5,7" -> {2, 3, 4, 5, 7}, in the order given. ConfigError naming
// dpdk.cores for a list that is malformed, empty, names a core twice or more than the EAL has
// lcores for ("none" is no list: see kFloatingCores).
std::vector<unsigned> parse_core_list(const std::string& text);

// The EAL arguments a config stands for (argv[0] included). dpdk.cores "2-5" becomes
// --lcores=0@(the process's CPUs),1@2,2@3,3@4,4@5: the main lcore (the caller's thread) keeps
// the CPUs it had, and each listed core gets one worker lcore. Without a list (empty or "none")
// the EAL starts `threads` worker lcores over the process's CPUs; by default start_eal then
// chooses a core for each, which the lcore pins itself to when it first runs. ConfigError for a
// bad list.
std::vector<std::string> eal_arguments(const DpdkTransportConfig& config, std::size_t threads);

// Starts the EAL unless it is running, and claims its worker lcores' cores against other dpa
// processes on the host (transport/core_choice.hpp); without enough free cores the lcores float
// and one warning says so. dpa::Error with DPDK's reason when the EAL cannot start.
void start_eal(const DpdkTransportConfig& config, std::size_t threads);

// `body` on a free worker lcore (rte_eal_remote_launch), or on an unpinned std::thread when every
// worker lcore is taken (dpdk.cores lists fewer cores than there are threads; where() says so).
// An lcore that cannot be pinned to its chosen core logs one warning naming both and floats.
std::unique_ptr<QueueThread> launch_on_lcore(std::function<void()> body);

}  // namespace dpa::transport::dpdk
