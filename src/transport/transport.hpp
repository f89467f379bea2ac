// Packet transport interface used by the worker engine and the software switch.
// One transport instance belongs to one thread; nothing in it is shared or locked.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "dpa/config.hpp"

namespace dpa::transport {

// An IPv4 UDP endpoint; address and port in host byte order.
struct Endpoint {
  std::uint32_t address = 0;
  std::uint16_t port = 0;

  // "a.b.c.d:port" or a host name with port; throws dpa::ConfigError naming `what` on failure.
  static Endpoint resolve(const std::string& host, std::uint16_t port, std::string_view what);
  [[nodiscard]] std::string to_string() const;
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

struct RxPacket {
  std::span<std::byte> data;  // owned by the transport, valid until its next receive()
  Endpoint from;
};

struct TxPacket {
  const std::byte* data = nullptr;
  std::uint32_t size = 0;
  Endpoint to;
};

struct TransportCounters {
  std::uint64_t rx_packets = 0;
  std::uint64_t tx_packets = 0;
  std::uint64_t tx_errors = 0;       // datagrams the kernel refused (ENOBUFS, ECONNREFUSED, ...)
  std::uint64_t rx_syscalls = 0;
  std::uint64_t tx_syscalls = 0;
  std::uint64_t injected_drops = 0;  // fault injection only
  std::uint64_t injected_duplicates = 0;
  std::uint64_t injected_reorders = 0;
  std::uint64_t injected_delays = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Waits at most `timeout` (zero: poll) for the first packet, then takes what is queued, up to
  // out.size() packets. Returns the number of packets written to `out`.
  virtual std::size_t receive(std::span<RxPacket> out, std::chrono::nanoseconds timeout) = 0;

  // Sends every packet, batching system calls. Packets that fail are counted, not retried.
  virtual void send(std::span<const TxPacket> packets) = 0;

  [[nodiscard]] virtual Endpoint local_endpoint() const = 0;
  [[nodiscard]] virtual TransportCounters counters() const = 0;
};

struct UdpOptions {
  std::string bind_host = "0.0.0.0";
  std::uint16_t bind_port = 0;             // 0: ephemeral
  std::size_t max_datagram = 65536;        // receive buffer size per packet
  std::size_t batch = 64;                  // packets per recvmmsg/sendmmsg
  int socket_buffer_bytes = 16 << 20;      // SO_RCVBUF/SO_SNDBUF (forced when running as root)
};

// UDP socket transport (recvmmsg/sendmmsg). Throws dpa::Error naming the address on bind failure.
std::unique_ptr<Transport> make_udp_transport(const UdpOptions& options);

// Fault injection for tests (see dpa::FaultInjection), reproducible from its seed.
using FaultOptions = dpa::FaultInjection;

std::unique_ptr<Transport> with_faults(std::unique_ptr<Transport> inner, const FaultOptions& options);

}  // namespace dpa::transport
