// SPDX-License-Identifier: Apache-2.0
// Integration tests: a software switch in this process, N dpa-test-worker processes over UDP
// loopback. Each worker verifies its own results (exact int32 sums, fp32 within the documented
// bound, per-block contributors) and reports statistics as JSON lines.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <stop_token>
#include <thread>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "dpa/context.hpp"
#include "dpa/switch.hpp"
#include "protocol/wire.hpp"
#include "quant/quant.hpp"
#include "switch/control_channel.hpp"
#include "tools/process.hpp"
#include "worker_results.hpp"
#include "transport/send.hpp"
#include "transport/socket/udp_device.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using testing::HasSubstr;

struct Scenario {
  int world = 2;
  std::vector<std::string> worker_args;  // passed to every rank
  std::vector<std::vector<std::string>> rank_args;  // extra, per rank (optional)
  std::chrono::seconds deadline{90};
};

dpa::SessionConfig session_config(int world, std::uint32_t payload = 256) {
  dpa::SessionConfig session;
  session.id = 1;
  session.world_size = world;
  session.payload = payload;
  session.pool_size = 1024;
  session.straggler_timeout = std::chrono::milliseconds(20);
  return session;
}

dpa::SwitchConfig switch_config(const dpa::SessionConfig& session, int threads = 1) {
  dpa::SwitchConfig config;
  std::get<dpa::UdpTransportConfig>(config.transport).bind_port = 0;
  config.threads = threads;
  config.sessions = {session};
  return config;
}

std::vector<RankResult> run_workers(std::uint16_t port, const Scenario& scenario) {
  std::vector<dpa::tools::Process> processes;
  for (int rank = 0; rank < scenario.world; ++rank) {
    std::vector<std::string> argv = {worker_path(), "--port", std::to_string(port), "--rank",
                                     std::to_string(rank), "--world", std::to_string(scenario.world)};
    argv.insert(argv.end(), scenario.worker_args.begin(), scenario.worker_args.end());
    if (rank < static_cast<int>(scenario.rank_args.size())) {
      argv.insert(argv.end(), scenario.rank_args[rank].begin(), scenario.rank_args[rank].end());
    }
    processes.emplace_back(argv);
  }
  return collect_results(processes, Clock::now() + scenario.deadline);
}

void expect_all_succeeded(const std::vector<RankResult>& results) {
  for (std::size_t r = 0; r < results.size(); ++r) {
    ASSERT_TRUE(results[r].exit_code.has_value()) << "rank " << r << " did not finish in time";
    EXPECT_EQ(*results[r].exit_code, 0) << "rank " << r << " failed";
  }
}

std::vector<RankResult> run(const dpa::SessionConfig& session, const Scenario& scenario,
                            int switch_threads = 1) {
  dpa::SoftwareSwitch sw(switch_config(session, switch_threads));
  return run_workers(sw.port(), scenario);
}

// --- Correctness over sizes and world sizes -------------------------------------------------

struct SizeCase {
  int world;
  std::size_t count;
  const char* dtype;
  const char* op;
};

void PrintTo(const SizeCase& c, std::ostream* os) {
  *os << "N=" << c.world << " count=" << c.count << " " << c.dtype << " " << c.op;
}

class Sizes : public testing::TestWithParam<SizeCase> {};

TEST_P(Sizes, ResultsAreExactOrWithinBound) {
  const SizeCase c = GetParam();
  Scenario scenario;
  scenario.world = c.world;
  scenario.worker_args = {"--count", std::to_string(c.count), "--dtype", c.dtype, "--op", c.op,
                          "--iterations", "2", "--window", "16"};
  const auto results = run(session_config(c.world), scenario);
  expect_all_succeeded(results);
  for (const RankResult& rank : results) {
    ASSERT_EQ(rank.lines.size(), 2u);
    for (const auto& line : rank.lines) {
      EXPECT_EQ(line["errors"], 0);
      EXPECT_EQ(line["missed"], 0);
      EXPECT_EQ(line["partial"], 0);
      EXPECT_EQ(line["full"], line["blocks"]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Integration, Sizes,
    testing::Values(SizeCase{1, 1000, "int32", "sum"}, SizeCase{2, 1, "int32", "sum"},
                    SizeCase{2, 255, "float32", "sum"}, SizeCase{2, 256, "int32", "sum"},
                    SizeCase{2, 257, "float32", "avg"}, SizeCase{4, 100003, "int32", "sum"},
                    SizeCase{4, 100003, "float32", "sum"}, SizeCase{4, 4096, "int32", "avg"},
                    SizeCase{8, 50000, "int32", "sum"}, SizeCase{8, 50000, "float32", "avg"}),
    [](const testing::TestParamInfo<SizeCase>& param_info) {
      const SizeCase& c = param_info.param;
      return "N" + std::to_string(c.world) + "_" + std::to_string(c.count) + "_" + c.dtype + "_" + c.op;
    });

// --- A caller that does the block floating point itself (the GPU path) -----------------------

// Rank `rank`'s input: blocks of different magnitudes, one of zeros, one with a NaN, a short last.
std::vector<float> block_float_input(int rank, std::size_t count, std::size_t payload) {
  std::mt19937 rng(static_cast<unsigned>(rank + 1));
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t block = i / payload;
    values[i] = block == 3 ? 0.0f : std::ldexp(unit(rng), static_cast<int>(block % 7) * 9 - 30);
  }
  if (rank == 1) values[5 * payload + 2] = std::nanf("");
  return values;
}

// Each rank reduces its input twice, once as usual and once with the options, and finishes the
// wire result as dpa/block_float.hpp says: the two must agree bit for bit.
void reduce_both_ways(int rank, int world, std::uint16_t port, std::size_t count,
                      dpa::ReduceOp op) {
  dpa::Config config;
  config.rank = rank;
  config.world_size = world;
  config.switches = {{"127.0.0.1", port}};
  config.threads = 2;
  config.window = 4;
  dpa::Context context(config);
  const std::size_t payload = context.payload();
  const std::size_t blocks = (count + payload - 1) / payload;
  const std::vector<float> input = block_float_input(rank, count, payload);
  dpa::AllreduceOptions options;
  options.op = op;
  std::vector<float> expected(count);
  context.allreduce(input.data(), expected.data(), count, dpa::DataType::float32, options);

  std::vector<std::int8_t> exponents(blocks);
  for (std::size_t b = 0; b < blocks; ++b) {
    exponents[b] = dpa::quant::block_exponent(input.data() + b * payload,
                                              std::min(payload, count - b * payload));
  }
  std::vector<dpa::block_float::WireBlock> wire_blocks(blocks);
  options.block_exponents = exponents.data();
  options.wire_result = wire_blocks.data();
  std::vector<float> wire = input;  // in place, as the torch backend runs it
  context.allreduce(wire.data(), wire.data(), count, dpa::DataType::float32, options);
  std::vector<float> finished(count);
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t n = std::min(payload, count - b * payload);
    ASSERT_NE(wire_blocks[b].divisor, 0u) << "rank " << rank << " missed block " << b;
    EXPECT_EQ(wire_blocks[b].divisor, op == dpa::ReduceOp::avg ? static_cast<std::uint32_t>(world) : 1u);
    dpa::quant::dequantize(reinterpret_cast<const std::byte*>(wire.data() + b * payload), n,
                           wire_blocks[b].exponent, world, wire_blocks[b].divisor,
                           finished.data() + b * payload);
  }
  EXPECT_EQ(std::memcmp(finished.data(), expected.data(), 4 * count), 0) << "rank " << rank;
}

TEST(Integration, CallerBlockExponentsAndWireResultReproduceTheHostResultBitForBit) {
  for (const dpa::ReduceOp op : {dpa::ReduceOp::sum, dpa::ReduceOp::avg}) {
    constexpr int kWorld = 3;
    dpa::SoftwareSwitch sw(switch_config(session_config(kWorld)));
    std::vector<std::future<void>> ranks;
    for (int rank = 0; rank < kWorld; ++rank) {
      ranks.push_back(std::async(std::launch::async, reduce_both_ways, rank, kWorld, sw.port(),
                                 std::size_t{10 * 256 + 77}, op));
    }
    for (auto& rank : ranks) rank.get();
  }
}

// A switch with more threads than the workers: each worker thread's window entries take turns
// over switch threads t, t + T, ... (protocol.md §7.1), so every switch thread aggregates, and the
// results are exact. S = 2T as the sizing gives 4 ranks on 16 cores (T = 4, S = 8), and S not a
// multiple of T (T = 3: worker threads 0 and 1 take turns over three switch threads, 2 over two).
TEST(Integration, SwitchThreadsBeyondTheWorkersThreadsEachTakeAShare) {
  constexpr int kWorld = 2;
  for (const auto& [worker_threads, switch_threads] : {std::pair{2, 4}, std::pair{4, 8}, std::pair{3, 8}}) {
    SCOPED_TRACE("T = " + std::to_string(worker_threads) + ", S = " + std::to_string(switch_threads));
    dpa::SoftwareSwitch sw(switch_config(session_config(kWorld), switch_threads));
    const auto reduce = [&sw, threads = worker_threads](int rank) {
      dpa::Config config;
      config.rank = rank;
      config.world_size = kWorld;
      config.switches = {{"127.0.0.1", sw.port()}};
      config.threads = threads;
      config.window = 4;
      dpa::Context context(config);
      std::vector<std::int32_t> values(64 * 256 + 5);
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::int32_t>(i) * (rank + 1);
      context.allreduce(values.data(), values.data(), values.size(), dpa::DataType::int32);
      for (std::size_t i = 0; i < values.size(); ++i) {
        ASSERT_EQ(values[i], static_cast<std::int32_t>(i) * 3) << "rank " << rank << " element " << i;
      }
    };
    auto other = std::async(std::launch::async, reduce, 1);
    reduce(0);
    other.get();
    const std::vector<dpa::SwitchThreadCounters> threads = sw.thread_counters();
    ASSERT_EQ(threads.size(), static_cast<std::size_t>(switch_threads));
    for (std::size_t t = 0; t < threads.size(); ++t) {
      EXPECT_GT(threads[t].counters.aggregated, 0u) << "switch thread " << t << " took no share";
      EXPECT_EQ(threads[t].counters.dropped_malformed, 0u) << "switch thread " << t;
    }
  }
}

TEST(Integration, CallerBlockFloatOptionsAreCheckedAtSubmission) {
  dpa::SoftwareSwitch sw(switch_config(session_config(1)));
  dpa::Config config;
  config.switches = {{"127.0.0.1", sw.port()}};
  dpa::Context context(config);
  std::vector<float> values(600, 1.0f);
  std::vector<std::int8_t> exponents{1, -100, 1};  // -100 < kExpMin
  dpa::AllreduceOptions options;
  options.block_exponents = exponents.data();
  try {
    context.allreduce(values.data(), values.data(), values.size(), dpa::DataType::float32, options);
    ADD_FAILURE() << "an invalid exponent was accepted";
  } catch (const dpa::ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("block_exponents[1] = -100"));
  }
  std::vector<dpa::block_float::WireBlock> blocks(3);
  dpa::AllreduceOptions wire_options;
  wire_options.wire_result = blocks.data();
  std::vector<std::int32_t> ints(600, 1);
  try {
    context.allreduce(ints.data(), ints.data(), ints.size(), dpa::DataType::int32, wire_options);
    ADD_FAILURE() << "wire_result was accepted for int32";
  } catch (const dpa::ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("float32 only"));
  }
  // The context is still usable.
  context.allreduce(ints.data(), ints.data(), ints.size(), dpa::DataType::int32);
  EXPECT_EQ(ints[0], 1);
}

TEST(Integration, SixtyFourMiBFloatAndIntOverMultipleThreads) {
  auto session = session_config(4, 2048);
  session.pool_size = 4096;
  Scenario scenario;
  scenario.world = 4;
  scenario.worker_args = {"--count", std::to_string(16u << 20), "--dtype", "float32", "--threads",
                          "2", "--window", "32", "--in-place"};
  scenario.deadline = std::chrono::seconds(240);
  const auto results = run(session, scenario, /*switch_threads=*/2);
  expect_all_succeeded(results);

  Scenario ints = scenario;
  ints.world = 2;
  ints.worker_args = {"--count", std::to_string(16u << 20), "--dtype", "int32", "--threads", "2",
                      "--window", "32"};
  auto pair = session_config(2, 2048);
  pair.pool_size = 4096;
  expect_all_succeeded(run(pair, ints, 2));
}

// --- Loss, duplication, reordering -------------------------------------------------------------

TEST(Integration, LossDuplicationAndReorderingStillGiveExactSums) {
  Scenario scenario;
  scenario.world = 4;
  scenario.worker_args = {"--count", "60000", "--dtype", "int32", "--iterations", "3",
                          "--drop", "0.05", "--duplicate", "0.05", "--reorder", "0.05",
                          "--delay", "0.02", "--rto-us", "2000"};
  for (int r = 0; r < 4; ++r) scenario.rank_args.push_back({"--seed", std::to_string(100 + r)});
  const auto results = run(session_config(4), scenario);
  expect_all_succeeded(results);
  std::uint64_t retransmissions = 0;
  for (const auto& rank : results) {
    for (const auto& line : rank.lines) {
      EXPECT_EQ(line["errors"], 0);
      EXPECT_EQ(line["full"], line["blocks"]) << line.dump();
      retransmissions += line["retransmissions"].get<std::uint64_t>();
    }
  }
  EXPECT_GT(retransmissions, 0u) << "5% loss must cause retransmissions";
}

TEST(Integration, FloatUnderLoss) {
  Scenario scenario;
  scenario.world = 3;
  scenario.worker_args = {"--count", "20000", "--dtype", "float32", "--drop", "0.05",
                          "--reorder", "0.05", "--rto-us", "2000"};
  expect_all_succeeded(run(session_config(3), scenario));
}

// --- Stragglers and fastest-K ------------------------------------------------------------------

Scenario straggler_scenario(std::vector<std::string> mode) {
  Scenario scenario;
  scenario.world = 4;
  scenario.worker_args = {"--count", "20000", "--dtype", "int32", "--iterations", "3",
                          "--straggler-rank", "3", "--straggler-delay-ms", "300",
                          "--window", "8", "--rto-us", "2000", "--timeout-ms", "10000"};
  scenario.worker_args.insert(scenario.worker_args.end(), mode.begin(), mode.end());
  return scenario;
}

void expect_fast_ranks_completed_without_straggler(const std::vector<RankResult>& results,
                                                   bool every_block_partial) {
  expect_all_succeeded(results);
  for (int rank = 0; rank < 3; ++rank) {
    for (const auto& line : results[rank].lines) {
      EXPECT_EQ(line["errors"], 0);
      EXPECT_EQ(line["missed"], 0);
      EXPECT_EQ(line["min_contributors"], 3) << "rank " << rank;
      EXPECT_GT(line["partial"], 0) << "rank " << rank;
      if (every_block_partial) {
        EXPECT_EQ(line["partial"], line["blocks"]) << "rank " << rank;
      }
      // The straggler sleeps 300 ms per operation; the fast ranks must not wait for it.
      EXPECT_LT(line["seconds"].get<double>(), 0.25) << "rank " << rank;
    }
  }
  // The straggler's output is verified block by block too (own input where it missed).
  for (const auto& line : results[3].lines) EXPECT_EQ(line["errors"], 0);
}

TEST(Integration, ReactiveFastestKCompletesWithoutTheStraggler) {
  const auto results = run(session_config(4), straggler_scenario({"--k", "3"}));
  expect_fast_ranks_completed_without_straggler(results, /*every_block_partial=*/false);
}

TEST(Integration, PreemptiveFastestKCompletesEveryBlockAtK) {
  const auto results = run(session_config(4), straggler_scenario({"--k", "3", "--preemptive"}));
  expect_fast_ranks_completed_without_straggler(results, /*every_block_partial=*/true);
}

TEST(Integration, StragglerWithSynDisabledSkipsForward) {
  const auto results =
      run(session_config(4), straggler_scenario({"--k", "3", "--preemptive", "--syn-disable"}));
  expect_fast_ranks_completed_without_straggler(results, /*every_block_partial=*/true);
}

TEST(Integration, FloatStragglerPreemptive) {
  Scenario scenario = straggler_scenario({"--k", "3", "--preemptive"});
  scenario.worker_args[3] = "float32";
  const auto results = run(session_config(4), scenario);
  expect_fast_ranks_completed_without_straggler(results, true);
}

TEST(Integration, WithoutFastestKEveryoneWaitsForTheStraggler) {
  Scenario scenario = straggler_scenario({});
  scenario.worker_args[5] = "1";  // one iteration
  const auto results = run(session_config(4), scenario);
  expect_all_succeeded(results);
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_EQ(results[rank].lines.size(), 1u);
    EXPECT_EQ(results[rank].lines[0]["full"], results[rank].lines[0]["blocks"]);
  }
  EXPECT_GT(results[0].lines[0]["seconds"].get<double>(), 0.25);
}

// --- Bad input ----------------------------------------------------------------------------------

TEST(Integration, UnknownSessionIsAClearError) {
  Scenario scenario;
  scenario.world = 1;
  scenario.worker_args = {"--session", "77", "--expect-error", "session 77 is unknown"};
  expect_all_succeeded(run(session_config(1), scenario));
}

TEST(Integration, UnregisteredSenderIsRejectedAndCounted) {
  auto session = session_config(1);
  session.workers = {{"127.0.0.2", 0}};
  dpa::SoftwareSwitch sw(switch_config(session));
  Scenario scenario;
  scenario.world = 1;
  scenario.worker_args = {"--local-host", "127.0.0.1", "--expect-error", "not registered"};
  expect_all_succeeded(run_workers(sw.port(), scenario));
  EXPECT_GT(sw.counters().dropped_unregistered, 0u);

  // The registered address works.
  scenario.worker_args = {"--local-host", "127.0.0.2", "--count", "1000"};
  expect_all_succeeded(run_workers(sw.port(), scenario));
}

TEST(Integration, RegisteredWorkerPortAdmitsEveryThreadOfThatRank) {
  // The registered port is thread 0's; the other threads announce theirs in the JOIN.
  const auto base = static_cast<std::uint16_t>(20000 + (getpid() % 20000));
  auto session = session_config(2);
  session.workers = {{"127.0.0.1", base}, {"127.0.0.1", static_cast<std::uint16_t>(base + 10)}};
  dpa::SoftwareSwitch sw(switch_config(session, 2));
  Scenario scenario;
  scenario.world = 2;
  scenario.worker_args = {"--threads", "2", "--count", "50000", "--local-host", "127.0.0.1"};
  scenario.rank_args = {{"--local-port", std::to_string(base)},
                        {"--local-port", std::to_string(base + 10)}};
  expect_all_succeeded(run_workers(sw.port(), scenario));
  EXPECT_EQ(sw.counters().dropped_unregistered, 0u);
}

TEST(Integration, RankConfigurationMismatchNamesTheSetting) {
  Scenario scenario;
  scenario.world = 2;
  scenario.worker_args = {"--expect-error", "window", "--join-timeout-ms", "10000"};
  scenario.rank_args = {{"--window", "8"}, {"--window", "16"}};
  expect_all_succeeded(run(session_config(2), scenario));

  scenario.worker_args = {"--expect-error", "threads", "--join-timeout-ms", "10000"};
  scenario.rank_args = {{"--threads", "1"}, {"--threads", "2"}};
  expect_all_succeeded(run(session_config(2), scenario));
}

TEST(Integration, WorldSizeAndPayloadMismatchAreRejected) {
  Scenario scenario;
  scenario.world = 3;  // the session has 2
  scenario.worker_args = {"--expect-error", "world size 2"};
  expect_all_succeeded(run(session_config(2), scenario));

  scenario.world = 2;
  scenario.worker_args = {"--payload", "512", "--expect-error", "payload 512 differs"};
  expect_all_succeeded(run(session_config(2), scenario));
}

TEST(Integration, PayloadLargerThanTheTransportCarriesIsAConfigError) {
  // The session's packets (48 + 4 * 2048 bytes) do not fit the ranks' 4000-byte UDP buffers.
  const std::string path = std::string(DPA_BINARY_DIR) + "/small-udp-" + std::to_string(getpid()) + ".json";
  std::ofstream(path) << R"({"udp": {"bind_host": "127.0.0.1", "max_payload": 4000}})";
  Scenario scenario;
  scenario.worker_args = {"--transport-config", path, "--expect-error",
                          "payload 2048 needs 8240-byte packets; the transport carries at most 4000"};
  const auto results = run(session_config(2, 2048), scenario);
  std::filesystem::remove(path);
  expect_all_succeeded(results);
}

TEST(Integration, ElementCountMismatchIsDetected) {
  Scenario scenario;
  scenario.world = 2;
  scenario.worker_args = {"--count", "1000", "--timeout-ms", "1500"};
  // The switch poisons the round both ranks share and tells both: each rank fails in that
  // operation with both counts named, long before the operation timeout; then the ranks
  // rejoin and an operation with matching counts works.
  const std::vector<std::string> args = {"--count-override-rank", "1", "--count-override", "900",
                                         "--expect-error", "disagree on the element count",
                                         "--expect-error", "1000",
                                         "--expect-error", "900", "--recover"};
  scenario.rank_args = {args, args};
  scenario.deadline = std::chrono::seconds(30);
  expect_all_succeeded(run(session_config(2), scenario));
}

TEST(Integration, DataTypeMismatchFailsEveryRankThenMatchedOperationsWork) {
  Scenario scenario;
  scenario.world = 2;
  scenario.worker_args = {"--count", "5000", "--timeout-ms", "1500"};
  const std::vector<std::string> args = {"--dtype-override-rank", "1", "--expect-error",
                                         "disagree on the data type", "--recover"};
  scenario.rank_args = {args, args};
  scenario.deadline = std::chrono::seconds(30);
  expect_all_succeeded(run(session_config(2), scenario));
}

TEST(Integration, MalformedPacketsAreDroppedAndTheSwitchKeepsWorking) {
  dpa::SoftwareSwitch sw(switch_config(session_config(2)));
  auto sender = dpa::transport::socket::open_udp_queue({.bind_host = "127.0.0.1"});
  const dpa::transport::Endpoint target{0x7f000001, sw.port()};
  std::vector<std::byte> garbage(100, std::byte{0xAB});
  std::vector<std::byte> short_packet(7, std::byte{0x01});
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(dpa::transport::send_datagram(*sender, garbage, target));
    ASSERT_TRUE(dpa::transport::send_datagram(*sender, short_packet, target));
  }
  Scenario scenario;
  scenario.world = 2;
  scenario.worker_args = {"--count", "5000"};
  expect_all_succeeded(run_workers(sw.port(), scenario));
  EXPECT_EQ(sw.counters().dropped_malformed, 100u);
}

// Valid JOINs from one foreign socket at `per_second` on a fixed schedule, until destroyed (the
// jthread stops and joins then, also when an assertion returns early): for ranks 0..world-1 in
// turn, each with a fresh nonce; or, with `only_rank`, one JOIN for that rank repeated (a stale
// process of the rank, or an impostor).
class JoinStorm {
 public:
  JoinStorm(std::uint16_t switch_port, const dpa::SessionConfig& session, int per_second,
            std::optional<int> only_rank = std::nullopt)
      : socket_(dpa::transport::socket::open_udp_queue({.bind_host = "127.0.0.1"})),
        thread_([this, switch_port, session, per_second, only_rank](std::stop_token stop) {
          const dpa::transport::Endpoint target{0x7f000001, switch_port};
          const auto interval = std::chrono::nanoseconds(1'000'000'000 / per_second);
          std::mt19937 nonces(42);
          auto next = Clock::now();
          started_ = next;
          for (std::uint32_t i = 0; !stop.stop_requested(); ++i) {
            dpa::protocol::JoinRequest request;
            request.nonce = only_rank.has_value() ? 1 : static_cast<std::uint32_t>(nonces()) | 1;
            request.world_size = static_cast<std::uint32_t>(session.world_size);
            request.threads = 1;
            request.window = 8;
            request.ports[0] = socket_->local_endpoint().port;
            dpa::protocol::Header header;
            header.flags = dpa::protocol::flag::kJoin;
            header.session = session.id;
            header.rank = static_cast<std::uint8_t>(
                only_rank.value_or(static_cast<int>(i % static_cast<std::uint32_t>(session.world_size))));
            header.count = static_cast<std::uint16_t>(request.words());
            std::array<std::byte, dpa::protocol::kHeaderSize + 4 * 64> packet{};
            dpa::protocol::encode(header, packet.data());
            dpa::protocol::encode(request, packet.data() + dpa::protocol::kHeaderSize);
            dpa::transport::send_datagram(
                *socket_, std::span(packet.data(), dpa::protocol::kHeaderSize + 4 * request.words()), target);
            sent_.fetch_add(1, std::memory_order_relaxed);
            next += interval;  // pacing the storm's rate, not waiting for anything
            std::this_thread::sleep_until(next);
          }
        }) {}

  [[nodiscard]] dpa::transport::Endpoint source() const { return socket_->local_endpoint(); }
  [[nodiscard]] std::uint64_t sent() const { return sent_.load(std::memory_order_relaxed); }
  [[nodiscard]] double per_second() const {
    return static_cast<double>(sent()) / std::chrono::duration<double>(Clock::now() - started_).count();
  }

 private:
  std::unique_ptr<dpa::transport::Queue> socket_;
  std::atomic<std::uint64_t> sent_{0};
  Clock::time_point started_ = Clock::now();
  std::jthread thread_;  // last: stops before the socket closes
};

TEST(Integration, AFourRankJobFormsUnderAJoinStormFromAForeignSocket) {
  const dpa::SessionConfig session = session_config(4);
  dpa::SoftwareSwitch sw(switch_config(session));
  JoinStorm storm(sw.port(), session, 2000);
  Scenario scenario;
  scenario.world = 4;
  scenario.worker_args = {"--count", "5000", "--join-timeout-ms", "20000"};
  scenario.deadline = std::chrono::seconds(60);
  const std::vector<RankResult> results = run_workers(sw.port(), scenario);
  const std::uint64_t sent = storm.sent();
  const double rate = storm.per_second();
  const dpa::SwitchCounters counters = sw.counters();
  std::cout << "storm: " << sent << " JOINs at " << rate << " per second; switch: joins_rate_limited "
            << counters.joins_rate_limited << ", joins_contended " << counters.joins_contended
            << ", joins_refused " << counters.joins_refused << "\n";
  expect_all_succeeded(results);
  EXPECT_GT(counters.joins_rate_limited, 0u) << "the storm's source was limited";
}

TEST(Integration, ARankWhosePendingJoinAnotherSourceHoldsNamesThatSource) {
  const dpa::SessionConfig session = session_config(2);
  dpa::SoftwareSwitch sw(switch_config(session));
  JoinStorm holder(sw.port(), session, 10, /*only_rank=*/1);
  const std::string source = "127.0.0.1:" + std::to_string(holder.source().port);
  std::vector<dpa::tools::Process> rank1;
  rank1.emplace_back(std::vector<std::string>{worker_path(), "--port", std::to_string(sw.port()), "--rank", "1",
                                              "--world", "2", "--join-timeout-ms", "2000", "--expect-error",
                                              source + ", not this rank's socket, held rank 1's pending JOIN"});
  const auto codes = dpa::tools::wait_all(rank1, Clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(codes[0].has_value()) << "rank 1 did not finish in time";
  EXPECT_EQ(*codes[0], 0) << rank1[0].output();
  EXPECT_GT(sw.counters().joins_contended, 0u);
}

constexpr const char* kControlSecret = "integration-test-control-secret";

// Sends request lines to the control channel over TCP, after the secret, and returns the reply
// lines to them.
std::vector<nlohmann::json> control_requests(std::uint16_t port, std::vector<std::string> requests) {
  requests.insert(requests.begin(), nlohmann::json{{"op", "auth"}, {"secret", kControlSecret}}.dump());
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::vector<nlohmann::json> replies;
  std::string pending;
  for (const std::string& request : requests) {
    const std::string line = request + "\n";
    EXPECT_EQ(send(fd, line.data(), line.size(), 0), static_cast<ssize_t>(line.size()));
    while (pending.find('\n') == std::string::npos) {
      char buffer[4096];
      const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      pending.append(buffer, static_cast<std::size_t>(n));
    }
    const auto newline = pending.find('\n');
    if (newline == std::string::npos) break;
    replies.push_back(nlohmann::json::parse(pending.substr(0, newline)));
    pending.erase(0, newline + 1);
  }
  close(fd);
  EXPECT_FALSE(replies.empty()) << "no reply to auth";
  if (replies.empty()) return replies;
  EXPECT_EQ(replies.front()["ok"], true) << replies.front();
  replies.erase(replies.begin());
  return replies;
}

TEST(Integration, ControlChannelAddsAndRemovesSessionsOfARunningSwitch) {
  dpa::SwitchConfig config = switch_config(session_config(2));
  config.sessions.clear();
  dpa::SoftwareSwitch sw(config);
  dpa::sw::ControlChannelOptions control_options;
  control_options.secret = kControlSecret;
  dpa::sw::ControlChannel control(sw, dpa::HostPort{"127.0.0.1", 0}, control_options);

  auto replies = control_requests(
      control.port(),
      {R"({"op":"add_session","session":{"id":5,"world_size":2,"payload":256,"pool_size":256}})",
       R"({"op":"add_session","session":{"id":5,"world_size":2}})",
       R"({"op":"add_session","session":{"id":6,"wrold_size":2}})", R"({"op":"sessions"})",
       R"(not json)", R"({"op":"reboot"})"});
  ASSERT_EQ(replies.size(), 6u);
  EXPECT_EQ(replies[0]["ok"], true);
  EXPECT_EQ(replies[1]["ok"], false);
  EXPECT_THAT(replies[1]["error"].get<std::string>(), HasSubstr("session 5 already exists"));
  EXPECT_THAT(replies[2]["error"].get<std::string>(), HasSubstr("wrold_size: unknown key"));
  EXPECT_EQ(replies[3]["sessions"], nlohmann::json::array({5}));
  EXPECT_THAT(replies[4]["error"].get<std::string>(), HasSubstr("invalid request"));
  EXPECT_THAT(replies[5]["error"].get<std::string>(), HasSubstr("unknown op"));

  Scenario scenario;
  scenario.world = 2;
  scenario.worker_args = {"--session", "5", "--count", "3000"};
  expect_all_succeeded(run_workers(sw.port(), scenario));
  replies = control_requests(control.port(), {R"({"op":"counters"})", R"({"op":"remove_session","id":5})",
                                              R"({"op":"remove_session","id":5})"});
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_GT(replies[0]["counters"]["aggregated"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(replies[1]["ok"], true);
  EXPECT_THAT(replies[2]["error"].get<std::string>(), HasSubstr("unknown session 5"));

  scenario.world = 1;
  scenario.worker_args = {"--session", "5", "--expect-error", "session 5 is unknown"};
  expect_all_succeeded(run_workers(sw.port(), scenario));
}

TEST(Integration, SwitchKilledMidOperationGivesATimeoutError) {
  const std::string switch_path = std::string(DPA_BINARY_DIR) + "/src/tools/dpa-switch";
  const std::string port_file = testing::TempDir() + "/dpa-switch-port-" + std::to_string(getpid());
  std::remove(port_file.c_str());
  dpa::tools::Process sw({switch_path, "--port", "0", "--world-size", "2", "--payload", "256",
                          "--port-file", port_file});
  std::uint16_t port = 0;
  const auto ready_deadline = Clock::now() + std::chrono::seconds(20);
  while (port == 0 && Clock::now() < ready_deadline) {
    std::ifstream(port_file) >> port;
    if (port == 0) sw.wait_until(Clock::now() + std::chrono::milliseconds(20));
  }
  ASSERT_NE(port, 0) << "dpa-switch did not start";
  std::remove(port_file.c_str());

  // Rank 1 straggles for 2 s, so rank 0's operation is in flight when the switch dies.
  std::vector<dpa::tools::Process> workers;
  for (int rank = 0; rank < 2; ++rank) {
    workers.emplace_back(std::vector<std::string>{
        worker_path(), "--port", std::to_string(port), "--rank", std::to_string(rank), "--world",
        "2", "--count", "100000", "--straggler-rank", "1", "--straggler-delay-ms", "2000",
        "--timeout-ms", "1000", "--expect-error", "no reply from the switch"});
  }
  sw.wait_until(Clock::now() + std::chrono::milliseconds(500));
  sw.signal(SIGKILL);
  const auto start = Clock::now();
  const auto codes = dpa::tools::wait_all(workers, Clock::now() + std::chrono::seconds(20));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(6));
  for (const auto& code : codes) {
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 0);
  }
}

}  // namespace
