// SPDX-License-Identifier: Apache-2.0
// Fault injection around any queue, for tests: drops, duplicates, reorders and delays packets,
// reproducibly from a seed, so the protocol's recovery paths run on loopback and virtual devices.
#pragma once

#include <memory>

#include "dpa/config.hpp"
#include "transport/queue.hpp"

namespace dpa::transport {

using FaultOptions = dpa::FaultInjection;

// Returns `inner` itself when no fault is enabled.
std::unique_ptr<Queue> with_faults(std::unique_ptr<Queue> inner, const FaultOptions& options);

}  // namespace dpa::transport
