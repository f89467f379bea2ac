// SPDX-License-Identifier: Apache-2.0
#include "transport/dpdk/l3.hpp"

#include <rte_cycles.h>

namespace dpa::transport::dpdk {

namespace {

// At most one ARP request per queue per this many microseconds while a neighbour is unknown.
constexpr std::uint64_t kArpIntervalUs = 1000;

}  // namespace

void write_arp_reply(std::byte* frame, const rte_arp_hdr& request, std::uint64_t our_mac, std::uint32_t our_ip) {
  auto* ethernet = reinterpret_cast<rte_ether_hdr*>(frame);
  ethernet->dst_addr = request.arp_data.arp_sha;
  ethernet->src_addr = u64_to_mac(our_mac);
  ethernet->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP);
  auto* answer = reinterpret_cast<rte_arp_hdr*>(frame + kEthernetBytes);
  *answer = request;
  answer->arp_opcode = rte_cpu_to_be_16(RTE_ARP_OP_REPLY);
  answer->arp_data.arp_tha = request.arp_data.arp_sha;
  answer->arp_data.arp_tip = request.arp_data.arp_sip;
  answer->arp_data.arp_sha = ethernet->src_addr;
  answer->arp_data.arp_sip = rte_cpu_to_be_32(our_ip);
}

void write_arp_request(std::byte* frame, std::uint64_t our_mac, std::uint32_t our_ip, std::uint32_t target_ip) {
  auto* ethernet = reinterpret_cast<rte_ether_hdr*>(frame);
  ethernet->dst_addr = u64_to_mac(kBroadcastMac);
  ethernet->src_addr = u64_to_mac(our_mac);
  ethernet->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP);
  auto* arp = reinterpret_cast<rte_arp_hdr*>(frame + kEthernetBytes);
  arp->arp_hardware = rte_cpu_to_be_16(RTE_ARP_HRD_ETHER);
  arp->arp_protocol = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
  arp->arp_hlen = RTE_ETHER_ADDR_LEN;
  arp->arp_plen = 4;
  arp->arp_opcode = rte_cpu_to_be_16(RTE_ARP_OP_REQUEST);
  arp->arp_data.arp_sha = ethernet->src_addr;
  arp->arp_data.arp_sip = rte_cpu_to_be_32(our_ip);
  arp->arp_data.arp_tha = rte_ether_addr{};
  arp->arp_data.arp_tip = rte_cpu_to_be_32(target_ip);
}

bool L3::on_arp(const rte_arp_hdr& arp, std::uint8_t link) {
  if (arp.arp_hardware != rte_cpu_to_be_16(RTE_ARP_HRD_ETHER) ||
      arp.arp_protocol != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4)) {
    return false;
  }
  const std::uint32_t sender_ip = rte_be_to_cpu_32(arp.arp_data.arp_sip);
  const NeighbourTable::Entry sender{mac_to_u64(arp.arp_data.arp_sha), link};
  const bool for_us = rte_be_to_cpu_32(arp.arp_data.arp_tip) == port_.local_ip;
  if (for_us || port_.neighbours.find(sender_ip)) port_.neighbours.learn(sender_ip, sender);
  if (!for_us || arp.arp_opcode != rte_cpu_to_be_16(RTE_ARP_OP_REQUEST)) return true;
  rte_mbuf* reply = sender_.allocate_frame();
  if (reply == nullptr) return true;
  write_arp_reply(rte_pktmbuf_mtod(reply, std::byte*), arp, port_.links[link].mac, port_.local_ip);
  reply->data_len = kArpFrameBytes;
  reply->pkt_len = reply->data_len;
  if (!sender_.send_frame(link, reply)) rte_pktmbuf_free(reply);
  return true;
}

void L3::request_arp(std::uint32_t ip) {
  const std::uint64_t now = rte_rdtsc();
  if (now - last_arp_request_ < rte_get_tsc_hz() / 1000000 * kArpIntervalUs) return;
  last_arp_request_ = now;
  // The neighbour may sit behind any port: ask on all of them.
  for (std::size_t link = 0; link < port_.links.size(); ++link) {
    rte_mbuf* request = sender_.allocate_frame();
    if (request == nullptr) return;
    write_arp_request(rte_pktmbuf_mtod(request, std::byte*), port_.links[link].mac, port_.local_ip, ip);
    request->data_len = kArpFrameBytes;
    request->pkt_len = request->data_len;
    if (!sender_.send_frame(static_cast<std::uint8_t>(link), request)) rte_pktmbuf_free(request);
  }
}

}  // namespace dpa::transport::dpdk
