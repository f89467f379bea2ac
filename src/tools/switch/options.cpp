// SPDX-License-Identifier: Apache-2.0
#include "tools/switch/options.hpp"

#include <chrono>
#include <variant>

#include <fmt/format.h>

#include "dpa/error.hpp"
#include "protocol/auth.hpp"
#include "protocol/wire.hpp"
#include "switch/control_secret.hpp"
#include "switch/metrics_text.hpp"

namespace dpa::tools::switch_tool {

namespace {

std::vector<dpa::WorkerAddress> parse_workers(const std::vector<std::string>& specs) {
  std::vector<dpa::WorkerAddress> workers;
  for (const std::string& spec : specs) {
    const dpa::HostPort address = dpa::parse_host_port(spec, "--workers ", 0, 0);
    workers.push_back(dpa::WorkerAddress{address.host, address.port});
  }
  return workers;
}

// The transport of the config file or --transport, with the socket and shared-memory flags applied.
void resolve_transport(const CLI::App& app, const Options& o, dpa::SwitchConfig& config) {
  if (o.transport == "udp" && !std::holds_alternative<dpa::UdpTransportConfig>(config.transport)) {
    config.transport = dpa::SwitchConfig::udp_defaults();
  }
  if (o.transport == "dpdk" && !std::holds_alternative<dpa::DpdkTransportConfig>(config.transport)) {
    throw dpa::ConfigError("--transport dpdk: the switch config (--config) has no \"dpdk\" section in \"switch\" "
                           "(see configs/switch-dpdk.json)");
  }
  if (o.transport == "shm" && !std::holds_alternative<dpa::ShmTransportConfig>(config.transport)) {
    dpa::ShmTransportConfig shm;
    shm.base_port = dpa::protocol::kDefaultPort;  // where workers look without a port in DPA_SWITCH
    config.transport = shm;
  }
  if (auto* shm = std::get_if<dpa::ShmTransportConfig>(&config.transport)) {
    if (!o.shm_fabric.empty()) shm->fabric = o.shm_fabric;
    if (app.count("--port") > 0) shm->base_port = o.udp.bind_port;
    if (app.count("--host") > 0) {
      throw dpa::ConfigError("--host: applies to the udp transport; shared memory has no address");
    }
  } else if (!o.shm_fabric.empty()) {
    throw dpa::ConfigError("--shm-fabric: applies to --transport shm");
  }
  if (auto* udp = std::get_if<dpa::UdpTransportConfig>(&config.transport)) {
    if (app.count("--host") > 0) udp->bind_host = o.udp.bind_host;
    if (app.count("--port") > 0) udp->bind_port = o.udp.bind_port;
  } else if (std::holds_alternative<dpa::DpdkTransportConfig>(config.transport)) {
    for (const char* flag : {"--host", "--port"}) {
      if (app.count(flag) > 0) {
        throw dpa::ConfigError(fmt::format("{}: applies to the udp transport; on DPDK the switch listens on "
                                           "switch.dpdk.local_ip and local_port of --config",
                                           flag));
      }
    }
  }
}

}  // namespace

void add_options(CLI::App& app, Options& o) {
  app.add_option("-c,--config", o.config_path, "Switch config JSON (configs/softswitch.json)");
  app.add_option("--transport", o.transport,
                 "udp (sockets), shm (shared memory with workers on this host: DPA_TRANSPORT=shm) or dpdk "
                 "(the \"dpdk\" section of --config: configs/switch-dpdk.json); default: the config's section")
      ->check(CLI::IsMember({"udp", "dpdk", "shm"}));
  app.add_option("--shm-fabric", o.shm_fabric, "--transport shm: the fabric the workers use (shm.fabric, DPA_SHM_FABRIC)");
  app.add_option("--host", o.udp.bind_host, "Address to listen on (udp.bind_host)")->capture_default_str();
  app.add_option("--port", o.udp.bind_port,
                 "First UDP port (thread i uses port + i; 0: ephemeral) (udp.bind_port)")
      ->capture_default_str();
  app.add_option("--threads", o.config.threads, "Switch threads")->capture_default_str();
  app.add_option("--busy-poll-us", o.busy_poll_us, "Spin this long before blocking (0: never)")
      ->capture_default_str();
  app.add_option("--busy-poll-threads", o.busy_poll_threads,
                 "Only threads 0 .. n-1 spin (0: every thread)")
      ->capture_default_str();
  app.add_option("--control", o.control_socket,
                 "Serve JSON control requests (add/remove sessions, counters) on a Unix socket at this path, "
                 "created 0600: only this user (and root) may connect");
  app.add_option("--control-port", o.control_port,
                 "Serve the control channel on this TCP port too (0: ephemeral); needs --control-secret-file "
                 "or --control-read-only-open")
      ->check(CLI::Range(0, 65535));
  app.add_option("--control-host", o.control_host, "Address of the TCP control channel")
      ->capture_default_str();
  app.add_option("--control-secret-file", o.control_secret_file,
                 "A file (mode 0600) holding the secret a client sends ({\"op\":\"auth\"}) before add/remove "
                 "requests; required for those requests over TCP");
  app.add_flag("--control-read-only-open", o.control.read_only_open,
               "Let anyone who reaches the control channel make the read-only requests (sessions, counters): "
               "TCP without the secret, and the Unix socket for every user (0666)");
  app.add_option("--control-idle-timeout-ms", o.control_idle_timeout_ms,
                 "Disconnect a control client that sends no request for this long")
      ->capture_default_str();
  app.add_option("--control-max-clients", o.control.max_clients,
                 "Control clients served at once; more are refused")
      ->capture_default_str();
  app.add_option("--control-max-request-bytes", o.control.max_request_bytes,
                 "Longest control request line; a longer one is refused and its connection closed")
      ->capture_default_str();
  app.add_option("--max-sessions", o.config.max_sessions, "Sessions the switch holds at most")
      ->capture_default_str();
  app.add_option("--max-memory-mb", o.config.max_memory_mb,
                 "Slot memory of all sessions together, in MiB; a session that does not fit is refused")
      ->capture_default_str();
  app.add_option("--metrics", o.metrics,
                 "Serve the counters for Prometheus at http://HOST:PORT/metrics: host:port, or a port on "
                 "127.0.0.1 (0: ephemeral) (switch.metrics); default: off");
  app.add_option("--port-file", o.port_file, "Write the first bound port here once listening");
  app.add_flag("--manual-clock", o.config.manual_clock,
               "Straggler timer reads a clock set through the control channel's set_clock "
               "(conformance tests)");
  app.add_option("--session", o.session.id, "Session id of the session given by flags")
      ->capture_default_str();
  app.add_option("-n,--ranks,--world-size", o.world_size, "Ranks in the session (defines a session by flags)");
  app.add_option("--k", o.session.k, "Fastest-K default (0: K = world size)")->capture_default_str();
  app.add_option("--payload", o.session.payload, "Values per packet")->capture_default_str();
  app.add_option("--pool-base", o.session.pool_base, "First slot of the session")->capture_default_str();
  app.add_option("--pool-size", o.session.pool_size, "Slots of the session")->capture_default_str();
  app.add_option("--straggler-timeout-us", o.straggler_timeout_us,
                 "Reactive fastest-K: wait this long before completing a slot with K")
      ->capture_default_str();
  app.add_option("--idle-timeout-ms", o.idle_timeout_ms,
                 "A join generation idle this long no longer holds the session against another job")
      ->capture_default_str();
  app.add_option("--liveness-timeout-ms", o.liveness_timeout_ms,
                 "A joined rank not heard from this long is gone: rounds that wait for it report it")
      ->capture_default_str();
  app.add_option("--workers", o.workers, "Worker addresses (ip or ip:port), one per rank or one for all")
      ->delimiter(',');
  app.add_option("--auth-key-file", o.auth_key_file,
                 "The session's key, 64 hex digits: its JOIN, LEAVE and KEEPALIVE packets and their replies then "
                 "carry their rank's tag (auth_key_file, docs/protocol.md §6.6)");
  app.add_flag("--auth-data", o.auth_data,
               "With --auth-key-file: data packets, probes and their replies carry the tag too (auth_data)");
}

StartUp resolve(const CLI::App& app, Options o) {
  StartUp start{o.config, o.control, std::nullopt};
  dpa::SwitchConfig& config = start.config;
  if (!o.config_path.empty()) {
    const dpa::SwitchConfig from_file = dpa::SwitchConfig::from_json_file(o.config_path);
    config.transport = from_file.transport;
    if (app.count("--threads") == 0) config.threads = from_file.threads;
    if (app.count("--max-sessions") == 0) config.max_sessions = from_file.max_sessions;
    if (app.count("--max-memory-mb") == 0) config.max_memory_mb = from_file.max_memory_mb;
    config.busy_poll = from_file.busy_poll;
    config.busy_poll_threads = from_file.busy_poll_threads;
    config.sessions = from_file.sessions;
    config.metrics = from_file.metrics;
  }
  resolve_transport(app, o, config);
  if (app.count("--busy-poll-us") > 0) config.busy_poll = std::chrono::microseconds(o.busy_poll_us);
  if (app.count("--busy-poll-threads") > 0) config.busy_poll_threads = o.busy_poll_threads;
  if (o.world_size > 0) {
    dpa::SessionConfig session = o.session;
    session.world_size = o.world_size;
    session.straggler_timeout = std::chrono::microseconds(o.straggler_timeout_us);
    session.idle_timeout = std::chrono::milliseconds(o.idle_timeout_ms);
    session.liveness_timeout = std::chrono::milliseconds(o.liveness_timeout_ms);
    session.workers = parse_workers(o.workers);
    if (!o.auth_key_file.empty()) session.auth_key = dpa::protocol::read_auth_key_file(o.auth_key_file, "--auth-key-file");
    session.auth_data = o.auth_data;
    std::erase_if(config.sessions, [&](const dpa::SessionConfig& s) { return s.id == session.id; });
    config.sessions.push_back(session);
  }
  if (o.world_size == 0 && (!o.auth_key_file.empty() || o.auth_data)) {
    throw dpa::ConfigError("--auth-key-file, --auth-data: apply to the session given by flags (--ranks); a config "
                           "file's session takes \"auth_key_file\" and \"auth_data\"");
  }
  const bool has_control = !o.control_socket.empty() || o.control_port >= 0;
  if (config.sessions.empty() && !has_control) {
    throw dpa::ConfigError("no session: give --config FILE, --ranks N, --control PATH or --control-port");
  }
  if (!has_control) {
    for (const char* flag : {"--control-secret-file", "--control-read-only-open", "--control-host"}) {
      if (app.count(flag) > 0) throw dpa::ConfigError(std::string(flag) + ": give --control PATH or --control-port");
    }
  }
  if (!o.control_secret_file.empty()) {
    start.control.secret = dpa::sw::read_control_secret(o.control_secret_file, "--control-secret-file");
  }
  if (app.count("--metrics") > 0) config.metrics = o.metrics;
  if (!config.metrics.empty()) {
    const char* source = app.count("--metrics") > 0 ? "--metrics " : "switch.metrics: ";
    start.metrics_at = dpa::sw::metrics_address(config.metrics, source);
#ifndef DPA_HAVE_METRICS_HTTP
    throw dpa::ConfigError(std::string(app.count("--metrics") > 0 ? "--metrics" : "switch.metrics") +
                           ": this dpa-switch was built without cpp-httplib, so it has no metrics endpoint "
                           "(install libcpp-httplib-dev and rebuild; the control channel's \"counters\" "
                           "request reads the counters meanwhile)");
#endif
  }
  start.control.idle_timeout = std::chrono::milliseconds(o.control_idle_timeout_ms);
  start.control.validate();
  return start;
}

}  // namespace dpa::tools::switch_tool
