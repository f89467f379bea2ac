// SPDX-License-Identifier: Apache-2.0
#include "transport/socket/udp_queue.hpp"

#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <system_error>

#include <fmt/format.h>

#include "dpa/error.hpp"

namespace dpa::transport::socket {
namespace {

using namespace std::chrono_literals;

// A full socket or device queue: wait this long once for room, then report what was taken and
// let the caller decide (back-pressure belongs to the caller, not to a sleep in here).
constexpr std::chrono::nanoseconds kBlockedWait = 1ms;

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

}  // namespace

UdpQueue::UdpQueue(const UdpTransportConfig& config)
    : batch_(config.batch),
      max_payload_(config.max_payload),
      pool_(config.buffers, config.max_payload),
      rx_storage_(std::make_unique_for_overwrite<std::byte[]>(batch_ * max_payload_)),
      rx_messages_(batch_),
      rx_iovecs_(batch_),
      rx_addresses_(batch_),
      tx_messages_(batch_),
      tx_iovecs_(batch_),
      tx_addresses_(batch_),
      tx_buffers_(batch_) {
  const Endpoint bind_endpoint = Endpoint::resolve(config.bind_host, config.bind_port, "udp.bind_host");
  socket_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (socket_ < 0) {
    throw Error(fmt::format("cannot create UDP socket for {}: {}", bind_endpoint.to_string(), error_text(errno)));
  }
  if (config.socket_buffer_bytes > 0) {
    set_buffer_size(socket_, SO_RCVBUFFORCE, SO_RCVBUF, config.socket_buffer_bytes);
    set_buffer_size(socket_, SO_SNDBUFFORCE, SO_SNDBUF, config.socket_buffer_bytes);
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
    rx_iovecs_[i] = iovec{rx_storage_.get() + i * max_payload_, max_payload_};
    rx_messages_[i].msg_hdr.msg_iov = &rx_iovecs_[i];
    rx_messages_[i].msg_hdr.msg_iovlen = 1;
    rx_messages_[i].msg_hdr.msg_name = &rx_addresses_[i];
    tx_messages_[i].msg_hdr.msg_iov = &tx_iovecs_[i];
    tx_messages_[i].msg_hdr.msg_iovlen = 1;
    tx_messages_[i].msg_hdr.msg_name = &tx_addresses_[i];
    tx_messages_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
  }
}

UdpQueue::~UdpQueue() {
  drain();
  for (std::size_t i = 0; i < queued_; ++i) pool_.drop(tx_buffers_[i]);
  close(socket_);
}

std::size_t UdpQueue::receive(std::span<RxPacket> out, std::chrono::nanoseconds timeout) {
  drain();  // a caller that waits for replies has sent its requests
  const std::size_t capacity = std::min(out.size(), batch_);
  if (capacity == 0) return 0;
  std::size_t received = receive_queued(capacity);
  if (received == 0 && timeout > 0ns) {
    const auto waited_from = std::chrono::steady_clock::now();
    const bool readable = wait_for(POLLIN, timeout);
    counters_.idle_ns += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - waited_from).count());
    if (readable) received = receive_queued(capacity);
  }
  std::size_t delivered = 0;
  for (std::size_t i = 0; i < received; ++i) {
    const msghdr& header = rx_messages_[i].msg_hdr;
    // A datagram larger than max_payload arrives cut short; no protocol can use the rest.
    if ((header.msg_flags & MSG_TRUNC) != 0) {
      ++counters_.rx_dropped;
      continue;
    }
    out[delivered++] = RxPacket{std::span(rx_storage_.get() + i * max_payload_, rx_messages_[i].msg_len),
                                to_endpoint(rx_addresses_[i])};
  }
  counters_.rx_packets += delivered;
  return delivered;
}

std::size_t UdpQueue::send(std::span<const TxRequest> packets) {
  std::size_t taken = 0;
  for (const TxRequest& request : packets) {
    if (!enqueue(*request.buffer, request.to)) break;
    ++taken;
  }
  return taken;
}

std::size_t UdpQueue::send_to_all(const TxBuffer& buffer, std::span<const Endpoint> to) {
  std::size_t taken = 0;
  for (const Endpoint& endpoint : to) {  // one payload, many addresses
    if (!enqueue(buffer, endpoint)) break;
    ++taken;
  }
  return taken;
}

bool UdpQueue::enqueue(const TxBuffer& buffer, const Endpoint& to) {
  if (queued_ == batch_ && !drain()) return false;
  tx_iovecs_[queued_] = iovec{buffer.payload, buffer.size};
  tx_addresses_[queued_] = to_sockaddr(to);
  tx_buffers_[queued_] = buffer.native;
  pool_.hold(buffer.native);
  ++queued_;
  return true;
}

bool UdpQueue::drain() {
  if (queued_ == 0) return true;
  const std::size_t sent = send_prepared(queued_);
  for (std::size_t i = 0; i < sent; ++i) pool_.drop(tx_buffers_[i]);
  // What the kernel did not take moves to the front (messages keep their own iovec and address).
  std::copy(tx_iovecs_.begin() + static_cast<std::ptrdiff_t>(sent),
            tx_iovecs_.begin() + static_cast<std::ptrdiff_t>(queued_), tx_iovecs_.begin());
  std::copy(tx_addresses_.begin() + static_cast<std::ptrdiff_t>(sent),
            tx_addresses_.begin() + static_cast<std::ptrdiff_t>(queued_), tx_addresses_.begin());
  std::copy(tx_buffers_.begin() + static_cast<std::ptrdiff_t>(sent),
            tx_buffers_.begin() + static_cast<std::ptrdiff_t>(queued_), tx_buffers_.begin());
  queued_ -= sent;
  return queued_ == 0;
}

std::size_t UdpQueue::send_prepared(std::size_t count) {
  std::size_t next = 0;
  bool waited = false;
  while (next < count) {
    ++counters_.tx_syscalls;
    const int sent = sendmmsg(socket_, tx_messages_.data() + next, static_cast<unsigned>(count - next), MSG_DONTWAIT);
    if (sent > 0) {
      // A partial send means message `next + sent` failed; the next call reports its error.
      counters_.tx_packets += static_cast<std::uint64_t>(sent);
      next += static_cast<std::size_t>(sent);
      continue;
    }
    const int error = errno;
    if (error == EINTR) continue;
    if (error == EAGAIN || error == EWOULDBLOCK || error == ENOBUFS) {
      if (waited) return next;
      waited = true;
      // ENOBUFS: the device queue is full while the socket still polls writable: plain back-off.
      if (error == ENOBUFS) {
        const timespec limit = to_timespec(kBlockedWait);
        ++counters_.tx_syscalls;
        ppoll(nullptr, 0, &limit, nullptr);
      } else {
        wait_for(POLLOUT, kBlockedWait);
      }
      continue;
    }
    // The message itself is refused (ECONNREFUSED, EMSGSIZE, ...): retrying cannot help, so it
    // counts as taken and failed.
    ++counters_.tx_errors;
    ++next;
  }
  return next;
}

std::size_t UdpQueue::receive_queued(std::size_t capacity) {
  for (std::size_t i = 0; i < capacity; ++i) rx_messages_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
  ++counters_.rx_syscalls;
  const int received =
      recvmmsg(socket_, rx_messages_.data(), static_cast<unsigned>(capacity), MSG_DONTWAIT, nullptr);
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

bool UdpQueue::wait_for(short events, std::chrono::nanoseconds timeout) {
  pollfd descriptor{socket_, events, 0};
  const timespec limit = to_timespec(timeout);
  ++(events == POLLIN ? counters_.rx_syscalls : counters_.tx_syscalls);
  return ppoll(&descriptor, 1, &limit, nullptr) > 0;
}

}  // namespace dpa::transport::socket
