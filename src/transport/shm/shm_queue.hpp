// SPDX-License-Identifier: Apache-2.0
// Shared-memory queue: owns a segment (its inbox and transmit buffers) and maps the segments of
// the queues it talks to. send() puts a descriptor of the caller's buffer into the destination's
// inbox (no copy; send_to_all puts the same one into many), receive() hands out views of the
// senders' buffers and gives them back at the next receive(). Nothing allocates or locks per
// packet; a system call happens only to wake or to put to sleep an idle receiver.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "dpa/transport_config.hpp"
#include "transport/queue.hpp"
#include "transport/shm/segment.hpp"

namespace dpa::transport::shm {

class ShmQueue final : public Queue {
 public:
  // port 0: a free port of the fabric. dpa::Error when the port is taken or the memory is short.
  ShmQueue(const ShmTransportConfig& config, std::uint16_t port);
  ShmQueue(const ShmQueue&) = delete;
  ShmQueue& operator=(const ShmQueue&) = delete;
  ~ShmQueue() override;

  std::size_t receive(std::span<RxPacket> out, std::chrono::nanoseconds timeout) override;
  std::size_t allocate(std::span<TxBuffer> out) override;
  std::size_t send(std::span<const TxRequest> packets) override;
  std::size_t send_to_all(const TxBuffer& buffer, std::span<const Endpoint> to) override;
  void release(std::span<TxBuffer> buffers) override;
  void flush() override {}  // every send is in its inbox at once

  // A descriptor the inbox took is read: nothing between the processes drops it.
  [[nodiscard]] bool lossless() const override { return true; }
  [[nodiscard]] std::uint32_t max_payload() const override { return own_->max_payload(); }
  [[nodiscard]] Endpoint local_endpoint() const override;
  [[nodiscard]] QueueCounters counters() const override { return counters_; }

  static constexpr std::size_t kBurst = 64;  // descriptors one receive() takes at most
  // Every endpoint of a fabric has this address (a shm fabric is one host).
  static constexpr std::uint32_t kAddress = 0x7f000001;

 private:
  // Where a packet to `port` goes: the live segment of its owner (this queue's own included,
  // mapped afresh when its owner changed), or nullptr when nobody owns it.
  Segment* destination(std::uint16_t port);
  // The segment a received packet's buffer lies in: its sender's, even if closed since.
  Segment* source(const Descriptor& packet);
  enum class Enqueued { queued, dropped, full };
  // Queues one descriptor of `buffer` at `to`. full: its inbox has no room (nothing taken);
  // dropped: it is lost (nobody listens there, or a receiver over the backlog limit).
  Enqueued enqueue(const TxBuffer& buffer, const Endpoint& to);
  void wake_destinations();
  void drop_reference(Segment& segment, std::uint32_t buffer);
  // Gives back the buffers of the packets the last receive() handed out.
  void release_received();

  ShmTransportConfig config_;
  std::unique_ptr<Segment> own_;
  std::unordered_map<std::uint16_t, std::unique_ptr<Segment>> peers_;  // the current owner's, by port
  // Segments of owners that left, kept mapped for their packets still in the inbox; a few.
  std::vector<std::unique_ptr<Segment>> retired_;
  Segment* last_destination_ = nullptr;  // the last one looked up (most sends go to one port)
  Segment* last_source_ = nullptr;       // the last sender's (most bursts come from one)
  std::vector<std::uint16_t> free_;     // own buffers nobody references
  std::vector<std::uint16_t> pending_;  // own buffers released here, still in some inbox or receiver
  std::vector<std::uint64_t> received_;     // descriptors handed out by the last receive()
  std::vector<Segment*> received_from_;     // their segments
  std::vector<Segment*> to_wake_;           // inboxes this send() put packets into
  QueueCounters counters_;
};

}  // namespace dpa::transport::shm
