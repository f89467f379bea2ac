// UDP socket transport: one non-blocking socket, batched recvmmsg/sendmmsg, every buffer and
// message array allocated once at construction so the packet path never allocates.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <memory>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "dpa/error.hpp"
#include "transport/transport.hpp"

namespace dpa::transport {
namespace {

using namespace std::chrono_literals;

// The kernel caps one recvmmsg/sendmmsg call at UIO_MAXIOV messages.
constexpr std::size_t kMaxBatch = 1024;
// A full socket or device queue: wait this long for room, this many times per stall, then give up
// on the rest of the call (the protocol retransmits; blocking the caller longer helps nobody).
constexpr std::chrono::nanoseconds kBlockedWait = 1ms;
constexpr int kBlockedRetries = 16;

std::string error_text(int error) { return std::system_category().message(error); }

timespec to_timespec(std::chrono::nanoseconds duration) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(duration);
  return timespec{static_cast<time_t>(seconds.count()), static_cast<long>((duration - seconds).count())};
}

sockaddr_in to_sockaddr(const Endpoint& endpoint) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(endpoint.address);
  address.sin_port = htons(endpoint.port);
  return address;
}

Endpoint to_endpoint(const sockaddr_in& address) {
  return Endpoint{ntohl(address.sin_addr.s_addr), ntohs(address.sin_port)};
}

// Asks for `bytes` of kernel buffer. The FORCE variants exceed net.core.[rw]mem_max but need
// CAP_NET_ADMIN; without it the plain option gets what the limit allows, which is still usable.
void set_buffer_size(int fd, int force_option, int plain_option, int bytes) {
  if (setsockopt(fd, SOL_SOCKET, force_option, &bytes, sizeof bytes) == 0) return;
  setsockopt(fd, SOL_SOCKET, plain_option, &bytes, sizeof bytes);
}

class UdpTransport final : public Transport {
 public:
  explicit UdpTransport(const UdpOptions& options)
      : batch_(options.batch),
        max_datagram_(options.max_datagram),
        rx_storage_(std::make_unique_for_overwrite<std::byte[]>(batch_ * max_datagram_)),
        rx_messages_(batch_),
        rx_iovecs_(batch_),
        rx_addresses_(batch_),
        tx_messages_(batch_),
        tx_iovecs_(batch_),
        tx_addresses_(batch_) {
    const Endpoint bind_endpoint = Endpoint::resolve(options.bind_host, options.bind_port, "bind host");
    socket_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (socket_ < 0) {
      throw Error(fmt::format("cannot create UDP socket for {}: {}", bind_endpoint.to_string(),
                              error_text(errno)));
    }
    if (options.socket_buffer_bytes > 0) {
      set_buffer_size(socket_, SO_RCVBUFFORCE, SO_RCVBUF, options.socket_buffer_bytes);
      set_buffer_size(socket_, SO_SNDBUFFORCE, SO_SNDBUF, options.socket_buffer_bytes);
    }
    const sockaddr_in bind_address = to_sockaddr(bind_endpoint);
    if (bind(socket_, reinterpret_cast<const sockaddr*>(&bind_address), sizeof bind_address) != 0) {
      const int error = errno;
      close(socket_);
      throw Error(fmt::format("cannot bind UDP {}: {}", bind_endpoint.to_string(), error_text(error)));
    }
    sockaddr_in bound{};
    socklen_t bound_length = sizeof bound;
    getsockname(socket_, reinterpret_cast<sockaddr*>(&bound), &bound_length);
    local_ = to_endpoint(bound);

    // Each message owns one iovec and one address slot for good; only lengths change per call.
    for (std::size_t i = 0; i < batch_; ++i) {
      rx_iovecs_[i] = iovec{rx_storage_.get() + i * max_datagram_, max_datagram_};
      rx_messages_[i].msg_hdr.msg_iov = &rx_iovecs_[i];
      rx_messages_[i].msg_hdr.msg_iovlen = 1;
      rx_messages_[i].msg_hdr.msg_name = &rx_addresses_[i];
      tx_messages_[i].msg_hdr.msg_iov = &tx_iovecs_[i];
      tx_messages_[i].msg_hdr.msg_iovlen = 1;
      tx_messages_[i].msg_hdr.msg_name = &tx_addresses_[i];
      tx_messages_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
    }
  }

  UdpTransport(const UdpTransport&) = delete;
  UdpTransport& operator=(const UdpTransport&) = delete;
  ~UdpTransport() override { close(socket_); }

  std::size_t receive(std::span<RxPacket> out, std::chrono::nanoseconds timeout) override {
    const std::size_t capacity = std::min(out.size(), batch_);
    if (capacity == 0) return 0;
    std::size_t received = receive_queued(capacity);
    if (received == 0 && timeout > 0ns && wait_for(POLLIN, timeout)) {
      received = receive_queued(capacity);
    }
    std::size_t delivered = 0;
    for (std::size_t i = 0; i < received; ++i) {
      const msghdr& header = rx_messages_[i].msg_hdr;
      // A datagram larger than max_datagram arrives cut short; no protocol can use the rest.
      if ((header.msg_flags & MSG_TRUNC) != 0) continue;
      out[delivered++] = RxPacket{std::span(rx_storage_.get() + i * max_datagram_, rx_messages_[i].msg_len),
                                  to_endpoint(rx_addresses_[i])};
    }
    counters_.rx_packets += delivered;
    return delivered;
  }

  void send(std::span<const TxPacket> packets) override {
    std::size_t next = 0;
    int retries_left = kBlockedRetries;
    while (next < packets.size()) {
      const std::size_t chunk = std::min(packets.size() - next, batch_);
      for (std::size_t i = 0; i < chunk; ++i) {
        const TxPacket& packet = packets[next + i];
        // sendmmsg only reads the buffer; iovec just lacks a const pointer type.
        tx_iovecs_[i] = iovec{const_cast<std::byte*>(packet.data), packet.size};
        tx_addresses_[i] = to_sockaddr(packet.to);
      }
      ++counters_.tx_syscalls;
      const int sent = sendmmsg(socket_, tx_messages_.data(), static_cast<unsigned>(chunk), MSG_DONTWAIT);
      if (sent > 0) {
        // A partial send means message `next + sent` failed; the next call reports its error.
        counters_.tx_packets += static_cast<std::uint64_t>(sent);
        next += static_cast<std::size_t>(sent);
        retries_left = kBlockedRetries;
        continue;
      }
      const int error = errno;
      if (error == EINTR) continue;
      if (error == EAGAIN || error == EWOULDBLOCK || error == ENOBUFS) {
        if (retries_left-- == 0) {
          counters_.tx_errors += packets.size() - next;
          return;
        }
        wait_for_room(error);
        continue;
      }
      // The first message of the chunk itself is refused (ECONNREFUSED, EMSGSIZE, ...): skip it.
      ++counters_.tx_errors;
      ++next;
    }
  }

  [[nodiscard]] Endpoint local_endpoint() const override { return local_; }
  [[nodiscard]] TransportCounters counters() const override { return counters_; }

 private:
  // One recvmmsg without blocking; returns how many messages arrived.
  std::size_t receive_queued(std::size_t capacity) {
    for (std::size_t i = 0; i < capacity; ++i) {
      rx_messages_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
    }
    ++counters_.rx_syscalls;
    const int received = recvmmsg(socket_, rx_messages_.data(), static_cast<unsigned>(capacity), MSG_DONTWAIT,
                                  nullptr);
    if (received >= 0) return static_cast<std::size_t>(received);
    const int error = errno;
    // Nothing queued, a signal, or an ICMP error left on the socket by an earlier send: none of
    // these is a reason to fail the receiver.
    if (error == EAGAIN || error == EWOULDBLOCK || error == EINTR || error == ECONNREFUSED ||
        error == EHOSTUNREACH || error == ENETUNREACH) {
      return 0;
    }
    throw Error(fmt::format("recvmmsg on UDP {}: {}", local_.to_string(), error_text(error)));
  }

  // Sleeps in the kernel until the socket has `events` or the timeout passes (true: ready).
  bool wait_for(short events, std::chrono::nanoseconds timeout) {
    pollfd descriptor{socket_, events, 0};
    const timespec limit = to_timespec(timeout);
    ++(events == POLLIN ? counters_.rx_syscalls : counters_.tx_syscalls);
    return ppoll(&descriptor, 1, &limit, nullptr) > 0;
  }

  void wait_for_room(int error) {
    if (error != ENOBUFS) {
      wait_for(POLLOUT, kBlockedWait);
      return;
    }
    // ENOBUFS: the device queue is full while the socket still polls writable, so just back off.
    const timespec limit = to_timespec(kBlockedWait);
    ++counters_.tx_syscalls;
    ppoll(nullptr, 0, &limit, nullptr);
  }

  int socket_ = -1;
  std::size_t batch_;
  std::size_t max_datagram_;
  std::unique_ptr<std::byte[]> rx_storage_;  // batch_ buffers of max_datagram_ bytes
  std::vector<mmsghdr> rx_messages_;
  std::vector<iovec> rx_iovecs_;
  std::vector<sockaddr_in> rx_addresses_;
  std::vector<mmsghdr> tx_messages_;
  std::vector<iovec> tx_iovecs_;
  std::vector<sockaddr_in> tx_addresses_;
  Endpoint local_;
  TransportCounters counters_;
};

}  // namespace

std::unique_ptr<Transport> make_udp_transport(const UdpOptions& options) {
  if (options.batch == 0 || options.batch > kMaxBatch) {
    throw ConfigError(fmt::format("UDP batch {} out of range (1..{})", options.batch, kMaxBatch));
  }
  if (options.max_datagram == 0) {
    throw ConfigError("UDP max_datagram must be positive");
  }
  return std::make_unique<UdpTransport>(options);
}

}  // namespace dpa::transport
