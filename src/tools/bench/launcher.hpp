// SPDX-License-Identifier: Apache-2.0
// dpa-bench's launcher: for each mode, a switch in this process (unless --switch) and one worker
// process per rank (copies of dpa-bench with --worker), or one rank and a DPDK switch over
// net_ring (--ring-switch); then the report of every rank's lines.
#pragma once

#include "tools/bench/settings.hpp"

namespace dpa::tools::bench {

// Runs every mode of `s` (checked by check_settings) and prints the report (and writes --json).
// Returns 0 when every result was right, 1 when one was wrong.
int run_launcher(Settings s);

}  // namespace dpa::tools::bench
