// SPDX-License-Identifier: Apache-2.0
#include "transport/dpdk/dpdk_queue.hpp"

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_prefetch.h>

#include <algorithm>
#include <cstring>
#include <string>

#include <fmt/format.h>

namespace dpa::transport::dpdk {
namespace {

// Idle polls of an up port between two reads of its link (PortState::Link::poll_only_when_up).
constexpr std::uint32_t kLinkCheckPolls = 4096;

std::uint64_t cycles_for(std::chrono::nanoseconds duration) {
  return static_cast<std::uint64_t>(static_cast<double>(duration.count()) * 1e-9 *
                                    static_cast<double>(rte_get_tsc_hz()));
}

std::byte* frame_of(rte_mbuf* mbuf) { return rte_pktmbuf_mtod(mbuf, std::byte*); }

}  // namespace

DpdkQueue::DpdkQueue(std::shared_ptr<PortState> port, std::uint16_t queue, rte_mempool* pool)
    : port_(std::move(port)),
      queue_(queue),
      pool_(pool),
      l3_(*port_, static_cast<std::uint16_t>(port_->base_port + queue_), *this),
      tx_(port_->links.size()) {
  const bool shared = port_->shared_polling;
  for (std::size_t link = 0; link < port_->links.size(); ++link) {
    const std::uint16_t port_id = port_->links[link].port_id;
    for (std::uint16_t rx_queue = 0; rx_queue < port_->port_queues; ++rx_queue) {
      PortState::RxClaim* claim = shared ? &port_->claim_of(link, rx_queue) : nullptr;
      if (rx_queue % port_->queues == queue_) {
        own_rx_.push_back(RxSource{port_id, rx_queue, claim, port_->links[link].poll_only_when_up,
                                   port_->links[link].poll_only_when_up});
      } else if (shared && (!port_->hardware_steering || rx_queue == 0)) {
        // With rte_flow rules only RX queue 0 (where frames no rule matches land: ARP) needs
        // others' polls.
        others_rx_.push_back(RxSource{port_id, rx_queue, claim, port_->links[link].poll_only_when_up,
                                      port_->links[link].poll_only_when_up});
      }
    }
  }
}

DpdkQueue::~DpdkQueue() {
  flush();
  rte_pktmbuf_free_bulk(held_.data(), static_cast<unsigned>(held_count_));
  rte_pktmbuf_free_bulk(recycled_.data(), static_cast<unsigned>(recycled_count_));
  for (TxBurst& burst : tx_) rte_pktmbuf_free_bulk(burst.packets.data(), static_cast<unsigned>(burst.count));
  port_->opened[queue_].store(false);
}

std::uint8_t DpdkQueue::link_of(const rte_mbuf* mbuf) const {
  const std::int16_t link = mbuf->port < RTE_MAX_ETHPORTS ? port_->link_of_port[mbuf->port] : -1;
  return static_cast<std::uint8_t>(link < 0 ? 0 : link);
}

QueueCounters DpdkQueue::counters() const {
  QueueCounters counters = counters_;
  counters.idle_ns = static_cast<std::uint64_t>(static_cast<double>(idle_cycles_) * 1e9 /
                                                static_cast<double>(rte_get_tsc_hz()));
  return counters;
}

std::size_t DpdkQueue::receive(std::span<RxPacket> out, std::chrono::nanoseconds timeout) {
  rte_pktmbuf_free_bulk(held_.data(), static_cast<unsigned>(held_count_));
  held_count_ = 0;
  const std::size_t capacity = std::min<std::size_t>({out.size(), port_->burst, kMaxBurst});
  if (capacity == 0) return 0;
  const std::uint64_t start = rte_rdtsc();
  const std::uint64_t wait = timeout.count() > 0 ? cycles_for(timeout) : 0;
  std::size_t delivered = 0;
  // One clock reading per poll step serves the flush timers, the bursts begun in this step, the
  // timeout and the idle time: a step that received nothing is idle from its start (or from the
  // end of the flush it did) to the next step.
  std::uint64_t idle_from = 0;
  for (std::uint64_t now = start;; now = rte_rdtsc()) {
    if (idle_from != 0) idle_cycles_ += now - idle_from;
    idle_from = 0;
    poll_step_tsc_ = now;
    flush_due(now);
    // Packets other queues received for this one first: they have waited longest.
    std::size_t taken = rte_ring_sc_dequeue_burst(port_->inboxes[queue_], reinterpret_cast<void**>(rx_.data()),
                                                  static_cast<unsigned>(capacity), nullptr);
    const std::size_t own = own_rx_.size();
    for (std::size_t i = 0; i < own && taken < capacity; ++i) taken = poll(own_rx_[(next_own_ + i) % own], taken, capacity);
    next_own_ = (next_own_ + 1) % own;  // no port starves the others when bursts are full
    // Another thread's RX queue, in case its thread is not polling: what lands there for this
    // thread (or any other) must not wait for that thread's next operation.
    if (!others_rx_.empty() && taken < capacity) {
      taken = poll(others_rx_[next_other_], taken, capacity);
      next_other_ = (next_other_ + 1) % others_rx_.size();
    }
    // Nothing came in: no more work to batch with right now, so what is queued leaves. While
    // packets keep coming, bursts build up until full or due.
    if (taken == 0) {
      const std::uint64_t sent = counters_.tx_packets;
      flush();
      idle_from = counters_.tx_packets == sent ? now : rte_rdtsc();
    }
    // The frames were written by another core (a peer's, or a NIC's DMA into the last-level
    // cache): ask for every mbuf's header at once and each frame two packets ahead, so the
    // transfers overlap instead of stalling classify() once per line.
    // For writing: the reference count, lengths and flags change here or when the packet is sent
    // back or freed.
    for (std::size_t i = 0; i < taken; ++i) __builtin_prefetch(rx_[i], 1, 3);
    for (std::size_t i = 0; i < std::min<std::size_t>(taken, 2); ++i) rte_prefetch0(frame_of(rx_[i]));
    for (std::size_t i = 0; i < taken; ++i) {
      if (i + 2 < taken) rte_prefetch0(frame_of(rx_[i + 2]));
      classify(rx_[i], out, delivered);
    }
    if (delivered > 0 || now - start >= wait) break;
  }
  if (idle_from != 0) idle_cycles_ += rte_rdtsc() - idle_from;
  counters_.rx_packets += delivered;
  return delivered;
}

std::string DpdkQueue::link_problems() const {
  std::string problems;
  for (std::size_t link = 0; link < port_->links.size(); ++link) {
    if (link_is_up(port_->links[link].port_id)) continue;
    problems += fmt::format("{}DPDK port {} has no link{}", problems.empty() ? "" : "; ", port_->link_names[link],
                            port_->no_link_hints[link]);
  }
  return problems;
}

bool DpdkQueue::link_came_up(RxSource& source) {
  if (!link_is_up(source.port_id)) return false;
  source.link_unknown = false;
  source.idle_polls_until_link_check = kLinkCheckPolls;
  return true;
}

std::size_t DpdkQueue::poll(RxSource& source, std::size_t taken, std::size_t capacity) {
  if (source.link_unknown && !link_came_up(source)) return taken;
  if (source.claim != nullptr && !source.claim->try_take()) return taken;  // another thread polls it now
  const std::uint16_t received = rte_eth_rx_burst(source.port_id, source.rx_queue, rx_.data() + taken,
                                                  static_cast<std::uint16_t>(capacity - taken));
  if (source.claim != nullptr) source.claim->give_back();
  // Only idle polls count towards reading the link again: a busy port pays nothing for it.
  if (received == 0 && source.poll_only_when_up && --source.idle_polls_until_link_check == 0) {
    source.link_unknown = true;
  }
  return taken + received;
}

void DpdkQueue::classify(rte_mbuf* mbuf, std::span<RxPacket> out, std::size_t& delivered) {
  if (mbuf->nb_segs > 1 && rte_pktmbuf_linearize(mbuf) != 0) {
    ++counters_.rx_dropped;
    rte_pktmbuf_free(mbuf);
    return;
  }
  const std::uint32_t length = rte_pktmbuf_data_len(mbuf);
  const std::byte* frame = frame_of(mbuf);
  const auto* ethernet = reinterpret_cast<const rte_ether_hdr*>(frame);
  const std::uint16_t type = length >= kEthernetBytes ? rte_be_to_cpu_16(ethernet->ether_type) : 0;
  if (type == RTE_ETHER_TYPE_ARP && length >= kEthernetBytes + sizeof(rte_arp_hdr)) {
    if (!l3_.on_arp(*reinterpret_cast<const rte_arp_hdr*>(frame + kEthernetBytes), link_of(mbuf))) {
      ++counters_.rx_dropped;
    }
    rte_pktmbuf_free(mbuf);
    return;
  }
  const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(frame + kEthernetBytes);
  const auto* udp = reinterpret_cast<const rte_udp_hdr*>(frame + kEthernetBytes + kIpv4Bytes);
  if (type != RTE_ETHER_TYPE_IPV4 || length < kFrameHeaderBytes || ip->version_ihl != RTE_IPV4_VHL_DEF ||
      ip->next_proto_id != IPPROTO_UDP || rte_be_to_cpu_32(ip->dst_addr) != port_->local_ip ||
      (ip->fragment_offset & rte_cpu_to_be_16(RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK)) != 0) {
    ++counters_.rx_dropped;
    rte_pktmbuf_free(mbuf);
    return;
  }
  const std::uint16_t udp_bytes = rte_be_to_cpu_16(udp->dgram_len);
  if (udp_bytes < kUdpBytes || static_cast<std::uint32_t>(kEthernetBytes + kIpv4Bytes + udp_bytes) > length) {
    ++counters_.rx_dropped;
    rte_pktmbuf_free(mbuf);
    return;
  }
  if (!checksums_hold(mbuf->ol_flags, *ip, *udp, udp_bytes, port_->check_udp_checksum)) {
    ++counters_.rx_bad_checksum;
    rte_pktmbuf_free(mbuf);
    return;
  }
  const std::uint16_t destination = rte_be_to_cpu_16(udp->dst_port);
  if (destination != static_cast<std::uint16_t>(port_->base_port + queue_)) {
    // Another queue's packet (no hardware steering on this port): hand it over without a lock.
    if (port_->owns(destination) && rte_ring_mp_enqueue(port_->inboxes[destination - port_->base_port], mbuf) == 0) {
      ++counters_.rx_dispatched;
    } else {
      ++counters_.rx_dropped;
      rte_pktmbuf_free(mbuf);
    }
    return;
  }
  const std::uint32_t source_ip = rte_be_to_cpu_32(ip->src_addr);
  l3_.learn(source_ip, {mac_to_u64(ethernet->src_addr), link_of(mbuf)});
  held_[held_count_] = mbuf;
  out[delivered++] = RxPacket{
      std::span(rte_pktmbuf_mtod_offset(mbuf, std::byte*, kFrameHeaderBytes), udp_bytes - kUdpBytes),
      Endpoint{source_ip, rte_be_to_cpu_16(udp->src_port)}, &held_[held_count_]};
  ++held_count_;
}

std::size_t DpdkQueue::allocate(std::span<TxBuffer> out) {
  std::array<rte_mbuf*, kMaxBurst> mbufs;
  std::size_t given = 0;
  for (; given < out.size() && recycled_count_ > 0; ++given) {
    rte_mbuf* mbuf = recycled_[--recycled_count_];
    rte_pktmbuf_reset(mbuf);
    out[given] = TxBuffer{frame_of(mbuf) + kFrameHeaderBytes, 0, port_->max_payload, mbuf};
  }
  while (given < out.size()) {
    // All or nothing per call in DPDK: ask for a burst at a time, then one by one at the end.
    const std::size_t wanted = std::min(out.size() - given, kMaxBurst);
    std::size_t got = wanted;
    if (rte_mempool_get_bulk(pool_, reinterpret_cast<void**>(mbufs.data()), static_cast<unsigned>(wanted)) == 0) {
      // rte_pktmbuf_alloc_bulk, with the headers asked for before any is reset: a freed mbuf's
      // lines are usually in the core that freed it (the peer that received it), so resetting
      // them one by one would wait for each transfer in turn.
      for (std::size_t i = 0; i < wanted; ++i) {
        rte_prefetch0(mbufs[i]);
        rte_prefetch0(&mbufs[i]->next);  // the second cache line
      }
      for (std::size_t i = 0; i < wanted; ++i) rte_pktmbuf_reset(mbufs[i]);
    } else {
      for (got = 0; got < wanted; ++got) {
        mbufs[got] = rte_pktmbuf_alloc(pool_);
        if (mbufs[got] == nullptr) break;
      }
    }
    for (std::size_t i = 0; i < got; ++i) {
      // The payload sits right after the header room; the frame header is written at send time.
      out[given++] = TxBuffer{frame_of(mbufs[i]) + kFrameHeaderBytes, 0, port_->max_payload, mbufs[i]};
    }
    if (got < wanted) break;
  }
  return given;
}

void DpdkQueue::release(std::span<TxBuffer> buffers) {
  for (TxBuffer& buffer : buffers) {
    auto* mbuf = static_cast<rte_mbuf*>(buffer.native);
    if (mbuf != nullptr && recycled_count_ < recycled_.size() && RTE_MBUF_DIRECT(mbuf) &&
        rte_mbuf_refcnt_read(mbuf) == 1 && mbuf->next == nullptr && mbuf->pool == pool_) {
      recycled_[recycled_count_++] = mbuf;  // ours alone: no TX ring or clone holds it
    } else if (mbuf != nullptr) {
      // A buffer still waiting in a TX ring keeps its other references; the PMD frees it last.
      rte_pktmbuf_free(mbuf);
    }
    buffer = TxBuffer{};
  }
}

TxBuffer DpdkQueue::take_for_reply(const RxPacket& packet, std::uint32_t bytes) {
  auto** held = static_cast<rte_mbuf**>(packet.native);
  if (held == nullptr || *held == nullptr) return {};
  rte_mbuf* mbuf = *held;
  // Ours alone (no peer keeps it for retransmission, no clone shares its data) and one segment,
  // whose frame header is rewritten at send time as for an allocated buffer.
  if (!RTE_MBUF_DIRECT(mbuf) || rte_mbuf_refcnt_read(mbuf) != 1 || mbuf->nb_segs != 1) return {};
  const std::uint32_t room = rte_pktmbuf_tailroom(mbuf) + rte_pktmbuf_data_len(mbuf);
  const std::uint32_t capacity =
      room > kFrameHeaderBytes ? std::min<std::uint32_t>(port_->max_payload, room - kFrameHeaderBytes) : 0;
  if (capacity < bytes) return {};
  *held = nullptr;  // the next receive() no longer frees it: the caller releases it
  return TxBuffer{frame_of(mbuf) + kFrameHeaderBytes, 0, capacity, mbuf};
}

bool DpdkQueue::chain_payload(rte_mbuf* head, rte_mbuf* buffer, std::uint16_t payload_bytes) {
  rte_mbuf* body = rte_pktmbuf_clone(buffer, pool_);  // shares the payload by reference count
  if (body == nullptr) return false;
  body->data_off = static_cast<std::uint16_t>(buffer->data_off + kFrameHeaderBytes);
  body->data_len = payload_bytes;
  body->pkt_len = payload_bytes;
  rte_pktmbuf_chain(head, body);
  return true;
}

std::uint16_t DpdkQueue::payload_sum(const TxBuffer& buffer) const {
  return port_->software_udp_checksum ? rte_raw_cksum(buffer.payload, buffer.size) : 0;
}

void DpdkQueue::finish_frame(rte_mbuf* first_segment, std::uint16_t sum) {
  first_segment->ol_flags = 0;
  if (port_->checksum_offload) {
    request_checksum_offload(first_segment);
  } else if (port_->software_udp_checksum) {
    // The header came from header_for() with no UDP checksum; a multicast's frames share one payload sum.
    write_udp_checksum(rte_pktmbuf_mtod(first_segment, std::byte*), sum);
  }
}

std::size_t DpdkQueue::send(std::span<const TxRequest> packets) {
  std::size_t taken = 0;
  for (const TxRequest& request : packets) {
    if (!send_one(*request.buffer, request.to, payload_sum(*request.buffer))) break;
    ++taken;
  }
  return taken;
}

bool DpdkQueue::send_one(const TxBuffer& buffer, const Endpoint& to, std::uint16_t sum) {
  auto* mbuf = static_cast<rte_mbuf*>(buffer.native);
  const auto payload_bytes = static_cast<std::uint16_t>(buffer.size);
  std::uint8_t link = 0;
  const std::byte* header = header_for(to, payload_bytes, link);
  // Unresolved: consumed, dropped until ARP answers; the protocol retransmits.
  if (header == nullptr) return true;
  std::byte* frame = frame_of(mbuf);
  if (rte_mbuf_refcnt_read(mbuf) == 1) {
    std::memcpy(frame, header, kFrameHeaderBytes);  // nobody else reads it now
  } else if (std::memcmp(frame, header, kFrameHeaderBytes) != 0) {
    // Still in flight with another header: send the payload under a header of its own.
    rte_mbuf* head = rte_pktmbuf_alloc(pool_);
    if (head == nullptr) return false;
    std::memcpy(rte_pktmbuf_append(head, kFrameHeaderBytes), header, kFrameHeaderBytes);
    if (!chain_payload(head, mbuf, payload_bytes)) {
      rte_pktmbuf_free(head);
      return false;
    }
    finish_frame(head, sum);
    if (!enqueue(link, head)) {
      rte_pktmbuf_free(head);
      return false;
    }
    return true;
  }
  mbuf->data_len = static_cast<std::uint16_t>(kFrameHeaderBytes + payload_bytes);
  mbuf->pkt_len = mbuf->data_len;
  finish_frame(mbuf, sum);
  // The TX ring holds its own reference, so the caller can retransmit or release at will.
  rte_mbuf_refcnt_update(mbuf, 1);
  if (!enqueue(link, mbuf)) {
    rte_mbuf_refcnt_update(mbuf, -1);
    return false;
  }
  return true;
}

std::size_t DpdkQueue::send_to_all(const TxBuffer& buffer, std::span<const Endpoint> to) {
  if (to.empty()) return 0;
  // The first destination gets the buffer itself (its header room is free); the others get a
  // header each in front of the shared payload.
  const std::uint16_t sum = payload_sum(buffer);
  if (!send_one(buffer, to[0], sum)) return 0;
  auto* mbuf = static_cast<rte_mbuf*>(buffer.native);
  const auto payload_bytes = static_cast<std::uint16_t>(buffer.size);
  std::size_t served = 1;
  for (const Endpoint& endpoint : to.subspan(1)) {
    std::uint8_t link = 0;
    const std::byte* header = header_for(endpoint, payload_bytes, link);
    if (header == nullptr) {
      ++served;
      continue;
    }
    rte_mbuf* head = rte_pktmbuf_alloc(pool_);
    if (head == nullptr) break;
    std::memcpy(rte_pktmbuf_append(head, kFrameHeaderBytes), header, kFrameHeaderBytes);
    if (port_->chained_transmit) {
      // One payload, N small headers: the payload is shared by reference count.
      if (!chain_payload(head, mbuf, payload_bytes)) {
        rte_pktmbuf_free(head);
        break;
      }
    } else {
      // The port cannot send chained mbufs: the payload has to be in the frame.
      std::memcpy(rte_pktmbuf_append(head, payload_bytes), buffer.payload, payload_bytes);
    }
    finish_frame(head, sum);
    if (!enqueue(link, head)) {
      rte_pktmbuf_free(head);
      break;
    }
    ++served;
  }
  return served;
}

bool DpdkQueue::enqueue(std::uint8_t link, rte_mbuf* mbuf) {
  TxBurst& burst = tx_[link];
  const std::size_t limit = std::min<std::size_t>(port_->burst, kMaxBurst);
  if (burst.count == limit) flush_link(link);
  if (burst.count == limit) return false;
  // Stamped with the last poll step's time, never later than the packet came: it waits at most
  // tx_flush from here, counted by the poll steps of receive().
  if (burst.count == 0) burst.oldest = poll_step_tsc_;
  burst.packets[burst.count++] = mbuf;
  if (burst.count == limit) flush_link(link);
  return true;
}

void DpdkQueue::flush_due(std::uint64_t now) {
  for (std::size_t link = 0; link < tx_.size(); ++link) {
    if (tx_[link].count > 0 && now - tx_[link].oldest >= port_->tx_flush_cycles) {
      flush_link(static_cast<std::uint8_t>(link));
    }
  }
}

void DpdkQueue::flush() {
  for (std::size_t link = 0; link < tx_.size(); ++link) flush_link(static_cast<std::uint8_t>(link));
}

void DpdkQueue::flush_link(std::uint8_t link) {
  TxBurst& burst = tx_[link];
  if (burst.count == 0) return;
  const std::uint16_t sent = rte_eth_tx_burst(port_->links[link].port_id, queue_, burst.packets.data(),
                                              static_cast<std::uint16_t>(burst.count));
  counters_.tx_packets += sent;
  counters_.tx_bursts += sent > 0 ? 1 : 0;
  std::copy(burst.packets.begin() + sent, burst.packets.begin() + static_cast<std::ptrdiff_t>(burst.count),
            burst.packets.begin());
  burst.count -= sent;
  if (burst.count > 0) burst.oldest = poll_step_tsc_;  // the rest waits for the device's ring
}

}  // namespace dpa::transport::dpdk
