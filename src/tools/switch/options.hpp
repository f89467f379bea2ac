// SPDX-License-Identifier: Apache-2.0
// dpa-switch's command line: every flag (Options), and the switch's start-up configuration made of
// the flags and the config file (StartUp). Errors are dpa::ConfigError naming the flag or key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "dpa/host_port.hpp"
#include "dpa/switch.hpp"
#include "switch/control_channel.hpp"

namespace dpa::tools::switch_tool {  // src/tools/switch/ (`switch` is a keyword)

// Every flag's value, as parsed; resolve() turns them into the switch's configuration.
struct Options {
  std::string config_path;
  std::string port_file;
  std::string transport;
  std::string shm_fabric;
  dpa::SwitchConfig config;
  dpa::SessionConfig session;
  dpa::UdpTransportConfig udp = dpa::SwitchConfig::udp_defaults();  // socket flags write here
  int world_size = 0;
  std::int64_t straggler_timeout_us = session.straggler_timeout.count();
  std::int64_t idle_timeout_ms = session.idle_timeout.count();
  std::int64_t liveness_timeout_ms = session.liveness_timeout.count();
  std::vector<std::string> workers;
  std::string auth_key_file;
  bool auth_data = false;
  std::int64_t busy_poll_us = 0;
  int busy_poll_threads = 0;
  std::string control_socket;
  int control_port = -1;
  std::string control_host = "127.0.0.1";
  std::string control_secret_file;
  dpa::sw::ControlChannelOptions control;
  std::int64_t control_idle_timeout_ms = control.idle_timeout.count();
  std::string metrics;
};

// What the switch runs with, once the flags and the config file are merged and checked.
struct StartUp {
  dpa::SwitchConfig config;
  dpa::sw::ControlChannelOptions control;
  std::optional<dpa::HostPort> metrics_at;
};

void add_options(CLI::App& app, Options& o);

// Merges the config file and the flags (flags given win) and checks the combination.
StartUp resolve(const CLI::App& app, Options o);

}  // namespace dpa::tools::switch_tool
