// SPDX-License-Identifier: Apache-2.0
// The CUDA block floating point kernels against the host ones, bit for bit: exponents and
// widened values (quant::block_exponent), and the finished floats (quant::dequantize, then
// torch's CPU rounding to float16/bfloat16). Built only with CUDA; skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dpa/block_float.hpp"
#include "quant/cuda/block_float_cuda.hpp"
#include "quant/quant.hpp"

namespace dpa::quant::cuda {
namespace {

using block_float::kExpMax;
using block_float::kExpMin;
using block_float::kExpNonFinite;
using block_float::kExpZero;
using block_float::WireBlock;

void check(cudaError_t status, const char* what) {
  ASSERT_EQ(status, cudaSuccess) << what << ": " << cudaGetErrorString(status);
}

// Device memory holding a copy of a host vector.
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& host) : size_(host.size()) {
    check(cudaMalloc(&data_, std::max<std::size_t>(bytes(), 1)), "cudaMalloc");
    check(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice), "copy to device");
  }
  ~DeviceVector() { cudaFree(data_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;

  [[nodiscard]] T* get() const { return static_cast<T*>(data_); }
  [[nodiscard]] std::vector<T> to_host() const {
    check(cudaDeviceSynchronize(), "kernel");
    std::vector<T> host(size_);
    check(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost), "copy to host");
    return host;
  }

 private:
  [[nodiscard]] std::size_t bytes() const { return size_ * sizeof(T); }
  void* data_ = nullptr;
  std::size_t size_;
};

class QuantCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      GTEST_SKIP() << "no CUDA device: the GPU kernels are compared with the host ones only "
                      "where one is present";
    }
  }
};

// --- host references for the 16-bit types, as torch's CPU conversions compute them ----------

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
  const int exponent = (h >> 10) & 0x1f;
  const std::uint32_t mantissa = h & 0x3ffU;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000U | (mantissa << 13));
  if (exponent == 0) {  // zero or denormal: mantissa * 2^-24, exact in float
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | static_cast<std::uint32_t>(exponent + 112) << 23 |
                              (mantissa << 13));
}

// c10::detail::fp16_ieee_from_fp32_value: round to nearest even, NaN -> 0x7e00.
std::uint16_t float_to_half(float f) {
  const float scale_to_inf = std::bit_cast<float>(0x77800000U);   // 2^112
  const float scale_to_zero = std::bit_cast<float>(0x08800000U);  // 2^-110
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const std::uint32_t w = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t shl1_w = w + w;
  const std::uint32_t sign = w & 0x80000000U;
  std::uint32_t bias = shl1_w & 0xff000000U;
  if (bias < 0x71000000U) bias = 0x71000000U;
  base = std::bit_cast<float>((bias >> 1) + 0x07800000U) + base;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(base);
  const std::uint32_t nonsign = ((bits >> 13) & 0x7c00U) + (bits & 0x0fffU);
  return static_cast<std::uint16_t>((sign >> 16) | (shl1_w > 0xff000000U ? 0x7e00U : nonsign));
}

float bf16_to_float(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

// c10::detail::round_to_nearest_even.
std::uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  return static_cast<std::uint16_t>((bits + 0x7fffU + ((bits >> 16) & 1U)) >> 16);
}

// --- inputs --------------------------------------------------------------------------------

// Blocks of one kind each: random magnitudes around 2^k (k over the whole float range), all
// zeros (either sign), denormals, a NaN or an infinity among ordinary values, and values at and
// beyond 2^kExpMax; the last block may be short.
std::vector<float> float_input(std::size_t n, std::size_t payload, std::mt19937& rng) {
  std::vector<float> values(n);
  std::uniform_int_distribution<int> kind(0, 7);
  std::uniform_int_distribution<int> scale(-150, 130);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<std::uint32_t> denormal(1, 0x7fffffU);
  for (std::size_t begin = 0; begin < n; begin += payload) {
    const std::size_t end = std::min(n, begin + payload);
    const int k = kind(rng);
    const int e = scale(rng);
    for (std::size_t i = begin; i < end; ++i) {
      switch (k) {
        case 0: values[i] = i % 2 == 0 ? 0.0f : -0.0f; break;
        case 1: values[i] = std::bit_cast<float>(denormal(rng) | (i % 2 == 0 ? 0U : 0x80000000U)); break;
        default: values[i] = std::ldexp(unit(rng), e); break;
      }
    }
    const std::size_t special = begin + (end - begin) / 2;
    if (k == 2) values[special] = std::numeric_limits<float>::quiet_NaN();
    if (k == 3) values[special] = -std::numeric_limits<float>::infinity();
    if (k == 4) values[special] = std::ldexp(1.0f, kExpMax);  // the first out-of-range magnitude
    if (k == 5) values[special] = -std::nextafter(std::ldexp(1.0f, kExpMax), 0.0f);
    if (k == 6) values[special] = std::ldexp(1.0f, e);  // a power of two as the maximum (strict)
  }
  return values;
}

// Random 16-bit patterns: every class (zeros, denormals, normals, Inf, NaN) turns up.
std::vector<std::uint16_t> bits16_input(std::size_t n, std::mt19937& rng, int zero_blocks_every,
                                        std::size_t payload) {
  std::vector<std::uint16_t> values(n);
  std::uniform_int_distribution<unsigned> bits(0, 0xffff);
  std::uniform_int_distribution<unsigned> small(0, 0x43ff);  // no Inf/NaN in most blocks
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t block = i / payload;
    if (static_cast<int>(block % static_cast<std::size_t>(zero_blocks_every)) == 0) {
      values[i] = static_cast<std::uint16_t>(i % 2 == 0 ? 0 : 0x8000);
    } else {
      values[i] = static_cast<std::uint16_t>(block % 3 == 0 ? bits(rng) : small(rng) | (i % 2) << 15);
    }
  }
  return values;
}

std::vector<std::int8_t> host_exponents(const std::vector<float>& values, std::size_t payload) {
  std::vector<std::int8_t> exponents;
  for (std::size_t begin = 0; begin < values.size(); begin += payload) {
    exponents.push_back(
        block_exponent(values.data() + begin, std::min(payload, values.size() - begin)));
  }
  return exponents;
}

constexpr std::size_t kPayloads[] = {1, 31, 256, 1000, 2048, 16000};
constexpr std::size_t kLengths[] = {1, 30, 257, 4096, 40001};

TEST_F(QuantCuda, ExponentsOfFloat32MatchTheHost) {
  std::mt19937 rng(1);
  for (const std::size_t payload : kPayloads) {
    for (const std::size_t n : kLengths) {
      const std::vector<float> values = float_input(n, payload, rng);
      const std::vector<std::int8_t> expected = host_exponents(values, payload);
      const DeviceVector<float> in(values);
      const DeviceVector<std::int8_t> exponents(std::vector<std::int8_t>(expected.size(), 0));
      prepare_blocks(in.get(), Element::float32, n, payload, nullptr, exponents.get(), nullptr);
      EXPECT_EQ(exponents.to_host(), expected) << "payload " << payload << ", n " << n;
    }
  }
}

void check_16bit(Element type, float (*widen)(std::uint16_t)) {
  std::mt19937 rng(2);
  for (const std::size_t payload : kPayloads) {
    for (const std::size_t n : kLengths) {
      const std::vector<std::uint16_t> bits = bits16_input(n, rng, 5, payload);
      std::vector<float> widened(n);
      std::transform(bits.begin(), bits.end(), widened.begin(), widen);
      const std::vector<std::int8_t> expected = host_exponents(widened, payload);
      const DeviceVector<std::uint16_t> in(bits);
      const DeviceVector<float> out(std::vector<float>(n, 0.0f));
      const DeviceVector<std::int8_t> exponents(std::vector<std::int8_t>(expected.size(), 0));
      prepare_blocks(in.get(), type, n, payload, out.get(), exponents.get(), nullptr);
      EXPECT_EQ(exponents.to_host(), expected) << "payload " << payload << ", n " << n;
      // NaN payloads aside (a block with a NaN travels as non-finite, its values unused).
      const std::vector<float> device_widened = out.to_host();
      for (std::size_t i = 0; i < n; ++i) {
        if (std::isnan(widened[i])) {
          ASSERT_TRUE(std::isnan(device_widened[i])) << "element " << i;
        } else {
          ASSERT_EQ(std::bit_cast<std::uint32_t>(device_widened[i]),
                    std::bit_cast<std::uint32_t>(widened[i]))
              << "element " << i << " (bits " << bits[i] << "), payload " << payload;
        }
      }
    }
  }
}

TEST_F(QuantCuda, Float16IsWidenedAndItsExponentsMatchTheHost) {
  check_16bit(Element::float16, half_to_float);
}

TEST_F(QuantCuda, BFloat16IsWidenedAndItsExponentsMatchTheHost) {
  check_16bit(Element::bfloat16, bf16_to_float);
}

// --- finishing -------------------------------------------------------------------------------

struct WireCase {
  std::vector<std::byte> wire;     // big-endian sums
  std::vector<WireBlock> blocks;
  std::vector<float> expected;     // quant::dequantize; NaN where the block is missed
};

// Sums anywhere in int32 (their extremes included), every exponent class, divisors 1..64 (powers
// of two take the multiply-only path, the others a division) and missed blocks.
WireCase wire_case(std::size_t n, std::size_t payload, int world, std::mt19937& rng) {
  WireCase c;
  c.wire.resize(4 * n);
  std::uniform_int_distribution<std::int32_t> sum(INT32_MIN, INT32_MAX);
  std::uniform_int_distribution<int> exponent(kExpMin - 2, kExpMax + 1);
  std::uniform_int_distribution<std::uint32_t> divisor(0, 64);
  for (std::size_t i = 0; i < n; ++i) {
    std::int32_t v = sum(rng);
    if (i % 97 == 0) v = INT32_MAX;
    if (i % 89 == 0) v = INT32_MIN;
    if (i % 7 == 0) v >>= (i % 31);  // small sums too
    const auto u = __builtin_bswap32(static_cast<std::uint32_t>(v));
    std::memcpy(c.wire.data() + 4 * i, &u, 4);
  }
  c.expected.assign(n, std::numeric_limits<float>::quiet_NaN());
  for (std::size_t begin = 0; begin < n; begin += payload) {
    const int e = exponent(rng);
    WireBlock block{.divisor = divisor(rng),
                    .exponent = static_cast<std::int8_t>(e < kExpMin   ? kExpZero
                                                         : e > kExpMax ? kExpNonFinite
                                                                       : e)};
    c.blocks.push_back(block);
    if (block.divisor == 0) continue;
    dequantize(c.wire.data() + 4 * begin, std::min(payload, n - begin), block.exponent, world,
               block.divisor, c.expected.data() + begin);
  }
  return c;
}

TEST_F(QuantCuda, Float32ResultsMatchDequantizeInPlace) {
  std::mt19937 rng(3);
  for (int world = 1; world <= 16; ++world) {
    for (const std::size_t payload : {std::size_t{1}, std::size_t{256}, std::size_t{2048}}) {
      const std::size_t n = 3 * payload + payload / 2 + 1;
      const WireCase c = wire_case(n, payload, world, rng);
      // In place, as the torch backend runs it: a missed block holds this rank's own floats.
      std::vector<std::byte> initial = c.wire;
      for (std::size_t begin = 0; begin < n; begin += payload) {
        if (c.blocks[begin / payload].divisor != 0) continue;
        for (std::size_t i = begin; i < std::min(n, begin + payload); ++i) {
          const float own = 1.5f + static_cast<float>(i);
          std::memcpy(initial.data() + 4 * i, &own, 4);
        }
      }
      std::vector<float> expected = c.expected;
      for (std::size_t i = 0; i < n; ++i) {
        if (c.blocks[i / payload].divisor == 0) std::memcpy(&expected[i], initial.data() + 4 * i, 4);
      }
      const DeviceVector<std::byte> data(initial);
      const DeviceVector<WireBlock> blocks(c.blocks);
      finish_blocks(data.get(), blocks.get(), n, payload, world, data.get(), Element::float32,
                    nullptr);
      const std::vector<std::byte> out = data.to_host();
      ASSERT_EQ(std::memcmp(out.data(), expected.data(), 4 * n), 0)
          << "world " << world << ", payload " << payload;
    }
  }
}

// Every exponent with every world size: the block factor reaches from 2^103 down to the
// denormal 2^-127, divided by every divisor up to 64.
TEST_F(QuantCuda, EveryExponentWorldAndDivisorMatchesDequantize) {
  constexpr std::size_t kPayload = 64;
  std::vector<std::byte> wire;
  std::vector<WireBlock> blocks;
  std::vector<float> expected;
  std::mt19937 rng(4);
  std::uniform_int_distribution<std::int32_t> sum(INT32_MIN, INT32_MAX);
  for (int world = 1; world <= 16; ++world) {
    wire.clear();
    blocks.clear();
    for (int e = kExpMin; e <= kExpMax; ++e) {
      blocks.push_back({.divisor = static_cast<std::uint32_t>(1 + (e - kExpMin) % 64),
                        .exponent = static_cast<std::int8_t>(e)});
      for (std::size_t i = 0; i < kPayload; ++i) {
        const auto u = __builtin_bswap32(
            static_cast<std::uint32_t>(i < 2 ? INT32_MAX - static_cast<std::int32_t>(i) : sum(rng)));
        const auto* p = reinterpret_cast<const std::byte*>(&u);
        wire.insert(wire.end(), p, p + 4);
      }
    }
    const std::size_t n = blocks.size() * kPayload;
    expected.assign(n, 0.0f);
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      dequantize(wire.data() + 4 * b * kPayload, kPayload, blocks[b].exponent, world,
                 blocks[b].divisor, expected.data() + b * kPayload);
    }
    const DeviceVector<std::byte> in(wire);
    const DeviceVector<WireBlock> device_blocks(blocks);
    const DeviceVector<float> out(std::vector<float>(n, 0.0f));
    finish_blocks(in.get(), device_blocks.get(), n, kPayload, world, out.get(), Element::float32,
                  nullptr);
    const std::vector<float> result = out.to_host();
    ASSERT_EQ(std::memcmp(result.data(), expected.data(), 4 * n), 0) << "world " << world;
  }
}

void check_16bit_results(Element type, std::uint16_t (*narrow)(float)) {
  std::mt19937 rng(5);
  for (int world = 1; world <= 16; world += 3) {
    for (const std::size_t payload : {std::size_t{33}, std::size_t{2048}}) {
      const std::size_t n = 5 * payload + 7;
      const WireCase c = wire_case(n, payload, world, rng);
      const std::uint16_t own = 0x3c00;  // a missed block keeps the tensor's own values
      std::vector<std::uint16_t> expected(n, own);
      for (std::size_t i = 0; i < n; ++i) {
        if (c.blocks[i / payload].divisor != 0) expected[i] = narrow(c.expected[i]);
      }
      const DeviceVector<std::byte> in(c.wire);
      const DeviceVector<WireBlock> blocks(c.blocks);
      const DeviceVector<std::uint16_t> out(std::vector<std::uint16_t>(n, own));
      finish_blocks(in.get(), blocks.get(), n, payload, world, out.get(), type, nullptr);
      EXPECT_EQ(out.to_host(), expected) << "world " << world << ", payload " << payload;
    }
  }
}

TEST_F(QuantCuda, Float16ResultsMatchDequantizeAndTorchRounding) {
  check_16bit_results(Element::float16, float_to_half);
}

TEST_F(QuantCuda, BFloat16ResultsMatchDequantizeAndTorchRounding) {
  check_16bit_results(Element::bfloat16, float_to_bf16);
}

TEST_F(QuantCuda, EmptyInputLaunchesNothing) {
  prepare_blocks(nullptr, Element::float32, 0, 256, nullptr, nullptr, nullptr);
  finish_blocks(nullptr, nullptr, 0, 256, 4, nullptr, Element::bfloat16, nullptr);
  check(cudaDeviceSynchronize(), "no kernel");
}

}  // namespace
}  // namespace dpa::quant::cuda
