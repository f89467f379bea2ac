// SPDX-License-Identifier: Apache-2.0
// dpa-bench's report: the JSON schema it shares with python -m dpa.bench (docs/benchmark-tools.md
// "JSON schema") and its table.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dpa::tools::bench {

inline constexpr int kSchemaVersion = 1;

// One result row from every rank's line of one mode and size (fields as run_rank writes them).
// The back-to-back time is the measured ranks' mean, an operation's latency its slowest measured
// rank's; `straggler_rank` (-1: none) is left out of both, so they say what the other ranks saw.
// Wrong and checked elements add up over every rank. Where the measured ranks share a clock
// (boot_id), each operation's latency is split into the barrier's exit skew and the time from the
// last rank's start to the last result; otherwise those fields are null.
nlohmann::json result_row(const std::vector<nlohmann::json>& rank_lines, int world, const std::string& dtype,
                          int straggler_rank);

// This host: name, platform, CPUs, CPU model.
nlohmann::json host_info();

// The DPA_* variables of this process's environment, by name.
nlohmann::json dpa_environment();

// The table of a report: one line per result, nccl-tests' columns and dpa's counters.
void print_table(const nlohmann::json& report);

}  // namespace dpa::tools::bench
