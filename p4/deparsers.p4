// SPDX-License-Identifier: Apache-2.0
// Deparsers. The ingress emits the bridged header in front of everything it forwards (the next
// pass parses it from a pass port, the egress from its parser); the egress drops it and
// recomputes the IPv4 checksum of every reply it rewrote. UDP checksums of replies are zero
// (docs/protocol.md §1).
#ifndef DPA_DEPARSERS_P4
#define DPA_DEPARSERS_P4

control IngressDeparser(packet_out pkt,
                        inout headers_t hdr,
                        in metadata_t md,
                        in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Checksum() icmp_checksum;

    apply {
        // An ICMP echo answer (net.p4) swaps addresses, which keeps the IPv4 checksum; only the
        // ICMP type changes.
        if (hdr.icmp.isValid()) {
            hdr.icmp.checksum = icmp_checksum.update({hdr.icmp.type, hdr.icmp.code, md.icmp_residual});
        }
        pkt.emit(hdr.bridged);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.arp);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.icmp);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.dpa);
        pkt.emit(hdr.values_lo);
        pkt.emit(hdr.values_hi);
    }
}

control EgressDeparser(packet_out pkt,
                       inout headers_t hdr,
                       in egress_metadata_t md,
                       in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_checksum;

    apply {
        if (hdr.ipv4.isValid()) {
            hdr.ipv4.hdr_checksum = ipv4_checksum.update({
                hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
                hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
                hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr});
        }
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.dpa);
    }
}

#endif
