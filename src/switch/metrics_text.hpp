// SPDX-License-Identifier: Apache-2.0
// The software switch's counters in the Prometheus text exposition format (version 0.0.4):
// what dpa-switch serves at GET /metrics. docs/metrics.md lists every metric.
#pragma once

#include <string>
#include <vector>

#include <string_view>

#include "dpa/host_port.hpp"
#include "dpa/switch.hpp"

namespace dpa::sw {

// Every switch and transport counter per switch thread (label thread="i"), every session's
// counters and settings (label session="id"), and the number of sessions. One HELP and one TYPE
// line per metric; times in seconds.
std::string metrics_text(const std::vector<SwitchThreadCounters>& threads, const std::vector<SessionStatus>& sessions);

// The same for a running switch, read without blocking its threads.
std::string metrics_text(const SoftwareSwitch& target);

// Where to serve them: "host:port" or a port alone (on 127.0.0.1: the counters name the jobs
// and their sizes, so exposing them beyond the host is the operator's explicit choice); port 0
// is ephemeral. `source` names the flag or key in the ConfigError for anything else.
HostPort metrics_address(std::string_view text, std::string_view source);

}  // namespace dpa::sw
