// SPDX-License-Identifier: Apache-2.0
// The software switch: the dpa aggregation state machine (the same one the Tofino program
// implements) on UDP sockets or DPDK. `dpa-switch` is a command-line front end to this class;
// it can also be embedded in a process (tests, the PyTorch backend's local default).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpa/transport_config.hpp"
#include "dpa/transport_counters.hpp"

namespace dpa {

// Where a rank's packets come from: an IPv4 address and the UDP port of its thread 0 (thread t
// uses the port announced in its JOIN). port 0 accepts any port from that address.
struct WorkerAddress {
  std::string host;
  std::uint16_t port = 0;
};

struct SessionConfig {
  std::uint32_t id = 1;
  int world_size = 1;
  int k = 0;                    // fastest-K default; 0 means K = world_size
  std::uint32_t payload = 1024;  // values per packet
  std::uint32_t pool_base = 0;
  std::uint32_t pool_size = 4096;  // slots
  // Counted in ticks of 65.536 us (rounded up); the JOIN reply reports the effective value.
  std::chrono::microseconds straggler_timeout{10000};
  // A join generation that has sent nothing for this long (or one of whose ranks has left)
  // no longer holds the session: another job's JOINs may then replace it.
  std::chrono::milliseconds idle_timeout{10000};
  // A joined rank whose keepalives (docs/protocol.md §6.7) stopped this long is gone: a probe
  // of a round that waits for it gets rank_gone instead of a pending reply. Counted in ticks.
  std::chrono::milliseconds liveness_timeout{5000};
  // One entry per rank, or a single entry that every rank may use; empty accepts any sender.
  std::vector<WorkerAddress> workers;
  // Authenticated admission (docs/protocol.md §6.6): the session key. Rank r's key is derived
  // from it (dpa-switch-ctl rank-key); every JOIN, LEAVE and KEEPALIVE of rank r and every reply
  // to them must carry a tag made with that key, so a process without it can neither join, hold,
  // leave nor take over the session. Empty: the session accepts keyless jobs (admission is then
  // protected only by the token, the rank secrets and the JOIN rules of §6.3). JSON:
  // "auth_key_file", a file of 64 hexadecimal digits, or "auth_key", the digits themselves.
  std::optional<std::array<std::uint8_t, 32>> auth_key;
  // Data packets, probes and their replies carry the tag too (needs auth_key). JSON "auth_data".
  bool auth_data = false;

  void validate() const;  // throws ConfigError naming the key
  // One session object in the JSON form of a switch config's "sessions" entries; `where` names
  // the source in error messages. Validated.
  static SessionConfig from_json(const std::string& text, const std::string& where);
};

struct SwitchConfig {
  // How packets move, as in a worker's Config (transport_config.hpp; JSON: a "udp" or "dpdk"
  // section inside "switch"): thread i serves queue i, on UDP port udp.bind_port + i (sockets)
  // or dpdk.local_port + i (DPDK). Default: sockets on udp_defaults().
  TransportConfig transport = udp_defaults();
  int threads = 1;
  std::chrono::microseconds busy_poll{0};  // spin before blocking in receive (0: never)
  int busy_poll_threads = 0;  // threads 0 .. n-1 spin (busy_poll); 0: every thread
  // Limits that every session, whether configured at start or added at run time, must fit:
  // at most max_sessions sessions holding at most max_memory_mb MiB of slots in all.
  std::uint32_t max_sessions = 256;
  std::uint64_t max_memory_mb = 1024;
  // The straggler timer reads a clock set through set_clock() instead of the steady clock
  // (conformance tests give every packet a time in ticks).
  bool manual_clock = false;
  // "host:port" (or "port": 127.0.0.1) where dpa-switch serves its counters for Prometheus
  // (GET /metrics); empty: no metrics endpoint. Read by the dpa-switch program, not by an
  // embedded SoftwareSwitch.
  std::string metrics;
  std::vector<SessionConfig> sessions;

  // The switch's socket settings where a "udp" section leaves a key out: 127.0.0.1:4242, batches
  // of 64, two transmit buffers per received packet (128), 32 MiB socket buffers.
  static UdpTransportConfig udp_defaults();

  // Reads configs/softswitch.json's format; unknown keys are a ConfigError, and so are the
  // top-level "host", "port", "batch" and "socket_buffer_bytes" of earlier versions (the message
  // names the key of the "udp" section that replaced each).
  static SwitchConfig from_json_file(const std::string& path);
  void validate() const;
};

struct SwitchCounters {
  std::uint64_t rx_packets = 0;
  std::uint64_t tx_packets = 0;
  std::uint64_t tx_dropped = 0;           // replies lost: no transmit buffer, or the device queue stayed full
  std::uint64_t aggregated = 0;           // contributions added to a slot
  std::uint64_t completed_full = 0;       // rounds completed with all N contributions
  std::uint64_t completed_partial = 0;    // rounds completed with K <= count < N
  std::uint64_t retransmitted_results = 0;  // unicast copies of stored results
  std::uint64_t duplicates = 0;           // contributions already counted (dropped)
  std::uint64_t late_contributions = 0;   // contributions to a round already complete
  std::uint64_t old_replies = 0;
  std::uint64_t syn_replies = 0;
  std::uint64_t joins = 0;
  std::uint64_t errors_sent = 0;
  std::uint64_t dropped_malformed = 0;
  std::uint64_t dropped_unknown_session = 0;
  std::uint64_t dropped_unregistered = 0;
  std::uint64_t dropped_not_joined = 0;
  std::uint64_t dropped_bad_token = 0;    // data or probes without the generation's job token
  std::uint64_t dropped_bad_tag = 0;      // authenticated sessions: packets without their rank's tag
  std::uint64_t joins_refused = 0;        // JOINs refused because another job holds the session
  std::uint64_t joins_contended = 0;      // JOINs refused because another source holds the rank's pending JOIN
  std::uint64_t joins_rate_limited = 0;   // JOINs dropped: their source sent more than its JOIN rate
  std::uint64_t leaves = 0;
  // Time the switch threads spent on packets: their running time less their transport's idle
  // time (DPDK: poll steps that found nothing; sockets: blocked waiting). rx_packets / busy_ns is
  // the packet rate one switch core sustains.
  std::uint64_t busy_ns = 0;

  SwitchCounters& operator+=(const SwitchCounters& other);
  [[nodiscard]] std::string to_string() const;  // one "name value" pair per line
};

// One switch thread's counters and its transport queue's, as the thread last published them
// (once per received batch: a consistent snapshot of that moment).
struct SwitchThreadCounters {
  SwitchCounters counters;
  TransportCounters transport;
};

// What happened to one session's packets, summed over the switch threads. Each counter only
// grows while the session exists; they are read one by one, not as one snapshot.
struct SessionCounters {
  std::uint64_t rx_packets = 0;             // packets naming the session (JOIN, LEAVE, data, probes)
  std::uint64_t aggregated = 0;             // contributions added to a slot
  std::uint64_t completed_full = 0;         // rounds completed with all N contributions
  std::uint64_t completed_partial = 0;      // rounds completed with K <= count < N
  std::uint64_t retransmitted_results = 0;  // unicast copies of stored results
  std::uint64_t duplicates = 0;             // contributions already counted (dropped)
  std::uint64_t late_contributions = 0;     // contributions to a round already complete
  std::uint64_t old_replies = 0;
  std::uint64_t syn_replies = 0;
  std::uint64_t errors_sent = 0;
  std::uint64_t dropped = 0;                // not registered or joined, wrong token or port, bad JOIN
  std::uint64_t joins = 0;

  SessionCounters& operator+=(const SessionCounters& other);
};

// A session as the switch holds it now: its configuration, its current join generation and
// its counters.
struct SessionStatus {
  SessionConfig config;
  std::uint32_t generation = 0;  // 0: no generation has joined yet
  std::uint64_t joined = 0;      // bitmap of the generation's ranks
  // How the generation authenticates data packets (docs/protocol.md §6.6): "none", "siphash24"
  // or "aes256gcm" (chosen at its join); "none" before any generation.
  std::string data_mac = "none";
  SessionCounters counters;
};

namespace detail {
class SwitchImpl;
}

class SoftwareSwitch {
 public:
  // Binds every socket and starts the threads; throws dpa::Error if a port is taken.
  explicit SoftwareSwitch(const SwitchConfig& config);
  ~SoftwareSwitch();  // stops and joins the threads
  SoftwareSwitch(const SoftwareSwitch&) = delete;
  SoftwareSwitch& operator=(const SoftwareSwitch&) = delete;

  // ConfigError if the id exists or the session does not fit max_sessions / max_memory_mb.
  void add_session(const SessionConfig& session);
  // ConfigError if the id is unknown. Returns once no switch thread can still use the session,
  // with its memory released.
  void remove_session(std::uint32_t id);
  [[nodiscard]] std::vector<std::uint32_t> session_ids() const;
  // Ranks whose JOIN for session `id` reached the switch since the session was added (bit r:
  // rank r), so that a job whose join fails can name the ranks that cannot reach the switch.
  // ConfigError if the id is unknown.
  [[nodiscard]] std::uint64_t joins_heard(std::uint32_t id) const;
  void stop();

  // With SwitchConfig::manual_clock: the time, in ticks, that the straggler timer reads.
  void set_clock(std::uint32_t ticks);

  [[nodiscard]] std::uint16_t port() const;  // thread 0's port (the one workers are given)
  // Readers never block the switch threads: counters() sums thread_counters().
  [[nodiscard]] SwitchCounters counters() const;
  [[nodiscard]] std::vector<SwitchThreadCounters> thread_counters() const;
  [[nodiscard]] std::vector<SessionStatus> session_status() const;  // by session id

 private:
  std::unique_ptr<detail::SwitchImpl> impl_;
};

}  // namespace dpa
