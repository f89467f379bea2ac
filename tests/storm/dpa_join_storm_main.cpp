// SPDX-License-Identifier: Apache-2.0
// dpa-join-storm: sends a bounded JOIN storm at a session (the attacker of docs/security.md's
// table), for scripts/dpa-attack-table.sh and by hand against a dpa-switch.
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "join_storm.hpp"

int main(int argc, char** argv) {
  dpa::storm::StormSettings settings;
  std::string mode = "fresh";
  double seconds = 20;
  CLI::App app("Send a bounded JOIN storm at a dpa session (docs/security.md)");
  app.add_option("--switch-host", settings.switch_host, "The switch's address")->capture_default_str();
  app.add_option("--switch-port", settings.switch_port, "The switch's first port")->capture_default_str();
  app.add_option("--session", settings.session, "The session attacked")->capture_default_str();
  app.add_option("--world-size", settings.world_size, "What the JOINs announce as N")->capture_default_str();
  app.add_option("--sockets", settings.sockets, "Sources (UDP sockets)")->check(CLI::Range(1, 16000))->capture_default_str();
  app.add_option("--rate", settings.rate, "JOINs per second over all sockets")->check(CLI::Range(1.0, 1e6))->capture_default_str();
  app.add_option("--seconds", seconds, "How long (at most 600)")->check(CLI::Range(0.1, 600.0))->capture_default_str();
  app.add_option("--mode", mode, "fresh: a new nonce per JOIN, ranks in turn; repeat: each socket repeats one nonce for --rank")
      ->check(CLI::IsMember({"fresh", "repeat"}))
      ->capture_default_str();
  app.add_option("--rank", settings.rank, "repeat: the rank claimed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  settings.mode = mode == "repeat" ? dpa::storm::StormSettings::Mode::repeat : dpa::storm::StormSettings::Mode::fresh;
  settings.duration = std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
  try {
    dpa::storm::JoinStorm storm(settings);
    storm.wait();
    std::printf("sent %llu JOINs from %d sockets\n", static_cast<unsigned long long>(storm.sent()), settings.sockets);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "dpa-join-storm: %s\n", error.what());
    return 1;
  }
  return 0;
}
