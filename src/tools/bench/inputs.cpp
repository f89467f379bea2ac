// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/inputs.hpp"

#include <bit>
#include <cmath>

namespace dpa::tools::bench {
namespace {

constexpr std::int32_t kIntHalfRange = 1 << 19;

std::uint64_t splitmix64(std::uint64_t value) {
  value += 0x9E3779B97F4A7C15ULL;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ULL;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBULL;
  return value ^ (value >> 31);
}

// murmur3's 32-bit finaliser: a bijection, so distinct indices give distinct values per key.
std::uint32_t mix32(std::uint32_t value) {
  value ^= value >> 16;
  value *= 0x85EBCA6BU;
  value ^= value >> 13;
  value *= 0xC2B2AE35U;
  return value ^ (value >> 16);
}

std::uint32_t bits(std::uint64_t key, std::size_t i) {
  return mix32(mix32(static_cast<std::uint32_t>(i) ^ static_cast<std::uint32_t>(key)) ^
               static_cast<std::uint32_t>(key >> 32));
}

float float_input(std::uint64_t key, std::size_t i) { return static_cast<float>(bits(key, i) >> 8) * 0x1p-23f - 1.0f; }

std::int32_t int_input(std::uint64_t key, std::size_t i) {
  return static_cast<std::int32_t>(bits(key, i) >> 12) - kIntHalfRange;
}

}  // namespace

std::uint64_t input_key(std::uint64_t seed, std::size_t size_index, View view, std::size_t operation, int rank) {
  std::uint64_t key = splitmix64(seed);
  for (const std::uint64_t part : {static_cast<std::uint64_t>(size_index), static_cast<std::uint64_t>(view),
                                   static_cast<std::uint64_t>(operation), static_cast<std::uint64_t>(rank)}) {
    key = splitmix64(key ^ part);
  }
  return key;
}

void fill_input(void* buffer, std::size_t count, bool is_float, std::uint64_t key) {
  if (is_float) {
    auto* values = static_cast<float*>(buffer);
    for (std::size_t i = 0; i < count; ++i) values[i] = float_input(key, i);
  } else {
    auto* values = static_cast<std::int32_t*>(buffer);
    for (std::size_t i = 0; i < count; ++i) values[i] = int_input(key, i);
  }
}

std::size_t count_wrong(const void* result, std::size_t count, bool is_float, int rank,
                        const std::vector<std::uint64_t>& keys, std::uint32_t payload,
                        const std::uint64_t* contributors, std::uint64_t required) {
  const auto world = static_cast<int>(keys.size());
  // §10.4, A + 2^-23 (|exact| + A) with A = N 2^(e+h-32) and e = 1: every input lies in
  // [-1, 1), so |v| < 2^1 in every block, and the bound only grows with e.
  const int h = world > 1 ? std::bit_width(static_cast<unsigned>(world - 1)) : 0;
  const double absolute = world * std::ldexp(1.0, h - 31);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t bitmap = contributors[i / payload];
    if ((bitmap & required) != required) {
      ++wrong;
      continue;
    }
    const auto contributes = [&](int r) { return bitmap == 0 ? r == rank : ((bitmap >> r) & 1) != 0; };
    if (is_float) {
      double exact = 0;
      for (int r = 0; r < world; ++r) {
        if (contributes(r)) exact += float_input(keys[r], i);
      }
      const double got = static_cast<const float*>(result)[i];
      if (!(std::abs(got - exact) <= absolute + 0x1p-23 * (std::abs(exact) + absolute))) ++wrong;
    } else {
      std::int64_t exact = 0;
      for (int r = 0; r < world; ++r) {
        if (contributes(r)) exact += int_input(keys[r], i);
      }
      if (static_cast<const std::int32_t*>(result)[i] != exact) ++wrong;
    }
  }
  return wrong;
}

std::uint64_t all_ranks(int world) { return world >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << world) - 1; }

void corrupt(void* result, std::size_t count, bool is_float) {
  if (is_float) {
    static_cast<float*>(result)[count / 2] += 1.0f;
  } else {
    static_cast<std::int32_t*>(result)[count / 2] += 1;
  }
}

}  // namespace dpa::tools::bench
