// SPDX-License-Identifier: Apache-2.0
// A queue: one thread's view of a Device (Gloo's pair, NCCL's comm). Nothing in a queue is
// shared or locked, so each thread owns one; different queues of a device run in parallel.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "transport/buffer.hpp"
#include "transport/queue_counters.hpp"

namespace dpa::transport {

class Queue {
 public:
  virtual ~Queue() = default;

  // Waits at most `timeout` (zero: poll) for the first packet, then takes what is queued, up to
  // out.size() packets. Packets from the previous call are invalid from here on.
  virtual std::size_t receive(std::span<RxPacket> out, std::chrono::nanoseconds timeout) = 0;

  // Fills `out` with empty transmit buffers of capacity max_payload(); returns how many it
  // could allocate (fewer when the pool is exhausted: release some and retry).
  virtual std::size_t allocate(std::span<TxBuffer> out) = 0;

  // Queues the packets for transmission in order and returns how many were taken (a prefix);
  // the rest met a full device queue and may be offered again. Buffers stay the caller's.
  // A queue may hold packets back to send them in bursts; they leave on their own as long as
  // the owner keeps calling receive() (sockets before waiting, DPDK when a burst is full, due
  // after tx_flush_us, or a poll step finds nothing to receive).
  virtual std::size_t send(std::span<const TxRequest> packets) = 0;

  // Sends one buffer to every endpoint (the switch's multicast) without copying its payload;
  // returns how many endpoints were served (in order, except shared memory, which skips a
  // destination whose inbox is full and serves the rest).
  virtual std::size_t send_to_all(const TxBuffer& buffer, std::span<const Endpoint> to) = 0;

  // Hands buffers back; a buffer may still be in flight, the transport frees it when sent.
  virtual void release(std::span<TxBuffer> buffers) = 0;

  // Turns a packet of the latest receive() into a transmit buffer holding its payload in place,
  // for a reply written over the request (as a Tofino rewrites the packet it received): no
  // buffer to allocate and no fresh lines to write. The packet's bytes stay readable until the
  // caller writes; the caller releases the buffer like an allocated one. An empty buffer
  // (payload null) when the transport cannot: someone else still holds the packet (a peer
  // keeping it for retransmission, a clone), it cannot hold `bytes`, or the transport's
  // received buffers are not sendable.
  virtual TxBuffer take_for_reply(const RxPacket& /*packet*/, std::uint32_t /*bytes*/) { return {}; }

  // Pushes out packets held back for batching at once: for an owner that stops calling receive()
  // (an engine thread between operations), not after every loop step.
  virtual void flush() = 0;

  // Whether the medium never loses a packet that send() took: only a receiver that stopped
  // reading (a full inbox) or went away loses one. The engine's timer then watches for stalled
  // peers, not for loss, and need not fire within a round trip.
  [[nodiscard]] virtual bool lossless() const { return false; }
  // What keeps this queue's ports from carrying packets now (a DPDK port without link, and why it
  // may be), for the message of a join that timed out; empty when nothing is known to be wrong.
  [[nodiscard]] virtual std::string link_problems() const { return {}; }
  [[nodiscard]] virtual std::uint32_t max_payload() const = 0;
  [[nodiscard]] virtual Endpoint local_endpoint() const = 0;
  [[nodiscard]] virtual QueueCounters counters() const = 0;
};

}  // namespace dpa::transport
