// SPDX-License-Identifier: Apache-2.0
// dpa-bench's command line: every flag's value (Settings), the flags themselves, and the checks
// of their combinations. A flag that is wrong, or wrong with another, is a UsageError (exit 2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "dpa/transport_config.hpp"
#include "protocol/auth.hpp"

namespace dpa::tools::bench {

inline constexpr int kDefaultRanks = 2;
inline constexpr std::uint32_t kDefaultPayload = 2048;
inline constexpr std::uint32_t kRingPayload = 256;  // --ring-switch without --payload

// A flag that is wrong, or wrong with another (exit status 2, as for CLI11's own errors).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Settings {
  // Worker settings: unset ones come from the environment (DPA_* variables, DPA_CONFIG).
  std::optional<int> ranks;                 // DPA_WORLD_SIZE
  std::optional<int> rank;                  // DPA_RANK
  std::optional<std::string> switch_address;  // DPA_SWITCH; neither: start a switch here
  std::optional<int> threads;               // DPA_THREADS
  std::optional<int> window;                // DPA_WINDOW
  std::optional<int> k;                     // DPA_K (fastest-K modes only)
  std::optional<std::int64_t> rto_us;       // DPA_RTO_US
  std::optional<std::int64_t> busy_poll_us;  // DPA_BUSY_POLL_US
  std::optional<std::int64_t> timeout_ms;   // DPA_TIMEOUT_MS
  std::optional<std::int64_t> join_timeout_ms;  // DPA_JOIN_TIMEOUT_MS
  // Settings of the switch started here.
  std::optional<std::uint32_t> payload;     // DPA_PAYLOAD, else kDefaultPayload
  std::optional<int> switch_threads;       // DPA_SWITCH_THREADS, else sized (or 1 with --switch)
  // The job's sizing (dpa/job_sizing.hpp) when the launcher starts the switch: computed there
  // from the host and the DPA_* variables, with the flags given on top, and handed to the workers.
  std::string sizing;
  std::int64_t straggler_timeout_us = 5000;
  // The benchmark itself.
  std::vector<std::string> sizes = {"4KiB", "64KiB", "1MiB", "16MiB", "64MiB"};
  std::string dtype = "float32";
  std::optional<int> iterations;  // per size and view; unset: iterations_for()
  int warmup = 3;
  std::uint64_t seed = 1;
  std::string pool_bytes = "256MiB";  // inputs filled ahead per rank (back-to-back rounds)
  bool inject_wrong = false;
  int straggler_rank = -1;
  int straggler_delay_ms = 0;
  std::string modes;  // comma list of full, reactive, preemptive
  std::string json_path;
  std::string transport;  // udp, dpdk, shm; empty: chosen in main() (see --transport)
  std::string transport_config;  // JSON with a "udp", "dpdk" or "shm" section; "{rank}" becomes the rank
  std::string shm_fabric;        // --transport shm without a config: the run's fabric
  // What the switch started here authenticates: off, join, data (protocol.md §6.6); join unless
  // this build has no libsodium.
  std::string auth = dpa::protocol::auth_available() ? "join" : "off";
  std::string auth_key_file;     // worker: this rank's key
  std::string auth_key_directory;  // launcher: where the ranks' key files are
  // --ring-switch: rank 0 and a DPDK switch in this process, over net_ring (no --switch).
  bool ring_switch = false;
  std::optional<int> ring_switch_threads;  // the switch's lcores, else 1
  bool ring_hand_off = false;  // requests land on switch queues their lcores do not own
  std::string ring_cores;      // the switch lcores' cores, then the worker threads'; empty: chosen
  // Worker mode.
  bool worker = false;
  std::string mode = "full";
};

// The flags, writing into `s`, and the help's text about them.
void add_options(CLI::App& app, Settings& s);

// Checks the flags' combinations and fills in what follows from them (the transport, --ring-switch's
// defaults, the run's shared-memory fabric).
void check_settings(Settings& s);

// --modes as a list, checked: full, reactive, preemptive (default: full; all three with a straggler).
std::vector<std::string> modes_of(const Settings& s);

// "4096", "4KiB", "16MiB", "1GiB": bytes. Throws std::invalid_argument for anything else.
std::size_t parse_size(const std::string& text);
// parse_size for the flag `flag`, a usage error naming it when `text` is no size.
std::size_t check_size(const char* flag, const std::string& text);
// The bytes of a --sizes entry: whole 4-byte elements, at least one.
std::size_t size_bytes(const std::string& text);
// "udp", "dpdk" or "shm": which section `transport` is.
std::string section_of(const dpa::TransportConfig& transport);

}  // namespace dpa::tools::bench
