// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/launcher.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpa/env.hpp"
#include "dpa/error.hpp"
#include "dpa/host_port.hpp"
#include "dpa/job_sizing.hpp"
#include "dpa/switch.hpp"
#include "dpa/version.hpp"
#include "protocol/auth.hpp"
#include "tools/bench/report.hpp"
#include "tools/bench/run_rank.hpp"
#include "tools/bench/worker_setup.hpp"
#include "tools/process.hpp"
#ifdef DPA_HAVE_DPDK
#include "transport/dpdk/eal.hpp"
#include "transport/dpdk/ring_pair.hpp"
#endif

namespace dpa::tools::bench {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

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

// The lines above the table: the workers' settings, the sizing, the switch servers.
void print_summary(const Settings& s, const dpa::Config& config, const std::vector<json>& all) {
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
}

}  // namespace

int run_launcher(Settings s) {
  const bool embeds_switch = !s.switch_address && !dpa::env_string("DPA_SWITCH");
  s.ranks = launcher_ranks(s, dpa::Config::from_env());
  if (embeds_switch || s.ring_switch) s.sizing = launcher_sizing(s, *s.ranks).to_text();
#ifdef DPA_HAVE_DPDK
  if (s.ring_switch) remove_ring_runtime_dirs(false);
  // The EAL's runtime directory goes with the run, whichever way main() leaves.
  const std::unique_ptr<const Settings, void (*)(const Settings*)> ring_files(
      s.ring_switch ? &s : nullptr, [](const Settings*) { remove_ring_runtime_dirs(true); });
#endif
  if (s.straggler_delay_ms > 0 && s.straggler_rank < 0) s.straggler_rank = *s.ranks - 1;
  const std::vector<std::string> modes = modes_of(s);
  const dpa::Config config = worker_config(s);
  std::vector<json> all;
  for (const std::string& mode : modes) {
    const std::vector<json> lines = run_mode(s, mode);
    all.insert(all.end(), lines.begin(), lines.end());
  }
  const json report = make_report(s, config, modes, all);
  print_summary(s, config, all);
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
}

}  // namespace dpa::tools::bench
