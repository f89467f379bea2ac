// SPDX-License-Identifier: Apache-2.0
// Block floating point end to end, as the ranks and the switch run it: each rank's exponent, the
// negotiated maximum, quantisation, the switch's wrapping int32 sum, dequantisation for SUM and
// AVG. Random blocks stay within docs/protocol.md §10.4's bound against a float64 sum, values on
// the block's quantum grid come out as the float32 rounding of the exact sum (integers, counts,
// ones, powers of two: exact), and every kernel set gives the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "protocol/wire.hpp"
#include "quant/quant.hpp"

namespace dpa::quant {
namespace {

using protocol::kExpMax;
using protocol::kExpZero;

constexpr int kMaxWorld = 64;  // the contributor bitmap's width

int ceil_log2(int n) { return static_cast<int>(std::bit_width(static_cast<unsigned>(n - 1))); }

// The kernel sets this CPU has, each selected in turn; "auto" again afterwards.
std::vector<std::string> kernel_sets() {
  std::vector<std::string> sets{"scalar"};
  if (avx2_kernels() != nullptr) sets.emplace_back("avx2");
  if (avx512_kernels() != nullptr) sets.emplace_back("avx512");
  return sets;
}

// One block reduced by `world` ranks, `contributors` of them contributing (the first ones; the
// scale is the world's, as under fastest-K).
struct Reduction {
  int world = 1;
  std::vector<std::vector<float>> inputs;  // one per contributor
  int extra_exponent = 0;                  // a non-contributor announced a larger exponent
};

struct Results {
  std::int8_t exponent = kExpZero;
  std::vector<float> sum;
  std::vector<float> average;
};

// What every rank computes: the same int32 sums and the same dequantisation, so one run stands
// for every rank.
Results reduce(const Reduction& r) {
  const std::size_t n = r.inputs.front().size();
  int e = kExpZero;
  for (const auto& input : r.inputs) e = std::max<int>(e, block_exponent(input.data(), n));
  if (e != kExpZero) e = std::min(e + r.extra_exponent, kExpMax);
  Results out{.exponent = static_cast<std::int8_t>(e), .sum = {}, .average = {}};
  std::vector<std::uint32_t> switch_sums(n, 0);  // the switch's wrapping adds
  std::vector<std::byte> wire(4 * n);
  if (e != kExpZero) {
    for (const auto& input : r.inputs) {
      quantize(input.data(), n, out.exponent, r.world, wire.data());
      for (std::size_t i = 0; i < n; ++i) {
        std::uint32_t be = 0;
        std::memcpy(&be, wire.data() + 4 * i, 4);
        switch_sums[i] += __builtin_bswap32(be);
      }
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t be = __builtin_bswap32(switch_sums[i]);
    std::memcpy(wire.data() + 4 * i, &be, 4);
  }
  out.sum.resize(n);
  out.average.resize(n);
  const auto contributors = static_cast<std::uint32_t>(r.inputs.size());
  dequantize(wire.data(), n, out.exponent, r.world, 1, out.sum.data());
  dequantize(wire.data(), n, out.exponent, r.world, contributors, out.average.data());
  return out;
}

// The sums in int64: |sum| <= INT32_MAX, so the switch's wrapping adds never wrapped.
bool fits_int32(const Reduction& r, std::int8_t e) {
  if (e == kExpZero) return true;
  const std::size_t n = r.inputs.front().size();
  std::vector<std::int64_t> wide(n, 0);
  std::vector<std::byte> wire(4 * n);
  for (const auto& input : r.inputs) {
    quantize(input.data(), n, e, r.world, wire.data());
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t be = 0;
      std::memcpy(&be, wire.data() + 4 * i, 4);
      wide[i] += static_cast<std::int32_t>(__builtin_bswap32(be));
    }
  }
  return std::all_of(wide.begin(), wide.end(),
                     [](std::int64_t s) { return s >= INT32_MIN && s <= INT32_MAX; });
}

// Runs `r` with every kernel set: the results must be bit-identical across them.
Results reduce_with_every_kernel_set(const Reduction& r) {
  Results first;
  for (const std::string& set : kernel_sets()) {
    EXPECT_TRUE(select_kernels(set));
    Results results = reduce(r);
    if (set == "scalar") {
      first = std::move(results);
      continue;
    }
    EXPECT_EQ(std::memcmp(first.sum.data(), results.sum.data(), 4 * first.sum.size()), 0) << set;
    EXPECT_EQ(std::memcmp(first.average.data(), results.average.data(), 4 * first.sum.size()), 0)
        << set;
  }
  select_kernels("auto");
  return first;
}

double exact_sum(const Reduction& r, std::size_t i) {
  // Exact on the quantum grid (at most 64 multiples of 2^-s below 2^31 * 2^-s); elsewhere float64's
  // rounding, at most 2^(e-41), stays far below the bound's A >= 2^(e-31).
  double exact = 0;
  for (const auto& input : r.inputs) exact += input[i];
  return exact;
}

// §10.4: |result - exact| <= A + 2^-23 (|exact| + A), A = N 2^(e+h-32); AVG divides both sides
// by the contributor count.
double documented_bound(int world, std::int8_t e, double exact) {
  if (e == kExpZero) return 0.0;
  const double a = world * std::ldexp(1.0, e + ceil_log2(world) - 32);
  return a + std::ldexp(std::abs(exact) + a, -23);
}

// Whether every contribution is a multiple of the block's quantum 2^-s.
bool on_quantum_grid(const Reduction& r, std::int8_t e) {
  const int s = scale_shift(e, r.world);
  for (const auto& input : r.inputs) {
    for (float v : input) {
      const double scaled = std::ldexp(static_cast<double>(v), s);
      if (scaled != std::nearbyint(scaled)) return false;
    }
  }
  return true;
}

// The float32 rounding of the exact sum, and that divided by the contributors in float32:
// what a framework's sum-then-divide gives when it adds without rounding.
void expect_exact(const Reduction& r, const Results& got, const std::string& what) {
  const auto contributors = static_cast<float>(r.inputs.size());
  for (std::size_t i = 0; i < got.sum.size(); ++i) {
    const auto sum = static_cast<float>(exact_sum(r, i));
    ASSERT_EQ(got.sum[i], sum) << what << ", element " << i << ", world " << r.world;
    ASSERT_EQ(got.average[i], sum / contributors)
        << what << ", element " << i << ", world " << r.world;
  }
}

// A value of one of the kinds the property draws from, around 2^shift.
float random_value(std::mt19937& rng, int shift) {
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<std::uint32_t> denormal(1, 0x7fffffU);
  std::uniform_int_distribution<int> small_int(-1000, 1000);
  std::uniform_int_distribution<int> below(0, 30);
  switch (kind(rng)) {
    case 0: return rng() % 2 == 0 ? 0.0f : -0.0f;
    case 1: return std::bit_cast<float>(denormal(rng) | (rng() % 2 == 0 ? 0U : 0x80000000U));
    case 2: return static_cast<float>(small_int(rng));
    case 3: return (rng() % 2 == 0 ? 1.0f : -1.0f) * std::ldexp(1.0f, shift - below(rng));
    default: return std::ldexp(unit(rng), shift);
  }
}

TEST(BlockFloatProperty, RandomBlocksStayWithinTheDocumentedBound) {
  constexpr int kTrials = 4000;
  std::mt19937 rng(47);
  std::uniform_int_distribution<int> world_of(2, kMaxWorld);
  std::uniform_int_distribution<int> length(1, 300);
  std::uniform_int_distribution<int> range(0, 7);
  std::uniform_int_distribution<int> spread(0, 40);
  int on_grid = 0;
  std::size_t values = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    Reduction r;
    r.world = world_of(rng);
    const int contributors =
        rng() % 2 == 0 ? r.world : std::uniform_int_distribution<int>(1, r.world)(rng);
    const auto n = static_cast<std::size_t>(length(rng));
    // Mixed exponents across ranks around a centre: ordinary, near kExpMin (denormals), near
    // the top (sums of 64 stay below fp32's largest), all zeros now and then, or on a grid:
    // integers up to 1000 times 2^k, k within 8 binades, which the block's quantum divides.
    const int kind = range(rng);
    const int centre = kind == 0   ? -110
                       : kind == 1 ? 118
                                   : std::uniform_int_distribution<int>(-40, 40)(rng);
    const int ranks_spread = spread(rng);
    const bool grid = kind == 2 || kind == 3;
    std::uniform_int_distribution<int> grid_int(-1000, 1000);
    std::uniform_int_distribution<int> grid_shift(centre - 8, centre);
    for (int c = 0; c < contributors; ++c) {
      const int shift =
          std::min(centre + std::uniform_int_distribution<int>(-ranks_spread, 0)(rng), 119);
      std::vector<float> input(n);
      for (float& v : input) {
        if (grid) {
          v = std::ldexp(static_cast<float>(grid_int(rng)), grid_shift(rng));
        } else {
          v = kind == 4 && trial % 5 == 0 ? 0.0f : random_value(rng, shift);
        }
      }
      r.inputs.push_back(std::move(input));
    }
    r.extra_exponent = rng() % 4 == 0 ? 1 : 0;
    const Results got = reduce_with_every_kernel_set(r);
    ASSERT_TRUE(fits_int32(r, got.exponent)) << "trial " << trial;
    for (std::size_t i = 0; i < n; ++i) {
      const double exact = exact_sum(r, i);
      const double bound = documented_bound(r.world, got.exponent, exact);
      ASSERT_LE(std::abs(got.sum[i] - exact), bound)
          << "trial " << trial << " world " << r.world << " e " << int{got.exponent} << " element "
          << i;
      ASSERT_LE(std::abs(got.average[i] - exact / contributors), bound / contributors)
          << "trial " << trial << " world " << r.world << " contributors " << contributors
          << " element " << i;
    }
    values += n * static_cast<std::size_t>(contributors);
    if (got.exponent != kExpZero && on_quantum_grid(r, got.exponent)) {
      ++on_grid;
      expect_exact(r, got, "trial " + std::to_string(trial) + " on the quantum grid");
    }
  }
  // The exact branch must have run on the grid trials (a quarter), not a handful.
  EXPECT_GT(on_grid, kTrials / 5) << values << " values";
}

// torch.ones on every world size: SUM is the world size, AVG one, exactly.
TEST(BlockFloatProperty, OnesSumToTheWorldSize) {
  for (int world = 1; world <= kMaxWorld; ++world) {
    Reduction r{.world = world,
                .inputs = std::vector<std::vector<float>>(static_cast<std::size_t>(world),
                                                          std::vector<float>(1000, 1.0f)),
                .extra_exponent = 0};
    const Results got = reduce_with_every_kernel_set(r);
    for (std::size_t i = 0; i < 1000; ++i) {
      ASSERT_EQ(got.sum[i], static_cast<float>(world)) << "world " << world;
      ASSERT_EQ(got.average[i], 1.0f) << "world " << world;
    }
  }
}

// Integer-valued floats (counts) whose block maximum is below 2^(31-h) sum to the float32 rounding
// of the exact sum: exactly when |sum| <= 2^24. AVG is that sum divided in float32: every rank
// contributing the same integer v averages to v for every divisor (with a rounded reciprocal
// 7 * v * float(1/7) != v for a fifth of all v).
TEST(BlockFloatProperty, IntegersSumExactly) {
  std::mt19937 rng(11);
  for (int world = 1; world <= kMaxWorld; ++world) {
    const int h = ceil_log2(world);
    // The largest float below 2^(31-h): every integer up to it rounds to a float no larger.
    const std::int64_t largest = (std::int64_t{1} << (31 - h)) - (std::int64_t{1} << (7 - h));
    for (const std::int64_t limit :
         {std::int64_t{1} << 24 >> h, std::min<std::int64_t>(largest, 1 << 24), largest}) {
      std::uniform_int_distribution<std::int64_t> count(-limit, limit);
      Reduction r{.world = world, .inputs = {}, .extra_exponent = 0};
      for (int c = 0; c < world; ++c) {
        std::vector<float> input(257);
        // Above 2^24 the float rounds the count, and is still an integer.
        for (float& v : input) v = static_cast<float>(count(rng));
        r.inputs.push_back(std::move(input));
      }
      expect_exact(r, reduce_with_every_kernel_set(r), "integers up to " + std::to_string(limit));
    }
    Reduction same{.world = world, .inputs = {}, .extra_exponent = 0};
    std::vector<float> values(1000);
    std::uniform_int_distribution<int> value(-(1 << 24) / world, (1 << 24) / world);
    for (float& v : values) v = static_cast<float>(value(rng));
    same.inputs.assign(static_cast<std::size_t>(world), values);
    const Results got = reduce_with_every_kernel_set(same);
    for (std::size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(got.average[i], values[i]) << "world " << world;
      ASSERT_EQ(got.sum[i], values[i] * static_cast<float>(world)) << "world " << world;
    }
  }
}

// Powers of two within 30 - h binades of the block's largest are on its quantum grid.
TEST(BlockFloatProperty, PowersOfTwoSumExactly) {
  std::mt19937 rng(5);
  for (int world = 1; world <= kMaxWorld; ++world) {
    const int h = ceil_log2(world);
    for (int top : {-90, -20, 0, 1, 24, 90}) {
      std::uniform_int_distribution<int> below(0, 30 - h);
      Reduction r{.world = world, .inputs = {}, .extra_exponent = 0};
      for (int c = 0; c < world; ++c) {
        std::vector<float> input(64);
        for (float& v : input) {
          v = (rng() % 2 == 0 ? 1.0f : -1.0f) * std::ldexp(1.0f, top - below(rng));
        }
        input[static_cast<std::size_t>(c) % input.size()] = std::ldexp(1.0f, top);
        r.inputs.push_back(std::move(input));
      }
      expect_exact(r, reduce_with_every_kernel_set(r),
                   "powers of two below 2^" + std::to_string(top));
    }
  }
}

}  // namespace
}  // namespace dpa::quant
