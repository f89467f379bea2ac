// SPDX-License-Identifier: Apache-2.0
// dpa-bench configures its workers like every dpa worker: DPA_* variables, overridden by flags.
// Each test runs dpa-bench processes against a switch in this process; every process is killed
// when its test ends (tools::Process), whatever the outcome.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "dpa/switch.hpp"
#include "tools/process.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using testing::HasSubstr;
using namespace std::chrono_literals;

std::string bench_path() { return std::string(DPA_BINARY_DIR) + "/src/tools/dpa-bench"; }

// dpa-bench with `environment` ("NAME=value" words) and `arguments`, stderr merged into stdout.
dpa::tools::Process start_bench(const std::string& environment, const std::vector<std::string>& arguments) {
  std::vector<std::string> argv = {"/bin/sh", "-c", environment + " exec \"$0\" \"$@\" 2>&1", bench_path()};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  return dpa::tools::Process(argv);
}

// The --json report at `path`, removed once read.
nlohmann::json read_report(const std::string& path) {
  nlohmann::json report;
  std::ifstream(path) >> report;
  std::remove(path.c_str());
  return report;
}

// A directory removed when this goes out of scope, whatever the test's outcome.
struct RemovedAtExit {
  std::string path;
  RemovedAtExit() = default;
  RemovedAtExit(const RemovedAtExit&) = delete;
  RemovedAtExit& operator=(const RemovedAtExit&) = delete;
  ~RemovedAtExit() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove_all(path, ignored);
  }
};

dpa::SwitchConfig one_session_switch(int world) {
  dpa::SessionConfig session;
  session.world_size = world;
  session.payload = 256;
  session.pool_size = 1024;
  dpa::SwitchConfig config;
  std::get<dpa::UdpTransportConfig>(config.transport).bind_port = 0;
  config.sessions = {session};
  return config;
}

std::vector<std::string> worker_arguments(int rank, std::uint16_t port) {
  return {"--worker", "--rank", std::to_string(rank), "--ranks", "2", "--switch", "127.0.0.1:" + std::to_string(port),
          "--sizes", "64KiB", "--warmup", "0", "--iterations", "100000000", "--pool-bytes", "1MiB"};
}

// Rank 0 takes its timeout from DPA_TIMEOUT_MS, rank 1 from --timeout-ms, which overrides a
// variable that says a minute. Both must give up about a second after the switch dies.
TEST(BenchWorker, SwitchKilledWorkersFailWithinTheConfiguredTimeout) {
  auto sw = std::make_unique<dpa::SoftwareSwitch>(one_session_switch(2));
  const std::uint16_t port = sw->port();
  std::vector<dpa::tools::Process> workers;
  workers.push_back(start_bench("DPA_TIMEOUT_MS=1000", worker_arguments(0, port)));
  std::vector<std::string> flagged = worker_arguments(1, port);
  flagged.insert(flagged.end(), {"--timeout-ms", "1000"});
  workers.push_back(start_bench("DPA_TIMEOUT_MS=60000", flagged));

  // Both ranks joined and are in the middle of their operations once rounds complete.
  const auto running_deadline = Clock::now() + 30s;
  while (sw->counters().completed_full < 100 && Clock::now() < running_deadline) {
    ASSERT_FALSE(workers[0].wait_until(Clock::now() + 10ms).has_value()) << workers[0].output();
  }
  ASSERT_GE(sw->counters().completed_full, 100u) << "the workers did not start operating";

  sw.reset();  // the switch dies: its sockets close, nothing answers
  const auto killed = Clock::now();
  const auto codes = dpa::tools::wait_all(workers, killed + 20s);
  const auto elapsed = Clock::now() - killed;
  EXPECT_LT(elapsed, 4s) << "the workers waited longer than their 1 s timeout (the default is 10 s)";
  for (std::size_t rank = 0; rank < workers.size(); ++rank) {
    ASSERT_TRUE(codes[rank].has_value()) << "rank " << rank << " still ran 20 s after the switch died";
    EXPECT_EQ(*codes[rank], 1) << workers[rank].output();
    EXPECT_THAT(workers[rank].output(),
                HasSubstr("dpa-bench: rank " + std::to_string(rank) + ": no reply from the switch at 127.0.0.1:" +
                          std::to_string(port) + " for 1000 ms"));
  }
}

TEST(BenchWorker, BadVariableIsNamedBeforeAnythingStarts) {
  dpa::tools::Process worker = start_bench("DPA_WINDOW=0", {"--worker", "--ranks", "1", "--sizes", "4KiB"});
  const auto code = worker.wait_until(Clock::now() + 20s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(worker.output(), HasSubstr("dpa-bench: DPA_WINDOW=\"0\": expected an integer in [1, 4096]"));
}

// The launcher's workers inherit its environment; flags given to the launcher win over it.
// 256 KiB is above the sized payload: the wide session, whose threads and window these set.
TEST(BenchWorker, LauncherWorkersUseTheVariablesAndTheFlagsGiven) {
  const std::string json_path = testing::TempDir() + "/dpa-bench-env-" + std::to_string(getpid()) + ".json";
  dpa::tools::Process launcher = start_bench(
      "DPA_THREADS=2 DPA_WINDOW=8 DPA_TIMEOUT_MS=60000",
      {"-n", "2", "--sizes", "256KiB", "--warmup", "0", "--iterations", "1", "--timeout-ms", "5000", "--json", json_path});
  const auto code = launcher.wait_until(Clock::now() + 120s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << launcher.output();
  EXPECT_THAT(launcher.output(), HasSubstr("# workers: 2 thread(s), window 8"));
  const nlohmann::json report = read_report(json_path);
  ASSERT_EQ(report["results"].size(), 1u);
  const nlohmann::json& lines = report["results"][0]["dpa"]["ranks"];
  ASSERT_EQ(lines.size(), 2u);
  for (const nlohmann::json& line : lines) {
    EXPECT_EQ(line["threads"], 2);
    EXPECT_EQ(line["window"], 8);
    EXPECT_EQ(line["timeout_ms"], 5000);
    // The timed operation's packets, from Context::transport_counters (sockets send no bursts).
    EXPECT_GT(line["tx_packets"].get<std::uint64_t>(), 0u);
    EXPECT_GT(line["rx_packets"].get<std::uint64_t>(), 0u);
    EXPECT_EQ(line["tx_bursts"], 0);
  }
}

// The launcher's own switch and its workers on shared memory (one fabric per run), checked.
TEST(BenchWorker, SharedMemoryRunVerifiesEveryResult) {
  for (const char* dtype : {"float32", "int32"}) {
    dpa::tools::Process launcher =
        start_bench("", {"-n", "2", "--transport", "shm", "--dtype", dtype, "--sizes", "4KiB,1MiB", "--warmup", "1",
                         "--iterations", "3", "--threads", "2", "--payload", "4096", "--timeout-ms", "20000"});
    const auto code = launcher.wait_until(Clock::now() + 120s);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 0) << launcher.output();
    EXPECT_THAT(launcher.output(), HasSubstr("1048576"));
  }
}

// Without flags the launcher sizes the job as the PyTorch backend does: small sizes on the
// small-packet session, large ones on the wide session, both checked.
TEST(BenchWorker, LauncherSizesTheJobAndRoutesSizesToTwoSessions) {
  const std::string json_path = testing::TempDir() + "/dpa-bench-sized-" + std::to_string(getpid()) + ".json";
  dpa::tools::Process launcher =
      start_bench("", {"-n", "2", "--sizes", "4KiB,1MiB", "--warmup", "1", "--iterations", "2",
                       "--timeout-ms", "20000", "--json", json_path});
  const auto code = launcher.wait_until(Clock::now() + 120s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << launcher.output();
  EXPECT_THAT(launcher.output(), HasSubstr("sizing: threads="));
  const nlohmann::json report = read_report(json_path);
  ASSERT_EQ(report["results"].size(), 2u);
  for (const nlohmann::json& row : report["results"]) {
    EXPECT_EQ(row["dpa"]["payload"], row["bytes"] == 4096 ? 1024 : 16000) << row.dump();
    EXPECT_EQ(row["wrong"], 0);
    ASSERT_EQ(row["dpa"]["ranks"].size(), 2u);
  }
}

// --ring-switch: one rank and a DPDK switch in one process over net_ring; every result checked,
// the switch's packets over the timed operations reported, and the EAL's runtime directory gone
// when it ends.
TEST(BenchWorker, RingSwitchRunVerifiesEveryResultAndReportsTheSwitch) {
#ifndef DPA_HAVE_DPDK
  GTEST_SKIP() << "DPDK transport not built";
#else
  for (const char* dtype : {"float32", "int32"}) {
    const std::string json_path = testing::TempDir() + "/dpa-bench-ring-" + std::to_string(getpid()) + ".json";
    dpa::tools::Process launcher =
        start_bench("", {"--transport", "dpdk", "--ring-switch", "-n", "1", "--payload", "256", "--dtype", dtype,
                         "--sizes", "4KiB,1MiB", "--warmup", "1", "--iterations", "3", "--timeout-ms",
                         "20000", "--json", json_path});
    const auto code = launcher.wait_until(Clock::now() + 120s);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 0) << launcher.output();
    EXPECT_THAT(launcher.output(), HasSubstr("per busy core"));
    EXPECT_FALSE(std::filesystem::exists("/var/run/dpdk/dpa-bench-ring-" + std::to_string(launcher.pid())));
    const nlohmann::json report = read_report(json_path);
    ASSERT_EQ(report["results"].size(), 2u) << launcher.output();
    for (const nlohmann::json& row : report["results"]) {
      EXPECT_EQ(row["wrong"], 0) << row.dump();
      // Every block of the timed operations went through the switch and back (3 operations per
      // view of 4 KiB or 1 MiB in 1 KiB packets; a last batch may not be published yet).
      const std::uint64_t packets = 2 * 3 * row["bytes"].get<std::uint64_t>() / 1024;
      EXPECT_GE(row["dpa"]["switch_rx_packets"].get<std::uint64_t>() + 32, packets) << row.dump();
      EXPECT_GT(row["dpa"]["switch_busy_ns"].get<std::uint64_t>(), 0u) << row.dump();
    }
  }
#endif
}

// --ring-switch with two switch lcores and two worker threads, requests on their lcores' queues
// and moved one queue on (--ring-hand-off): every result checked, each lcore handled packets, the
// hand-off mode passed some to their owner's inbox, and the EAL's runtime directory gone.
TEST(BenchWorker, RingSwitchWithTwoLcoresVerifiesEveryResultAndReportsEachLcore) {
#ifndef DPA_HAVE_DPDK
  GTEST_SKIP() << "DPDK transport not built";
#else
  for (const bool hand_off : {false, true}) {
    SCOPED_TRACE(hand_off ? "--ring-hand-off" : "steered");
    const std::string json_path = testing::TempDir() + "/dpa-bench-ring2-" + std::to_string(getpid()) + ".json";
    std::vector<std::string> arguments = {"--transport", "dpdk", "--ring-switch", "--ring-switch-threads", "2",
                                          "--threads", "2", "--payload", "256", "--sizes", "4KiB,256KiB",
                                          "--warmup", "1", "--iterations", "3", "--timeout-ms", "20000",
                                          "--json", json_path};
    if (hand_off) arguments.emplace_back("--ring-hand-off");
    RemovedAtExit runtime_directory;  // declared first: removed after the launcher is killed
    dpa::tools::Process launcher = start_bench("", arguments);
    runtime_directory.path = "/var/run/dpdk/dpa-bench-ring-" + std::to_string(launcher.pid());
    const auto code = launcher.wait_until(Clock::now() + 80s);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 0) << launcher.output();
    EXPECT_THAT(launcher.output(), HasSubstr("lcore 1 per busy core"));
    EXPECT_FALSE(std::filesystem::exists(runtime_directory.path));
    const nlohmann::json report = read_report(json_path);
    EXPECT_EQ(report["config"]["ring_switch"]["switch_lcores"], 2);
    EXPECT_EQ(report["config"]["ring_switch"]["hand_off"], hand_off);
    ASSERT_EQ(report["results"].size(), 2u) << launcher.output();
    std::uint64_t handed_off = 0;
    for (const nlohmann::json& row : report["results"]) {
      const nlohmann::json& dpa = row["dpa"];
      EXPECT_EQ(row["wrong"], 0) << row.dump();
      EXPECT_EQ(dpa["threads"], 2) << row.dump();
      // Both worker threads' blocks went through the switch and back (2 views x 3 operations in
      // 1 KiB packets; each lcore's last batch may not be published yet).
      const std::uint64_t packets = 2 * 3 * row["bytes"].get<std::uint64_t>() / 1024;
      EXPECT_GE(dpa["switch_rx_packets"].get<std::uint64_t>() + 2 * 32, packets) << row.dump();
      ASSERT_EQ(dpa["switch_lcores"].size(), 2u) << row.dump();
      for (const nlohmann::json& lcore : dpa["switch_lcores"]) {
        EXPECT_GT(lcore["rx_packets"].get<std::uint64_t>(), 0u) << row.dump();
        EXPECT_GT(lcore["busy_ns"].get<std::uint64_t>(), 0u) << row.dump();
        handed_off += lcore["handed_off"].get<std::uint64_t>();
      }
      EXPECT_EQ(dpa["switch_handed_off"].get<std::uint64_t>(),
                dpa["switch_lcores"][0]["handed_off"].get<std::uint64_t>() +
                    dpa["switch_lcores"][1]["handed_off"].get<std::uint64_t>());
    }
    if (hand_off) {
      EXPECT_GT(handed_off, 0u);
    }
  }
#endif
}

TEST(BenchWorker, RingSwitchRefusesBadLcoreFlags) {
#ifndef DPA_HAVE_DPDK
  GTEST_SKIP() << "DPDK transport not built: --ring-cores is not parsed";
#else
  for (const auto& [arguments, message] :
       {std::pair{std::vector<std::string>{"--ring-switch", "--ring-switch-threads", "2", "--ring-cores", "0,1"},
                  "--ring-cores lists 2 core(s); --ring-switch-threads 2 and --threads 2 need 4"},
        std::pair{std::vector<std::string>{"--ring-switch", "--ring-hand-off"},
                  "--ring-hand-off needs --ring-switch-threads 2 or more"},
        std::pair{std::vector<std::string>{"--ring-switch-threads", "2"}, "go with --ring-switch"}}) {
    std::vector<std::string> argv = {"--transport", "dpdk", "--sizes", "4KiB"};
    argv.insert(argv.end(), arguments.begin(), arguments.end());
    dpa::tools::Process launcher = start_bench("", argv);
    const auto code = launcher.wait_until(Clock::now() + 30s);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 2) << launcher.output();
    EXPECT_THAT(launcher.output(), HasSubstr(message));
  }
#endif
}

TEST(BenchWorker, RingSwitchRefusesMoreThanOneRank) {
  dpa::tools::Process launcher = start_bench("", {"--transport", "dpdk", "--ring-switch", "-n", "2", "--sizes", "4KiB"});
  const auto code = launcher.wait_until(Clock::now() + 30s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 2);
  EXPECT_THAT(launcher.output(), HasSubstr("--ring-switch: one rank"));
}

// The report follows the schema shared with python -m dpa.bench (docs/benchmark-tools.md), and
// every operation of both views and the warmup is checked on every rank.
TEST(BenchWorker, ReportFollowsTheSharedSchema) {
  const std::string json_path = testing::TempDir() + "/dpa-bench-schema-" + std::to_string(getpid()) + ".json";
  dpa::tools::Process launcher = start_bench(
      "", {"-n", "2", "--sizes", "4KiB,64KiB", "--warmup", "1", "--iterations", "3", "--timeout-ms", "20000",
           "--json", json_path});
  const auto code = launcher.wait_until(Clock::now() + 120s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << launcher.output();
  EXPECT_THAT(launcher.output(), HasSubstr("#wrong"));
  const nlohmann::json report = read_report(json_path);
  EXPECT_EQ(report["schema"], "dpa-bench");
  EXPECT_EQ(report["schema_version"], 1);
  EXPECT_EQ(report["tool"]["name"], "dpa-bench");
  EXPECT_EQ(report["config"]["ranks"], 2);
  EXPECT_EQ(report["wrong"], 0);
  ASSERT_EQ(report["results"].size(), 2u);
  // The first size warms up the run: at least 100 operations; the next has --warmup's 1.
  EXPECT_EQ(report["results"][0]["warmup"], 100);
  EXPECT_EQ(report["results"][1]["warmup"], 1);
  for (const nlohmann::json& row : report["results"]) {
    for (const char* key : {"backend", "bytes", "elements", "dtype", "device", "ranks", "iterations", "warmup",
                            "time_us", "algbw", "busbw", "p50_us", "p99_us", "barrier_skew_us", "after_last_start_us",
                            "wrong", "checked", "dpa"}) {
      EXPECT_TRUE(row.contains(key)) << key << " missing: " << row.dump();
    }
    EXPECT_EQ(row["backend"], "dpa");
    EXPECT_EQ(row["iterations"], 3);
    EXPECT_EQ(row["checked"], (row["warmup"].get<std::uint64_t>() + 3 + 3) * row["elements"].get<std::uint64_t>() * 2)
        << row.dump();
    EXPECT_EQ(row["wrong"], 0);
    EXPECT_LE(row["p50_us"].get<double>(), row["p99_us"].get<double>());
    // Both ranks run on this kernel: the latency view is split.
    for (const char* split : {"barrier_skew_us", "after_last_start_us"}) {
      ASSERT_TRUE(row[split].is_object()) << split << ": " << row.dump();
      EXPECT_GE(row[split]["p50_us"].get<double>(), 0.0) << row.dump();
      EXPECT_LE(row[split]["p50_us"].get<double>(), row[split]["p99_us"].get<double>()) << row.dump();
    }
    EXPECT_FALSE(row["dpa"]["ranks"][0].contains("latency_start_us"));
  }
}

// --inject-wrong corrupts one element of one rank's result per size: the verification must
// count it, the report show it, and the run exit 1 (float32 against its bound, int32 exactly).
TEST(BenchWorker, CorruptedResultIsCountedAndFailsTheRun) {
  for (const char* dtype : {"float32", "int32"}) {
    const std::string json_path = testing::TempDir() + "/dpa-bench-wrong-" + std::to_string(getpid()) + ".json";
    dpa::tools::Process launcher =
        start_bench("", {"-n", "2", "--dtype", dtype, "--sizes", "4KiB,64KiB", "--warmup", "0", "--iterations", "2",
                         "--inject-wrong", "--timeout-ms", "20000", "--json", json_path});
    const auto code = launcher.wait_until(Clock::now() + 120s);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 1) << launcher.output();
    EXPECT_THAT(launcher.output(), HasSubstr("dpa-bench: 2 wrong elements"));
    const nlohmann::json report = read_report(json_path);
    ASSERT_EQ(report["results"].size(), 2u);
    for (const nlohmann::json& row : report["results"]) EXPECT_EQ(row["wrong"], 1) << row.dump();
  }
}

TEST(BenchWorker, BadFlagsExitWithStatus2NamingTheFlag) {
  for (const auto& [flag, value, message] :
       {std::tuple{"--sizes", "4KiB,lots", "--sizes: 'lots' is not a size"},
        std::tuple{"--modes", "fast", "--modes: \"fast\" is not one of full, reactive, preemptive"},
        std::tuple{"--iterations", "0", "--iterations"}}) {
    dpa::tools::Process launcher = start_bench("", {flag, value});
    const auto code = launcher.wait_until(Clock::now() + 20s);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 2) << launcher.output();
    EXPECT_THAT(launcher.output(), HasSubstr(message));
  }
}

}  // namespace
