// SPDX-License-Identifier: Apache-2.0
// The DPDK transport's IPv4 stack (transport/dpdk/l3.hpp) without a NIC or the EAL: ARP frames
// built and answered, neighbours learned, headers cached, and received checksums judged by the
// NIC's flags or computed. Frames the stack sends land in a recording FrameSender.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <utility>
#include <vector>

#include "transport/dpdk/frame.hpp"
#include "transport/dpdk/l3.hpp"
#include "transport/dpdk/port_state.hpp"

namespace dpa::transport::dpdk {
namespace {

constexpr std::uint32_t kOurIp = 0x0a000001;    // 10.0.0.1
constexpr std::uint32_t kPeerIp = 0x0a000002;   // 10.0.0.2
constexpr std::uint64_t kOurMac = 0x020000000001;
constexpr std::uint64_t kOtherLinkMac = 0x020000000009;
constexpr std::uint64_t kPeerMac = 0x02000000aa02;

rte_arp_hdr arp_request(std::uint64_t sender_mac, std::uint32_t sender_ip, std::uint32_t target_ip) {
  std::array<std::byte, kArpFrameBytes> frame{};
  write_arp_request(frame.data(), sender_mac, sender_ip, target_ip);
  rte_arp_hdr arp;
  std::memcpy(&arp, frame.data() + kEthernetBytes, sizeof arp);
  return arp;
}

// Frames the stack sends, in mbufs that need no mempool: each wraps a buffer of its own.
class RecordingSender final : public FrameSender {
 public:
  rte_mbuf* allocate_frame() override {
    std::array<std::byte, 128>& bytes = buffers_.emplace_back();
    rte_mbuf& mbuf = mbufs_.emplace_back();
    mbuf.buf_addr = bytes.data();
    mbuf.buf_len = static_cast<std::uint16_t>(bytes.size());
    mbuf.nb_segs = 1;
    return &mbuf;
  }
  bool send_frame(std::uint8_t link, rte_mbuf* frame) override {
    sent.emplace_back(link, frame);
    return true;
  }

  std::vector<std::pair<std::uint8_t, rte_mbuf*>> sent;

 private:
  std::deque<rte_mbuf> mbufs_;  // a deque never moves its elements
  std::deque<std::array<std::byte, 128>> buffers_;
};

const rte_ether_hdr& ethernet_of(rte_mbuf* mbuf) { return *rte_pktmbuf_mtod(mbuf, const rte_ether_hdr*); }
const rte_arp_hdr& arp_of(rte_mbuf* mbuf) { return *rte_pktmbuf_mtod_offset(mbuf, const rte_arp_hdr*, kEthernetBytes); }

class L3Stack : public ::testing::Test {
 protected:
  L3Stack() : port_(1), l3_(port_, 4242, sender_) {
    port_.links = {PortState::Link{0, kOurMac}, PortState::Link{1, kOtherLinkMac}};
    port_.local_ip = kOurIp;
  }

  PortState port_;
  RecordingSender sender_;
  L3 l3_;
};

TEST(ArpFrames, ARequestIsABroadcastAskingForTheTarget) {
  std::array<std::byte, kArpFrameBytes> frame{};
  write_arp_request(frame.data(), kOurMac, kOurIp, kPeerIp);
  const auto* ethernet = reinterpret_cast<const rte_ether_hdr*>(frame.data());
  EXPECT_EQ(mac_to_u64(ethernet->dst_addr), kBroadcastMac);
  EXPECT_EQ(mac_to_u64(ethernet->src_addr), kOurMac);
  EXPECT_EQ(rte_be_to_cpu_16(ethernet->ether_type), RTE_ETHER_TYPE_ARP);
  const auto* arp = reinterpret_cast<const rte_arp_hdr*>(frame.data() + kEthernetBytes);
  EXPECT_EQ(rte_be_to_cpu_16(arp->arp_opcode), RTE_ARP_OP_REQUEST);
  EXPECT_EQ(rte_be_to_cpu_16(arp->arp_hardware), RTE_ARP_HRD_ETHER);
  EXPECT_EQ(rte_be_to_cpu_16(arp->arp_protocol), RTE_ETHER_TYPE_IPV4);
  EXPECT_EQ(arp->arp_hlen, RTE_ETHER_ADDR_LEN);
  EXPECT_EQ(arp->arp_plen, 4);
  EXPECT_EQ(mac_to_u64(arp->arp_data.arp_sha), kOurMac);
  EXPECT_EQ(rte_be_to_cpu_32(arp->arp_data.arp_sip), kOurIp);
  EXPECT_EQ(mac_to_u64(arp->arp_data.arp_tha), 0u);
  EXPECT_EQ(rte_be_to_cpu_32(arp->arp_data.arp_tip), kPeerIp);
}

TEST(ArpFrames, AReplyGoesBackToTheAskerWithOurAddresses) {
  const rte_arp_hdr request = arp_request(kPeerMac, kPeerIp, kOurIp);
  std::array<std::byte, kArpFrameBytes> frame{};
  write_arp_reply(frame.data(), request, kOurMac, kOurIp);
  const auto* ethernet = reinterpret_cast<const rte_ether_hdr*>(frame.data());
  EXPECT_EQ(mac_to_u64(ethernet->dst_addr), kPeerMac);
  EXPECT_EQ(mac_to_u64(ethernet->src_addr), kOurMac);
  const auto* arp = reinterpret_cast<const rte_arp_hdr*>(frame.data() + kEthernetBytes);
  EXPECT_EQ(rte_be_to_cpu_16(arp->arp_opcode), RTE_ARP_OP_REPLY);
  EXPECT_EQ(mac_to_u64(arp->arp_data.arp_sha), kOurMac);
  EXPECT_EQ(rte_be_to_cpu_32(arp->arp_data.arp_sip), kOurIp);
  EXPECT_EQ(mac_to_u64(arp->arp_data.arp_tha), kPeerMac);
  EXPECT_EQ(rte_be_to_cpu_32(arp->arp_data.arp_tip), kPeerIp);
}

// A frame of `payload` to the peer, as the transport sends it without checksum offload, with the
// UDP checksum computed here.
std::vector<std::byte> udp_frame(const std::vector<std::byte>& payload) {
  std::vector<std::byte> frame(kFrameHeaderBytes + payload.size());
  const FrameAddresses addresses{kOurMac, kPeerMac, kOurIp, kPeerIp, 4242, 5000};
  write_frame_header(frame.data(), addresses, static_cast<std::uint16_t>(payload.size()), false);
  std::memcpy(frame.data() + kFrameHeaderBytes, payload.data(), payload.size());
  write_udp_checksum(frame.data(), rte_raw_cksum(payload.data(), payload.size()));
  return frame;
}

struct Headers {
  const rte_ipv4_hdr& ip;
  const rte_udp_hdr& udp;
  std::uint16_t udp_bytes;
};

Headers headers_of(const std::vector<std::byte>& frame) {
  const auto& ip = *reinterpret_cast<const rte_ipv4_hdr*>(frame.data() + kEthernetBytes);
  const auto& udp = *reinterpret_cast<const rte_udp_hdr*>(frame.data() + kEthernetBytes + kIpv4Bytes);
  return {ip, udp, rte_be_to_cpu_16(udp.dgram_len)};
}

std::vector<std::byte> payload_of(std::size_t bytes) {
  std::vector<std::byte> payload(bytes);
  for (std::size_t i = 0; i < bytes; ++i) payload[i] = static_cast<std::byte>(i * 37 + 11);
  return payload;
}

TEST(Checksums, AFrameAsSentPassesTheComputedChecksums) {
  for (const std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{57}, std::size_t{1024}}) {
    const std::vector<std::byte> frame = udp_frame(payload_of(bytes));
    const Headers h = headers_of(frame);
    EXPECT_TRUE(ipv4_checksum_holds(h.ip)) << bytes;
    EXPECT_TRUE(udp_checksum_holds(h.ip, h.udp, h.udp_bytes)) << bytes;
    EXPECT_TRUE(checksums_hold(0, h.ip, h.udp, h.udp_bytes, true)) << bytes;
  }
}

TEST(Checksums, ADamagedPayloadOrHeaderFailsThem) {
  std::vector<std::byte> frame = udp_frame(payload_of(64));
  frame[kFrameHeaderBytes + 10] ^= std::byte{0x40};
  const Headers h = headers_of(frame);
  EXPECT_TRUE(ipv4_checksum_holds(h.ip));
  EXPECT_FALSE(checksums_hold(0, h.ip, h.udp, h.udp_bytes, true)) << "the payload's UDP checksum";
  EXPECT_TRUE(checksums_hold(0, h.ip, h.udp, h.udp_bytes, false)) << "UDP checksums not checked";
  std::vector<std::byte> damaged_header = udp_frame(payload_of(64));
  damaged_header[kEthernetBytes + 8] ^= std::byte{0x01};  // the TTL
  const Headers g = headers_of(damaged_header);
  EXPECT_FALSE(checksums_hold(0, g.ip, g.udp, g.udp_bytes, false)) << "the IPv4 header's checksum";
}

TEST(Checksums, UdpChecksumZeroMeansNone) {
  std::vector<std::byte> frame = udp_frame(payload_of(32));
  auto* udp = reinterpret_cast<rte_udp_hdr*>(frame.data() + kEthernetBytes + kIpv4Bytes);
  udp->dgram_cksum = 0;
  frame[kFrameHeaderBytes] ^= std::byte{0xff};
  const Headers h = headers_of(frame);
  EXPECT_TRUE(checksums_hold(0, h.ip, h.udp, h.udp_bytes, true));
}

TEST(Checksums, TheNicsVerdictWinsWhereItGaveOne) {
  std::vector<std::byte> frame = udp_frame(payload_of(32));
  frame[kFrameHeaderBytes] ^= std::byte{0xff};  // computed, the UDP checksum fails
  const Headers h = headers_of(frame);
  EXPECT_TRUE(checksums_hold(RTE_MBUF_F_RX_IP_CKSUM_GOOD | RTE_MBUF_F_RX_L4_CKSUM_GOOD, h.ip, h.udp, h.udp_bytes, true));
  const std::vector<std::byte> intact = udp_frame(payload_of(32));
  const Headers g = headers_of(intact);
  EXPECT_FALSE(checksums_hold(RTE_MBUF_F_RX_IP_CKSUM_BAD, g.ip, g.udp, g.udp_bytes, true));
  EXPECT_FALSE(checksums_hold(RTE_MBUF_F_RX_L4_CKSUM_BAD, g.ip, g.udp, g.udp_bytes, false));
}

TEST_F(L3Stack, ARequestForUsIsAnsweredOnItsLinkAndItsSenderLearned) {
  ASSERT_TRUE(l3_.on_arp(arp_request(kPeerMac, kPeerIp, kOurIp), 1));
  ASSERT_EQ(sender_.sent.size(), 1u);
  const auto [link, reply] = sender_.sent[0];
  EXPECT_EQ(link, 1);
  EXPECT_EQ(reply->data_len, kArpFrameBytes);
  EXPECT_EQ(mac_to_u64(ethernet_of(reply).src_addr), kOtherLinkMac) << "the MAC of the link it came in on";
  EXPECT_EQ(rte_be_to_cpu_16(arp_of(reply).arp_opcode), RTE_ARP_OP_REPLY);
  EXPECT_EQ(rte_be_to_cpu_32(arp_of(reply).arp_data.arp_tip), kPeerIp);
  const auto learned = port_.neighbours.find(kPeerIp);
  ASSERT_TRUE(learned);
  EXPECT_EQ(*learned, (NeighbourTable::Entry{kPeerMac, 1}));
}

TEST_F(L3Stack, ARequestForAnotherHostIsNeitherAnsweredNorLearnedFrom) {
  ASSERT_TRUE(l3_.on_arp(arp_request(kPeerMac, kPeerIp, 0x0a000003), 0));
  EXPECT_TRUE(sender_.sent.empty());
  EXPECT_FALSE(port_.neighbours.find(kPeerIp));
}

TEST_F(L3Stack, ArpOfAnotherHardwareOrProtocolIsRefused) {
  rte_arp_hdr arp = arp_request(kPeerMac, kPeerIp, kOurIp);
  arp.arp_protocol = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6);
  EXPECT_FALSE(l3_.on_arp(arp, 0));
  EXPECT_TRUE(sender_.sent.empty());
}

TEST_F(L3Stack, AnUnknownDestinationAsksEveryLinkThenAKnownOneGetsItsHeader) {
  std::uint8_t link = 7;
  EXPECT_EQ(l3_.header_for({kPeerIp, 5000}, 100, link), nullptr);
  ASSERT_EQ(sender_.sent.size(), 2u) << "one ARP request per link";
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(sender_.sent[i].first, i);
    EXPECT_EQ(rte_be_to_cpu_16(arp_of(sender_.sent[i].second).arp_opcode), RTE_ARP_OP_REQUEST);
    EXPECT_EQ(rte_be_to_cpu_32(arp_of(sender_.sent[i].second).arp_data.arp_tip), kPeerIp);
  }
  l3_.learn(kPeerIp, {kPeerMac, 1});
  const std::byte* header = l3_.header_for({kPeerIp, 5000}, 100, link);
  ASSERT_NE(header, nullptr);
  EXPECT_EQ(link, 1);
  std::array<std::byte, kFrameHeaderBytes> expected{};
  write_frame_header(expected.data(), {kOtherLinkMac, kPeerMac, kOurIp, kPeerIp, 4242, 5000}, 100, false);
  EXPECT_EQ(std::memcmp(header, expected.data(), kFrameHeaderBytes), 0);
  // The cache follows the neighbour: a move to another link rebuilds the header.
  l3_.learn(kPeerIp, {kPeerMac, 0});
  header = l3_.header_for({kPeerIp, 5000}, 100, link);
  ASSERT_NE(header, nullptr);
  EXPECT_EQ(link, 0);
  EXPECT_EQ(mac_to_u64(reinterpret_cast<const rte_ether_hdr*>(header)->src_addr), kOurMac);
}

}  // namespace
}  // namespace dpa::transport::dpdk
