// SPDX-License-Identifier: Apache-2.0
// The worker engine's bookkeeping: how an operation is cut into blocks (BlockPlan) and how the
// engine threads' parts come together (Operation).
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/operation.hpp"

namespace dpa::detail {
namespace {

using namespace std::chrono_literals;

// ---- BlockPlan ------------------------------------------------------------------------------

struct PlanCase {
  std::size_t count;
  std::size_t payload;
  std::size_t threads;
  std::size_t window;

  [[nodiscard]] std::string name() const {
    return "count " + std::to_string(count) + ", payload " + std::to_string(payload) + ", threads " +
           std::to_string(threads) + ", window " + std::to_string(window);
  }
};

std::vector<PlanCase> plan_cases() {
  std::vector<PlanCase> cases;
  for (const std::size_t count : {0u, 1u, 63u, 64u, 65u, 255u, 256u, 257u, 1000u, 4096u, 100'003u}) {
    for (const std::size_t payload : {1u, 64u, 256u, 1024u}) {
      for (const std::size_t threads : {1u, 2u, 3u, 4u, 7u, 8u}) {
        for (const std::size_t window : {1u, 2u, 3u, 4u, 8u, 16u}) {
          if (count / payload > 20'000) continue;  // keep the per-block checks quick
          cases.push_back({count, payload, threads, window});
        }
      }
    }
  }
  return cases;
}

TEST(BlockPlan, BlockCountIsTheCeilingOfCountOverPayload) {
  EXPECT_EQ(BlockPlan(0, 256, 0, 1).blocks, 0u);
  EXPECT_EQ(BlockPlan(1, 256, 0, 1).blocks, 1u);
  EXPECT_EQ(BlockPlan(256, 256, 0, 1).blocks, 1u);
  EXPECT_EQ(BlockPlan(257, 256, 0, 1).blocks, 2u);
  EXPECT_EQ(BlockPlan(1000, 1, 0, 1).blocks, 1000u);
  EXPECT_EQ(BlockPlan(1000, 256, 0, 1).payload, 256u);
}

TEST(BlockPlan, ThreadsTakeContiguousRunsThatCoverEveryBlock) {
  for (const PlanCase& c : plan_cases()) {
    SCOPED_TRACE(c.name());
    const std::size_t blocks = (c.count + c.payload - 1) / c.payload;
    std::size_t next = 0;
    std::size_t smallest = blocks;
    std::size_t largest = 0;
    for (std::size_t t = 0; t < c.threads; ++t) {
      const BlockPlan plan(c.count, c.payload, t, c.threads);
      ASSERT_EQ(plan.blocks, blocks);
      ASSERT_EQ(plan.first_block, next) << "thread " << t << " does not start where thread " << t - 1 << " ended";
      next += plan.thread_blocks;
      smallest = std::min(smallest, plan.thread_blocks);
      largest = std::max(largest, plan.thread_blocks);
    }
    EXPECT_EQ(next, blocks) << "the threads' runs must add up to every block";
    EXPECT_LE(largest - smallest, 1u) << "runs differ by more than one block";
  }
}

TEST(BlockPlan, WindowEntriesSplitEachThreadsRunExactlyOnce) {
  for (const PlanCase& c : plan_cases()) {
    SCOPED_TRACE(c.name());
    const BlockPlan whole(c.count, c.payload, 0, 1);
    std::vector<int> times_assigned(whole.blocks, 0);
    for (std::size_t t = 0; t < c.threads; ++t) {
      const BlockPlan plan(c.count, c.payload, t, c.threads);
      std::size_t entry_total = 0;
      for (std::size_t e = 0; e < c.window; ++e) {
        const std::size_t n = plan.entry_blocks(e, c.window);
        entry_total += n;
        for (std::size_t j = 0; j < n; ++j) {
          const std::size_t block = plan.block_of(e, j, c.window);
          ASSERT_GE(block, plan.first_block) << "thread " << t << " entry " << e << " block " << j;
          ASSERT_LT(block, plan.first_block + plan.thread_blocks) << "thread " << t << " entry " << e;
          ++times_assigned[block];
        }
      }
      EXPECT_EQ(entry_total, plan.thread_blocks) << "thread " << t;
    }
    for (std::size_t b = 0; b < whole.blocks; ++b) {
      ASSERT_EQ(times_assigned[b], 1) << "block " << b;
    }
  }
}

TEST(BlockPlan, EntryBlocksAreStridedByTheWindow) {
  const BlockPlan plan(10 * 256, 256, 1, 2);  // 10 blocks; thread 1 owns blocks 5..9
  ASSERT_EQ(plan.first_block, 5u);
  ASSERT_EQ(plan.thread_blocks, 5u);
  constexpr std::size_t kWindow = 2;
  EXPECT_EQ(plan.entry_blocks(0, kWindow), 3u);
  EXPECT_EQ(plan.entry_blocks(1, kWindow), 2u);
  EXPECT_EQ(plan.block_of(0, 0, kWindow), 5u);
  EXPECT_EQ(plan.block_of(0, 1, kWindow), 7u);
  EXPECT_EQ(plan.block_of(0, 2, kWindow), 9u);
  EXPECT_EQ(plan.block_of(1, 0, kWindow), 6u);
  EXPECT_EQ(plan.block_of(1, 1, kWindow), 8u);
}

TEST(BlockPlan, BlocksOfAnEntryAscendAndEntriesInterleave) {
  for (const PlanCase& c : plan_cases()) {
    SCOPED_TRACE(c.name());
    const BlockPlan plan(c.count, c.payload, c.threads - 1, c.threads);
    for (std::size_t e = 0; e < c.window; ++e) {
      const std::size_t n = plan.entry_blocks(e, c.window);
      if (n > 0) {
        EXPECT_EQ(plan.block_of(e, 0, c.window), plan.first_block + e);
      }
      for (std::size_t j = 1; j < n; ++j) {
        ASSERT_EQ(plan.block_of(e, j, c.window), plan.block_of(e, j - 1, c.window) + c.window);
      }
    }
  }
}

TEST(BlockPlan, EntriesBeyondTheThreadsRunCarryNothing) {
  const BlockPlan plan(3, 1, 0, 1);  // 3 blocks
  EXPECT_EQ(plan.entry_blocks(0, 8), 1u);
  EXPECT_EQ(plan.entry_blocks(2, 8), 1u);
  EXPECT_EQ(plan.entry_blocks(3, 8), 0u);
  EXPECT_EQ(plan.entry_blocks(7, 8), 0u);
  // 1 block, 4 threads: the block goes to the last thread, the others carry nothing.
  EXPECT_EQ(BlockPlan(1, 256, 3, 4).thread_blocks, 1u);
  const BlockPlan idle(1, 256, 0, 4);
  EXPECT_EQ(idle.thread_blocks, 0u);
  EXPECT_EQ(idle.entry_blocks(0, 4), 0u);
}

// ---- Operation ------------------------------------------------------------------------------

OpStats part_stats(std::uint64_t blocks, std::uint32_t min_contributors, ElementRange missed) {
  OpStats stats;
  stats.blocks = blocks;
  stats.blocks_full = blocks - 1;
  stats.blocks_partial = 1;
  stats.retransmissions = blocks * 2;
  stats.min_contributors = min_contributors;
  stats.missed = {missed};
  return stats;
}

TEST(Operation, FinishingThreePartsMergesTheirStats) {
  Operation op;
  op.parts_remaining = 3;
  op.submitted = std::chrono::steady_clock::now();

  op.finish_part(part_stats(10, 4, {0, 100}), nullptr);
  EXPECT_FALSE(op.complete());
  op.finish_part(part_stats(20, 2, {300, 400}), nullptr);
  EXPECT_FALSE(op.complete());
  op.finish_part(part_stats(30, 3, {100, 200}), nullptr);
  EXPECT_TRUE(op.complete());
  EXPECT_TRUE(op.wait_for(0ms));

  const OpStats& stats = op.result();
  EXPECT_EQ(stats.blocks, 60u);
  EXPECT_EQ(stats.blocks_full, 57u);
  EXPECT_EQ(stats.blocks_partial, 3u);
  EXPECT_EQ(stats.retransmissions, 120u);
  EXPECT_EQ(stats.min_contributors, 2u);
  EXPECT_EQ(stats.missed, (std::vector<ElementRange>{{0, 200}, {300, 400}}));
  EXPECT_GE(stats.seconds, 0.0);
}

TEST(Operation, ResultRethrowsTheFirstError) {
  Operation op;
  op.parts_remaining = 3;
  op.finish_part(OpStats{}, nullptr);
  op.finish_part(OpStats{}, std::make_exception_ptr(std::runtime_error("first")));
  op.finish_part(OpStats{}, std::make_exception_ptr(std::runtime_error("second")));
  ASSERT_TRUE(op.complete());
  try {
    (void)op.result();
    FAIL() << "result() did not throw";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "first");
  }
}

TEST(Operation, WaitForTimesOutWhileAPartRemains) {
  Operation op;
  op.parts_remaining = 2;
  op.finish_part(OpStats{}, nullptr);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(op.wait_for(20ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
  EXPECT_FALSE(op.complete());
}

TEST(Operation, WaitForWakesWhenTheLastPartFinishesOnAnotherThread) {
  Operation op;
  op.parts_remaining = 3;
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&op] {
      OpStats stats;
      stats.blocks = 1;
      op.finish_part(stats, nullptr);
    });
  }
  EXPECT_TRUE(op.wait_for(10s));
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(op.result().blocks, 3u);
}

}  // namespace
}  // namespace dpa::detail
