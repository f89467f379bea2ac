// SPDX-License-Identifier: Apache-2.0
// One job over several switch servers (docs/configuration.md, DPA_SWITCH with a list): two
// software switches in this process, the ranks dpa-test-worker processes over UDP loopback whose
// thread t talks to server t mod 2. Each rank verifies its results (exact int32 sums, per-block
// contributors); each server's counters must show its share of the traffic.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "dpa/context.hpp"
#include "dpa/error.hpp"
#include "dpa/switch.hpp"
#include "tools/process.hpp"
#include "worker_results.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using testing::HasSubstr;

dpa::SessionConfig session_config(int world, std::uint32_t payload = 256) {
  dpa::SessionConfig session;
  session.id = 1;
  session.world_size = world;
  session.payload = payload;
  session.pool_size = 1024;
  session.straggler_timeout = std::chrono::milliseconds(20);
  return session;
}

dpa::SwitchConfig switch_config(const dpa::SessionConfig& session) {
  dpa::SwitchConfig config;
  std::get<dpa::UdpTransportConfig>(config.transport).bind_port = 0;
  config.sessions = {session};
  return config;
}

std::string address_of(const dpa::SoftwareSwitch& sw) { return "127.0.0.1:" + std::to_string(sw.port()); }

// Every rank of `world` with `args`, and `straggler_args` added for the last rank.
std::vector<RankResult> run_workers(const std::string& switches, int world, const std::vector<std::string>& args,
                                    const std::vector<std::string>& last_rank_args = {}) {
  std::vector<dpa::tools::Process> processes;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> argv = {worker_path(),
                                     "--switch", switches, "--rank", std::to_string(rank), "--world",
                                     std::to_string(world)};
    argv.insert(argv.end(), args.begin(), args.end());
    if (rank == world - 1) argv.insert(argv.end(), last_rank_args.begin(), last_rank_args.end());
    processes.emplace_back(argv);
  }
  return collect_results(processes, Clock::now() + std::chrono::seconds(120));
}

void expect_all_succeeded(const std::vector<RankResult>& results, std::size_t lines) {
  for (std::size_t r = 0; r < results.size(); ++r) {
    ASSERT_TRUE(results[r].exit_code.has_value()) << "rank " << r << " did not finish in time";
    EXPECT_EQ(*results[r].exit_code, 0) << "rank " << r << " failed";
    EXPECT_EQ(results[r].lines.size(), lines) << "rank " << r;
  }
}

// Thread t's server is entry t mod S of the list, on every rank.
void expect_threads_on_their_servers(const std::vector<RankResult>& results, const std::vector<std::string>& servers,
                                     int threads) {
  for (const RankResult& rank : results) {
    for (const auto& line : rank.lines) {
      ASSERT_EQ(line["switches"].size(), static_cast<std::size_t>(threads));
      for (int t = 0; t < threads; ++t) EXPECT_EQ(line["switches"][t], servers[t % servers.size()]);
    }
  }
}

struct Shape {
  int world;
  int threads;
};

class TwoServers : public testing::TestWithParam<Shape> {};

TEST_P(TwoServers, ExactSumsWithEachServerCarryingItsThreads) {
  const Shape shape = GetParam();
  dpa::SoftwareSwitch a(switch_config(session_config(shape.world)));
  dpa::SoftwareSwitch b(switch_config(session_config(shape.world)));
  const std::vector<std::string> servers = {address_of(a), address_of(b)};
  const auto results = run_workers(servers[0] + "," + servers[1], shape.world,
                                   {"--threads", std::to_string(shape.threads), "--window", "16", "--count",
                                    "100003", "--dtype", "int32", "--iterations", "2"});
  expect_all_succeeded(results, 2);
  for (const RankResult& rank : results) {
    for (const auto& line : rank.lines) {
      EXPECT_EQ(line["errors"], 0);
      EXPECT_EQ(line["full"], line["blocks"]);
    }
  }
  expect_threads_on_their_servers(results, servers, shape.threads);
  // Both servers aggregated, and neither saw a packet of the other's threads.
  for (const dpa::SoftwareSwitch* sw : {&a, &b}) {
    const dpa::SwitchCounters counters = sw->counters();
    EXPECT_GT(counters.completed_full, 0u) << address_of(*sw);
    EXPECT_EQ(counters.dropped_malformed + counters.dropped_unregistered + counters.dropped_bad_token, 0u)
        << address_of(*sw);
  }
  // 100003 int32 in blocks of 256 per operation, split between the threads round robin: the
  // servers' rounds add up to the job's blocks (2 operations).
  const std::uint64_t blocks = (100003 + 255) / 256;
  EXPECT_EQ(a.counters().completed_full + b.counters().completed_full, 2 * blocks);
}

INSTANTIATE_TEST_SUITE_P(MultiSwitch, TwoServers, testing::Values(Shape{2, 2}, Shape{3, 4}, Shape{4, 2}),
                         [](const testing::TestParamInfo<Shape>& param_info) {
                           return fmt::format("N{}_T{}", param_info.param.world, param_info.param.threads);
                         });

TEST(MultiSwitch, FastestKCompletesEveryBlockWithoutTheStragglerOnBothServers) {
  constexpr int kWorld = 4;
  dpa::SoftwareSwitch a(switch_config(session_config(kWorld)));
  dpa::SoftwareSwitch b(switch_config(session_config(kWorld)));
  const auto results = run_workers(address_of(a) + "," + address_of(b), kWorld,
                                   {"--threads", "2", "--window", "8", "--count", "20000", "--dtype", "int32",
                                    "--iterations", "3", "--k", "3", "--straggler-rank", "3",
                                    "--straggler-delay-ms", "300", "--timeout-ms", "10000"});
  expect_all_succeeded(results, 3);
  for (int rank = 0; rank < kWorld - 1; ++rank) {
    for (const auto& line : results[rank].lines) {
      EXPECT_EQ(line["errors"], 0);
      EXPECT_EQ(line["missed"], 0);
      EXPECT_EQ(line["min_contributors"], 3) << "rank " << rank;
      EXPECT_GT(line["partial"], 0) << "rank " << rank;
    }
  }
  for (const auto& line : results[kWorld - 1].lines) EXPECT_EQ(line["errors"], 0);  // own input where missed
  EXPECT_GT(a.counters().completed_partial, 0u);
  EXPECT_GT(b.counters().completed_partial, 0u);
}

TEST(MultiSwitch, ServersWithDifferentSessionsAreNamedBoth) {
  dpa::SoftwareSwitch a(switch_config(session_config(1, 256)));
  dpa::SoftwareSwitch b(switch_config(session_config(1, 512)));
  dpa::Config config;
  config.switches = {{"127.0.0.1", a.port()}, {"127.0.0.1", b.port()}};
  config.threads = 2;
  config.join_timeout = std::chrono::seconds(10);
  try {
    dpa::Context context(config);
    ADD_FAILURE() << "servers with different payloads were accepted";
  } catch (const dpa::ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr(address_of(a) + " (payload 256)"));
    EXPECT_THAT(error.what(), HasSubstr(address_of(b) + " (payload 512)"));
    EXPECT_THAT(error.what(), HasSubstr("DPA_SWITCH"));
  }
}

TEST(MultiSwitch, OneAddressUnderTwoNamesIsRefused) {
  dpa::SoftwareSwitch a(switch_config(session_config(1)));
  dpa::Config config;
  config.switches = {{"127.0.0.1", a.port()}, {"localhost", a.port()}};
  config.threads = 2;
  try {
    dpa::Context context(config);
    ADD_FAILURE() << "one server listed under two names was accepted";
  } catch (const dpa::ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("are the same server"));
    EXPECT_THAT(error.what(), HasSubstr("DPA_SWITCH"));
  }
}

}  // namespace
