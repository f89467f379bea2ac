// SPDX-License-Identifier: Apache-2.0
// One thread's RX/TX queue pair on each port of a DPDK device: burst RX (plus the inbox other
// queues dispatch to), TX buffered per port until a burst is full, its first packet has waited
// tx_flush, or a poll step of receive() finds nothing to receive (flush() sends at once), mbufs
// from the queue's own pool.
// Busy-polls; nothing on the packet path allocates from the heap or takes a lock. ARP, neighbours
// and frame headers are the L3 stack's (l3.hpp); its ARP frames leave through this queue's bursts.
#pragma once

#include <rte_mbuf.h>

#include <array>
#include <memory>
#include <vector>

#include "transport/dpdk/frame.hpp"
#include "transport/dpdk/l3.hpp"
#include "transport/dpdk/port_state.hpp"
#include "transport/queue.hpp"

namespace dpa::transport::dpdk {

class DpdkQueue final : public Queue, private FrameSender {
 public:
  static constexpr std::size_t kMaxBurst = 512;

  DpdkQueue(std::shared_ptr<PortState> port, std::uint16_t queue, rte_mempool* pool);
  DpdkQueue(const DpdkQueue&) = delete;
  DpdkQueue& operator=(const DpdkQueue&) = delete;
  ~DpdkQueue() override;

  std::size_t receive(std::span<RxPacket> out, std::chrono::nanoseconds timeout) override;
  std::size_t allocate(std::span<TxBuffer> out) override;
  std::size_t send(std::span<const TxRequest> packets) override;
  std::size_t send_to_all(const TxBuffer& buffer, std::span<const Endpoint> to) override;
  void release(std::span<TxBuffer> buffers) override;
  TxBuffer take_for_reply(const RxPacket& packet, std::uint32_t bytes) override;
  void flush() override;

  [[nodiscard]] std::uint32_t max_payload() const override { return port_->max_payload; }
  [[nodiscard]] Endpoint local_endpoint() const override {
    return Endpoint{port_->local_ip, static_cast<std::uint16_t>(port_->base_port + queue_)};
  }
  [[nodiscard]] QueueCounters counters() const override;
  [[nodiscard]] std::string link_problems() const override;

 private:
  struct TxBurst {
    std::array<rte_mbuf*, kMaxBurst> packets{};
    std::size_t count = 0;
    std::uint64_t oldest = 0;  // TSC of the poll step before the oldest packet was queued
  };

  // Sends one buffer to one endpoint (its own frame when free, else a header chained to it);
  // false when the TX burst is full or the pool is empty.
  // `sum`: the payload's 16-bit one's-complement sum where UDP checksums are computed here
  // (payload_sum()), else 0.
  bool send_one(const TxBuffer& buffer, const Endpoint& to, std::uint16_t sum);
  std::uint16_t payload_sum(const TxBuffer& buffer) const;
  // Sorts one received frame: ours (appended to `out`), another queue's, ARP, or not for us.
  void classify(rte_mbuf* mbuf, std::span<RxPacket> out, std::size_t& delivered);
  // FrameSender: the L3 stack's ARP frames.
  rte_mbuf* allocate_frame() override { return rte_pktmbuf_alloc(pool_); }
  bool send_frame(std::uint8_t link, rte_mbuf* frame) override { return enqueue(link, frame); }
  // Takes one frame into the link's TX burst; false when it is full and the port takes none.
  bool enqueue(std::uint8_t link, rte_mbuf* mbuf);
  void flush_link(std::uint8_t link);
  // Sends the bursts whose oldest packet has waited tx_flush by `now` (TSC).
  void flush_due(std::uint64_t now);
  // L3::header_for, counting a destination whose MAC is unknown (its packet is dropped).
  const std::byte* header_for(const Endpoint& to, std::uint16_t payload_bytes, std::uint8_t& link) {
    const std::byte* header = l3_.header_for(to, payload_bytes, link);
    if (header == nullptr) ++counters_.tx_unresolved;
    return header;
  }
  // Appends `buffer`'s payload (past its frame header) to `head` as a second segment that
  // shares the data; false when the pool is empty.
  bool chain_payload(rte_mbuf* head, rte_mbuf* buffer, std::uint16_t payload_bytes);
  void finish_frame(rte_mbuf* first_segment, std::uint16_t sum);
  std::uint8_t link_of(const rte_mbuf* mbuf) const;

  std::shared_ptr<PortState> port_;
  std::uint16_t queue_;
  rte_mempool* pool_;
  L3 l3_;
  std::array<rte_mbuf*, kMaxBurst> rx_{};
  // Delivered by the last receive(), freed by the next (but for those take_for_reply() took:
  // nulled here; each RxPacket's native handle is its entry).
  std::array<rte_mbuf*, kMaxBurst> held_{};
  std::size_t held_count_ = 0;
  // Transmit buffers released while nobody else held them, handed out again by allocate() before
  // the pool: most packets then skip a mempool put and get (last in, first out: still in cache).
  std::array<rte_mbuf*, kMaxBurst> recycled_{};
  std::size_t recycled_count_ = 0;
  // One RX queue of one port that this queue polls: its own (every port's RX queues that no
  // thread of its own polls first), or, with shared polling, another thread's.
  struct RxSource {
    std::uint16_t port_id = 0;
    std::uint16_t rx_queue = 0;
    PortState::RxClaim* claim = nullptr;  // null: polled by this queue alone
    bool poll_only_when_up = false;       // PortState::Link
    bool link_unknown = false;            // such a port's link is read before the next poll
    std::uint32_t idle_polls_until_link_check = 0;
  };
  // Polls one source into rx_[taken..capacity); returns how many it received.
  std::size_t poll(RxSource& source, std::size_t taken, std::size_t capacity);
  // For a port polled only when up: reads its link while down, and again after kLinkCheckPolls
  // idle polls while up (a peer that goes away and comes back connects again). True when up.
  static bool link_came_up(RxSource& source);

  std::vector<TxBurst> tx_;  // one per link
  std::vector<RxSource> own_rx_;
  std::vector<RxSource> others_rx_;  // polled one per poll step, in turn
  std::size_t next_own_ = 0;    // RX polls its sources in turn, starting here
  std::size_t next_other_ = 0;
  std::uint64_t poll_step_tsc_ = 0;  // TSC read at the start of the latest poll step
  std::uint64_t idle_cycles_ = 0;  // poll steps that found nothing (QueueCounters::idle_ns)
  QueueCounters counters_;
};

}  // namespace dpa::transport::dpdk
