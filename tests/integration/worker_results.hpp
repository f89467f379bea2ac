// SPDX-License-Identifier: Apache-2.0
// What a dpa-test-worker process left behind: its exit status and the JSON lines it printed.
// Shared by the integration tests that start worker processes.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tools/process.hpp"

struct RankResult {
  std::optional<int> exit_code;  // empty: killed at the deadline
  std::vector<nlohmann::json> lines;
};

inline std::string worker_path() { return std::string(DPA_BINARY_DIR) + "/tests/integration/dpa-test-worker"; }

// Waits for every process until `deadline` and parses each one's output, a JSON object per line.
inline std::vector<RankResult> collect_results(std::vector<dpa::tools::Process>& processes,
                                               std::chrono::steady_clock::time_point deadline) {
  const auto codes = dpa::tools::wait_all(processes, deadline);
  std::vector<RankResult> results(processes.size());
  for (std::size_t r = 0; r < processes.size(); ++r) {
    results[r].exit_code = codes[r];
    std::istringstream lines(processes[r].output());
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) results[r].lines.push_back(nlohmann::json::parse(line));
    }
  }
  return results;
}
