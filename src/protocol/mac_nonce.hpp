// SPDX-License-Identifier: Apache-2.0
// The nonces of one sender of AES-256-GCM-sealed packets (docs/protocol.md §6.6): GCM must never
// see one nonce twice under one key for different data (a repeat reveals its hash key, and every
// tag can then be forged). A sender (a worker engine thread, a switch thread) seals with its own
// 32-bit sender id, unique among the senders that hold the key, and a 64-bit counter that only
// ever increases, so no two of its packets share a nonce. The receiver reads the nonce from the
// packet's trailer and keeps no state.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dpa/error.hpp"
#include "protocol/auth.hpp"
#include "protocol/byte_order.hpp"

namespace dpa::protocol {

class NonceCounter {
 public:
  explicit NonceCounter(std::uint32_t sender) : sender_(sender) {}
  // A copy would seal with the nonces this one has yet to use.
  NonceCounter(const NonceCounter&) = delete;
  NonceCounter& operator=(const NonceCounter&) = delete;

  // Writes the next nonce, kGcmNonceSize bytes: the sender id, then the counter (big-endian).
  void write_next(std::byte* out) {
    // 2^64 packets take centuries at any packet rate; stopping is still better than repeating.
    if (next_ == ~std::uint64_t{0}) throw Error("AES-256-GCM: sender " + std::to_string(sender_) + " used up its nonces");
    store_be32(out, sender_);
    store_be64(out + 4, next_++);
  }

  [[nodiscard]] std::uint32_t sender() const { return sender_; }
  [[nodiscard]] std::uint64_t used() const { return next_; }

 private:
  std::uint32_t sender_;
  std::uint64_t next_ = 0;
};

static_assert(kGcmNonceSize == 4 + 8, "the nonce is a 32-bit sender id and a 64-bit counter");

}  // namespace dpa::protocol
