// The packet-stream view the worker engine and the software switch still use: send copies the
// caller's bytes into queue buffers. It is the bridge until both drive a Queue directly (with
// transmit buffers they fill in place); new code uses Device and Queue.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "transport/buffer.hpp"
#include "transport/endpoint.hpp"
#include "transport/queue.hpp"

namespace dpa::transport {

struct TxPacket {
  const std::byte* data = nullptr;
  std::uint32_t size = 0;
  Endpoint to;
};

using TransportCounters = QueueCounters;

class Transport {
 public:
  virtual ~Transport() = default;

  // Waits at most `timeout` (zero: poll) for the first packet, then takes what is queued, up to
  // out.size() packets. Returns the number of packets written to `out`.
  virtual std::size_t receive(std::span<RxPacket> out, std::chrono::nanoseconds timeout) = 0;

  // Sends every packet; packets the queue keeps refusing are counted as errors, not retried.
  virtual void send(std::span<const TxPacket> packets) = 0;

  [[nodiscard]] virtual Endpoint local_endpoint() const = 0;
  [[nodiscard]] virtual TransportCounters counters() const = 0;
};

// A queue seen as a packet stream.
std::unique_ptr<Transport> as_stream(std::unique_ptr<Queue> queue);

struct UdpOptions {
  std::string bind_host = "0.0.0.0";
  std::uint16_t bind_port = 0;  // 0: ephemeral
  std::size_t max_datagram = 65507;  // the largest UDP datagram
  std::size_t batch = 64;
  int socket_buffer_bytes = 16 << 20;
};

// One UDP socket as a packet stream. Throws dpa::Error naming the address on bind failure.
std::unique_ptr<Transport> make_udp_transport(const UdpOptions& options);

}  // namespace dpa::transport
