// SPDX-License-Identifier: Apache-2.0
// Traffic that is not a dpa request: ARP and ICMP echo for the switch's address, L2 forwarding
// for everything else (workers' other traffic, and the controller's JOIN replies sent from the
// CPU port), flooding unknown destinations to every port but the one it came from.
#ifndef DPA_NET_P4
#define DPA_NET_P4

control Net(inout headers_t hdr,
            inout metadata_t md,
            in ingress_intrinsic_metadata_t ig_intr_md,
            inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    action forward(bit<9> port) {
        ig_tm_md.ucast_egress_port = port;
    }
    // The controller prunes the ingress port from the flood group with $pre.prune (L2 XID).
    action flood(bit<16> mgid) {
        ig_tm_md.mcast_grp_a = mgid;
        ig_tm_md.level2_exclusion_id = ig_intr_md.ingress_port;
    }
    table forwarding {
        key = { hdr.ethernet.dst_addr : exact; }
        actions = { forward; flood; }
        default_action = flood(0);
        size = DPA_L2_ENTRIES;
    }

    action arp_reply() {
        hdr.ethernet.dst_addr = hdr.arp.sender_hw;
        hdr.ethernet.src_addr = md.switch_mac;
        hdr.arp.opcode = 2;
        hdr.arp.target_hw = hdr.arp.sender_hw;
        hdr.arp.target_ip = hdr.arp.sender_ip;
        hdr.arp.sender_hw = md.switch_mac;
        hdr.arp.sender_ip = md.switch_ip;
        ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port;
    }
    action icmp_echo_reply() {
        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
        hdr.ethernet.src_addr = md.switch_mac;
        hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
        hdr.ipv4.src_addr = md.switch_ip;
        hdr.icmp.type = 0;
        ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port;
    }

    // The address a request asks for, XOR the switch's: zero when it is for the switch.
    action compare_arp() { md.address_x = hdr.arp.target_ip ^ md.switch_ip; }
    action compare_ipv4() { md.address_x = hdr.ipv4.dst_addr ^ md.switch_ip; }

    // ARP requests and ICMP echo requests for the switch's address (a table: a gateway cannot
    // compare the address with the other conditions in one).
    table local_address {
        key = {
            hdr.arp.isValid() : exact;
            hdr.arp.opcode : ternary;
            hdr.icmp.isValid() : exact;
            hdr.icmp.type : ternary;
            md.address_x : ternary;
        }
        actions = { arp_reply; icmp_echo_reply; NoAction; }
        const default_action = NoAction;
        size = 2;
        const entries = {
            (true, 1, false, _, 0) : arp_reply();
            (false, _, true, 8, 0) : icmp_echo_reply();
        }
    }

    apply {
        if (hdr.arp.isValid()) {
            compare_arp();
        } else {
            compare_ipv4();
        }
        switch (local_address.apply().action_run) {
            NoAction: { forwarding.apply(); }
        }
    }
}

#endif
