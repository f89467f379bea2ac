// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dpa/host_port.hpp"
#include "dpa/transport_config.hpp"

namespace dpa {

// Packet fault injection for tests; off by default. Probabilities are per packet in [0, 1].
// Drops and duplicates apply to sent and received packets; reordering and delay to sent ones.
struct FaultInjection {
  double drop = 0.0;
  double duplicate = 0.0;
  double reorder = 0.0;
  double delay = 0.0;
  std::chrono::microseconds delay_time{2000};
  std::uint64_t seed = 1;

  [[nodiscard]] bool enabled() const { return drop > 0 || duplicate > 0 || reorder > 0 || delay > 0; }
};

// Everything a worker needs to take part in a session. Build it in code, from a JSON file
// (keys as the field names) or from DPA_* environment variables; docs/configuration.md lists them all.
struct Config {
  int rank = 0;
  int world_size = 1;

  // The switch servers of the job (DPA_SWITCH "host:port,host:port"). With several, worker thread
  // t talks to server t mod S (switch_of_thread): every server holds the same session and
  // aggregates the slots of its threads, so one job's aggregation spreads over S servers.
  std::vector<HostPort> switches{{"127.0.0.1", 4242}};
  std::uint32_t session = 1;

  int threads = 1;         // worker threads, one socket and one slot range each
  int window = 32;         // outstanding packets per thread
  std::uint32_t payload = 0;  // values per packet; 0 adopts the session's

  // How packets move: UDP sockets (default) or DPDK; queue t serves thread t (see
  // transport_config.hpp; JSON sections "udp": {...} or "dpdk": {...}).
  TransportConfig transport;

  std::chrono::microseconds retransmit_timeout{2000};       // first retransmission
  std::chrono::microseconds max_retransmit_timeout{16000};  // back-off cap (doubling)
  // A round that waits this long for other ranks fails the operation (DPA_TIMEOUT_MS; the
  // PyTorch backend uses the process group's timeout unless that is set).
  std::chrono::milliseconds timeout{10000};
  std::chrono::milliseconds join_timeout{30000};  // waiting for every rank to join
  // Liveness (docs/protocol.md §6.7, DPA_LIVENESS_TIMEOUT_MS): a switch that answers nothing
  // this long while an operation waits is dead. Thread 0 sends the switch a keepalive, and a
  // round the switch reports pending is probed, every min(1 s, a fifth of it).
  std::chrono::milliseconds liveness_timeout{5000};
  // An operation pending this long logs a warning naming the ranks it waits for (DPA_PENDING_WARN_MS).
  std::chrono::milliseconds pending_warn{30000};
  // Spin on the socket this long before blocking (0: never spin). Lowers latency on machines
  // with a core to spare per worker thread; off by default so small machines stay idle.
  std::chrono::microseconds busy_poll{0};
  // A thread blocked in Handle::wait() runs the parts of its operation that no engine thread has
  // started (UDP sockets; DPDK queues stay on their lcores): a small synchronous allreduce then
  // costs no thread hand-off (DPA_WAITER_RUNS).
  bool waiter_runs = true;

  int k = 0;                 // fastest-K default for operations; 0 uses the session's
  bool preemptive = false;   // complete every block at the first K (DPA_PREEMPTIVE)
  bool syn_disable = false;  // stragglers skip without fetching a missed result (DPA_SYN_DISABLE)

  // Authenticated admission (docs/protocol.md §6.6): this rank's key, derived from the session's
  // (dpa-switch-ctl rank-key). Its JOIN, LEAVE and KEEPALIVE and the switch's JOIN replies then
  // carry a tag, and data packets too if the session authenticates data (its JOIN ack says so).
  // Empty: a keyless rank, for a session without a key. JSON "auth_key_file" / DPA_AUTH_KEY_FILE:
  // a file of 64 hexadecimal digits; JSON "auth_key": the digits themselves.
  std::optional<std::array<std::uint8_t, 32>> auth_key;
  // Require the session to authenticate data packets too (the join fails otherwise). JSON
  // "auth_data" / DPA_AUTH=data. Needs auth_key.
  bool auth_data = false;
  // The data MACs this rank offers the session (docs/protocol.md §6.6; the switch chooses one per
  // join generation): "auto" offers AES-256-GCM where this CPU has AES-NI and PCLMUL, besides
  // SipHash-2-4; "siphash" offers SipHash-2-4 alone. JSON "data_mac" / DPA_DATA_MAC.
  std::string data_mac = "auto";

  FaultInjection faults;

  // Reads a JSON object whose keys are the field names above (durations in the unit of the
  // key's suffix: retransmit_timeout_us, max_retransmit_timeout_us, timeout_ms,
  // join_timeout_ms, liveness_timeout_ms, pending_warn_ms; "switch" as "host:port", a comma-separated list of them, or an array of
  // them). Unknown keys are a ConfigError.
  static Config from_json_file(const std::string& path);
  // Starts from DPA_CONFIG (a JSON file) if set, then applies the DPA_* variables.
  // RANK / WORLD_SIZE (torchrun) are used when DPA_RANK / DPA_WORLD_SIZE are absent.
  static Config from_env();

  // Throws ConfigError naming the first invalid setting.
  void validate() const;

  // The server worker thread `thread` talks to: switches[thread mod switches.size()].
  [[nodiscard]] const HostPort& switch_of_thread(int thread) const;

  // Switch slots the session must have for these workers (SessionConfig::pool_size at least):
  // two per window entry of every thread, 2 x threads x window.
  [[nodiscard]] std::uint32_t pool_slots() const;
};

}  // namespace dpa
