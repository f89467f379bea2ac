// SPDX-License-Identifier: Apache-2.0
// Stateless JOIN cookies (docs/protocol.md §6.3, "Admission under a storm"): while a session hears
// more JOINs than a job sends, a JOIN enters the pending set only with a cookie the switch sent to
// its source for its rank and nonce. A live rank repeats its JOIN with the cookie at once; a storm
// that sends fresh nonces from many sockets and never echoes a cookie then holds no rank, and the
// switch keeps no state per unconfirmed source that such a storm could flush.
#pragma once

#include <cstdint>

#include "protocol/auth.hpp"
#include "transport/endpoint.hpp"

namespace dpa::sw {

class JoinCookies {
 public:
  // A cookie stays valid for one to two epochs of 2^31 ns (2.1 to 4.3 s): longer than a rank's
  // join retries take, short enough that a cookie seen once is soon worthless.
  static constexpr unsigned kEpochShift = 31;

  JoinCookies();  // a fresh random secret

  // The non-zero cookie of a JOIN of `rank` with `nonce` from `from`, for session `session`.
  [[nodiscard]] std::uint32_t make(std::uint32_t session, std::uint32_t rank, std::uint32_t nonce,
                                   const transport::Endpoint& from, std::uint64_t now_ns) const;
  // Whether `cookie` is the one make() gave that JOIN in this epoch or the previous one.
  [[nodiscard]] bool valid(std::uint32_t cookie, std::uint32_t session, std::uint32_t rank, std::uint32_t nonce,
                           const transport::Endpoint& from, std::uint64_t now_ns) const;

 private:
  [[nodiscard]] std::uint32_t at_epoch(std::uint32_t session, std::uint32_t rank, std::uint32_t nonce,
                                       const transport::Endpoint& from, std::uint64_t epoch) const;
  protocol::TagKey secret_{};
  bool keyed_ = false;  // false in a build without libsodium: a mixing function stands in
};

}  // namespace dpa::sw
