// SPDX-License-Identifier: Apache-2.0
// dpa-bench: allreduce throughput and latency, every result verified (docs/benchmark-tools.md). By
// default it starts a software switch in this process and N local worker processes (copies of
// itself with --worker); with --switch it uses an existing switch, and with --worker it runs as
// one rank of a multi-host run.
//
// Workers configure themselves like every dpa worker (dpa::Config::from_env(): DPA_CONFIG, then
// the DPA_* variables); a flag given on the command line overrides its variable. The launcher
// forwards only the flags it was given, so its workers see the same environment.
//
// The steps, each in tools/bench/: the flags and their checks (settings), a rank's config
// (worker_setup), one rank's run (run_rank), and the launcher with its report (launcher).
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "tools/bench/launcher.hpp"
#include "tools/bench/run_rank.hpp"
#include "tools/bench/settings.hpp"
#include "tools/command_line.hpp"

int main(int argc, char** argv) {
  namespace bench = dpa::tools::bench;
  CLI::App app;
  bench::Settings s;
  bench::add_options(app, s);
  if (const auto exit_code = dpa::tools::parse_command_line(app, "dpa-bench", argc, argv)) return *exit_code;
  try {
    bench::check_settings(s);
    return s.worker ? bench::run_worker(s) : bench::run_launcher(s);
  } catch (const bench::UsageError& error) {
    std::cerr << "dpa-bench: " << error.what() << "\n";
    return dpa::tools::kExitUsage;
  } catch (const std::exception& error) {
    std::cerr << "dpa-bench: " << error.what() << "\n";
    return dpa::tools::kExitRuntimeFailure;
  }
}
