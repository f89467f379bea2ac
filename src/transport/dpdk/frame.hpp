// SPDX-License-Identifier: Apache-2.0
// Ethernet/IPv4/UDP framing for the DPDK transport: the 42 bytes in front of every payload.
#pragma once

#include <rte_arp.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_udp.h>

#include <cstdint>
#include <cstring>

namespace dpa::transport::dpdk {

inline constexpr std::uint16_t kEthernetBytes = sizeof(rte_ether_hdr);
inline constexpr std::uint16_t kIpv4Bytes = sizeof(rte_ipv4_hdr);
inline constexpr std::uint16_t kUdpBytes = sizeof(rte_udp_hdr);
inline constexpr std::uint16_t kFrameHeaderBytes = kEthernetBytes + kIpv4Bytes + kUdpBytes;  // 42
inline constexpr std::uint64_t kBroadcastMac = 0xffffffffffffULL;

inline std::uint64_t mac_to_u64(const rte_ether_addr& mac) {
  std::uint64_t value = 0;
  for (const std::uint8_t byte : mac.addr_bytes) value = value << 8 | byte;
  return value;
}

inline rte_ether_addr u64_to_mac(std::uint64_t value) {
  rte_ether_addr mac{};
  for (int i = 5; i >= 0; --i, value >>= 8) mac.addr_bytes[i] = static_cast<std::uint8_t>(value & 0xff);
  return mac;
}

// Addresses of one packet, in host byte order except the MACs.
struct FrameAddresses {
  std::uint64_t source_mac = 0;
  std::uint64_t destination_mac = 0;
  std::uint32_t source_ip = 0;
  std::uint32_t destination_ip = 0;
  std::uint16_t source_port = 0;
  std::uint16_t destination_port = 0;
};

// Writes the 42 header bytes at `frame` for a UDP payload of `payload_bytes`. With
// `checksum_offload` the NIC fills the IPv4 checksum (the mbuf flags ask for it) and the UDP
// checksum is the pseudo-header sum the NIC completes; without it the IPv4 checksum is computed
// here and the UDP checksum is 0 ("none", valid for IPv4), which spares a pass over the payload.
inline void write_frame_header(std::byte* frame, const FrameAddresses& to, std::uint16_t payload_bytes,
                               bool checksum_offload) {
  auto* ethernet = reinterpret_cast<rte_ether_hdr*>(frame);
  ethernet->dst_addr = u64_to_mac(to.destination_mac);
  ethernet->src_addr = u64_to_mac(to.source_mac);
  ethernet->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
  auto* ip = reinterpret_cast<rte_ipv4_hdr*>(frame + kEthernetBytes);
  ip->version_ihl = RTE_IPV4_VHL_DEF;
  ip->type_of_service = 0;
  ip->total_length = rte_cpu_to_be_16(static_cast<std::uint16_t>(kIpv4Bytes + kUdpBytes + payload_bytes));
  ip->packet_id = 0;
  ip->fragment_offset = rte_cpu_to_be_16(RTE_IPV4_HDR_DF_FLAG);
  ip->time_to_live = 64;
  ip->next_proto_id = IPPROTO_UDP;
  ip->hdr_checksum = 0;
  ip->src_addr = rte_cpu_to_be_32(to.source_ip);
  ip->dst_addr = rte_cpu_to_be_32(to.destination_ip);
  auto* udp = reinterpret_cast<rte_udp_hdr*>(frame + kEthernetBytes + kIpv4Bytes);
  udp->src_port = rte_cpu_to_be_16(to.source_port);
  udp->dst_port = rte_cpu_to_be_16(to.destination_port);
  udp->dgram_len = rte_cpu_to_be_16(static_cast<std::uint16_t>(kUdpBytes + payload_bytes));
  if (checksum_offload) {
    udp->dgram_cksum = rte_ipv4_phdr_cksum(ip, RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_UDP_CKSUM);
  } else {
    udp->dgram_cksum = 0;
    ip->hdr_checksum = rte_ipv4_cksum(ip);
  }
}

// The one's-complement sum of the IPv4 pseudo-header and `datagram_sum` (the 16-bit sums of the UDP
// header and payload, added), folded to 16 bits: what sending complements and checking compares.
inline std::uint16_t udp_sum(const rte_ipv4_hdr& ip, std::uint32_t datagram_sum) {
  std::uint32_t sum = std::uint32_t{rte_ipv4_phdr_cksum(&ip, 0)} + datagram_sum;
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(sum);
}

// Completes the UDP checksum of the frame at `frame`, whose header write_frame_header() wrote
// without offload (UDP checksum 0), from `payload_sum`, rte_raw_cksum() of its payload: one's
// complement sums add, so a multicast sums its payload once for every destination's header.
inline void write_udp_checksum(std::byte* frame, std::uint16_t payload_sum) {
  const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(frame + kEthernetBytes);
  auto* udp = reinterpret_cast<rte_udp_hdr*>(frame + kEthernetBytes + kIpv4Bytes);
  const auto checksum = static_cast<std::uint16_t>(
      ~udp_sum(*ip, std::uint32_t{rte_raw_cksum(udp, kUdpBytes)} + payload_sum));
  udp->dgram_cksum = checksum == 0 ? 0xffff : checksum;  // 0 would mean "no checksum" (RFC 768)
}

// Whether a received frame's IPv4 header checksum and UDP checksum (0: none, valid for IPv4) hold,
// computed here: for ports whose driver does not check them (the mbuf's flags say unknown).
// `udp_bytes` is the UDP length, already checked against the frame.
inline bool ipv4_checksum_holds(const rte_ipv4_hdr& ip) { return rte_raw_cksum(&ip, kIpv4Bytes) == 0xffff; }

inline bool udp_checksum_holds(const rte_ipv4_hdr& ip, const rte_udp_hdr& udp, std::uint16_t udp_bytes) {
  if (udp.dgram_cksum == 0) return true;
  // One's-complement sum over the pseudo-header, the UDP header (checksum included) and the
  // payload: all ones when it holds.
  return udp_sum(ip, rte_raw_cksum(&udp, udp_bytes)) == 0xffff;
}

// Marks an mbuf whose first segment starts with the frame header for the NIC's checksums.
inline void request_checksum_offload(rte_mbuf* mbuf) {
  mbuf->l2_len = kEthernetBytes;
  mbuf->l3_len = kIpv4Bytes;
  mbuf->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_UDP_CKSUM;
}

}  // namespace dpa::transport::dpdk
