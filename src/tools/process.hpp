// SPDX-License-Identifier: Apache-2.0
// Child processes for the launchers (dpa-bench, the integration tests): spawn with captured
// stdout, wait with a deadline, and never leave one behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace dpa::tools {

class Process {
 public:
  // Starts argv[0] (a path) with the given arguments; stdout is captured, stderr inherited.
  // Throws dpa::Error if the program cannot be started.
  explicit Process(const std::vector<std::string>& argv);
  ~Process();  // SIGKILLs and reaps the child if it is still running
  Process(Process&& other) noexcept;
  Process& operator=(Process&&) = delete;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Waits for the child to exit, collecting its output, until `deadline`. Returns the exit
  // code (128 + signal if it was killed by one), or nothing if it is still running.
  std::optional<int> wait_until(std::chrono::steady_clock::time_point deadline);
  void signal(int signal_number) const;

  [[nodiscard]] const std::string& output() const { return output_; }
  [[nodiscard]] pid_t pid() const { return pid_; }

 private:
  void drain_output();

  pid_t pid_ = -1;
  int pidfd_ = -1;
  int stdout_fd_ = -1;
  std::optional<int> exit_code_;
  std::string output_;
};

// Waits for every process until `deadline`; kills the rest when it passes. Returns exit codes
// (nothing for a process that had to be killed).
std::vector<std::optional<int>> wait_all(std::vector<Process>& processes,
                                         std::chrono::steady_clock::time_point deadline);

// Directory of the running executable (to find sibling programs such as dpa-switch).
std::string executable_directory();

}  // namespace dpa::tools
