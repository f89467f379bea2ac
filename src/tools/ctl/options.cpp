// SPDX-License-Identifier: Apache-2.0
#include "tools/ctl/options.hpp"

#include <cstdlib>

#include "dpa/error.hpp"
#include "switch/control_secret.hpp"

namespace dpa::tools::ctl {

using nlohmann::json;

namespace {

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

}  // namespace

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

std::variant<UnixPath, dpa::HostPort> resolve_address(const CLI::App& app, const Options& o) {
  if (!o.control.empty()) return control_address(o.control, "--control ");
  const char* from_environment = std::getenv("DPA_SWITCH_CONTROL");
  if (from_environment == nullptr || *from_environment == '\0') {
    throw dpa::ConfigError("no control channel: give --control PATH or HOST:PORT, or set DPA_SWITCH_CONTROL "
                           "(dpa-switch serves it with --control PATH or --control-port)");
  }
  return control_address(from_environment, app.count("--control") > 0 ? "--control " : "DPA_SWITCH_CONTROL=");
}

std::optional<std::string> resolve_secret(const Options& o) {
  if (!o.secret_file.empty()) return dpa::sw::read_control_secret(o.secret_file, "--control-secret-file");
  const char* from_environment = std::getenv("DPA_SWITCH_CONTROL_SECRET_FILE");
  if (from_environment == nullptr || *from_environment == '\0') return std::nullopt;
  return dpa::sw::read_control_secret(from_environment, "DPA_SWITCH_CONTROL_SECRET_FILE=");
}

json build_request(const Options& o) {
  if (*o.sessions) return {{"op", "session_status"}};
  if (*o.counters) return {{"op", "counters"}};
  if (*o.remove) return {{"op", "remove_session"}, {"id", o.remove_id}};
  if (*o.set_clock) return {{"op", "set_clock"}, {"ticks", o.ticks}};
  return add_session_request(o);
}

}  // namespace dpa::tools::ctl
