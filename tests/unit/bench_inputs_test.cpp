// SPDX-License-Identifier: Apache-2.0
// dpa-bench's inputs and their check (src/tools/bench/inputs.hpp): the exact sum passes; a result
// off by more than the bound, NaN and the injected error do not; fastest-K blocks are checked
// against their contributors only, so a contribution too many is caught; under K = N a block
// without every rank is wrong whatever its bitmap claims. And the report's split of the
// latency view.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tools/bench/inputs.hpp"
#include "tools/bench/report.hpp"

namespace {

namespace bench = dpa::tools::bench;

constexpr std::size_t kCount = 1000;
constexpr std::uint32_t kPayload = 256;  // 4 blocks, the last one short
constexpr int kWorld = 4;

std::vector<std::uint64_t> keys_of(std::size_t operation) {
  std::vector<std::uint64_t> keys;
  for (int rank = 0; rank < kWorld; ++rank)
    keys.push_back(bench::input_key(1, 0, bench::View::latency, operation, rank));
  return keys;
}

template <typename T>
std::vector<T> input(std::uint64_t key) {
  std::vector<T> values(kCount);
  bench::fill_input(values.data(), kCount, std::is_same_v<T, float>, key);
  return values;
}

// The sum of the ranks in each block's bitmap (a missed block, bitmap 0: `rank`'s own input),
// rounded to T once.
template <typename T>
std::vector<T> sum_of(const std::vector<std::uint64_t>& keys, const std::vector<std::uint64_t>& bitmaps, int rank) {
  std::vector<double> exact(kCount, 0.0);
  for (int r = 0; r < kWorld; ++r) {
    const std::vector<T> values = input<T>(keys[static_cast<std::size_t>(r)]);
    for (std::size_t i = 0; i < kCount; ++i) {
      const std::uint64_t bitmap = bitmaps[i / kPayload];
      if (bitmap == 0 ? r == rank : ((bitmap >> r) & 1) != 0) exact[i] += static_cast<double>(values[i]);
    }
  }
  return std::vector<T>(exact.begin(), exact.end());
}

const std::vector<std::uint64_t> kAll(4, 0b1111);

TEST(BenchInputs, InputsAreReproducibleDistinctAndOnTheirGrid) {
  const std::vector<float> floats = input<float>(bench::input_key(1, 0, bench::View::warmup, 0, 0));
  EXPECT_EQ(floats, input<float>(bench::input_key(1, 0, bench::View::warmup, 0, 0)));
  EXPECT_NE(floats, input<float>(bench::input_key(1, 0, bench::View::warmup, 0, 1)));
  EXPECT_NE(floats, input<float>(bench::input_key(1, 0, bench::View::warmup, 1, 0)));
  EXPECT_NE(floats, input<float>(bench::input_key(2, 0, bench::View::warmup, 0, 0)));
  for (const float value : floats) {
    EXPECT_GE(value, -1.0f);
    EXPECT_LT(value, 1.0f);
    EXPECT_EQ(std::ldexp(value, 23), std::round(std::ldexp(value, 23)));
  }
  for (const std::int32_t value : input<std::int32_t>(bench::input_key(1, 0, bench::View::warmup, 0, 0))) {
    EXPECT_GE(value, -(1 << 19));
    EXPECT_LT(value, 1 << 19);
  }
}

TEST(BenchInputs, ExactSumsPassAndWrongOnesAreCounted) {
  const auto keys = keys_of(3);
  std::vector<float> floats = sum_of<float>(keys, kAll, 0);
  EXPECT_EQ(bench::count_wrong(floats.data(), kCount, true, 0, keys, kPayload, kAll.data(), 0), 0u);
  // §10.4 with N = 4 (h = 2), e = 0: 4 (2^-30 + 2^-24) + 2^-23 |exact|, about 2.4e-7 + 1.2e-7 |exact|.
  floats[10] += 1e-6f;
  floats[20] = std::numeric_limits<float>::quiet_NaN();
  bench::corrupt(floats.data(), kCount, true);
  EXPECT_EQ(bench::count_wrong(floats.data(), kCount, true, 0, keys, kPayload, kAll.data(), 0), 3u);

  std::vector<std::int32_t> ints = sum_of<std::int32_t>(keys, kAll, 0);
  EXPECT_EQ(bench::count_wrong(ints.data(), kCount, false, 0, keys, kPayload, kAll.data(), 0), 0u);
  ints[999] += 1;
  EXPECT_EQ(bench::count_wrong(ints.data(), kCount, false, 0, keys, kPayload, kAll.data(), 0), 1u);
}

// Fastest-K: block 1 completed without rank 3, block 2 was missed by rank 0 (it must hold rank 0's
// input). The full sum is then wrong in exactly those blocks.
TEST(BenchInputs, FastestKBlocksAreCheckedAgainstTheirContributors) {
  const auto keys = keys_of(5);
  const std::vector<std::uint64_t> bitmaps = {0b1111, 0b0111, 0, 0b1111};
  for (const bool is_float : {true, false}) {
    const auto check = [&](const auto& result) {
      return bench::count_wrong(result.data(), kCount, is_float, 0, keys, kPayload, bitmaps.data(), 0);
    };
    if (is_float) {
      EXPECT_EQ(check(sum_of<float>(keys, bitmaps, 0)), 0u);
      EXPECT_EQ(check(sum_of<float>(keys, kAll, 0)), 2 * kPayload);
    } else {
      EXPECT_EQ(check(sum_of<std::int32_t>(keys, bitmaps, 0)), 0u);
      EXPECT_EQ(check(sum_of<std::int32_t>(keys, kAll, 0)), 2 * kPayload);
    }
  }
}

// K = N: the library reports block 2 complete with ranks 0-2 only and hands back their sum. By
// its own bitmap the block is right; against K = N it is wrong in every element, and the blocks
// that hold every rank stay right.
TEST(BenchInputs, FullModeCountsABlockWithoutEveryRankAsWrong) {
  const auto keys = keys_of(7);
  const std::vector<std::uint64_t> bitmaps = {0b1111, 0b1111, 0b0111, 0b1111};
  const std::uint64_t every_rank = bench::all_ranks(kWorld);
  ASSERT_EQ(every_rank, 0b1111u);
  const std::vector<float> floats = sum_of<float>(keys, bitmaps, 0);
  EXPECT_EQ(bench::count_wrong(floats.data(), kCount, true, 0, keys, kPayload, bitmaps.data(), 0), 0u);
  EXPECT_EQ(bench::count_wrong(floats.data(), kCount, true, 0, keys, kPayload, bitmaps.data(), every_rank), kPayload);
  const std::vector<std::int32_t> ints = sum_of<std::int32_t>(keys, bitmaps, 0);
  EXPECT_EQ(bench::count_wrong(ints.data(), kCount, false, 0, keys, kPayload, bitmaps.data(), every_rank), kPayload);
  const std::vector<float> full = sum_of<float>(keys, kAll, 0);
  EXPECT_EQ(bench::count_wrong(full.data(), kCount, true, 0, keys, kPayload, kAll.data(), every_rank), 0u);
  EXPECT_EQ(bench::all_ranks(64), ~std::uint64_t{0});
}

}  // namespace

// The report's split of the latency view (src/tools/bench/report.hpp): from known timestamps of
// ranks on one kernel, and nothing where the kernels differ.
namespace {

nlohmann::json rank_line(int rank, const std::string& boot, std::vector<double> starts, std::vector<double> ends) {
  return {{"rank", rank},           {"mode", "full"},      {"threads", 1},         {"window", 8},
          {"bytes", 4096},          {"payload", 1024},     {"elements", 1024},     {"iterations", starts.size()},
          {"warmup", 0},            {"back_to_back_s", 1.0},
          {"latency_start_us", starts}, {"latency_end_us", ends}, {"boot_id", boot},
          {"retransmissions", 0},   {"blocks", 0},         {"partial", 0},         {"missed", 0},
          {"tx_packets", 0},        {"tx_bursts", 0},      {"wrong", 0},           {"checked", 0}};
}

}  // namespace

TEST(BenchReport, LatencyIsSplitIntoBarrierSkewAndTheRest) {
  // Operation 0: rank 1 starts 30 us after rank 0, the last result 50 us after that; operation 1:
  // 10 and 20 us.
  const std::vector<nlohmann::json> lines = {rank_line(0, "boot-a", {100, 1000}, {180, 1030}),
                                             rank_line(1, "boot-a", {130, 1010}, {170, 1025})};
  const nlohmann::json row = bench::result_row(lines, 2, "float32", -1);
  EXPECT_DOUBLE_EQ(row["p99_us"].get<double>(), 80.0);  // rank 0's 80 us: the barrier released it first
  EXPECT_DOUBLE_EQ(row["barrier_skew_us"]["p50_us"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(row["barrier_skew_us"]["p99_us"].get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(row["after_last_start_us"]["p50_us"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(row["after_last_start_us"]["p99_us"].get<double>(), 50.0);
  EXPECT_FALSE(row["dpa"]["ranks"][0].contains("latency_start_us"));
}

TEST(BenchReport, NoSplitAcrossKernels) {
  const std::vector<nlohmann::json> lines = {rank_line(0, "boot-a", {100}, {180}), rank_line(1, "boot-b", {130}, {170})};
  const nlohmann::json row = bench::result_row(lines, 2, "float32", -1);
  EXPECT_TRUE(row["barrier_skew_us"].is_null());
  EXPECT_TRUE(row["after_last_start_us"].is_null());
  EXPECT_DOUBLE_EQ(row["p50_us"].get<double>(), 80.0);
  // A straggler left out leaves one measured rank: nothing to split.
  EXPECT_TRUE(bench::result_row({rank_line(0, "a", {1}, {2}), rank_line(1, "a", {1}, {3})}, 2, "float32", 1)
                  ["barrier_skew_us"].is_null());
}
