// SPDX-License-Identifier: Apache-2.0
// Ingress and egress parsers. A first pass (a worker's port) parses up to the dpa header: the
// state pass needs no values. A later pass arrives on a pass port (a loopback or recirculation
// port the controller lists in `pass_ports`) with the bridged header in front, and parses one
// chunk of values when its pass consumes them.
#ifndef DPA_PARSERS_P4
#define DPA_PARSERS_P4

parser IngressParser(packet_in pkt,
                     out headers_t hdr,
                     out metadata_t md,
                     out ingress_intrinsic_metadata_t ig_intr_md) {
    Checksum() icmp_checksum;
    value_set<bit<9>>(DPA_PASS_PORTS) pass_ports;

    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        // metadata_t starts zeroed (@pa_auto_init_metadata, headers.p4): ADM_NONE, GATE_NONE,
        // COUNT_OP_NONE and every hit flag clear. The parser writes none of it, so bf-p4c may
        // overlay it with the value headers of the value passes (dpa.p4).
        transition select(ig_intr_md.ingress_port) {
            pass_ports: parse_bridged;
            default: parse_ethernet;
        }
    }

    // The packets on pass ports are dpa packets this program parsed and checked on their first
    // pass, so their headers are extracted without selects.
    state parse_bridged {
        pkt.extract(hdr.bridged);
        transition select(hdr.bridged.reduce_op) {
            REDUCE_READ_LO: parse_pass_headers;
            REDUCE_READ_HI: parse_pass_headers;
            REDUCE_SKIP: parse_pass_headers;
            default: parse_pass_values;
        }
    }

    state parse_pass_headers {
        pkt.extract(hdr.ethernet);
        pkt.extract(hdr.ipv4);
        pkt.extract(hdr.udp);
        pkt.extract(hdr.dpa);
        transition accept;
    }

    state parse_pass_values {
        pkt.extract(hdr.ethernet);
        pkt.extract(hdr.ipv4);
        pkt.extract(hdr.udp);
        pkt.extract(hdr.dpa);
        pkt.extract(hdr.values_lo);
        pkt.extract(hdr.values_hi);
        transition accept;
    }

    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_ARP: parse_arp;
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_arp {
        pkt.extract(hdr.arp);
        transition accept;
    }

    // docs/protocol.md §1: IHL 5 and unfragmented, or it is not a dpa packet.
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.flags[0:0], hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (5, 0, 0, IP_PROTO_UDP): parse_udp;
            (5, 0, 0, IP_PROTO_ICMP): parse_icmp;
            default: accept;
        }
    }

    state parse_icmp {
        pkt.extract(hdr.icmp);
        icmp_checksum.subtract({hdr.icmp.type, hdr.icmp.code, hdr.icmp.checksum});
        icmp_checksum.subtract_all_and_deposit(md.icmp_residual);
        transition accept;
    }

    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            DPA_UDP_PORT: parse_dpa;
            default: accept;
        }
    }

    state parse_dpa {
        pkt.extract(hdr.dpa);
        transition accept;
    }
}

parser EgressParser(packet_in pkt,
                    out headers_t hdr,
                    out egress_metadata_t md,
                    out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        pkt.extract(eg_intr_md);
        // Every packet that reaches an egress without bypass carries the bridged header.
        pkt.extract(hdr.bridged);
        transition select(hdr.bridged.delivery) {
            DELIVER_UNICAST: parse_reply;
            DELIVER_MULTICAST: parse_reply;
            DELIVER_POISONED: parse_reply;
            default: accept;
        }
    }

    // A reply's values (if any) follow as packet body: the egress rewrites headers only.
    state parse_reply {
        pkt.extract(hdr.ethernet);
        pkt.extract(hdr.ipv4);
        pkt.extract(hdr.udp);
        pkt.extract(hdr.dpa);
        transition accept;
    }
}

#endif
