// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/settings.hpp"

#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "dpa/config.hpp"
#include "dpa/env.hpp"
#include "dpa/error.hpp"
#ifdef DPA_HAVE_DPDK
#include "transport/dpdk/eal.hpp"
#endif

namespace dpa::tools::bench {

namespace {

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

}  // namespace

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

std::size_t check_size(const char* flag, const std::string& text) {
  try {
    return parse_size(text);
  } catch (const std::logic_error&) {
    throw UsageError(std::string(flag) + ": '" + text + "' is not a size such as 4096, 4KiB, 16MiB or 1GiB");
  }
}

std::size_t size_bytes(const std::string& text) { return std::max<std::size_t>(1, parse_size(text) / 4) * 4; }

std::string section_of(const dpa::TransportConfig& transport) {
  if (std::holds_alternative<dpa::DpdkTransportConfig>(transport)) return "dpdk";
  if (std::holds_alternative<dpa::ShmTransportConfig>(transport)) return "shm";
  return "udp";
}

void add_options(CLI::App& app, Settings& s) {
  app.description("dpa-bench: allreduce throughput (back to back) and latency (after a barrier), every result "
               "verified (docs/benchmark-tools.md). Exit status: 0 every result right, 1 a wrong result or a "
               "failure, 2 a usage error");
  app.footer(
      "Worker settings come, in this order of precedence, from the flag, the DPA_* variable named in\n"
      "its help (read by every dpa worker; docs/configuration.md), a DPA_CONFIG file, and\n"
      "the default. The launcher forwards only the flags it was given to its workers, which inherit\n"
      "its environment. Without --switch or DPA_SWITCH the launcher starts a switch in its process.");
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
}

void check_settings(Settings& s) {
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
}

std::vector<std::string> modes_of(const Settings& s) {
  std::vector<std::string> modes;
  std::stringstream list(s.modes.empty() ? (s.straggler_delay_ms > 0 ? "full,reactive,preemptive" : "full")
                                         : s.modes);
  for (std::string mode; std::getline(list, mode, ',');) {
    if (mode != "full" && mode != "reactive" && mode != "preemptive") {
      throw UsageError("--modes: \"" + mode + "\" is not one of full, reactive, preemptive");
    }
    modes.push_back(mode);
  }
  return modes;
}

}  // namespace dpa::tools::bench
