// SPDX-License-Identifier: Apache-2.0
// dpa-switch-ctl: the requests of dpa-switch's control channel (src/switch/control_channel.hpp)
// from a shell: list sessions with their state, add and remove sessions, read the counters, set
// the manual clock. Exit codes: 0 done, 1 the switch refused or could not be reached, 2 usage.
// main() parses the flags (tools/ctl/options), resolves the address and the secret, and run()
// makes the request over a Connection (tools/ctl/connection) and prints the reply.
#include <chrono>
#include <cstdint>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <variant>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dpa/error.hpp"
#include "dpa/host_port.hpp"
#include "dpa/switch.hpp"
#include "protocol/auth.hpp"
#include "tools/ctl/connection.hpp"
#include "tools/ctl/options.hpp"

namespace {

using nlohmann::json;
using dpa::tools::ctl::Connection;
using dpa::tools::ctl::Failure;
using dpa::tools::ctl::Options;
using dpa::tools::ctl::UnixPath;

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

std::string joined_ranks(const json& session) {
  return fmt::format("{}/{}", session.at("joined").size(), session.at("world_size").get<int>());
}

void print_sessions(const json& sessions) {
  if (sessions.empty()) {
    std::cout << "no sessions\n";
    return;
  }
  std::cout << fmt::format("{:>10} {:>5} {:>3} {:>7} {:>22} {:>10} {:>7} {:>12} {:>12} {:>12} {:>9}\n", "session",
                           "world", "K", "payload", "slots", "generation", "joined", "rounds_full", "rounds_part",
                           "rx_packets", "dropped");
  for (const json& s : sessions) {
    const json& c = s.at("counters");
    const auto base = s.at("pool_base").get<std::uint64_t>();
    std::cout << fmt::format("{:>10} {:>5} {:>3} {:>7} {:>22} {:>10} {:>7} {:>12} {:>12} {:>12} {:>9}\n",
                             s.at("id").get<std::uint32_t>(), s.at("world_size").get<int>(), s.at("k").get<int>(),
                             s.at("payload").get<std::uint32_t>(),
                             fmt::format("[{}, {})", base, base + s.at("pool_size").get<std::uint64_t>()),
                             s.at("generation").get<std::uint32_t>(), joined_ranks(s),
                             c.at("completed_full").get<std::uint64_t>(),
                             c.at("completed_partial").get<std::uint64_t>(),
                             c.at("rx_packets").get<std::uint64_t>(), c.at("dropped").get<std::uint64_t>());
  }
}

// The reply's content for --json: what the request returned, without the "ok" envelope.
json content(json reply) {
  reply.erase("ok");
  return reply;
}

void print_reply(const Options& o, const json& request, const json& reply) {
  if (o.as_json) {
    std::cout << content(reply).dump(2) << "\n";
  } else if (*o.sessions) {
    print_sessions(reply.at("sessions"));
  } else if (*o.counters) {
    for (const auto& [name, value] : reply.at("counters").items()) std::cout << name << " " << value << "\n";
    if (reply.contains("control_channel")) {
      for (const auto& [name, value] : reply["control_channel"].items()) {
        std::cout << "control_channel." << name << " " << value << "\n";
      }
    }
  } else if (*o.add) {
    std::cout << "session " << request["session"]["id"] << " added\n";
  } else if (*o.remove) {
    std::cout << "session " << o.remove_id << " removed\n";
  } else {
    std::cout << "clock set to " << o.ticks << " ticks\n";
  }
}

// add-session: a slot pool that overlaps another session's is refused here, naming both. The
// software switch would hold both (each session has slots of its own), but a job set up against it
// would not run on a Tofino, whose sessions share the slot registers. A session id the switch holds
// already is left to the switch's own refusal; so is a pool it would refuse as malformed.
void check_pool_free(Connection& connection, const json& request) {
  const json& session = request.at("session");
  const dpa::SessionConfig defaults;
  const json base = session.value("pool_base", json(defaults.pool_base));
  const json size = session.value("pool_size", json(defaults.pool_size));
  if (!base.is_number_unsigned() || !size.is_number_unsigned()) return;
  const json reply = connection.request({{"op", "session_status"}});
  if (!reply.is_object() || reply.value("ok", false) != true || !reply.contains("sessions")) return;
  const auto first = base.get<std::uint64_t>();
  const std::uint64_t end = first + size.get<std::uint64_t>();
  for (const json& other : reply["sessions"]) {
    if (other.at("id") == session.at("id")) return;
  }
  for (const json& other : reply["sessions"]) {
    const auto other_first = other.at("pool_base").get<std::uint64_t>();
    const std::uint64_t other_end = other_first + other.at("pool_size").get<std::uint64_t>();
    if (first < other_end && other_first < end) {
      throw Failure{fmt::format("add-session: session {}'s slots [{}, {}) overlap session {}'s slots [{}, {}): give a "
                                "--pool-base and --pool-size outside every other session's pool (dpa-switch-ctl "
                                "sessions lists them)",
                                session.at("id").dump(), first, end, other.at("id").dump(), other_first, other_end)};
    }
  }
}

// Sends the request (after the secret, if any) and prints the reply; a refusal is a Failure.
void run(const Options& o, const std::variant<UnixPath, dpa::HostPort>& address,
         const std::optional<std::string>& secret, const json& request) {
  Connection connection(address, Connection::Clock::now() + std::chrono::milliseconds(o.timeout_ms));
  if (secret) {
    const json authenticated = connection.request({{"op", "auth"}, {"secret", *secret}});
    if (!authenticated.is_object() || authenticated.value("ok", false) != true) {
      throw Failure{"dpa-switch refused the secret: " + authenticated.value("error", authenticated.dump())};
    }
  }
  if (*o.add) check_pool_free(connection, request);
  const json reply = connection.request(request);
  if (!reply.is_object() || !reply.contains("ok") || !reply["ok"].is_boolean()) {
    throw Failure{"the switch's reply has no \"ok\": " + reply.dump()};
  }
  if (!reply["ok"].get<bool>()) {
    if (o.as_json) std::cout << reply.dump(2) << "\n";
    const bool has_error = reply.contains("error") && reply["error"].is_string();
    const std::string error = has_error ? reply["error"].get<std::string>() : reply.dump();
    throw Failure{"dpa-switch refused " + request["op"].get<std::string>() + ": " + error};
  }
  print_reply(o, request, reply);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpa-switch-ctl: requests to a running dpa-switch's control channel (dpa-switch --control or "
               "--control-port)"};
  Options options;
  dpa::tools::ctl::add_options(app, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // CLI11 exits 0 for --help/--version and 100+ for usage errors: 2 for all of those.
    return app.exit(error) == 0 ? 0 : kExitUsage;
  }
  try {
    if (*options.rank_key) {
      const dpa::protocol::AuthKey session_key =
          dpa::protocol::read_auth_key_file(options.session_key_file, "rank-key");
      std::cout << dpa::protocol::to_hex(dpa::protocol::derive_rank_key(session_key, options.key_rank)) << '\n';
      return 0;
    }
    const auto address = dpa::tools::ctl::resolve_address(app, options);
    const std::optional<std::string> secret = dpa::tools::ctl::resolve_secret(options);
    run(options, address, secret, dpa::tools::ctl::build_request(options));
    return 0;
  } catch (const dpa::ConfigError& error) {
    std::cerr << "dpa-switch-ctl: " << error.what() << "\n";
    return kExitUsage;
  } catch (const Failure& failure) {
    std::cerr << "dpa-switch-ctl: " << failure.message << "\n";
    return kExitFailure;
  } catch (const std::exception& error) {
    std::cerr << "dpa-switch-ctl: " << error.what() << "\n";
    return kExitFailure;
  }
}
