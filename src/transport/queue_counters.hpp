// SPDX-License-Identifier: Apache-2.0
// Per-queue packet counters, read by the thread that owns the queue: the public
// dpa::TransportCounters, which a context also reports summed over its queues.
#pragma once

#include "dpa/transport_counters.hpp"

namespace dpa::transport {

using QueueCounters = TransportCounters;

}  // namespace dpa::transport
