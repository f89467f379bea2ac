// SPDX-License-Identifier: Apache-2.0
// One rank of dpa-bench: every size in both views (docs/benchmark-tools.md), each result verified.
#pragma once

#include <ostream>

#include "dpa/config.hpp"
#include "dpa/switch.hpp"
#include "tools/bench/settings.hpp"

namespace dpa::tools::bench {

// Runs every size of `s` as rank config.rank and writes one JSON line per size to `out` with this
// rank's timings, wrong elements and counters. With the switch of this process (--ring-switch),
// each line also has the switch's packets and busy time over the timed operations. Returns 1 when
// a result was wrong, else 0.
int run_rank(const Settings& s, const dpa::Config& config, std::ostream& out, const dpa::SoftwareSwitch* sw);

// --worker: run_rank with the worker config of the flags and the environment, lines on stdout.
int run_worker(const Settings& s);

}  // namespace dpa::tools::bench
