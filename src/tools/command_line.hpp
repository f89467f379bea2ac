// SPDX-License-Identifier: Apache-2.0
// The command-line conventions every dpa tool shares: --help and --version print and exit 0, a
// usage error prints what is wrong and exits 2; runtime failures are the tool's own exit 1.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "dpa/version.hpp"

namespace dpa::tools {

inline constexpr int kExitRuntimeFailure = 1;
inline constexpr int kExitUsage = 2;

// Adds --version and parses; returns the exit code when the tool must stop here.
inline std::optional<int> parse_command_line(CLI::App& app, const std::string& tool, int argc, char** argv) {
  app.set_version_flag("--version", tool + " " DPA_VERSION_STRING, "Print the version and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // CLI11 exits 0 for --help/--version and 100+ for usage errors; dpa's tools say 2 for all of those.
    return app.exit(error) == 0 ? 0 : kExitUsage;
  }
  return std::nullopt;
}

}  // namespace dpa::tools
