// SPDX-License-Identifier: Apache-2.0
// Egress rewrite of dpa replies: each multicast copy gets the address and thread port of its
// rank (replication id = rank, docs/protocol.md §12), the offender's extra copy of a poisoned
// round gets its own op_id back, and every reply gets its lengths. A result of an owned round
// (§13) carries its values only to the ranks that take them: the owner of a TO_OWNER round,
// every rank but the owner of a FROM_OWNER one. Each copy compares its rank (the replication id
// of a multicast copy, the requester's `rank` of a unicast one) with the round's owner, carried
// from the state pass in the bridged header, and a copy that takes no values gets the header's
// lengths: its values stay behind as an Ethernet trailer, as those of every header-only reply to
// a data packet do, and Tofino2 cuts them off. The IPv4 checksum is recomputed by the egress
// deparser; the UDP checksum is zero (set by delivery.p4).
#ifndef DPA_EGRESS_REWRITE_P4
#define DPA_EGRESS_REWRITE_P4

control EgressRewrite(inout headers_t hdr,
                      inout egress_metadata_t eg_md,
                      in egress_intrinsic_metadata_t eg_intr_md,
                      inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
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
#if __TARGET_TOFINO__ == 2
        // Ethernet, IPv4, UDP and the dpa header, and 4 bytes more, so that the cut keeps the
        // whole header whether or not the length counts the frame check sequence.
        eg_dprsr_md.mtu_trunc_len = 14 + 20 + 8 + 48 + 4;
#endif
    }
    // with_values: the reply carries P values; mode and owner_x: whether this copy takes them.
    table lengths {
        key = {
            hdr.bridged.with_values : exact;
            hdr.bridged.mode : exact;
            eg_md.owner_x : ternary;
        }
        actions = { values_length; header_length; }
        const default_action = header_length;
        size = 6;
        const entries = {
            (1, MODE_NONE, _) : values_length();
            (1, MODE_TO_OWNER, 0) : values_length();
            (1, MODE_TO_OWNER, _) : header_length();
            (1, MODE_FROM_OWNER, 0) : header_length();
            (1, MODE_FROM_OWNER, _) : values_length();
        }
    }

    apply {
        if (hdr.bridged.delivery == DELIVER_UNICAST) {
            eg_md.owner_x = hdr.dpa.rank[4:0] ^ hdr.bridged.owner;
        } else {
            eg_md.owner_x = eg_intr_md.egress_rid[4:0] ^ hdr.bridged.owner;
        }
        lengths.apply();
        if (eg_intr_md.egress_rid == RID_SENDER) {
            hdr.dpa.op_id = hdr.bridged.op_id_or_round;
        } else if (hdr.bridged.delivery == DELIVER_MULTICAST || hdr.bridged.delivery == DELIVER_POISONED) {
            destinations.apply();
        }
    }
}

#endif
