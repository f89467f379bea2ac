// SPDX-License-Identifier: Apache-2.0
// What the worker-engine tests (engine_step_test, engine_packets_test) share: the session they
// play, and how they build the switch's replies.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "protocol/byte_order.hpp"
#include "protocol/wire.hpp"
#include "transport/endpoint.hpp"

namespace dpa::detail::engine_test {

constexpr std::uint32_t kSession = 7;
constexpr std::uint32_t kPayload = 4;  // values per packet
constexpr int kWorld = 2;              // this rank is 0; the test's switch plays rank 1 as well
constexpr std::uint32_t kPoolBase = 100;
constexpr std::uint32_t kOpId = 5;

inline const transport::Endpoint kSwitch{0x7f000001, 4242};

inline std::uint32_t seq_of(std::uint64_t round) { return static_cast<std::uint32_t>(round / 2 + 1); }

inline protocol::Header make_header(std::uint16_t flags, std::uint32_t slot, std::uint32_t seq,
                                    std::uint32_t offset = 0, std::uint16_t count = 0,
                                    std::uint8_t contributors = 2, std::uint64_t bitmap = 0b11,
                                    std::uint32_t op_id = kOpId) {
  protocol::Header h;
  h.flags = flags;
  h.session = kSession;
  h.op_id = op_id;
  h.slot = slot;
  h.seq = seq;
  h.offset = offset;
  h.count = count;
  h.contributors = contributors;
  h.bitmap = bitmap;
  return h;
}

// The header of the result a switch sends for the round of `request`.
inline protocol::Header result_for(const protocol::Header& request,
                                   std::uint16_t flags = protocol::flag::kResult) {
  protocol::Header h = make_header(
      static_cast<std::uint16_t>(flags | (request.flags & protocol::flag::kFloat)), request.slot,
      request.seq, request.offset, request.count, 2, 0b11, request.op_id);
  h.exp_used = request.exp_used;
  h.exp_next = request.exp_next;
  return h;
}

inline std::vector<std::byte> encode_packet(const protocol::Header& h,
                                            std::span<const std::int32_t> values = {}) {
  std::vector<std::byte> bytes(protocol::kHeaderSize + 4 * values.size());
  protocol::encode(h, bytes.data());
  for (std::size_t i = 0; i < values.size(); ++i) {
    protocol::store_be32(bytes.data() + protocol::kHeaderSize + 4 * i,
                         static_cast<std::uint32_t>(values[i]));
  }
  return bytes;
}

}  // namespace dpa::detail::engine_test
