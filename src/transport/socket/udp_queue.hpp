// SPDX-License-Identifier: Apache-2.0
// UDP socket queue: one non-blocking socket, batched recvmmsg/sendmmsg, every buffer and message
// array allocated once at construction so the packet path never allocates. Sends are queued (each
// holding a reference to its buffer) and go out in one sendmmsg when `batch` are queued or at
// flush(), so one buffer sent to many addresses is one iovec repeated, never a copy.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <memory>
#include <vector>

#include "dpa/transport_config.hpp"
#include "transport/queue.hpp"
#include "transport/socket/buffer_pool.hpp"

namespace dpa::transport::socket {

class UdpQueue final : public Queue {
 public:
  explicit UdpQueue(const UdpTransportConfig& config);  // binds; dpa::Error naming the address
  UdpQueue(const UdpQueue&) = delete;
  UdpQueue& operator=(const UdpQueue&) = delete;
  ~UdpQueue() override;

  std::size_t receive(std::span<RxPacket> out, std::chrono::nanoseconds timeout) override;
  std::size_t allocate(std::span<TxBuffer> out) override { return pool_.allocate(out); }
  std::size_t send(std::span<const TxRequest> packets) override;
  std::size_t send_to_all(const TxBuffer& buffer, std::span<const Endpoint> to) override;
  void release(std::span<TxBuffer> buffers) override { pool_.release(buffers); }
  void flush() override { drain(); }

  [[nodiscard]] std::uint32_t max_payload() const override { return max_payload_; }
  [[nodiscard]] Endpoint local_endpoint() const override { return local_; }
  [[nodiscard]] QueueCounters counters() const override { return counters_; }

 private:
  std::size_t receive_queued(std::size_t capacity);
  bool wait_for(short events, std::chrono::nanoseconds timeout);
  // Queues one datagram; false when the queue is full and the kernel takes none of it.
  bool enqueue(const TxBuffer& buffer, const Endpoint& to);
  // Sends the queued datagrams; false when some stay queued (the socket buffer is full).
  bool drain();
  // Sends the `count` messages prepared in tx_messages_; returns how many were taken.
  std::size_t send_prepared(std::size_t count);

  int socket_ = -1;
  std::size_t batch_;
  std::uint32_t max_payload_;
  BufferPool pool_;
  std::unique_ptr<std::byte[]> rx_storage_;  // batch_ buffers of max_payload_ bytes
  std::vector<mmsghdr> rx_messages_;
  std::vector<iovec> rx_iovecs_;
  std::vector<sockaddr_in> rx_addresses_;
  std::vector<mmsghdr> tx_messages_;
  std::vector<iovec> tx_iovecs_;
  std::vector<sockaddr_in> tx_addresses_;
  std::vector<const void*> tx_buffers_;  // the pool handle each queued message holds
  std::size_t queued_ = 0;
  Endpoint local_;
  QueueCounters counters_;
};

}  // namespace dpa::transport::socket
