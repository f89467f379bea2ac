// SPDX-License-Identifier: Apache-2.0
// Packet buffers owned by a transport (NCCL net-plugin style: the transport owns the memory,
// the caller borrows it). A transmit buffer is allocated from a Queue, filled in place, sent as
// often as needed (a retransmission sends the same buffer again, no copy) and released once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/endpoint.hpp"

namespace dpa::transport {

struct TxBuffer {
  std::byte* payload = nullptr;  // UDP payload; headroom for Ethernet/IPv4/UDP precedes it
  std::uint32_t size = 0;        // payload bytes to send; the caller sets it (<= capacity)
  std::uint32_t capacity = 0;
  void* native = nullptr;        // the transport's handle (an rte_mbuf, a pool slot)

  [[nodiscard]] std::span<std::byte> bytes() const { return {payload, size}; }
};

// One packet to send: a buffer (still owned by the caller afterwards) and where it goes.
struct TxRequest {
  const TxBuffer* buffer = nullptr;
  Endpoint to;
};

// A received packet's UDP payload; owned by the queue and valid until its next receive().
struct RxPacket {
  std::span<std::byte> data;
  Endpoint from;
  void* native = nullptr;  // the transport's handle, for Queue::take_for_reply (null: none)
};

}  // namespace dpa::transport
