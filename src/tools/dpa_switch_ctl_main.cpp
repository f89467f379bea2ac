// SPDX-License-Identifier: Apache-2.0
// dpa-switch-ctl: the requests of dpa-switch's control channel (src/switch/control_channel.hpp)
// from a shell: list sessions with their state, add and remove sessions, read the counters, set
// the manual clock. Exit codes: 0 done, 1 the switch refused or could not be reached, 2 usage.
#include <CLI/CLI.hpp>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "dpa/error.hpp"
#include "dpa/host_port.hpp"
#include "protocol/auth.hpp"
#include "switch/control_secret.hpp"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// A request that could not be made or that the switch refused: exit 1 with the message.
struct Failure {
  std::string message;
};

using UnixPath = std::string;

// "unix:PATH" or anything with a '/': dpa-switch --control's Unix socket; else "host:port", or a
// port alone on 127.0.0.1 (dpa-switch's --control-host default).
std::variant<UnixPath, dpa::HostPort> control_address(const std::string& text, const std::string& source) {
  if (text.starts_with("unix:")) return UnixPath(text.substr(5));
  if (text.find('/') != std::string::npos) return UnixPath(text);
  const bool port_only = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  return dpa::parse_host_port(port_only ? "127.0.0.1:" + text : text, source, 0, 1);
}

class Connection {
 public:
  Connection(const std::variant<UnixPath, dpa::HostPort>& to, Clock::time_point deadline) : deadline_(deadline) {
    sockaddr_storage storage{};
    socklen_t address_length = 0;
    if (const auto* path = std::get_if<UnixPath>(&to)) {
      where_ = "unix:" + *path;
      auto& address = reinterpret_cast<sockaddr_un&>(storage);
      address.sun_family = AF_UNIX;
      if (path->empty() || path->size() >= sizeof address.sun_path) {
        throw dpa::ConfigError(fmt::format("--control \"{}\": a Unix socket path has 1 to {} bytes", where_,
                                           sizeof address.sun_path - 1));
      }
      path->copy(address.sun_path, path->size());
      address_length = sizeof address;
    } else {
      const dpa::HostPort& host_port = std::get<dpa::HostPort>(to);
      where_ = host_port.to_string();
      auto& address = reinterpret_cast<sockaddr_in&>(storage);
      address.sin_family = AF_INET;
      address.sin_port = htons(host_port.port);
      if (inet_pton(AF_INET, host_port.host.c_str(), &address.sin_addr) != 1) {
        throw dpa::ConfigError("--control \"" + where_ + "\": the host is not an IPv4 address");
      }
      address_length = sizeof address;
    }
    fd_ = socket(storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd_ < 0) throw Failure{fmt::format("socket: {}", std::strerror(errno))};
    if (connect(fd_, reinterpret_cast<const sockaddr*>(&storage), address_length) != 0) {
      if (errno != EINPROGRESS) fail_with_errno("cannot connect to");
      wait_for(POLLOUT, "connecting to");
      int error = 0;
      socklen_t length = sizeof error;
      getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &length);
      if (error != 0) {
        errno = error;
        fail_with_errno("cannot connect to");
      }
    }
  }
  ~Connection() {
    if (fd_ >= 0) close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends one request line and returns the reply line, parsed.
  json request(const json& message) {
    const std::string line = message.dump() + "\n";
    for (std::size_t sent = 0; sent < line.size();) {
      wait_for(POLLOUT, "sending to");
      const ssize_t n = send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) fail_with_errno("cannot send to");
      if (n > 0) sent += static_cast<std::size_t>(n);
    }
    std::string reply;
    char buffer[4096];
    while (reply.find('\n') == std::string::npos) {
      wait_for(POLLIN, "waiting for a reply from");
      const ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
      if (n == 0) throw Failure{fmt::format("dpa-switch at {} closed the connection without a reply", where_)};
      if (n < 0 && errno != EAGAIN && errno != EINTR) fail_with_errno("cannot read from");
      if (n > 0) reply.append(buffer, static_cast<std::size_t>(n));
    }
    try {
      return json::parse(reply.substr(0, reply.find('\n')));
    } catch (const json::exception& error) {
      throw Failure{fmt::format("{} replied something other than JSON: {}", where_, error.what())};
    }
  }

 private:
  [[noreturn]] void fail_with_errno(const char* doing) const {
    const char* hint = errno == EACCES || errno == EPERM
                           ? "only the switch's user may open its control socket"
                           : "is dpa-switch running with --control or --control-port?";
    throw Failure{fmt::format("{} {}: {} ({})", doing, where_, std::strerror(errno), hint)};
  }

  void wait_for(short events, const char* doing) const {
    for (;;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - Clock::now());
      if (left.count() <= 0) throw Failure{fmt::format("timed out {} {}", doing, where_)};
      pollfd polled{fd_, events, 0};
      const int ready = poll(&polled, 1, static_cast<int>(left.count()));
      if (ready > 0) return;
      if (ready < 0 && errno != EINTR) fail_with_errno(doing);
    }
  }

  int fd_ = -1;
  Clock::time_point deadline_;
  std::string where_;
};

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

void add_options(CLI::App& app, Options& o) {
  app.set_version_flag("--version", std::string("dpa-switch-ctl ") + DPA_SWITCH_CTL_VERSION,
                       "Print the version and exit");
  app.add_option("-c,--control", o.control,
                 "The control channel: a Unix socket path (unix:PATH, or any path with a '/'), host:port, or a "
                 "port on 127.0.0.1 (default: $DPA_SWITCH_CONTROL)");
  app.add_option("--control-secret-file,--secret-file", o.secret_file,
                 "Send the secret in this file (mode 0600) first, as dpa-switch --control-secret-file wants over "
                 "TCP (default: $DPA_SWITCH_CONTROL_SECRET_FILE)");
  app.add_flag("--json", o.as_json, "Print the reply as JSON instead of text");
  app.add_option("--timeout-ms", o.timeout_ms, "Give up on the switch after this long")
      ->check(CLI::Range(1, 3'600'000))
      ->capture_default_str();
  app.require_subcommand(1);
  app.fallthrough();  // --control, --control-secret-file, --json and --timeout-ms also after the subcommand

  o.sessions = app.add_subcommand("sessions", "List the sessions with their state and counters");
  o.counters = app.add_subcommand("counters", "Print the switch's counters, summed over its threads");

  CLI::App* add = o.add = app.add_subcommand("add-session", "Add a session (the keys of a config's \"sessions\" entry)");
  add->add_option("--from-json", o.session_json,
                  "The session as a JSON object, e.g. '{\"id\": 2, \"world_size\": 4}'; the flags below "
                  "override its keys");
  add->add_option("--session,--id", o.id, "Session id (id)");
  add->add_option("-n,--ranks,--world-size", o.world_size, "Ranks in the session (world_size)");
  add->add_option("--k", o.k, "Fastest-K default, 0: K = world size (k)");
  add->add_option("--payload", o.payload, "Values per packet (payload)");
  add->add_option("--pool-base", o.pool_base, "First slot of the session (pool_base)");
  add->add_option("--pool-size", o.pool_size, "Slots of the session (pool_size)");
  add->add_option("--straggler-timeout-us", o.straggler_timeout_us,
                  "Reactive fastest-K: wait this long before completing a slot with K (straggler_timeout_us)");
  add->add_option("--idle-timeout-ms", o.idle_timeout_ms,
                  "A join generation idle this long no longer holds the session (idle_timeout_ms)");
  add->add_option("--liveness-timeout-ms", o.liveness_timeout_ms,
                  "A joined rank not heard from this long is gone (liveness_timeout_ms)");
  add->add_option("--workers", o.workers, "Worker addresses (ip or ip:port), one per rank or one for all (workers)")
      ->delimiter(',');
  add->add_option("--auth-key-file", o.auth_key_file,
                  "The session key's file, read by dpa-switch on its host (a relative path from its working "
                  "directory): the session authenticates its admission, JOIN, LEAVE and KEEPALIVE (auth_key_file)");
  add->add_flag("--auth-data", o.auth_data,
                "With --auth-key-file: the session authenticates its data packets and probes too (auth_data)");

  o.remove = app.add_subcommand("remove-session", "Remove a session");
  o.remove->add_option("id", o.remove_id, "Session id")->required();

  o.set_clock = app.add_subcommand("set-clock", "Set the straggler timer's clock (dpa-switch --manual-clock)");
  o.set_clock->add_option("ticks", o.ticks, "Clock value in ticks of 65.536 us")->required();

  o.rank_key = app.add_subcommand(
      "rank-key", "Print rank R's authentication key, derived from a session key file (docs/protocol.md §6.6); "
                  "needs no switch");
  o.rank_key->add_option("session_key_file", o.session_key_file, "The session's auth_key_file")->required();
  o.rank_key->add_option("rank", o.key_rank, "The rank")->required()->check(CLI::Range(0, 63));
}

// Where the control channel is: --control, else DPA_SWITCH_CONTROL.
std::variant<UnixPath, dpa::HostPort> resolve_address(const CLI::App& app, const Options& o) {
  if (!o.control.empty()) return control_address(o.control, "--control ");
  const char* from_environment = std::getenv("DPA_SWITCH_CONTROL");
  if (from_environment == nullptr || *from_environment == '\0') {
    throw dpa::ConfigError("no control channel: give --control PATH or HOST:PORT, or set DPA_SWITCH_CONTROL "
                           "(dpa-switch serves it with --control PATH or --control-port)");
  }
  return control_address(from_environment, app.count("--control") > 0 ? "--control " : "DPA_SWITCH_CONTROL=");
}

// The secret to send first: --control-secret-file, else DPA_SWITCH_CONTROL_SECRET_FILE, else none.
std::optional<std::string> resolve_secret(const Options& o) {
  if (!o.secret_file.empty()) return dpa::sw::read_control_secret(o.secret_file, "--control-secret-file");
  const char* from_environment = std::getenv("DPA_SWITCH_CONTROL_SECRET_FILE");
  if (from_environment == nullptr || *from_environment == '\0') return std::nullopt;
  return dpa::sw::read_control_secret(from_environment, "DPA_SWITCH_CONTROL_SECRET_FILE=");
}

json add_session_request(const Options& o) {
  json session = json::object();
  if (!o.session_json.empty()) {
    try {
      session = json::parse(o.session_json);
    } catch (const json::exception& error) {
      throw dpa::ConfigError(std::string("--from-json: invalid JSON: ") + error.what());
    }
    if (!session.is_object()) throw dpa::ConfigError("--from-json: expected a JSON object");
  }
  if (o.id) session["id"] = *o.id;
  if (o.world_size) session["world_size"] = *o.world_size;
  if (o.k) session["k"] = *o.k;
  if (o.payload) session["payload"] = *o.payload;
  if (o.pool_base) session["pool_base"] = *o.pool_base;
  if (o.pool_size) session["pool_size"] = *o.pool_size;
  if (o.straggler_timeout_us) session["straggler_timeout_us"] = *o.straggler_timeout_us;
  if (o.idle_timeout_ms) session["idle_timeout_ms"] = *o.idle_timeout_ms;
  if (o.liveness_timeout_ms) session["liveness_timeout_ms"] = *o.liveness_timeout_ms;
  if (!o.workers.empty()) session["workers"] = o.workers;
  if (o.auth_key_file) session["auth_key_file"] = *o.auth_key_file;
  if (o.auth_data) session["auth_data"] = true;
  if (!session.contains("id") || !session.contains("world_size")) {
    throw dpa::ConfigError("add-session: give at least --session and --ranks (or both keys in --from-json)");
  }
  return {{"op", "add_session"}, {"session", session}};
}

// The request of the subcommand given.
json build_request(const Options& o) {
  if (*o.sessions) return {{"op", "session_status"}};
  if (*o.counters) return {{"op", "counters"}};
  if (*o.remove) return {{"op", "remove_session"}, {"id", o.remove_id}};
  if (*o.set_clock) return {{"op", "set_clock"}, {"ticks", o.ticks}};
  return add_session_request(o);
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

// Sends the request (after the secret, if any) and prints the reply; a refusal is a Failure.
void run(const Options& o, const std::variant<UnixPath, dpa::HostPort>& address,
         const std::optional<std::string>& secret, const json& request) {
  Connection connection(address, Clock::now() + std::chrono::milliseconds(o.timeout_ms));
  if (secret) {
    const json authenticated = connection.request({{"op", "auth"}, {"secret", *secret}});
    if (!authenticated.is_object() || authenticated.value("ok", false) != true) {
      throw Failure{"dpa-switch refused the secret: " + authenticated.value("error", authenticated.dump())};
    }
  }
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
  add_options(app, options);
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
    const auto address = resolve_address(app, options);
    const std::optional<std::string> secret = resolve_secret(options);
    run(options, address, secret, build_request(options));
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
