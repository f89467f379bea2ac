// dpa-bench's inputs and their check (src/tools/bench/inputs.hpp): the exact sum passes; a result
// off by more than the bound, NaN and the injected error do not; fastest-K blocks are checked
// against their contributors only, so a contribution too many is caught.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tools/bench/inputs.hpp"

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
  EXPECT_EQ(bench::count_wrong(floats.data(), kCount, true, 0, keys, kPayload, kAll.data()), 0u);
  // §10.4 with N = 4 (h = 2), e = 0: 4 (2^-30 + 2^-24) + 2^-23 |exact|, about 2.4e-7 + 1.2e-7 |exact|.
  floats[10] += 1e-6f;
  floats[20] = std::numeric_limits<float>::quiet_NaN();
  bench::corrupt(floats.data(), kCount, true);
  EXPECT_EQ(bench::count_wrong(floats.data(), kCount, true, 0, keys, kPayload, kAll.data()), 3u);

  std::vector<std::int32_t> ints = sum_of<std::int32_t>(keys, kAll, 0);
  EXPECT_EQ(bench::count_wrong(ints.data(), kCount, false, 0, keys, kPayload, kAll.data()), 0u);
  ints[999] += 1;
  EXPECT_EQ(bench::count_wrong(ints.data(), kCount, false, 0, keys, kPayload, kAll.data()), 1u);
}

// Fastest-K: block 1 completed without rank 3, block 2 was missed by rank 0 (it must hold rank 0's
// input). The full sum is then wrong in exactly those blocks.
TEST(BenchInputs, FastestKBlocksAreCheckedAgainstTheirContributors) {
  const auto keys = keys_of(5);
  const std::vector<std::uint64_t> bitmaps = {0b1111, 0b0111, 0, 0b1111};
  for (const bool is_float : {true, false}) {
    const auto check = [&](const auto& result) {
      return bench::count_wrong(result.data(), kCount, is_float, 0, keys, kPayload, bitmaps.data());
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

}  // namespace
