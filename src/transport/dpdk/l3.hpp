// SPDX-License-Identifier: Apache-2.0
// The DPDK transport's small IPv4 stack, beside the queue that moves frames: ARP (answering,
// asking, learning), neighbours learned from received packets, the per-destination header cache,
// and the checks of received checksums. Its own frames (ARP) leave through a FrameSender, the
// queue's TX bursts. The frame builders and checks are pure: they touch only the bytes given.
#pragma once

#include <rte_arp.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_udp.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "transport/dpdk/frame.hpp"
#include "transport/dpdk/neighbour_table.hpp"
#include "transport/dpdk/port_state.hpp"
#include "transport/endpoint.hpp"

namespace dpa::transport::dpdk {

inline constexpr std::uint16_t kArpFrameBytes = kEthernetBytes + sizeof(rte_arp_hdr);  // 42

// Writes at `frame` the ARP reply to `request` (an Ethernet/IPv4 ARP request for `our_ip`) from
// `our_mac`: kArpFrameBytes bytes.
void write_arp_reply(std::byte* frame, const rte_arp_hdr& request, std::uint64_t our_mac, std::uint32_t our_ip);

// Writes at `frame` a broadcast ARP request from `our_mac` / `our_ip` for `target_ip` (host byte
// order): kArpFrameBytes bytes.
void write_arp_request(std::byte* frame, std::uint64_t our_mac, std::uint32_t our_ip, std::uint32_t target_ip);

// Whether a received frame's IPv4 and (with `check_udp`) UDP checksums hold, its lengths already
// checked: the NIC's verdict where the mbuf's `ol_flags` carry one (RX checksum offload), else
// computed here.
inline bool checksums_hold(std::uint64_t ol_flags, const rte_ipv4_hdr& ip, const rte_udp_hdr& udp,
                           std::uint16_t udp_bytes, bool check_udp) {
  const std::uint64_t ip_flags = ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
  const std::uint64_t udp_flags = ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;
  if (ip_flags == RTE_MBUF_F_RX_IP_CKSUM_BAD || udp_flags == RTE_MBUF_F_RX_L4_CKSUM_BAD) return false;
  const bool ip_holds = ip_flags == RTE_MBUF_F_RX_IP_CKSUM_GOOD || ipv4_checksum_holds(ip);
  return ip_holds &&
         (!check_udp || udp_flags == RTE_MBUF_F_RX_L4_CKSUM_GOOD || udp_checksum_holds(ip, udp, udp_bytes));
}

// Where the stack's own frames go: a frame buffer, then onto the TX burst of a link.
class FrameSender {
 public:
  // A fresh mbuf, or null when the pool is empty.
  virtual rte_mbuf* allocate_frame() = 0;
  // Queues `frame` on `link`; false when its burst is full (the caller frees the frame).
  virtual bool send_frame(std::uint8_t link, rte_mbuf* frame) = 0;

 protected:
  ~FrameSender() = default;
};

// One queue's view of the stack: the port's shared neighbour table, and this queue's header
// cache and ARP request timer (no locks: one thread per queue).
class L3 {
 public:
  L3(PortState& port, std::uint16_t local_port, FrameSender& sender) : port_(port), local_port_(local_port), sender_(sender) {}

  // A received ARP frame's header, on `link`: learns the sender (when it asks us, or is known
  // already) and answers a request for our address. False when it is not Ethernet/IPv4 ARP.
  bool on_arp(const rte_arp_hdr& arp, std::uint8_t link);

  // A received packet's sender: replies go back to it by the link it came in on.
  void learn(std::uint32_t source_ip, const NeighbourTable::Entry& sender) {
    if (const auto known = port_.neighbours.find(source_ip); !known || *known != sender) {
      port_.neighbours.learn(source_ip, sender);
    }
  }

  // The 42 header bytes for a payload of `payload_bytes` to `to` and the link that reaches it, or
  // nullptr when its MAC is unknown (ARP asked, at most once per kArpIntervalUs). Built once per
  // destination and length, then copied: a packet costs a neighbour lookup and a 42-byte copy,
  // not MAC conversions and an IPv4 checksum.
  const std::byte* header_for(const Endpoint& to, std::uint16_t payload_bytes, std::uint8_t& link) {
    const auto neighbour = port_.neighbours.find(to.address);
    if (!neighbour) {
      request_arp(to.address);
      return nullptr;
    }
    link = neighbour->link;
    const std::size_t slot = ((to.address * 2654435761u) ^ to.port ^ (std::size_t{payload_bytes} << 3)) &
                             (kHeaderCacheSize - 1);
    CachedHeader& cached = headers_[slot];
    if (!cached.valid || cached.to != to || cached.payload_bytes != payload_bytes || cached.where != *neighbour) {
      const FrameAddresses addresses{port_.links[link].mac, neighbour->mac, port_.local_ip, to.address,
                                     local_port_, to.port};
      write_frame_header(cached.bytes.data(), addresses, payload_bytes, port_.checksum_offload);
      cached.to = to;
      cached.payload_bytes = payload_bytes;
      cached.where = *neighbour;
      cached.valid = true;
    }
    return cached.bytes.data();
  }

 private:
  static constexpr std::size_t kHeaderCacheSize = 256;  // power of two; direct-mapped

  struct CachedHeader {
    Endpoint to;
    std::uint16_t payload_bytes = 0;
    bool valid = false;
    NeighbourTable::Entry where;
    std::array<std::byte, kFrameHeaderBytes> bytes{};
  };

  // Asks every link for `ip`'s MAC, unless this queue asked within kArpIntervalUs.
  void request_arp(std::uint32_t ip);

  PortState& port_;
  std::uint16_t local_port_;
  FrameSender& sender_;
  std::uint64_t last_arp_request_ = 0;
  std::array<CachedHeader, kHeaderCacheSize> headers_{};
};

}  // namespace dpa::transport::dpdk
