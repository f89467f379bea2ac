// SPDX-License-Identifier: Apache-2.0
// Unaligned big-endian loads and stores for header fields.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dpa::protocol {

template <typename T>
inline T to_big_endian(T v) {
  if constexpr (std::endian::native == std::endian::little) {
    if constexpr (sizeof(T) == 2) return static_cast<T>(__builtin_bswap16(v));
    if constexpr (sizeof(T) == 4) return static_cast<T>(__builtin_bswap32(v));
    if constexpr (sizeof(T) == 8) return static_cast<T>(__builtin_bswap64(v));
  }
  return v;
}

template <typename T>
inline void store_be(std::byte* out, T v) {
  v = to_big_endian(v);
  std::memcpy(out, &v, sizeof v);
}
template <typename T>
inline T load_be(const std::byte* in) {
  T v;
  std::memcpy(&v, in, sizeof v);
  return to_big_endian(v);
}

inline void store_be16(std::byte* out, std::uint16_t v) { store_be(out, v); }
inline void store_be32(std::byte* out, std::uint32_t v) { store_be(out, v); }
inline void store_be64(std::byte* out, std::uint64_t v) { store_be(out, v); }
inline std::uint16_t load_be16(const std::byte* in) { return load_be<std::uint16_t>(in); }
inline std::uint32_t load_be32(const std::byte* in) { return load_be<std::uint32_t>(in); }
inline std::uint64_t load_be64(const std::byte* in) { return load_be<std::uint64_t>(in); }

}  // namespace dpa::protocol
