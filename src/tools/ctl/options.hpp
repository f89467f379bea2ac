// SPDX-License-Identifier: Apache-2.0
// dpa-switch-ctl's command line: every flag and subcommand (Options), where the control channel is
// and which secret goes first (flags, else environment), and the request the subcommand makes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "dpa/host_port.hpp"
#include "tools/ctl/connection.hpp"

namespace dpa::tools::ctl {

// Every flag's value and the subcommands, as parsed.
struct Options {
  std::string control;
  std::string secret_file;
  bool as_json = false;
  int timeout_ms = 10000;
  CLI::App* sessions = nullptr;
  CLI::App* counters = nullptr;
  CLI::App* add = nullptr;
  CLI::App* remove = nullptr;
  CLI::App* set_clock = nullptr;
  CLI::App* rank_key = nullptr;
  // add-session: each given flag overrides its key of --from-json.
  std::string session_json;
  std::optional<std::uint32_t> id;
  std::optional<int> world_size;
  std::optional<int> k;
  std::optional<std::uint32_t> payload;
  std::optional<std::uint32_t> pool_base;
  std::optional<std::uint32_t> pool_size;
  std::optional<std::int64_t> straggler_timeout_us;
  std::optional<std::int64_t> idle_timeout_ms;
  std::optional<std::int64_t> liveness_timeout_ms;
  std::vector<std::string> workers;
  std::optional<std::string> auth_key_file;
  bool auth_data = false;
  std::uint32_t remove_id = 0;
  std::uint32_t ticks = 0;
  std::string session_key_file;
  std::uint32_t key_rank = 0;
};

void add_options(CLI::App& app, Options& o);

// Where the control channel is: --control, else DPA_SWITCH_CONTROL.
std::variant<UnixPath, dpa::HostPort> resolve_address(const CLI::App& app, const Options& o);

// The secret to send first: --control-secret-file, else DPA_SWITCH_CONTROL_SECRET_FILE, else none.
std::optional<std::string> resolve_secret(const Options& o);

// The request of the subcommand given.
nlohmann::json build_request(const Options& o);

}  // namespace dpa::tools::ctl
