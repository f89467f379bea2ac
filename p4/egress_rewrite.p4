// SPDX-License-Identifier: Apache-2.0
// Egress rewrite of dpa replies: each multicast copy gets the address and thread port of its
// rank (replication id = rank, docs/protocol.md §12), the offender's extra copy of a poisoned
// round gets its own op_id back, and every reply gets its lengths. The IPv4 checksum is
// recomputed by the egress deparser; the UDP checksum is zero (set by delivery.p4).
#ifndef DPA_EGRESS_REWRITE_P4
#define DPA_EGRESS_REWRITE_P4

control EgressRewrite(inout headers_t hdr,
                      in egress_intrinsic_metadata_t eg_intr_md) {
    action set_destination(bit<48> mac, bit<32> ip, bit<16> port) {
        hdr.ethernet.dst_addr = mac;
        hdr.ipv4.dst_addr = ip;
        hdr.udp.dst_port = port;
    }
    // (session, rank, thread) -> that rank's endpoint for the thread owning the slot.
    table destinations {
        key = {
            hdr.bridged.session_index : exact;
            eg_intr_md.egress_rid : exact;
            hdr.bridged.thread : exact;
        }
        actions = { set_destination; NoAction; }
        const default_action = NoAction;
        size = DPA_IDENTITIES;
    }

    action values_length() {
        hdr.ipv4.total_len = 20 + DPA_DATA_UDP_LENGTH;
        hdr.udp.length = DPA_DATA_UDP_LENGTH;
    }
    action header_length() {
        hdr.ipv4.total_len = 20 + 8 + DPA_HEADER_BYTES;
        hdr.udp.length = 8 + DPA_HEADER_BYTES;
    }

    apply {
        if (hdr.bridged.with_values == 1) {
            values_length();
        } else {
            header_length();
        }
        if (eg_intr_md.egress_rid == RID_SENDER) {
            hdr.dpa.op_id = hdr.bridged.request_op_id;
        } else if (hdr.bridged.delivery == DELIVER_MULTICAST || hdr.bridged.delivery == DELIVER_POISONED) {
            destinations.apply();
        }
    }
}

#endif
