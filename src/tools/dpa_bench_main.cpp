// SPDX-License-Identifier: Apache-2.0
// dpa-bench: allreduce throughput and latency, every result verified (docs/benchmark-tools.md). By
// default it starts a software switch in this process and N local worker processes (copies of
// itself with --worker); with --switch it uses an existing switch, and with --worker it runs as
// one rank of a multi-host run.
//
// Workers configure themselves like every dpa worker (dpa::Config::from_env(): DPA_CONFIG, then
// the DPA_* variables); a flag given on the command line overrides its variable. The launcher
// forwards only the flags it was given, so its workers see the same environment.
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "common/boot_id.hpp"
#include "dpa/context.hpp"
#include "dpa/env.hpp"
#include "dpa/error.hpp"
#include "dpa/host_port.hpp"
#include "dpa/job_sizing.hpp"
#include "dpa/switch.hpp"
#include "protocol/auth.hpp"
#include "protocol/wire.hpp"
#include "tools/command_line.hpp"
#include "tools/bench/inputs.hpp"
#include "tools/bench/report.hpp"
#include "tools/process.hpp"
#ifdef DPA_HAVE_DPDK
#include "transport/dpdk/eal.hpp"
#include "transport/dpdk/ring_pair.hpp"
#endif

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace bench = dpa::tools::bench;

constexpr int kDefaultRanks = 2;
constexpr std::uint32_t kDefaultPayload = 2048;
constexpr std::uint32_t kRingPayload = 256;  // --ring-switch without --payload
// The first size's warm-up is at least this many operations (of at most kRunWarmupBytes in all):
// with --warmup's 3 alone the first size measured the start (2-core VM, 2 ranks, 4 KiB back to
// back: 196 us first, 114 us when measured again after 64 KiB), as python -m dpa.bench found.
constexpr std::size_t kRunWarmupOperations = 100;
constexpr std::size_t kRunWarmupBytes = std::size_t{64} << 20;

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
  std::string auth = "join";     // what the switch started here authenticates: off, join, data (protocol.md §6.6)
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

std::size_t parse_size(const std::string& text) {
  std::size_t consumed = 0;
  const double value = std::stod(text, &consumed);
  std::string unit = text.substr(consumed);
  std::transform(unit.begin(), unit.end(), unit.begin(), ::tolower);
  double scale = 1;
  if (unit == "k" || unit == "kib" || unit == "kb") scale = 1024;
  else if (unit == "m" || unit == "mib" || unit == "mb") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib" || unit == "gb") scale = 1024.0 * 1024 * 1024;
  else if (!unit.empty() && unit != "b") throw std::invalid_argument("unknown unit");
  if (!(value >= 0)) throw std::invalid_argument("negative");
  return static_cast<std::size_t>(value * scale);
}

// parse_size for the flag `flag`, a usage error naming it when `text` is no size.
std::size_t check_size(const char* flag, const std::string& text) {
  try {
    return parse_size(text);
  } catch (const std::logic_error&) {
    throw UsageError(std::string(flag) + ": '" + text + "' is not a size such as 4096, 4KiB, 16MiB or 1GiB");
  }
}

// The bytes of a --sizes entry: whole 4-byte elements, at least one.
std::size_t size_bytes(const std::string& text) { return std::max<std::size_t>(1, parse_size(text) / 4) * 4; }

// "udp", "dpdk" or "shm": which section `transport` is.
std::string section_of(const dpa::TransportConfig& transport) {
  if (std::holds_alternative<dpa::DpdkTransportConfig>(transport)) return "dpdk";
  if (std::holds_alternative<dpa::ShmTransportConfig>(transport)) return "shm";
  return "udp";
}

// The transport section of --transport-config for `rank`: "{rank}" in its strings becomes the
// rank, so one file serves every local rank (its own memif socket, file prefix, address, core).
dpa::TransportConfig rank_transport(const Settings& s, int rank) {
  dpa::TransportConfig transport = dpa::Config::from_json_file(s.transport_config).transport;
  const auto for_rank = [rank](std::string& text) {
    for (std::size_t at; (at = text.find("{rank}")) != std::string::npos;) text.replace(at, 6, std::to_string(rank));
  };
  if (auto* dpdk = std::get_if<dpa::DpdkTransportConfig>(&transport)) {
    for (auto* list : {&dpdk->vdevs, &dpdk->ports, &dpdk->eal_args, &dpdk->allow}) {
      for (std::string& text : *list) for_rank(text);
    }
    for_rank(dpdk->file_prefix);
    for_rank(dpdk->local_ip);
    for_rank(dpdk->cores);
  } else if (auto* udp = std::get_if<dpa::UdpTransportConfig>(&transport)) {
    for_rank(udp->bind_host);
  }
  if (s.transport != section_of(transport)) {
    throw dpa::ConfigError("--transport " + s.transport + ": " + s.transport_config + " has no \"" + s.transport +
                           "\" section");
  }
  return transport;
}

// --transport shm without --transport-config: the run's fabric, packets of the payload, buffers
// for the window (each entry's packet and probe, as many again in flight) unless configured.
dpa::ShmTransportConfig shm_transport(const Settings& s, const dpa::Config& config) {
  dpa::ShmTransportConfig shm;
  const auto* given = std::get_if<dpa::ShmTransportConfig>(&config.transport);
  if (given != nullptr) shm = *given;
  if (!s.shm_fabric.empty()) shm.fabric = s.shm_fabric;
  const std::uint32_t payload = config.payload != 0 ? config.payload : kDefaultPayload;
  // Room for the tag of an authenticated session (--auth) after the payload.
  shm.max_payload = std::max<std::uint32_t>(
      64, static_cast<std::uint32_t>(dpa::protocol::kHeaderSize + dpa::protocol::kTagSize) + 4 * payload);
  if (given == nullptr) shm.buffers = static_cast<std::uint32_t>(std::clamp(4 * config.window + 32, 16, 65536));
  return shm;
}

// The worker config: DPA_CONFIG and the DPA_* variables, then the flags given, then the mode,
// which decides K and preemption. Validated.
dpa::Config worker_config(const Settings& s) {
  dpa::Config config = dpa::Config::from_env();
  if (s.ranks) config.world_size = *s.ranks;
  if (s.rank) config.rank = *s.rank;
  if (s.switch_address) {
    config.switches = dpa::parse_host_port_list(*s.switch_address, "--switch ", config.switches.front().port);
  }
  if (!s.sizing.empty()) dpa::JobSizing::from_text(s.sizing).configure_wide(config);
  if (s.threads) config.threads = *s.threads;
  if (s.window) config.window = *s.window;
  if (s.rto_us) {
    config.retransmit_timeout = std::chrono::microseconds(*s.rto_us);
    config.max_retransmit_timeout = std::max(config.retransmit_timeout, config.max_retransmit_timeout);
  }
  if (s.busy_poll_us) config.busy_poll = std::chrono::microseconds(*s.busy_poll_us);
  if (s.timeout_ms) config.timeout = std::chrono::milliseconds(*s.timeout_ms);
  if (s.join_timeout_ms) config.join_timeout = std::chrono::milliseconds(*s.join_timeout_ms);
  if (s.payload) config.payload = *s.payload;
  if (!s.auth_key_file.empty()) config.auth_key = dpa::protocol::read_auth_key_file(s.auth_key_file, "--auth-key-file");
  if (s.mode == "full") {
    config.k = 0;
  } else if (s.k) {
    config.k = *s.k;
  } else if (config.k == 0) {
    config.k = std::max(1, config.world_size - 1);
  }
  config.preemptive = s.mode == "preemptive";
  if (!s.transport_config.empty()) {
    config.transport = rank_transport(s, config.rank);
  } else if (s.transport == "shm") {
    config.transport = shm_transport(s, config);
  }
  config.validate();
  return config;
}

// The small-packet session's worker config beside `wide`, when the sizing has one.
std::optional<dpa::Config> small_config(const Settings& s, const dpa::Config& wide) {
  if (s.sizing.empty()) return std::nullopt;
  const dpa::JobSizing sizing = dpa::JobSizing::from_text(s.sizing);
  if (sizing.small_payload == 0) return std::nullopt;
  dpa::Config small = sizing.small_config(wide);
  small.validate();
  return small;
}

// The sizing of a run whose switch this launcher starts: the host's and the DPA_* variables'
// (docs/configuration.md §8), then the flags given. The transport stays dpa-bench's own choice.
dpa::JobSizing launcher_sizing(const Settings& s, int ranks) {
  dpa::Config from_env = dpa::Config::from_env();
  from_env.world_size = ranks;
  dpa::JobSizing sizing =
      dpa::JobSizing::for_job(ranks, dpa::HostResources::probe(32 << 20), from_env, s.transport == "shm");
  if (s.threads) sizing.threads = *s.threads;
  if (s.window) sizing.window = *s.window;
  if (s.payload) {
    sizing.payload = *s.payload;  // one payload for every size, as with DPA_PAYLOAD
    sizing.small_payload = 0;
  }
  if (s.switch_threads) sizing.switch_threads = *s.switch_threads;
  if (s.busy_poll_us) sizing.busy_poll = sizing.small_busy_poll = std::chrono::microseconds(*s.busy_poll_us);
  sizing.shm_fabric = 0;
  if (s.ring_switch) {
    sizing.small_payload = 0;  // one session: the ring pair has one port each
    sizing.switch_threads = s.ring_switch_threads.value_or(1);
  }
  return sizing;
}

// --ring-cores: empty (chosen), "none" (floating), or one core per busy lcore, the switch's S
// then the worker's T.
void check_ring_cores([[maybe_unused]] const Settings& s) {
#ifdef DPA_HAVE_DPDK
  if (s.ring_cores.empty() || s.ring_cores == dpa::transport::dpdk::kFloatingCores) return;
  std::size_t listed = 0;
  try {
    listed = dpa::transport::dpdk::parse_core_list(s.ring_cores).size();
  } catch (const dpa::ConfigError& error) {
    constexpr std::string_view key = "dpdk.cores";
    std::string why = error.what();
    if (why.starts_with(key)) why.replace(0, key.size(), "--ring-cores");
    throw UsageError(why);
  }
  const int switch_threads = s.ring_switch_threads.value_or(1);
  if (listed != static_cast<std::size_t>(switch_threads + *s.threads)) {
    throw UsageError(fmt::format("--ring-cores lists {} core(s); --ring-switch-threads {} and --threads {} need {}: "
                                 "the switch lcores' cores, then the worker threads'",
                                 listed, switch_threads, *s.threads, switch_threads + *s.threads));
  }
#endif
}

// The launcher's ranks: --ranks, else DPA_WORLD_SIZE / WORLD_SIZE (or DPA_CONFIG), else 2.
int launcher_ranks(const Settings& s, const dpa::Config& from_env) {
  if (s.ranks) return *s.ranks;
  const bool configured = dpa::env_string("DPA_WORLD_SIZE") || dpa::env_string("WORLD_SIZE") ||
                          dpa::env_string("DPA_CONFIG");
  return configured ? from_env.world_size : kDefaultRanks;
}

// --iterations, else about 256 MiB of tensor per view, within 20..500 operations (as dpa.bench).
std::size_t iterations_for(const Settings& s, std::size_t bytes) {
  if (s.iterations) return static_cast<std::size_t>(*s.iterations);
  return std::clamp<std::size_t>((std::size_t{256} << 20) / std::max<std::size_t>(bytes, 1), 20, 500);
}

// The switch server of each worker thread, "host:port" for [t]: which servers served.
json thread_switch_names(const dpa::Context& context) {
  json names = json::array();
  for (const dpa::HostPort& address : context.thread_switches()) names.push_back(address.to_string());
  return names;
}

// The switch's packets (docs/benchmark-tools.md, "JSON schema"): each lcore's over the timed
// operations (`before` to `after`), with the packets it handed to another lcore's inbox, their
// sums, and the sums over the back-to-back view alone (`before` to `back_to_back`), whose wall
// time makes them the rate the switch sustained.
json switch_lcore_counters(const std::vector<dpa::SwitchThreadCounters>& before,
                           const std::vector<dpa::SwitchThreadCounters>& back_to_back,
                           const std::vector<dpa::SwitchThreadCounters>& after) {
  json lcores = json::array();
  std::uint64_t rx = 0;
  std::uint64_t tx = 0;
  std::uint64_t busy = 0;
  std::uint64_t handed_off = 0;
  std::uint64_t back_to_back_rx = 0;
  std::uint64_t back_to_back_tx = 0;
  for (std::size_t i = 0; i < after.size(); ++i) {
    const dpa::SwitchCounters& now = after[i].counters;
    const dpa::SwitchCounters& then = before[i].counters;
    const json lcore = {{"rx_packets", now.rx_packets - then.rx_packets},
                        {"tx_packets", now.tx_packets - then.tx_packets},
                        {"busy_ns", now.busy_ns - then.busy_ns},
                        {"handed_off", after[i].transport.rx_dispatched - before[i].transport.rx_dispatched}};
    rx += lcore["rx_packets"].get<std::uint64_t>();
    tx += lcore["tx_packets"].get<std::uint64_t>();
    busy += lcore["busy_ns"].get<std::uint64_t>();
    handed_off += lcore["handed_off"].get<std::uint64_t>();
    back_to_back_rx += back_to_back[i].counters.rx_packets - then.rx_packets;
    back_to_back_tx += back_to_back[i].counters.tx_packets - then.tx_packets;
    lcores.push_back(lcore);
  }
  return {{"switch_rx_packets", rx},
          {"switch_tx_packets", tx},
          {"switch_busy_ns", busy},
          {"switch_handed_off", handed_off},
          {"switch_back_to_back_rx_packets", back_to_back_rx},
          {"switch_back_to_back_tx_packets", back_to_back_tx},
          {"switch_lcores", lcores}};
}

// One rank: every size in both views (docs/benchmark-tools.md), one JSON line per size to `out`
// with this rank's timings, wrong elements and counters. With the switch of this process
// (--ring-switch), each line also has the switch's packets and busy time over the timed operations.
int run_rank(const Settings& s, const dpa::Config& config, std::ostream& out, const dpa::SoftwareSwitch* sw) {
  const int rank = config.rank;
  const int ranks = config.world_size;
  dpa::Context context(config);
  // Sizes of fewer elements than the wide session's payload go to the small-packet session.
  const std::optional<dpa::Config> small = small_config(s, config);
  std::optional<dpa::Context> small_context;
  if (small) small_context.emplace(*small, context.submit_order());

  const bool is_float = s.dtype == "float32";
  const dpa::DataType type = is_float ? dpa::DataType::float32 : dpa::DataType::int32;
  dpa::AllreduceOptions barrier_options;  // a full-N allreduce of one value lines the ranks up
  barrier_options.k = ranks;
  barrier_options.preemptive = false;
  float token = 1;
  const auto barrier = [&] { context.allreduce(&token, &token, 1, dpa::DataType::float32, barrier_options); };
  const auto straggle = [&] {
    if (rank == s.straggler_rank && s.straggler_delay_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(s.straggler_delay_ms));
    }
  };
  const std::size_t pool_bytes = parse_size(s.pool_bytes);
  int status = 0;

  for (std::size_t size_index = 0; size_index < s.sizes.size(); ++size_index) {
    const std::size_t count = size_bytes(s.sizes[size_index]) / 4;
    const std::size_t iterations = iterations_for(s, count * 4);
    const std::size_t warmup = std::max(static_cast<std::size_t>(s.warmup),
                                        size_index == 0 ? std::min(kRunWarmupOperations, kRunWarmupBytes / (count * 4)) : 0);
    const bool goes_small = small_context && count < context.payload();
    dpa::Context& session = goes_small ? *small_context : context;
    const dpa::Config& used = goes_small ? *small : config;
    const std::size_t blocks = (count + session.payload() - 1) / session.payload();
    // The pool: inputs filled before a round's timed region, one buffer per operation.
    const std::size_t per_round = std::clamp<std::size_t>(
        pool_bytes / (count * 4), 1, std::max(iterations, warmup));
    std::vector<std::vector<float>> pool(per_round, std::vector<float>(count));
    std::vector<std::vector<std::uint64_t>> contributors(per_round, std::vector<std::uint64_t>(blocks));
    std::vector<std::uint64_t> keys(static_cast<std::size_t>(ranks));
    std::size_t wrong = 0;
    std::size_t checked = 0;
    bool corrupt_next = s.inject_wrong && rank == ranks - 1;
    // K = N: a block is right only with every rank in it, whatever the library's bitmap says.
    const std::uint64_t required_contributors = s.mode == "full" ? bench::all_ranks(ranks) : 0;
    dpa::OpStats totals;
    double back_to_back_s = 0;
    // The latency view's starts and ends on CLOCK_MONOTONIC (steady_clock), which the ranks of one
    // kernel share: the report takes each operation's time from them, and splits it into the
    // barrier's skew and the rest.
    std::vector<double> latency_start_us;
    std::vector<double> latency_end_us;
    const auto monotonic_us = [](Clock::time_point when) {
      return std::chrono::duration<double, std::micro>(when.time_since_epoch()).count();
    };

    // Operations first .. first + n - 1 of `view`: filled, run (back to back after one barrier, or
    // each after its own), then checked. Returns the seconds of a back-to-back round.
    const auto round = [&](bench::View view, std::size_t first, std::size_t n, bool each_after_barrier) {
      for (std::size_t j = 0; j < n; ++j) {
        bench::fill_input(pool[j].data(), count, is_float, bench::input_key(s.seed, size_index, view, first + j, rank));
      }
      std::vector<dpa::AllreduceOptions> options(n);
      for (std::size_t j = 0; j < n; ++j) options[j].block_contributors = contributors[j].data();
      const bool timed = view != bench::View::warmup;
      double seconds = 0;
      if (!each_after_barrier) barrier();
      const auto round_start = Clock::now();
      for (std::size_t j = 0; j < n; ++j) {
        if (each_after_barrier) barrier();
        straggle();
        const auto start = Clock::now();
        const dpa::OpStats stats = session.allreduce(pool[j].data(), pool[j].data(), count, type, options[j]);
        if (each_after_barrier) {
          latency_start_us.push_back(monotonic_us(start));
          latency_end_us.push_back(monotonic_us(Clock::now()));
        }
        if (timed) totals += stats;
      }
      if (!each_after_barrier) seconds = std::chrono::duration<double>(Clock::now() - round_start).count();
      for (std::size_t j = 0; j < n; ++j) {
        if (timed && corrupt_next) {
          bench::corrupt(pool[j].data(), count, is_float);
          corrupt_next = false;
        }
        for (int r = 0; r < ranks; ++r) {
          keys[static_cast<std::size_t>(r)] = bench::input_key(s.seed, size_index, view, first + j, r);
        }
        wrong += bench::count_wrong(pool[j].data(), count, is_float, rank, keys, session.payload(),
                                    contributors[j].data(), required_contributors);
        checked += count;
      }
      return seconds;
    };
    const auto rounds = [&](bench::View view, std::size_t operations, bool each_after_barrier) {
      double seconds = 0;
      for (std::size_t first = 0; first < operations; first += per_round) {
        seconds += round(view, first, std::min(per_round, operations - first), each_after_barrier);
      }
      return seconds;
    };

    const auto size_started = Clock::now();
    rounds(bench::View::warmup, warmup, false);
    const dpa::TransportCounters before = context.transport_counters();
    using SwitchLcores = std::vector<dpa::SwitchThreadCounters>;
    const SwitchLcores switch_before = sw != nullptr ? sw->thread_counters() : SwitchLcores{};
    back_to_back_s = rounds(bench::View::back_to_back, iterations, false);
    const SwitchLcores switch_back_to_back = sw != nullptr ? sw->thread_counters() : SwitchLcores{};
    rounds(bench::View::latency, iterations, true);
    // The timed operations' packets through this rank's queues (DPDK: and the TX bursts that
    // carried them, so tx_packets / tx_bursts is how full a burst left).
    const dpa::TransportCounters io = context.transport_counters().since(before);
    json line = {{"rank", rank},
                 {"mode", s.mode},
                 {"threads", used.threads},
                 {"switches", thread_switch_names(session)},
                 {"window", used.window},
                 {"timeout_ms", config.timeout.count()},
                 {"bytes", count * 4},
                 {"payload", session.payload()},
                 {"elements", count},
                 {"iterations", iterations},
                 {"warmup", warmup},
                 {"back_to_back_s", back_to_back_s},
                 {"latency_start_us", latency_start_us},
                 {"latency_end_us", latency_end_us},
                 {"boot_id", dpa::detail::boot_id().value_or("")},  // ranks of one kernel share CLOCK_MONOTONIC
                 {"retransmissions", totals.retransmissions},
                 {"blocks", totals.blocks},
                 {"partial", totals.blocks_partial},
                 {"missed", totals.blocks_missed},
                 {"rx_packets", io.rx_packets},
                 {"tx_packets", io.tx_packets},
                 {"tx_bursts", io.tx_bursts},
                 {"tx_errors", io.tx_errors},
                 {"rx_dropped", io.rx_dropped},
                 {"rx_dispatched", io.rx_dispatched},
                 {"wrong", wrong},
                 {"checked", checked}};
    if (sw != nullptr) {
      // The switch publishes its counters once per received batch: the last batch of the timed
      // operations may be missing, a few dozen packets of hundreds of thousands.
      line.update(switch_lcore_counters(switch_before, switch_back_to_back, sw->thread_counters()));
    }
    out << line.dump() << std::endl;
    if (rank == 0) {
      std::cerr << fmt::format("dpa-bench: {} {}: {} operations per view, {} wrong on rank 0, {:.1f} s\n", s.mode,
                               s.sizes[size_index], iterations, wrong,
                               std::chrono::duration<double>(Clock::now() - size_started).count());
    }
    if (wrong > 0) {
      std::cerr << "dpa-bench: rank " << rank << ": " << wrong << " wrong elements at " << s.sizes[size_index] << "\n";
      status = 1;
    }
  }
  return status;
}

int run_worker(const Settings& s) { return run_rank(s, worker_config(s), std::cout, nullptr); }

std::vector<json> parse_lines(const std::string& output) {
  std::vector<json> lines;
  std::istringstream stream(output);
  for (std::string line; std::getline(stream, line);) {
    if (!line.empty()) lines.push_back(json::parse(line));
  }
  return lines;
}

#ifdef DPA_HAVE_DPDK
// The DPDK runtime directory of this process's EAL, and those of earlier --ring-switch runs
// that were killed before they could remove theirs (their PID is gone).
std::string ring_file_prefix() { return "dpa-bench-ring-" + std::to_string(getpid()); }

void remove_ring_runtime_dirs(bool own) {
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/var/run/dpdk", ignored)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("dpa-bench-ring-", 0) != 0) continue;
    const std::string pid = name.substr(std::string("dpa-bench-ring-").size());
    const bool dead = pid.find_first_not_of("0123456789") == std::string::npos && !pid.empty() &&
                      ::kill(static_cast<pid_t>(std::stol(pid)), 0) != 0 && errno == ESRCH;
    if ((own && name == ring_file_prefix()) || dead) std::filesystem::remove_all(entry.path(), ignored);
  }
}

// --ring-switch: rank 0 of a world of one with T worker threads and a DPDK dpa-switch with S
// lcores in this process, every thread on an lcore of its own, joined by two net_ring ports
// (mbuf pointers pass through rings: no copy, as a NIC hands frames over by DMA). The switch runs
// its real poll loops on real mbufs, so its packets per busy core are a switch core's own
// capacity, without memif's copies in and out.
std::vector<json> run_ring_mode(const Settings& s, const std::string& mode) {
  Settings resolved = s;
  resolved.mode = mode;
  dpa::Config config = worker_config(resolved);
  const auto switch_threads = static_cast<std::size_t>(s.ring_switch_threads.value_or(1));
  const auto worker_threads = static_cast<std::size_t>(config.threads);
  // A queue pair per thread of the side with more. Worker thread t sends on ring queue t to the
  // switch's UDP port t mod S, whose lcore owns switch queues t mod S, t mod S + S...: each
  // request arrives where its lcore polls, as rte_flow steering by UDP port would put it, unless
  // --ring-hand-off moves it one queue on.
  const std::size_t queues = std::max(switch_threads, worker_threads);
  dpa::DpdkTransportConfig eal;
  eal.cores = s.ring_cores;
  eal.no_huge = true;
  // Each thread's queue has a pool of `mbufs` (about 40 MB of them here).
  eal.memory_mb = static_cast<std::uint32_t>(std::max<std::size_t>(512, 256 + 64 * (switch_threads + worker_threads)));
  eal.file_prefix = ring_file_prefix();
  eal.eal_args = {"--no-pci", "--log-level=lib.eal:error"};
  eal.mbufs = 16383;
  eal.queues = static_cast<std::uint16_t>(queues);
  // Lcores for the switch's threads, then the worker's: with --ring-cores empty each takes a free
  // core of its own (docs/dpdk.md, "Cores"), in that order.
  dpa::transport::dpdk::start_eal(eal, switch_threads + worker_threads);
  const auto ports = dpa::transport::dpdk::create_ring_pair(eal, "dpa_bench_switch", "dpa_bench_worker", queues,
                                                            4096, s.ring_hand_off ? 1 : 0);

  dpa::SwitchConfig switch_config = dpa::JobSizing::from_text(s.sizing).switch_config(
      config, std::nullopt, std::chrono::microseconds(s.straggler_timeout_us));
  dpa::DpdkTransportConfig switch_port = eal;
  switch_port.ports = {ports.a};
  switch_port.local_ip = "10.96.0.100";
  switch_port.local_port = 4242;
  switch_config.transport = switch_port;
  switch_config.threads = static_cast<int>(switch_threads);
  dpa::SoftwareSwitch sw(switch_config);

  dpa::DpdkTransportConfig worker_port = eal;
  worker_port.ports = {ports.b};
  worker_port.local_ip = "10.96.1.1";
  worker_port.local_port = 5000;
  config.transport = worker_port;
  config.switches = {{switch_port.local_ip, sw.port()}};
  config.validate();
  std::ostringstream output;
  run_rank(resolved, config, output, &sw);  // wrong results are in its lines
  sw.stop();
  return parse_lines(output.str());
}
#endif

// The worker's command line: the launcher's resolved rank count and switch, the benchmark's own
// flags, and only those worker flags the launcher was given (the rest come from the environment
// the workers inherit).
std::vector<std::string> worker_argv(const Settings& s, int ranks, int rank, const std::string& mode,
                                     const std::string& switch_address) {
  std::vector<std::string> argv = {
      dpa::tools::executable_directory() + "/dpa-bench", "--worker", "--rank", std::to_string(rank),
      "--ranks", std::to_string(ranks), "--switch", switch_address,
      "--dtype", s.dtype, "--warmup", std::to_string(s.warmup), "--seed", std::to_string(s.seed),
      "--pool-bytes", s.pool_bytes, "--mode", mode, "--straggler-rank", std::to_string(s.straggler_rank),
      "--straggler-delay-ms", std::to_string(s.straggler_delay_ms)};
  const auto forward = [&](const char* flag, const auto& value) {
    if (value) argv.insert(argv.end(), {flag, std::to_string(*value)});
  };
  forward("--threads", s.threads);
  forward("--window", s.window);
  forward("--k", s.k);
  forward("--rto-us", s.rto_us);
  forward("--busy-poll-us", s.busy_poll_us);
  forward("--timeout-ms", s.timeout_ms);
  forward("--join-timeout-ms", s.join_timeout_ms);
  forward("--payload", s.payload);
  forward("--iterations", s.iterations);
  if (s.inject_wrong) argv.emplace_back("--inject-wrong");
  if (!s.auth_key_directory.empty()) {
    argv.insert(argv.end(), {"--auth-key-file", s.auth_key_directory + "/rank-" + std::to_string(rank) + ".key"});
  }
  if (!s.sizing.empty()) argv.insert(argv.end(), {"--sizing", s.sizing});
  if (!s.transport_config.empty()) {
    argv.insert(argv.end(), {"--transport", s.transport, "--transport-config", s.transport_config});
  } else if (s.transport == "shm") {
    argv.insert(argv.end(), {"--transport", "shm", "--shm-fabric", s.shm_fabric});
  }
  std::string sizes;
  for (const std::string& size : s.sizes) sizes += (sizes.empty() ? "" : ",") + size;
  argv.insert(argv.end(), {"--sizes", sizes});
  return argv;
}

// --auth: the ranks' key files, in a directory only this user can read, removed with the object.
class RankKeyFiles {
 public:
  RankKeyFiles() {
    std::string pattern = (std::filesystem::temp_directory_path() / "dpa-bench-keys-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("--auth: cannot create a key directory");
    path_ = pattern;
  }
  RankKeyFiles(const RankKeyFiles&) = delete;
  RankKeyFiles& operator=(const RankKeyFiles&) = delete;
  ~RankKeyFiles() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  void write(int rank, const dpa::protocol::AuthKey& key) const {
    std::ofstream(path_ + "/rank-" + std::to_string(rank) + ".key") << dpa::protocol::to_hex(key) << '\n';
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<json> run_mode(const Settings& s, const std::string& mode) {
  if (s.ring_switch) {
#ifdef DPA_HAVE_DPDK
    return run_ring_mode(s, mode);
#else
    throw dpa::ConfigError("--ring-switch: this dpa-bench was built without DPDK");
#endif
  }
  Settings resolved = s;
  resolved.mode = mode;
  const dpa::Config config = worker_config(resolved);
  std::optional<RankKeyFiles> auth_keys;  // outlives the workers
  std::unique_ptr<dpa::SoftwareSwitch> sw;
  std::string switch_address = dpa::to_string(config.switches);
  if (!s.switch_address && !dpa::env_string("DPA_SWITCH")) {
    // The launcher sizes every run whose switch it starts (main()), as the PyTorch backend does.
    dpa::SwitchConfig switch_config = dpa::JobSizing::from_text(s.sizing).switch_config(
        config, small_config(resolved, config), std::chrono::microseconds(s.straggler_timeout_us));
    if (s.auth != "off") {
      // One session key for the run; each rank gets only its own key, in a file of this run's.
      const dpa::protocol::AuthKey session_key = dpa::protocol::random_auth_key();
      for (dpa::SessionConfig& session : switch_config.sessions) {
        session.auth_key = session_key;
        session.auth_data = s.auth == "data";
      }
      auth_keys.emplace();
      for (int rank = 0; rank < config.world_size; ++rank) {
        auth_keys->write(rank, dpa::protocol::derive_rank_key(session_key, static_cast<std::uint32_t>(rank)));
      }
      resolved.auth_key_directory = auth_keys->path();
    }
    sw = std::make_unique<dpa::SoftwareSwitch>(switch_config);
    switch_address = "127.0.0.1:" + std::to_string(sw->port());
  }
  std::vector<dpa::tools::Process> workers;
  for (int rank = 0; rank < config.world_size; ++rank) {
    workers.emplace_back(worker_argv(resolved, config.world_size, rank, mode, switch_address));
  }
  const auto codes = dpa::tools::wait_all(workers, Clock::now() + std::chrono::minutes(30));
  std::vector<json> lines;
  for (std::size_t r = 0; r < workers.size(); ++r) {
    // Exit status 1 with a line for every size: the rank found wrong results, which its lines count.
    const std::vector<json> rank_lines =
        codes[r] && (*codes[r] == 0 || *codes[r] == 1) ? parse_lines(workers[r].output()) : std::vector<json>{};
    if (rank_lines.size() != s.sizes.size()) {
      throw std::runtime_error("worker rank " + std::to_string(r) + " failed" +
                               (codes[r] ? " with exit status " + std::to_string(*codes[r]) : ", still running"));
    }
    lines.insert(lines.end(), rank_lines.begin(), rank_lines.end());
  }
  return lines;
}

// The report (docs/benchmark-tools.md "JSON schema") of every mode's lines, in the order run.
json make_report(const Settings& s, const dpa::Config& config, const std::vector<std::string>& modes,
                 const std::vector<json>& lines) {
  json results = json::array();
  std::uint64_t wrong = 0;
  for (const std::string& mode : modes) {
    for (const std::string& size_text : s.sizes) {
      const std::size_t bytes = size_bytes(size_text);
      std::vector<json> rank_lines;
      for (const json& line : lines) {
        if (line["mode"] == mode && line["bytes"] == bytes) rank_lines.push_back(line);
      }
      if (rank_lines.empty()) continue;
      std::sort(rank_lines.begin(), rank_lines.end(),
                [](const json& a, const json& b) { return a["rank"] < b["rank"]; });
      const int straggler = s.straggler_delay_ms > 0 ? s.straggler_rank : -1;
      results.push_back(bench::result_row(rank_lines, config.world_size, s.dtype, straggler));
      wrong += results.back()["wrong"].get<std::uint64_t>();
    }
  }
  std::vector<std::size_t> sizes;
  for (const std::string& size_text : s.sizes) sizes.push_back(size_bytes(size_text));
  const json host = bench::host_info();
  json settings = {{"sizes", sizes},
                   {"dtype", s.dtype},
                   {"device", "cpu"},
                   {"iterations", s.iterations ? json(*s.iterations) : json("auto")},
                   {"warmup", s.warmup},
                   {"seed", s.seed},
                   {"pool_bytes", parse_size(s.pool_bytes)},
                   {"inject_wrong", s.inject_wrong},
                   {"ranks", config.world_size},
                   {"hosts", json::array({host["hostname"]})},
                   {"ranks_per_host", config.world_size},
                   {"launcher", "local"},
                   {"backends", json::array({"dpa"})},
                   {"skipped", json::object()},
                   {"environment", bench::dpa_environment()},
                   {"modes", modes},
                   {"transport", s.ring_switch ? "dpdk (--ring-switch)" : s.transport},
                   {"ring_switch", s.ring_switch ? json{{"switch_lcores", s.ring_switch_threads.value_or(1)},
                                                        {"worker_threads", config.threads},
                                                        {"hand_off", s.ring_hand_off},
                                                        {"cores", s.ring_cores.empty() ? "chosen" : s.ring_cores}}
                                                 : json(nullptr)},
                   {"switch", s.switch_address ? json(*s.switch_address) : json(nullptr)},
                   {"sizing", s.sizing.empty() ? json(nullptr) : json(s.sizing)},
                   {"straggler_rank", s.straggler_delay_ms > 0 ? s.straggler_rank : -1},
                   {"straggler_delay_ms", s.straggler_delay_ms}};
  return {{"schema", "dpa-bench"},
          {"schema_version", bench::kSchemaVersion},
          {"tool", {{"name", "dpa-bench"}, {"version", DPA_VERSION_STRING}}},
          {"host", host},
          {"config", settings},
          {"results", results},
          {"wrong", wrong}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpa-bench: allreduce throughput (back to back) and latency (after a barrier), every result "
               "verified (docs/benchmark-tools.md). Exit status: 0 every result right, 1 a wrong result or a "
               "failure, 2 a usage error"};
  app.footer(
      "Worker settings come, in this order of precedence, from the flag, the DPA_* variable named in\n"
      "its help (read by every dpa worker; docs/configuration.md), a DPA_CONFIG file, and\n"
      "the default. The launcher forwards only the flags it was given to its workers, which inherit\n"
      "its environment. Without --switch or DPA_SWITCH the launcher starts a switch in its process.");
  Settings s;
  app.add_option("-n,--ranks", s.ranks, "Ranks, local worker processes (DPA_WORLD_SIZE; default 2)");
  app.add_option("--switch", s.switch_address,
                 "Use the switch at host:port instead of starting one; host:port,host:port,... spreads the "
                 "job over several switch servers, thread t on server t mod S (DPA_SWITCH)");
  app.add_option("--sizes", s.sizes, "Tensor sizes (B, KiB, MiB, GiB)")->delimiter(',')->capture_default_str();
  app.add_option("--dtype", s.dtype)->check(CLI::IsMember({"float32", "int32"}))->capture_default_str();
  app.add_option("--iterations", s.iterations,
                 "Timed operations per size and view (default: 256 MiB / size, within 20..500)")
      ->check(CLI::Range(1, 1000000000));
  app.add_option("--warmup", s.warmup, "Untimed, verified operations per size first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", s.seed, "Seed of every rank's inputs")->capture_default_str();
  app.add_option("--pool-bytes", s.pool_bytes,
                 "Input buffers filled ahead per rank; more operations take several rounds")
      ->capture_default_str();
  app.add_flag("--inject-wrong", s.inject_wrong,
               "Self-check: corrupt one element of the last rank's result of the first timed operation of "
               "every size and mode; the run must report it and exit 1");
  app.add_option("--threads", s.threads, "Worker threads per rank (DPA_THREADS; default 1)");
  app.add_option("--window", s.window, "Outstanding packets per thread (DPA_WINDOW; default 32)");
  app.add_option("--payload", s.payload,
                 "Values per packet of the switch started here and of the workers (DPA_PAYLOAD; default 2048 "
                 "for the switch started here, the session's for workers)");
  app.add_option("--switch-threads", s.switch_threads,
                 "Threads of the switch started here (default: sized, as DPA_SWITCH_THREADS)");
  app.add_option("--sizing", s.sizing, "The job's sizing (set by the launcher for its workers)");
  app.add_option("--straggler-rank", s.straggler_rank, "Rank delayed before every operation");
  app.add_option("--straggler-delay-ms", s.straggler_delay_ms, "Delay of the straggler per operation");
  app.add_option("--k", s.k, "K for the fastest-K modes (DPA_K; default ranks - 1)");
  app.add_option("--modes", s.modes,
                 "Comma list of full, reactive, preemptive (default: full; all three with a straggler); "
                 "they decide K and preemption, so DPA_PREEMPTIVE is not used");
  app.add_option("--straggler-timeout-us", s.straggler_timeout_us, "Straggler timeout of the switch started here")
      ->capture_default_str();
  app.add_option("--rto-us", s.rto_us, "Worker retransmission timeout (DPA_RTO_US; default 2000)");
  app.add_option("--busy-poll-us", s.busy_poll_us,
                 "Workers and the switch started here spin this long before blocking (DPA_BUSY_POLL_US; default 0)");
  app.add_option("--timeout-ms", s.timeout_ms,
                 "A worker fails an operation after this long without a reply (DPA_TIMEOUT_MS; default 10000)");
  app.add_option("--join-timeout-ms", s.join_timeout_ms,
                 "A worker fails if not every rank joined by then (DPA_JOIN_TIMEOUT_MS; default 30000)");
  app.add_option("--json", s.json_path, "Also write the report here (schema: docs/benchmark-tools.md)");
  app.add_flag("--worker", s.worker, "Run as one rank (used by the launcher and for multi-host runs)");
  app.add_option("--rank", s.rank, "This worker's rank (DPA_RANK)");
  app.add_option("--mode", s.mode)->check(CLI::IsMember({"full", "reactive", "preemptive"}));
  app.add_option("--transport", s.transport,
                 "Workers' transport: udp; shm (shared memory with the switch embedded here, or "
                 "with dpa-switch --transport shm on this host); or dpdk (needs --transport-config and "
                 "--switch: start dpa-switch --transport dpdk first). Default: the --transport-config "
                 "file's, else DPA_TRANSPORT, else shm when the switch is embedded here, else udp")
      ->check(CLI::IsMember({"udp", "dpdk", "shm"}));
  app.add_flag("--ring-switch", s.ring_switch,
               "--transport dpdk without --switch: one rank in this process with a DPDK dpa-switch, every "
               "thread on an lcore of its own, joined by net_ring ports (zero copy: mbuf pointers pass "
               "through rings, as a NIC's DMA would feed the switch); prints each switch lcore's packets "
               "per busy core, their sum over the back-to-back wall time and the packets handed between "
               "lcores. World size 1, --threads worker threads (default: --ring-switch-threads), MTU 1500 "
               "(default --payload 256), --no-huge, no --transport-config");
  app.add_option("--ring-switch-threads", s.ring_switch_threads,
                 "--ring-switch: the switch's lcores S, each with its own queue pair and the slots of worker "
                 "threads t with t mod S its index (default 1)")
      ->check(CLI::Range(1, 64));
  app.add_flag("--ring-hand-off", s.ring_hand_off,
               "--ring-switch: what worker thread t sends arrives on switch queue t + 1 (mod the queues), "
               "owned by another lcore, which hands it to the owner's inbox: measures the software steering "
               "that replaces rte_flow (needs --ring-switch-threads 2 or more)");
  app.add_option("--ring-cores", s.ring_cores,
                 "--ring-switch: the cores of the switch's S lcores, then of the T worker threads, S + T in "
                 "all (dpdk.cores syntax, \"none\": floating; default: a free core each, as dpdk.cores empty)");
  app.add_option("--transport-config", s.transport_config,
                 "JSON file with the workers' \"udp\" or \"dpdk\" section (it replaces DPA_CONFIG's); "
                 "\"{rank}\" in its strings becomes the rank (see scripts/dpa-bench-memif.sh)")
      ->check(CLI::ExistingFile);
  app.add_option("--auth", s.auth,
                 "What the switch started here authenticates (docs/protocol.md §6.6): join (admission: JOIN, "
                 "LEAVE, KEEPALIVE), data (every packet) or off; a random session key, each rank's key in a "
                 "file of this run's")
      ->check(CLI::IsMember({"off", "join", "data"}))
      ->capture_default_str();
  app.add_option("--auth-key-file", s.auth_key_file, "Worker: this rank's authentication key (DPA_AUTH_KEY_FILE)");
  app.add_option("--shm-fabric", s.shm_fabric,
                 "--transport shm: the fabric (shm.fabric) the workers and the switch share; default: "
                 "one of this run's own, or DPA_SHM_FABRIC / DPA_CONFIG's with --switch");
  if (const auto exit_code = dpa::tools::parse_command_line(app, "dpa-bench", argc, argv)) return *exit_code;

  try {
    std::vector<std::size_t> sizes;
    for (const std::string& size : s.sizes) {
      check_size("--sizes", size);
      if (std::find(sizes.begin(), sizes.end(), size_bytes(size)) != sizes.end()) {
        throw UsageError("--sizes: " + std::to_string(size_bytes(size)) + " B given twice");
      }
      sizes.push_back(size_bytes(size));
    }
    if (check_size("--pool-bytes", s.pool_bytes) == 0) throw UsageError("--pool-bytes must be positive");
    const bool embeds_switch = !s.switch_address && !dpa::env_string("DPA_SWITCH");
    if (s.transport.empty()) {
      if (!s.transport_config.empty()) {
        s.transport = section_of(dpa::Config::from_json_file(s.transport_config).transport);
      } else if (const auto variable = dpa::env_string("DPA_TRANSPORT")) {
        s.transport = *variable;
      } else {
        s.transport = embeds_switch && !s.worker ? "shm" : "udp";
      }
    }
    if (s.ring_switch) {
      if (s.transport.empty()) s.transport = "dpdk";
      if (s.transport != "dpdk" || s.switch_address || !s.transport_config.empty() || s.worker) {
        throw UsageError("--ring-switch: --transport dpdk only, without --switch, --transport-config or --worker "
                               "(the switch and its ring ports are made here)");
      }
      if (s.ranks.value_or(1) != 1) {
        throw UsageError("--ring-switch: one rank (-n 1): the ring pair joins one worker process to the switch");
      }
      if (s.switch_threads) {
        throw UsageError("--switch-threads: with --ring-switch the switch's lcores are --ring-switch-threads");
      }
      if (s.ring_hand_off && s.ring_switch_threads.value_or(1) < 2) {
        throw UsageError("--ring-hand-off needs --ring-switch-threads 2 or more: one switch lcore has no other to "
                         "hand packets to");
      }
      s.ranks = 1;
      if (!s.threads) s.threads = s.ring_switch_threads.value_or(1);
      if (*s.threads < 1) throw UsageError("--threads must be at least 1");
      check_ring_cores(s);
      if (!s.payload) s.payload = kRingPayload;  // the sized default does not fit the ports' MTU of 1500
    } else if (s.ring_switch_threads || s.ring_hand_off || !s.ring_cores.empty()) {
      throw UsageError("--ring-switch-threads, --ring-hand-off and --ring-cores go with --ring-switch");
    }
    if (s.transport == "dpdk" && !s.ring_switch && (s.transport_config.empty() || !s.switch_address)) {
      throw UsageError("--transport dpdk needs --transport-config FILE and --switch HOST:PORT (the switch "
                             "embedded here runs on sockets; start dpa-switch --transport dpdk)");
    }
    if (s.transport == "shm" && s.transport_config.empty() && s.shm_fabric.empty() && embeds_switch &&
        !dpa::env_string("DPA_SHM_FABRIC")) {
      s.shm_fabric = "bench-" + std::to_string(getpid());  // this run's switch and workers only
    }
    if (s.worker && !s.json_path.empty()) {
      throw UsageError("--json with --worker: a worker prints its own lines on stdout; the report is the "
                       "launcher's (docs/benchmark-tools.md)");
    }
    if (s.worker) return run_worker(s);
    s.ranks = launcher_ranks(s, dpa::Config::from_env());
    if (embeds_switch || s.ring_switch) s.sizing = launcher_sizing(s, *s.ranks).to_text();
#ifdef DPA_HAVE_DPDK
    if (s.ring_switch) remove_ring_runtime_dirs(false);
    // The EAL's runtime directory goes with the run, whichever way main() leaves.
    const std::unique_ptr<const Settings, void (*)(const Settings*)> ring_files(
        s.ring_switch ? &s : nullptr, [](const Settings*) { remove_ring_runtime_dirs(true); });
#endif
    if (s.straggler_delay_ms > 0 && s.straggler_rank < 0) s.straggler_rank = *s.ranks - 1;
    std::vector<std::string> modes;
    std::stringstream list(s.modes.empty() ? (s.straggler_delay_ms > 0 ? "full,reactive,preemptive" : "full")
                                           : s.modes);
    for (std::string mode; std::getline(list, mode, ',');) {
      if (mode != "full" && mode != "reactive" && mode != "preemptive") {
        throw UsageError("--modes: \"" + mode + "\" is not one of full, reactive, preemptive");
      }
      modes.push_back(mode);
    }
    const dpa::Config config = worker_config(s);
    std::vector<json> all;
    for (const std::string& mode : modes) {
      const std::vector<json> lines = run_mode(s, mode);
      all.insert(all.end(), lines.begin(), lines.end());
    }
    const json report = make_report(s, config, modes, all);
    std::printf("# workers: %d thread(s), window %d, payload %u%s\n", config.threads, config.window,
                all.empty() ? config.payload : all.front()["payload"].get<std::uint32_t>(),
                s.straggler_delay_ms > 0 ? (", rank " + std::to_string(s.straggler_rank) + " delayed " +
                                            std::to_string(s.straggler_delay_ms) + " ms per operation").c_str()
                                         : "");
    if (!s.sizing.empty()) std::printf("# sizing: %s\n", s.sizing.c_str());
    // The wide session's threads (a small-packet session has one thread on the first server).
    const auto widest = std::ranges::max_element(
        all, {}, [](const json& line) { return line["switches"].size(); });
    if (widest != all.end()) {
      std::string servers;
      for (const json& server : (*widest)["switches"]) servers += " " + server.get<std::string>();
      std::printf("# switch servers of threads 0..%zu:%s\n", (*widest)["switches"].size() - 1, servers.c_str());
    }
    bench::print_table(report);
    if (!s.json_path.empty()) {
      std::ofstream file(s.json_path);
      file << report.dump(2) << "\n";
      if (!file) throw std::runtime_error("--json " + s.json_path + ": cannot write");
    }
    if (report["wrong"].get<std::uint64_t>() > 0) {
      std::cerr << "dpa-bench: " << report["wrong"].get<std::uint64_t>() << " wrong elements\n";
      return 1;
    }
    return 0;
  } catch (const UsageError& error) {
    std::cerr << "dpa-bench: " << error.what() << "\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "dpa-bench: " << error.what() << "\n";
    return 1;
  }
}
