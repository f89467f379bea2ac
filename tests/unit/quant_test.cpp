// SPDX-License-Identifier: Apache-2.0
// Block floating point: exponent edge cases, the scalar, AVX2 and AVX-512 kernels' bit-identity,
// the documented round-trip error bound, clamping, the int32 wire order and the sentinels.
// block_float_property_test covers random blocks end to end and the exact cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "protocol/wire.hpp"
#include "quant/quant.hpp"

namespace dpa::quant {
namespace {

using protocol::kExpMin;
using protocol::kExpNonFinite;
using protocol::kExpZero;

constexpr std::byte kCanary{0xa5};
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

float pow2(int k) { return std::ldexp(1.0f, k); }

int ceil_log2(int n) { return static_cast<int>(std::bit_width(static_cast<unsigned>(n - 1))); }

// Computed independently of the library: step down from float(value) until it fits.
std::int32_t largest_float_at_most(std::int32_t value) {
  auto f = static_cast<float>(value);
  while (static_cast<std::int64_t>(f) > value) f = std::nextafter(f, 0.0f);
  return static_cast<std::int32_t>(f);
}

std::vector<std::byte> to_be(const std::vector<std::int32_t>& values) {
  std::vector<std::byte> out(values.size() * 4);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto u = static_cast<std::uint32_t>(values[i]);
    for (std::size_t b = 0; b < 4; ++b) out[4 * i + b] = std::byte(u >> (24 - 8 * b));
  }
  return out;
}

std::vector<std::int32_t> from_be(const std::byte* bytes, std::size_t n) {
  std::vector<std::int32_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u = 0;
    for (std::size_t b = 0; b < 4; ++b) {
      u = (u << 8) | std::to_integer<std::uint32_t>(bytes[4 * i + b]);
    }
    out[i] = static_cast<std::int32_t>(u);
  }
  return out;
}

std::int8_t exponent_of(std::initializer_list<float> values) {
  const std::vector<float> v(values);
  return block_exponent(v.data(), v.size());
}

// A 64-byte aligned byte buffer filled with a canary, so a test can place data at any offset
// and check that a kernel wrote nothing outside its range.
class Buffer {
 public:
  explicit Buffer(std::size_t size) : storage_(size + 128, kCanary) {
    const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
    base_ = storage_.data() + (64 - address % 64);
  }
  std::byte* at(std::size_t offset) { return base_ + offset; }
  template <typename T>
  void place(std::size_t offset, const std::vector<T>& values) {
    if (values.empty()) return;  // also keeps GCC's -Warray-bounds from misfiring on n == 0
    std::copy_n(reinterpret_cast<const std::byte*>(values.data()), values.size() * sizeof(T),
                base_ + offset);
  }
  float* floats_at(std::size_t offset) { return reinterpret_cast<float*>(base_ + offset); }
  std::int32_t* ints_at(std::size_t offset) {
    return reinterpret_cast<std::int32_t*>(base_ + offset);
  }
  // True if every byte outside [offset, offset + length) still holds the canary.
  [[nodiscard]] bool intact_outside(std::size_t offset, std::size_t length) const {
    const auto begin = static_cast<std::size_t>(base_ - storage_.data()) + offset;
    for (std::size_t i = 0; i < storage_.size(); ++i) {
      if ((i < begin || i >= begin + length) && storage_[i] != kCanary) return false;
    }
    return true;
  }

 private:
  std::vector<std::byte> storage_;
  std::byte* base_;
};

// Values of every kind: ordinary magnitudes, +-0, denormals, NaN, +-Inf and raw bit patterns.
std::vector<float> mixed_values(std::mt19937& rng, std::size_t n) {
  std::uniform_int_distribution<int> kind(0, 19);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> shift(-40, 40);
  std::vector<float> out(n);
  for (float& v : out) {
    switch (kind(rng)) {
      case 0: v = -0.0f; break;
      case 1: v = std::bit_cast<float>(bits(rng) & 0x807fffffU); break;  // denormal
      case 2: v = kNaN; break;
      case 3: v = -kInf; break;
      case 4: case 5: v = std::bit_cast<float>(bits(rng)); break;
      default: v = std::ldexp(unit(rng), shift(rng)); break;
    }
  }
  return out;
}

// Runs each test once per available kernel set, selected through the public switch.
class QuantKernelTest : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!select_kernels(GetParam())) GTEST_SKIP() << GetParam() << " kernels unavailable";
    ASSERT_EQ(active_kernels(), GetParam());
  }
  void TearDown() override { select_kernels("auto"); }
};

INSTANTIATE_TEST_SUITE_P(Kernels, QuantKernelTest, testing::Values("scalar", "avx2", "avx512"),
                         [](const auto& p) { return p.param; });

TEST_P(QuantKernelTest, ExponentOfZerosIsZeroSentinel) {
  EXPECT_EQ(block_exponent(nullptr, 0), kExpZero);
  EXPECT_EQ(exponent_of({0.0f}), kExpZero);
  EXPECT_EQ(exponent_of({-0.0f}), kExpZero);
  EXPECT_EQ(block_exponent(std::vector<float>(17, -0.0f).data(), 17), kExpZero);
}

// The exponent is strict (|v| < 2^e): a power of two gets the exponent above its own, like every
// value of its binade, so it scales below the clamp.
TEST_P(QuantKernelTest, ExponentIsStrictAtPowersOfTwo) {
  for (int k = kExpMin - 1; k <= protocol::kExpMax - 1; ++k) {
    const float p = pow2(k);
    EXPECT_EQ(exponent_of({p}), k + 1) << k;
    EXPECT_EQ(exponent_of({0.0f, -p}), k + 1) << k;
    EXPECT_EQ(exponent_of({std::nextafter(p, kInf)}), k + 1) << k;
    EXPECT_EQ(exponent_of({std::nextafter(p, 0.0f)}), std::max(k, kExpMin)) << k;
  }
  EXPECT_EQ(exponent_of({1.0f}), 1);
  EXPECT_EQ(exponent_of({-2.0f, 1.0f}), 2);
  EXPECT_EQ(exponent_of({1.5f, -0.75f}), 1);
  EXPECT_EQ(exponent_of({0.75f}), 0);
  EXPECT_EQ(exponent_of({0.5f}), 0);
  EXPECT_EQ(exponent_of({3.0f}), 2);
}

TEST_P(QuantKernelTest, ExponentOfTinyValuesIsClampedToMin) {
  EXPECT_EQ(exponent_of({std::numeric_limits<float>::denorm_min()}), kExpMin);
  EXPECT_EQ(exponent_of({-std::bit_cast<float>(0x007fffffU)}), kExpMin);  // largest denormal
  EXPECT_EQ(exponent_of({std::numeric_limits<float>::min()}), kExpMin);
  EXPECT_EQ(exponent_of({pow2(-100)}), kExpMin);
  EXPECT_EQ(exponent_of({std::nextafter(pow2(-96), 0.0f)}), kExpMin);
  EXPECT_EQ(exponent_of({pow2(-96)}), kExpMin + 1);
  EXPECT_EQ(exponent_of({std::nextafter(pow2(-96), 1.0f)}), kExpMin + 1);
}

TEST_P(QuantKernelTest, ExponentOfNonFiniteOrHugeIsNonFiniteSentinel) {
  EXPECT_EQ(exponent_of({kNaN}), kExpNonFinite);
  EXPECT_EQ(exponent_of({-kNaN}), kExpNonFinite);
  EXPECT_EQ(exponent_of({kInf}), kExpNonFinite);
  EXPECT_EQ(exponent_of({1.0f, -kInf}), kExpNonFinite);
  EXPECT_EQ(exponent_of({pow2(126)}), kExpNonFinite);
  EXPECT_EQ(exponent_of({-pow2(126)}), kExpNonFinite);
  EXPECT_EQ(exponent_of({std::numeric_limits<float>::max()}), kExpNonFinite);
  EXPECT_EQ(exponent_of({std::nextafter(pow2(126), 0.0f)}), 126);
  EXPECT_EQ(exponent_of({-pow2(125)}), 126);
}

// Every position of every tail length: the SIMD tail handling must see each value.
TEST_P(QuantKernelTest, ExponentSeesEveryPosition) {
  for (std::size_t n = 1; n <= 17; ++n) {
    for (std::size_t pos = 0; pos < n; ++pos) {
      std::vector<float> v(n, 0.25f);
      v[pos] = -3.0f;
      EXPECT_EQ(block_exponent(v.data(), n), 2) << n << " " << pos;
      v[pos] = kNaN;
      EXPECT_EQ(block_exponent(v.data(), n), kExpNonFinite) << n << " " << pos;
      v[pos] = -kInf;
      EXPECT_EQ(block_exponent(v.data(), n), kExpNonFinite) << n << " " << pos;
    }
  }
}

TEST(Quant, ScaleShiftAndContributionLimit) {
  EXPECT_EQ(scale_shift(0, 1), 31);
  EXPECT_EQ(scale_shift(0, 2), 30);
  EXPECT_EQ(scale_shift(0, 3), 29);
  EXPECT_EQ(scale_shift(0, 4), 29);
  EXPECT_EQ(scale_shift(5, 64), 20);
  EXPECT_EQ(scale_shift(-96, 1), 127);
  EXPECT_EQ(scale_shift(126, 64), -101);
  EXPECT_EQ(contribution_limit(1), INT32_MAX);
  EXPECT_EQ(contribution_limit(2), 1073741823);
  EXPECT_EQ(contribution_limit(3), 715827882);
  EXPECT_EQ(contribution_limit(64), 33554431);
}

TEST_P(QuantKernelTest, QuantizeRoundsHalfToEven) {
  // world 1, e = 0: scale 2^31, so v = x * 2^-31 quantises to round(x).
  const std::vector<float> v{0.5f, 1.5f, 2.5f, 3.5f, -0.5f, -1.5f, -2.5f, 2.25f, -2.75f};
  const std::vector<std::int32_t> expected{0, 2, 2, 4, 0, -2, -2, 2, -3};
  std::vector<float> scaled(v.size());
  std::transform(v.begin(), v.end(), scaled.begin(), [](float x) { return x * pow2(-31); });
  std::vector<std::byte> wire(4 * v.size());
  quantize(scaled.data(), scaled.size(), 0, 1, wire.data());
  EXPECT_EQ(from_be(wire.data(), v.size()), expected);
}

// The largest magnitude below 2^e, the float just under it, scales to 2^(31-h) - 2^(7-h) (an
// integer for h <= 7) and is never clamped: N of them fit int32. Only what exceeds the contract
// (2^e itself when N is a power of two, 4 * 2^e, Inf: a straggler's values) saturates at the
// largest float <= L = contribution_limit.
TEST_P(QuantKernelTest, QuantizeClampsOnlyBeyondTheExponent) {
  for (int world : {1, 2, 3, 4, 5, 8, 33, 64}) {
    const int h = ceil_log2(world);
    const auto largest = static_cast<std::int32_t>((std::int64_t{1} << (31 - h)) - (1 << (7 - h)));
    const std::int32_t saturated = largest_float_at_most(contribution_limit(world));
    ASSERT_LE(std::int64_t{largest} * world, INT32_MAX) << world;
    for (int e : {-96, -3, 0, 17, 126}) {
      const float p = pow2(e);
      const float below = std::nextafter(p, 0.0f);
      const std::vector<float> v{below, -below, p, 4 * p, kInf, -kInf};
      std::vector<std::byte> wire(4 * v.size());
      quantize(v.data(), v.size(), static_cast<std::int8_t>(e), world, wire.data());
      const auto q = from_be(wire.data(), v.size());
      EXPECT_EQ(q[0], largest) << world << " " << e;
      EXPECT_EQ(q[1], -largest) << world << " " << e;
      EXPECT_EQ(q[2], std::min<std::int64_t>(std::int64_t{1} << (31 - h), saturated)) << world << " " << e;
      EXPECT_EQ(q[3], saturated);
      EXPECT_EQ(q[4], saturated);
      EXPECT_EQ(q[5], -saturated);
    }
  }
}

// A power of two quantised with its own (strict) exponent loses nothing, in every world.
TEST_P(QuantKernelTest, PowersOfTwoRoundTrip) {
  for (int world : {1, 2, 3, 5, 64}) {
    for (int k : {-97, -96, -1, 0, 40, 125}) {
      const float v = pow2(k);
      const std::int8_t exp = block_exponent(&v, 1);
      std::array<std::byte, 4> wire{};
      float out = 0;
      quantize(&v, 1, exp, world, wire.data());
      dequantize(wire.data(), 1, exp, world, 1, &out);
      EXPECT_EQ(out, v) << world << " " << k;
    }
  }
}

// The documented bound (§10.4): for N contributions quantised with the max exponent e,
// |result - exact| <= A + 2^-23 * (|exact| + A), A = N * 2^(e + ceil_log2(N) - 32).
void check_round_trip_bound(int world, int min_shift, int max_shift, std::uint32_t seed) {
  constexpr std::size_t kValues = 1003;  // not a multiple of 8: exercises the tail
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> shift(min_shift, max_shift);

  std::vector<std::vector<float>> blocks(static_cast<std::size_t>(world));
  int e = kExpZero;
  for (auto& block : blocks) {
    const int block_shift = shift(rng);
    block.resize(kValues);
    for (float& v : block) v = std::ldexp(unit(rng), block_shift);
    e = std::max<int>(e, block_exponent(block.data(), block.size()));
  }
  ASSERT_GE(e, kExpMin);
  const auto exp = static_cast<std::int8_t>(e);

  std::vector<std::int64_t> wide(kValues, 0);
  std::vector<std::uint32_t> wrapping(kValues, 0);  // the switch's int32 adder
  std::vector<std::byte> wire(4 * kValues);
  for (const auto& block : blocks) {
    quantize(block.data(), block.size(), exp, world, wire.data());
    const auto q = from_be(wire.data(), kValues);
    for (std::size_t i = 0; i < kValues; ++i) {
      wide[i] += q[i];
      wrapping[i] += static_cast<std::uint32_t>(q[i]);
    }
  }
  std::vector<std::int32_t> sums(kValues);
  for (std::size_t i = 0; i < kValues; ++i) {
    ASSERT_LE(std::abs(wide[i]), INT32_MAX) << "int32 overflow at " << i;
    sums[i] = static_cast<std::int32_t>(wrapping[i]);
    ASSERT_EQ(sums[i], wide[i]);
  }

  std::vector<float> result(kValues);
  dequantize(to_be(sums).data(), kValues, exp, world, 1, result.data());
  const double absolute = world * std::ldexp(1.0, e + ceil_log2(world) - 32);
  for (std::size_t i = 0; i < kValues; ++i) {
    double exact = 0;
    for (const auto& block : blocks) exact += block[i];
    const double bound = absolute + std::ldexp(1.0, -23) * (std::abs(exact) + absolute);
    ASSERT_LE(std::abs(static_cast<double>(result[i]) - exact), bound)
        << "world " << world << " e " << e << " index " << i;
  }
}

TEST_P(QuantKernelTest, RoundTripWithinDocumentedBound) {
  for (int world : {1, 2, 3, 4, 8, 64}) {
    for (std::uint32_t seed = 1; seed <= 3; ++seed) {
      check_round_trip_bound(world, -4, 4, seed);
      check_round_trip_bound(world, -120, -100, seed);  // exponent clamped to -96
      check_round_trip_bound(world, 118, 125, seed);    // near the largest exponent
    }
  }
}

// float(sum) * 2^-s, then one division: a float32 sum divided as a framework divides it. Power-of-
// two divisors take the multiply-only path and must give the same floats; exponent -96 on one
// rank reaches denormal results.
TEST_P(QuantKernelTest, DequantizeUnscalesThenDivides) {
  const std::vector<std::int32_t> sums{0, 1, -1, 3, 7, 21, INT32_MAX, INT32_MIN, 123456789, -5};
  std::vector<float> out(sums.size());
  for (const auto [exp, world] : {std::pair<std::int8_t, int>{5, 7}, {-96, 1}, {-96, 64}, {100, 64}}) {
    for (std::uint32_t divisor : {1U, 2U, 3U, 4U, 7U, 12U, 63U, 64U}) {
      dequantize(to_be(sums).data(), sums.size(), exp, world, divisor, out.data());
      const float unscale = std::ldexp(1.0f, -scale_shift(exp, world));
      for (std::size_t i = 0; i < sums.size(); ++i) {
        const float expected = static_cast<float>(sums[i]) * unscale / static_cast<float>(divisor);
        EXPECT_EQ(std::bit_cast<std::uint32_t>(out[i]), std::bit_cast<std::uint32_t>(expected))
            << "exp " << int{exp} << " world " << world << " divisor " << divisor << " sum " << sums[i];
      }
    }
  }
}

TEST_P(QuantKernelTest, DequantizeSentinels) {
  const auto garbage = to_be({1, -5, INT32_MAX, 42, 7, 8, 9, 10, 11});
  std::vector<float> out(9, 1.0f);
  dequantize(garbage.data(), out.size(), kExpZero, 4, 1, out.data());
  for (float v : out) EXPECT_EQ(std::bit_cast<std::uint32_t>(v), 0U);  // +0, not -0
  dequantize(garbage.data(), out.size(), kExpNonFinite, 4, 1, out.data());
  for (float v : out) EXPECT_TRUE(std::isnan(v));
}

TEST_P(QuantKernelTest, Int32WireRoundTrip) {
  const std::vector<std::int32_t> values{0,         1,         -1,      0x01020304, INT32_MAX,
                                         INT32_MIN, -123456,   77,      9};
  std::vector<std::byte> wire(4 * values.size());
  int32_to_wire(values.data(), values.size(), wire.data());
  EXPECT_EQ(wire, to_be(values));
  EXPECT_EQ(wire[12], std::byte{0x01});  // most significant byte first
  EXPECT_EQ(wire[15], std::byte{0x04});
  std::vector<std::int32_t> back(values.size());
  int32_from_wire(wire.data(), wire.size() / 4, 1, back.data());
  EXPECT_EQ(back, values);
  int32_from_wire(wire.data(), wire.size() / 4, 0, back.data());  // 0 means no division too
  EXPECT_EQ(back, values);
}

TEST_P(QuantKernelTest, Int32AverageTruncatesTowardsZero) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int32_t> any(INT32_MIN, INT32_MAX);
  std::vector<std::int32_t> values{7, -7, 8, -8, 1, -1, 0, INT32_MAX, INT32_MIN, INT32_MIN + 1};
  for (int i = 0; i < 1000; ++i) values.push_back(any(rng));
  const auto wire = to_be(values);
  std::vector<std::int32_t> out(values.size());
  for (std::uint32_t divisor : {2U, 3U, 4U, 7U, 64U, 1U << 31, UINT32_MAX}) {
    int32_from_wire(wire.data(), values.size(), divisor, out.data());
    for (std::size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(out[i], static_cast<std::int64_t>(values[i]) / static_cast<std::int64_t>(divisor))
          << values[i] << " / " << divisor;
    }
  }
  int32_from_wire(to_be({-7, 7, -5}).data(), 3, 2, out.data());
  EXPECT_EQ(out[0], -3);
  EXPECT_EQ(out[1], 3);
  EXPECT_EQ(out[2], -2);
}

TEST(Quant, SelectKernels) {
  EXPECT_FALSE(select_kernels("bogus"));
  EXPECT_FALSE(select_kernels(""));
  ASSERT_TRUE(select_kernels("scalar"));
  EXPECT_EQ(active_kernels(), "scalar");
  EXPECT_FALSE(select_kernels("bogus"));
  EXPECT_EQ(active_kernels(), "scalar");  // a failed selection changes nothing
  EXPECT_EQ(select_kernels("avx2"), avx2_kernels() != nullptr);
  EXPECT_EQ(select_kernels("avx512"), avx512_kernels() != nullptr);
  ASSERT_TRUE(select_kernels("auto"));
  EXPECT_EQ(active_kernels(), avx512_kernels() != nullptr ? "avx512" : avx2_kernels() != nullptr ? "avx2" : "scalar");
}

// The scalar kernels and a SIMD set (AVX2, AVX-512) called directly on the same inputs, for every
// tail length and for input and output pointers at every alignment, must agree bit for bit and
// write only [0, n).
class KernelIdentityTest : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    simd_ = GetParam() == "avx2" ? avx2_kernels() : avx512_kernels();
    if (simd_ == nullptr) GTEST_SKIP() << "CPU lacks " << GetParam();
  }
  const Kernels& scalar_ = scalar_kernels();
  const Kernels* simd_ = nullptr;  // the set under test
  std::mt19937 rng_{2024};

  static std::vector<std::size_t> sizes() {
    std::vector<std::size_t> out;
    for (std::size_t n = 0; n <= 17; ++n) out.push_back(n);
    for (std::size_t n : {31, 33, 47, 63, 64, 65, 127, 255, 1024, 1027}) out.push_back(n);
    return out;
  }
  // Float offsets (4-byte aligned, as typed arrays are) and byte offsets (any, 40 = payload).
  static constexpr std::size_t kFloatOffsets[] = {0, 4, 8, 12, 16, 20, 24, 28};
  static constexpr std::size_t kByteOffsets[] = {0, 1, 2, 3, 5, 40};
};

TEST_P(KernelIdentityTest, MaxAbs) {
  for (std::size_t n : sizes()) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> values = mixed_values(rng_, n);
      if (trial % 2 == 0) {  // half the trials without NaN/Inf, so the finite max is compared
        for (float& v : values) v = std::isfinite(v) ? v : 1.0f;
      }
      for (std::size_t offset : kFloatOffsets) {
        Buffer in(4 * n);
        in.place(offset, values);
        bool scalar_nf = false;
        bool simd_nf = true;
        const float a = scalar_.max_abs(in.floats_at(offset), n, &scalar_nf);
        const float b = simd_->max_abs(in.floats_at(offset), n, &simd_nf);
        ASSERT_EQ(std::bit_cast<std::uint32_t>(a), std::bit_cast<std::uint32_t>(b)) << n;
        ASSERT_EQ(scalar_nf, simd_nf) << n;
        const bool any_non_finite =
            std::any_of(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
        ASSERT_EQ(scalar_nf, any_non_finite) << n;
      }
    }
  }
}

TEST_P(KernelIdentityTest, Quantize) {
  struct Scale {
    int exp;
    int world;
  };
  const Scale scales[] = {{0, 1}, {-20, 3}, {30, 64}, {-96, 1}, {126, 2}, {7, 5}};
  for (std::size_t n : sizes()) {
    const std::vector<float> values = mixed_values(rng_, n);
    for (const auto [exp, world] : scales) {
      const float scale = pow2(scale_shift(static_cast<std::int8_t>(exp), world));
      const float limit = std::nextafter(static_cast<float>(contribution_limit(world)), 0.0f);
      for (std::size_t in_offset : kFloatOffsets) {
        Buffer in(4 * n);
        in.place(in_offset, values);
        for (std::size_t out_offset : kByteOffsets) {
          Buffer out_scalar(4 * n);
          Buffer out_simd(4 * n);
          scalar_.quantize(in.floats_at(in_offset), n, scale, limit, out_scalar.at(out_offset));
          simd_->quantize(in.floats_at(in_offset), n, scale, limit, out_simd.at(out_offset));
          ASSERT_EQ(std::memcmp(out_scalar.at(out_offset), out_simd.at(out_offset), 4 * n), 0)
              << n << " exp " << exp << " world " << world;
          ASSERT_TRUE(out_simd.intact_outside(out_offset, 4 * n)) << n;
          ASSERT_TRUE(out_scalar.intact_outside(out_offset, 4 * n)) << n;
        }
      }
    }
  }
}

TEST_P(KernelIdentityTest, Dequantize) {
  std::uniform_int_distribution<std::int32_t> any(INT32_MIN, INT32_MAX);
  const float factors[] = {pow2(-31), pow2(-127), pow2(-29) / 3.0f, pow2(100), pow2(-101) / 7.0f};
  for (std::size_t n : sizes()) {
    std::vector<std::int32_t> sums(n);
    for (auto& s : sums) s = any(rng_);
    const auto wire = to_be(sums);
    for (float factor : factors) {
      for (std::size_t in_offset : kByteOffsets) {
        Buffer in(4 * n);
        in.place(in_offset, wire);
        for (std::size_t out_offset : kFloatOffsets) {
          Buffer out_scalar(4 * n);
          Buffer out_simd(4 * n);
          for (float divisor : {1.0f, 3.0f, 7.0f, 63.0f}) {
            scalar_.dequantize(in.at(in_offset), n, factor, divisor, out_scalar.floats_at(out_offset));
            simd_->dequantize(in.at(in_offset), n, factor, divisor, out_simd.floats_at(out_offset));
            ASSERT_EQ(std::memcmp(out_scalar.at(out_offset), out_simd.at(out_offset), 4 * n), 0)
                << n << " factor " << factor << " divisor " << divisor;
          }
          ASSERT_TRUE(out_simd.intact_outside(out_offset, 4 * n)) << n;
        }
      }
    }
  }
}

TEST_P(KernelIdentityTest, Int32Wire) {
  std::uniform_int_distribution<std::int32_t> any(INT32_MIN, INT32_MAX);
  for (std::size_t n : sizes()) {
    std::vector<std::int32_t> values(n);
    for (auto& v : values) v = any(rng_);
    for (std::size_t int_offset : kFloatOffsets) {
      for (std::size_t byte_offset : kByteOffsets) {
        Buffer ints(4 * n);
        ints.place(int_offset, values);
        Buffer wire_scalar(4 * n);
        Buffer wire_simd(4 * n);
        scalar_.to_wire(ints.ints_at(int_offset), n, wire_scalar.at(byte_offset));
        simd_->to_wire(ints.ints_at(int_offset), n, wire_simd.at(byte_offset));
        ASSERT_EQ(std::memcmp(wire_scalar.at(byte_offset), wire_simd.at(byte_offset), 4 * n), 0);
        ASSERT_TRUE(wire_simd.intact_outside(byte_offset, 4 * n)) << n;
        ASSERT_EQ(from_be(wire_simd.at(byte_offset), n), values);

        Buffer back_scalar(4 * n);
        Buffer back_simd(4 * n);
        scalar_.from_wire(wire_simd.at(byte_offset), n, back_scalar.ints_at(int_offset));
        simd_->from_wire(wire_simd.at(byte_offset), n, back_simd.ints_at(int_offset));
        ASSERT_EQ(std::memcmp(back_scalar.at(int_offset), values.data(), 4 * n), 0);
        ASSERT_EQ(std::memcmp(back_simd.at(int_offset), values.data(), 4 * n), 0);
        ASSERT_TRUE(back_simd.intact_outside(int_offset, 4 * n)) << n;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Simd, KernelIdentityTest, testing::Values("avx2", "avx512"),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace dpa::quant
