// SPDX-License-Identifier: Apache-2.0
// Sending through a Queue beyond one send() call: a burst that meets a full device queue, and
// one datagram copied into a transmit buffer (for the few packets that are not on the data path,
// JOIN and LEAVE, and for tests; the data path fills transmit buffers in place).
#pragma once

#include <cstddef>
#include <span>

#include "transport/buffer.hpp"
#include "transport/endpoint.hpp"
#include "transport/queue.hpp"

namespace dpa::transport {

// A thread that handles a burst of received packets hands what they caused to its queue once it
// has handled this many bytes of them, not only at the burst's end: on shared memory the peer
// then works on the first packets while this thread handles the rest. 4 ranks, 64 MiB, 16-core
// host: p50 17.4 ms against 19.3 sending after the burst (means of 8 alternating runs); one engine
// and one switch thread on the 2-core VM: 13 ms against 18-23. After every packet the peers'
// extra wake-ups cost where threads share cores (docs/benchmarks.md, 2026-12-07 (morning)).
// Sockets and DPDK only queue packets for their own bursts in send().
inline constexpr std::size_t kSendEveryBytes = 128 << 10;

// Offers `packets` until the queue took them all, flushing when it takes none, at most a few
// times in a row; returns how many it took (the rest are lost, for the protocol to retransmit).
// Does not flush at the end.
std::size_t send_all(Queue& queue, std::span<const TxRequest> packets);

// Copies `bytes` into a buffer of `queue`, sends it to `to` and flushes. Returns false when the
// queue has no buffer left, `bytes` exceed its max_payload(), or the device queue stays full.
bool send_datagram(Queue& queue, std::span<const std::byte> bytes, const Endpoint& to);

}  // namespace dpa::transport
