// SPDX-License-Identifier: Apache-2.0
// The value passes (docs/switch.md, "Pass plan"). After the state pass a data packet takes one
// input pass per chunk of values (chunk c in the pipe of pass c + 1), and a reply with values
// then takes two output passes per chunk, last chunk first, each emitting one half in front of
// what the later halves already emitted. The controller writes one `next_pass` entry per worker
// port and pass from the config's pipe order and pass ports: the shared pass port of each pipe,
// or the worker port's own loopback port in each chunk pipe (ports.*.loopback_ports), so that
// no port carries more than one worker's passes. After the last pass the packet is delivered.
#ifndef DPA_NEXT_PASS_P4
#define DPA_NEXT_PASS_P4

control NextPass(inout headers_t hdr,
                 inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                 inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    // The next input pass: same reduce operation, next chunk.
    action continue_input(bit<9> port) {
        ig_tm_md.ucast_egress_port = port;
        ig_tm_md.bypass_egress = 1;
        hdr.bridged.pass_index = hdr.bridged.pass_index + 1;
    }
    // The next output pass reads `reduce_op`'s half (REDUCE_READ_HI or REDUCE_READ_LO).
    action continue_output(bit<9> port, bit<8> reduce_op) {
        ig_tm_md.ucast_egress_port = port;
        ig_tm_md.bypass_egress = 1;
        hdr.bridged.pass_index = hdr.bridged.pass_index + 1;
        hdr.bridged.reduce_op = reduce_op;
    }
    action last_pass() {}
    table next_pass {
        key = {
            hdr.bridged.worker_port : exact;
            hdr.bridged.pass_index : exact;
            hdr.bridged.with_values : exact;
        }
        actions = { continue_input; continue_output; last_pass; }
        const default_action = last_pass;
        size = (4 * DPA_CHUNKS + 4) * DPA_WORKER_PORTS;
    }

    action deliver_drop() { ig_dprsr_md.drop_ctl = 1; }
    action deliver_unicast() {
        ig_tm_md.ucast_egress_port = hdr.bridged.worker_port;
        ig_tm_md.bypass_egress = 0;
    }
    // One copy per rank of the generation, rank as replication id (the egress rewrites each).
    action deliver_multicast() {
        ig_tm_md.mcast_grp_a = hdr.bridged.mgid;
        ig_tm_md.bypass_egress = 0;
    }
    // A round poisoned by an op_id mismatch: also one copy to the offender with its op_id.
    action deliver_poisoned() {
        ig_tm_md.mcast_grp_a = hdr.bridged.mgid;
        ig_tm_md.mcast_grp_b = hdr.bridged.sender_mgid;
        ig_tm_md.bypass_egress = 0;
    }
    table deliver {
        key = { hdr.bridged.delivery : exact; }
        actions = { deliver_drop; deliver_unicast; deliver_multicast; deliver_poisoned; }
        const default_action = deliver_drop;
        size = 4;
        const entries = {
            DELIVER_DROP : deliver_drop();
            DELIVER_UNICAST : deliver_unicast();
            DELIVER_MULTICAST : deliver_multicast();
            DELIVER_POISONED : deliver_poisoned();
        }
    }

    apply {
        switch (next_pass.apply().action_run) {
            last_pass: { deliver.apply(); }
        }
    }
}

#endif
