// SPDX-License-Identifier: Apache-2.0
// reduce_scatter, all_gather and broadcast through real contexts and an embedded switch on
// loopback (docs/protocol.md §13): every shard where it belongs, sums exact for int32 and
// bit-identical to an all-reduce of the same blocks for float32, and what a straggling owner
// gets. The packets themselves (values only to the ranks that take them) are checked by the
// conformance case tests/conformance/cases/owned_rounds.json.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dpa/context.hpp"
#include "dpa/switch.hpp"

namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kPayload = 64;

std::unique_ptr<dpa::SoftwareSwitch> start_switch(int world_size) {
  dpa::SessionConfig session;
  session.world_size = world_size;
  session.payload = kPayload;
  session.pool_size = 1024;
  dpa::SwitchConfig config;
  std::get<dpa::UdpTransportConfig>(config.transport).bind_port = 0;
  config.sessions = {session};
  return std::make_unique<dpa::SoftwareSwitch>(config);
}

// Runs `body(rank, context)` on every rank of a fresh job, each on its own thread.
void run_ranks(const dpa::SoftwareSwitch& sw, int world, int threads,
               const std::function<void(int, dpa::Context&)>& body) {
  std::vector<std::thread> ranks;
  std::vector<std::string> failures(static_cast<std::size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        dpa::Config config;
        config.rank = rank;
        config.world_size = world;
        config.threads = threads;
        config.window = 4;
        config.switches = {{"127.0.0.1", sw.port()}};
        config.transport = dpa::UdpTransportConfig{.bind_host = "127.0.0.1"};
        config.timeout = 20s;
        config.join_timeout = 20s;
        dpa::Context context(config);
        body(rank, context);
      } catch (const std::exception& e) {
        failures[static_cast<std::size_t>(rank)] = e.what();
      }
    });
  }
  for (auto& thread : ranks) thread.join();
  for (int rank = 0; rank < world; ++rank) EXPECT_EQ(failures[static_cast<std::size_t>(rank)], "") << "rank " << rank;
}

// Rank r's value at element i: distinct per rank and element, small enough to sum exactly.
std::int32_t value_of(int rank, std::size_t i) { return static_cast<std::int32_t>(1000 * (rank + 1) + i % 977); }

struct Shape {
  int world;
  int threads;
  std::size_t shard;
};
std::string name(const Shape& s) {
  return std::to_string(s.world) + " ranks, " + std::to_string(s.threads) + " threads, shard " + std::to_string(s.shard);
}
const std::vector<Shape> kShapes = {{2, 1, 1}, {3, 1, 63}, {3, 2, 64}, {3, 2, 65}, {4, 3, 1000}, {2, 2, 4 * kPayload * 9 + 5}};

TEST(ShardedCollectives, ReduceScatterDeliversEachRankItsShardOfTheSum) {
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(name(shape));
    const auto sw = start_switch(shape.world);
    run_ranks(*sw, shape.world, shape.threads, [&](int rank, dpa::Context& context) {
      const std::size_t total = shape.shard * static_cast<std::size_t>(shape.world);
      std::vector<std::int32_t> in(total);
      for (std::size_t i = 0; i < total; ++i) in[i] = value_of(rank, i);
      std::vector<std::int32_t> out(shape.shard, -1);
      const dpa::OpStats stats = context.reduce_scatter(in.data(), out.data(), shape.shard, dpa::DataType::int32);
      for (std::size_t i = 0; i < shape.shard; ++i) {
        const std::size_t at = static_cast<std::size_t>(rank) * shape.shard + i;
        std::int32_t expected = 0;
        for (int r = 0; r < shape.world; ++r) expected += value_of(r, at);
        ASSERT_EQ(out[i], expected) << "rank " << rank << ", element " << i;
      }
      EXPECT_EQ(stats.blocks_missed, 0u);
      // AVG: the sum divided by the contributors, as all-reduce's.
      std::vector<std::int32_t> average(shape.shard);
      dpa::AllreduceOptions options;
      options.op = dpa::ReduceOp::avg;
      context.reduce_scatter(in.data(), average.data(), shape.shard, dpa::DataType::int32, options);
      for (std::size_t i = 0; i < shape.shard; ++i) ASSERT_EQ(average[i], out[i] / shape.world);
    });
  }
}

TEST(ShardedCollectives, AllGatherAndBroadcastMoveEveryWordUnchanged) {
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(name(shape));
    const auto sw = start_switch(shape.world);
    run_ranks(*sw, shape.world, shape.threads, [&](int rank, dpa::Context& context) {
      // Random bit patterns: NaN payloads, denormals and bfloat16 pairs must cross unchanged.
      std::mt19937 bits(static_cast<std::uint32_t>(rank));
      std::vector<std::uint32_t> mine(shape.shard);
      for (auto& word : mine) word = bits();
      std::vector<std::uint32_t> gathered(shape.shard * static_cast<std::size_t>(shape.world), 0);
      context.all_gather(mine.data(), gathered.data(), shape.shard);
      for (int r = 0; r < shape.world; ++r) {
        std::mt19937 theirs(static_cast<std::uint32_t>(r));
        for (std::size_t i = 0; i < shape.shard; ++i) {
          ASSERT_EQ(gathered[static_cast<std::size_t>(r) * shape.shard + i], theirs()) << "shard " << r << ", word " << i;
        }
      }
      for (int root = 0; root < shape.world; ++root) {
        std::vector<std::uint32_t> buffer(shape.shard, static_cast<std::uint32_t>(rank));
        if (rank == root) buffer = mine;
        context.broadcast(buffer.data(), buffer.size(), root);
        std::mt19937 roots(static_cast<std::uint32_t>(root));
        for (std::size_t i = 0; i < shape.shard; ++i) ASSERT_EQ(buffer[i], roots()) << "root " << root << ", word " << i;
      }
    });
  }
}

TEST(ShardedCollectives, AFloatReduceScatterIsBitIdenticalToTheAllreducesShard) {
  const int world = 3;
  const std::size_t shard = 4 * kPayload;  // a multiple of P: the blocks are the all-reduce's
  const auto sw = start_switch(world);
  run_ranks(*sw, world, 2, [&](int rank, dpa::Context& context) {
    std::mt19937 random(static_cast<std::uint32_t>(7 + rank));
    std::normal_distribution<float> normal(0.0F, 3.0F);
    std::vector<float> in(shard * world);
    for (float& v : in) v = normal(random);
    std::vector<float> reduced(in.size());
    context.allreduce(in.data(), reduced.data(), in.size(), dpa::DataType::float32);
    std::vector<float> mine(shard);
    context.reduce_scatter(in.data(), mine.data(), shard, dpa::DataType::float32);
    EXPECT_EQ(std::memcmp(mine.data(), reduced.data() + static_cast<std::size_t>(rank) * shard, shard * sizeof(float)), 0)
        << "rank " << rank << ": the shard differs from the all-reduce's";
  });
}

TEST(ShardedCollectives, AStragglingOwnerReceivesTheFastestRanksSumOfItsShard) {
  const int world = 3;
  const std::size_t shard = 2 * kPayload;  // 6 blocks: one round per slot with a window of 4, 2 threads
  const auto sw = start_switch(world);
  std::vector<std::vector<std::int32_t>> results(world);
  std::vector<dpa::OpStats> stats(world);
  std::mutex mutex;
  std::condition_variable fast_done;
  int finished = 0;
  run_ranks(*sw, world, 2, [&](int rank, dpa::Context& context) {
    std::vector<std::int32_t> in(shard * world);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = value_of(rank, i);
    results[rank].assign(shard, -1);
    dpa::AllreduceOptions options;
    options.k = 2;
    options.preemptive = true;  // every round completes at the first two contributions
    if (rank == 2) {
      // The owner of shard 2 straggles: it starts once ranks 0 and 1 are done.
      std::unique_lock lock(mutex);
      ASSERT_TRUE(fast_done.wait_for(lock, 30s, [&] { return finished == 2; }));
    }
    stats[rank] = context.reduce_scatter(in.data(), results[rank].data(), shard, dpa::DataType::int32, options);
    std::lock_guard lock(mutex);
    ++finished;
    fast_done.notify_all();
  });
  for (int rank = 0; rank < world; ++rank) {
    for (std::size_t i = 0; i < shard; ++i) {
      const std::size_t at = static_cast<std::size_t>(rank) * shard + i;
      ASSERT_EQ(results[rank][i], value_of(0, at) + value_of(1, at))
          << "rank " << rank << ", element " << i << ": every block holds ranks 0 and 1 only";
    }
  }
  EXPECT_EQ(stats[2].contributed, 0u) << "the straggler's values reached no block";
  EXPECT_EQ(stats[2].blocks_missed, 0u) << "the owner still received every block of its shard";
  EXPECT_GT(stats[2].blocks_partial, 0u);
}

TEST(ShardedCollectives, BadArgumentsNameTheProblem) {
  const auto sw = start_switch(2);
  run_ranks(*sw, 2, 1, [&](int, dpa::Context& context) {
    std::vector<std::int32_t> buffer(8);
    EXPECT_THROW(context.broadcast(buffer.data(), buffer.size(), 2), dpa::ConfigError);
    dpa::AllreduceOptions too_many;
    too_many.k = 3;
    EXPECT_THROW(context.reduce_scatter(buffer.data(), buffer.data(), 4, dpa::DataType::int32, too_many),
                 dpa::ConfigError);
    EXPECT_THROW(context.reduce_scatter(nullptr, buffer.data(), 4, dpa::DataType::int32), dpa::ConfigError);
    // A failed submission takes no op id: the job goes on.
    context.broadcast(buffer.data(), buffer.size(), 0);
  });
}

}  // namespace
