// SPDX-License-Identifier: Apache-2.0
#include "switch/join_cookie.hpp"

#include <array>
#include <cstring>
#include <random>

#include "protocol/byte_order.hpp"

namespace dpa::sw {

JoinCookies::JoinCookies() : keyed_(protocol::auth_available()) {
  if (keyed_) {
    secret_ = protocol::random_tag_key();
  } else {
    std::random_device device;
    for (auto& byte : secret_) byte = static_cast<std::uint8_t>(device());
  }
}

std::uint32_t JoinCookies::at_epoch(std::uint32_t session, std::uint32_t rank, std::uint32_t nonce,
                                    const transport::Endpoint& from, std::uint64_t epoch) const {
  std::array<std::byte, 26> input{};
  protocol::store_be32(input.data(), session);
  protocol::store_be32(input.data() + 4, rank);
  protocol::store_be32(input.data() + 8, nonce);
  protocol::store_be32(input.data() + 12, from.address);
  protocol::store_be16(input.data() + 16, from.port);
  std::memcpy(input.data() + 18, &epoch, sizeof epoch);
  std::uint64_t hash = 0;
  if (keyed_) {
    hash = protocol::keyed_hash(secret_, input);
  } else {
    // Without libsodium: FNV-1a over the secret and the input, then a 64-bit finaliser. It ties
    // a cookie to its source as well, but a patient guesser is not kept out as by SipHash.
    hash = 0xcbf29ce484222325ULL;
    for (std::uint8_t byte : secret_) hash = (hash ^ byte) * 0x100000001b3ULL;
    for (std::byte byte : input) hash = (hash ^ static_cast<std::uint8_t>(byte)) * 0x100000001b3ULL;
    hash ^= hash >> 33;
    hash *= 0xff51afd7ed558ccdULL;
    hash ^= hash >> 33;
  }
  const auto cookie = static_cast<std::uint32_t>(hash ^ (hash >> 32));
  return cookie == 0 ? 1 : cookie;  // 0 in a JOIN means "no cookie"
}

std::uint32_t JoinCookies::make(std::uint32_t session, std::uint32_t rank, std::uint32_t nonce,
                                const transport::Endpoint& from, std::uint64_t now_ns) const {
  return at_epoch(session, rank, nonce, from, now_ns >> kEpochShift);
}

bool JoinCookies::valid(std::uint32_t cookie, std::uint32_t session, std::uint32_t rank, std::uint32_t nonce,
                        const transport::Endpoint& from, std::uint64_t now_ns) const {
  if (cookie == 0) return false;
  const std::uint64_t epoch = now_ns >> kEpochShift;
  return cookie == at_epoch(session, rank, nonce, from, epoch) ||
         (epoch > 0 && cookie == at_epoch(session, rank, nonce, from, epoch - 1));
}

}  // namespace dpa::sw
