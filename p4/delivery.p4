// SPDX-License-Identifier: Apache-2.0
// What the state pass answers (docs/protocol.md §8.2's Reply column, §8.3, §4), and how the
// packet leaves the state pass: header-only replies (OLD, SYN, ERROR) straight back to the
// sender or, for a poisoned round, to every rank; packets whose values must be added or
// fetched into the input passes (a probe that fetches a result rides them too, so it never
// overtakes the values of the packet that completed the round), and so does a counted rank's
// retransmission, which repairs what a lost value pass left out (chunk_state.p4); JOIN and LEAVE
// to the CPU; the rest dropped. A round whose count is 0 (the exponent-priming round, §5) has no values:
// its requests add nothing and its results are header only, so they leave from the state pass
// too. A header-only reply to a data packet keeps the request's values behind the
// header: the egress sets the IPv4 and UDP lengths to the header, so they are an Ethernet
// trailer that every receiver discards (docs/switch.md).
// The header is rewritten here, once; the egress only sets each copy's destination and the
// lengths (egress_rewrite.p4).
#ifndef DPA_DELIVERY_P4
#define DPA_DELIVERY_P4

control Delivery(inout headers_t hdr,
                 inout metadata_t md,
                 in ingress_intrinsic_metadata_t ig_intr_md,
                 inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                 inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    DirectCounter<bit<64>>(CounterType_t.PACKETS) outcomes;

    // Pass port of the first input pass (next_pass.p4 takes the packet on from there), per
    // worker port: the pipe's shared pass port, or the worker's own loopback port in that pipe
    // (ports.*.loopback_ports, docs/switch.md "Per-worker loopback ports"). The controller writes
    // one entry per worker port; admission admits data only from a rank's own worker port.
    action set_pass_plan(bit<9> input_port) {
        md.input_port = input_port;
    }
    table pass_plan {
        key = { hdr.bridged.worker_port : exact; }
        actions = { set_pass_plan; }
        default_action = set_pass_plan(0);
        size = DPA_WORKER_PORTS;
    }

    // ---- routes ----
    action route_now() {
        ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port;
        ig_tm_md.bypass_egress = 0;
        hdr.bridged.delivery = DELIVER_UNICAST;
        hdr.bridged.with_values = 0;
    }
    // The sender's bit rides along only if the sender is one of the round's contributors
    // (md.result_bitmap: the contributors after this packet, frozen once complete): only then may
    // its input passes add its values, which is how a counted rank's retransmission repairs a
    // chunk that a lost pass left without them (chunk_state.p4), and why a late rank's does not.
    action route_input(bit<8> reduce_op, bit<8> delivery, bit<8> with_values) {
        ig_tm_md.ucast_egress_port = md.input_port;
        ig_tm_md.bypass_egress = 1;
        hdr.bridged.pass_index = 1;
        hdr.bridged.reduce_op = reduce_op;
        hdr.bridged.delivery = delivery;
        hdr.bridged.with_values = with_values;
        hdr.bridged.sender_bit = md.result_bitmap & md.sender_bit;
        // The chunk round the value passes compare (chunk_state.p4): the round (the reply's seq
        // where the action rewrote it) in the generation of its token.
        hdr.bridged.op_id_or_round = hdr.dpa.seq ^ hdr.dpa.token;
    }
    // A header-only result to every rank of the generation (rank = RID, egress_rewrite.p4).
    action route_multicast_now() {
        ig_tm_md.mcast_grp_a = hdr.bridged.mgid;
        ig_tm_md.bypass_egress = 0;
        hdr.bridged.delivery = DELIVER_MULTICAST;
        hdr.bridged.with_values = 0;
    }
    // ---- header views (§2 Reply column) ----
    // Replies go from the switch to the sender; multicast copies get their destination in the
    // egress.
    action to_sender() {
        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
        hdr.ethernet.src_addr = md.switch_mac;
        hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
        hdr.ipv4.src_addr = md.switch_ip;
        hdr.udp.dst_port = hdr.udp.src_port;
        hdr.udp.src_port = DPA_UDP_PORT;
        hdr.udp.checksum = 0;
    }
    // Every reply action writes each header word from at most one metadata word (a Tofino
    // action writes a container from one PHV source plus constants, or two PHV sources), which
    // is why the registers store their words as the header lays them out (headers.p4), the
    // exponent codes are already in place (exponent.p4) and the error code is action data.
    //
    // The slot's state (result, OLD, SYN). `flags` holds the reply's low flag byte; FLOAT is
    // the slot's type. `meta` is count << 16 | target: the round's count for a result, 0 for
    // the others. The round number is the packet's minus d, except for the packet that opened
    // the round (its seq is the slot's now). The sender's rank stays in `rank`.
    action slot_view(bit<8> flags, bit<32> meta) {
        to_sender();
        hdr.dpa.version = DPA_VERSION;
        hdr.dpa.error_code = 0;
        hdr.dpa.flags = md.slot_round[15:8] ++ flags;
        hdr.dpa.op_id = md.slot_op_id;
        // `offset` is the slot's already: its register writes the header (slot_state.p4).
        hdr.dpa.op_length = md.slot_op_length;
        hdr.dpa.count = meta[31:16];
        hdr.dpa.k = meta[7:0];
        hdr.dpa.contributors = md.contributors[7:0];
        hdr.dpa.bitmap_hi = 0;
        hdr.dpa.bitmap_lo = md.result_bitmap;
        // Which copies of a result take its values (§13): the egress compares each copy's rank
        // with the owner (egress_rewrite.p4).
        hdr.bridged.mode = md.slot_round[13:12];
        hdr.bridged.owner = md.slot_meta[12:8];
    }
    action result_view(bit<8> flags) {
        slot_view(flags, md.slot_meta);
        hdr.dpa.seq = md.slot_seq;
    }
    action opened_result_view() {
        slot_view(0x01, md.slot_meta);
    }
    action state_view(bit<8> flags) {
        slot_view(flags, md.state_meta);
        hdr.dpa.seq = md.slot_seq;
    }
    // An ERROR echoes the request (§4): kind bits kept (the request's high flag byte is its FLOAT
    // and mode bits, §8.1 and §13.1 admit nothing else), count and contributors zero. The caller sets `count`
    // and the bitmap's low word (0, or the offender's value of a poisoned round), so no field is
    // written twice in one action.
    action error_view(bit<8> flags, bit<8> code, bit<32> expected) {
        to_sender();
        hdr.dpa.version = DPA_VERSION;
        hdr.dpa.error_code = code;
        hdr.dpa.flags[7:0] = flags;
        hdr.dpa.offset = expected;
        hdr.dpa.contributors = 0;
        hdr.dpa.bitmap_hi = 0;
    }

    // ---- outcomes ----
    action drop_packet() {
        outcomes.count();
        ig_dprsr_md.drop_ctl = 1;
    }
    action to_cpu() {
        outcomes.count();
        ig_tm_md.ucast_egress_port = DPA_CPU_PORT;
        ig_tm_md.bypass_egress = 0;
        hdr.bridged.delivery = DELIVER_CPU;
    }
    action admission_error(bit<8> flags, bit<8> code) {
        outcomes.count();
        error_view(flags, code, md.error_expected);
        hdr.dpa.count = 0;
        hdr.dpa.bitmap_lo = 0;
        route_now();
        hdr.bridged.event = EV_ERROR;
    }
    action seq_ahead() {
        outcomes.count();
        error_view(0x10, ERR_SEQ_AHEAD, md.slot_seq);
        hdr.dpa.count = 0;
        hdr.dpa.bitmap_lo = 0;
        route_now();
        hdr.bridged.event = EV_ERROR;
    }
    action old_reply(bit<8> flags) {
        outcomes.count();
        state_view(flags);
        route_now();
        hdr.bridged.event = EV_OLD;
    }
    action syn_reply(bit<8> flags) {
        outcomes.count();
        state_view(flags);
        route_now();
        hdr.bridged.event = EV_SYN;
    }
    // §8.3: the packet poisons the round now. Every rank gets the error (the round's op_id);
    // the offender also gets one with its own op_id when that differs (mcast_grp_b: the group
    // of its port alone, replication id RID_SENDER).
    action poisoned_now(bit<8> code) {
        outcomes.count();
        error_view(0x10, code, md.poison_expected);
        hdr.dpa.count = 0;
        hdr.dpa.op_id = md.slot_op_id;
        hdr.dpa.bitmap_lo = md.poison_value;
        ig_tm_md.mcast_grp_a = hdr.bridged.mgid;
        ig_tm_md.bypass_egress = 0;
        hdr.bridged.delivery = DELIVER_MULTICAST;
        hdr.bridged.with_values = 0;
        hdr.bridged.event = EV_ERROR;
    }
    action poisoned_now_with_sender_copy() {
        outcomes.count();
        error_view(0x10, ERR_OP_MISMATCH, md.poison_expected);
        hdr.dpa.count = 0;
        hdr.dpa.op_id = md.slot_op_id;
        hdr.dpa.bitmap_lo = md.poison_value;
        ig_tm_md.mcast_grp_a = hdr.bridged.mgid;
        ig_tm_md.mcast_grp_b = hdr.bridged.sender_mgid;
        ig_tm_md.bypass_egress = 0;
        hdr.bridged.delivery = DELIVER_POISONED;
        hdr.bridged.with_values = 0;
        hdr.bridged.event = EV_ERROR;
    }
    // A packet for a round poisoned earlier: the round's error under the sender's op_id. The
    // poison word puts the offender's rank where `rank` sits and zeros over `count`.
    action poisoned_before(bit<8> flags, bit<8> code) {
        error_view(flags, code, md.poison_expected);
        hdr.dpa.count = md.poison_info[31:16];
        hdr.dpa.rank = md.poison_info[15:8];
        hdr.dpa.bitmap_lo = md.poison_value;
        route_now();
        hdr.bridged.event = EV_ERROR;
    }
    action poisoned_op(bit<8> flags) {
        outcomes.count();
        poisoned_before(flags, ERR_OP_MISMATCH);
    }
    action poisoned_type(bit<8> flags) {
        outcomes.count();
        poisoned_before(flags, ERR_DTYPE_MISMATCH);
    }
    action poisoned_length(bit<8> flags) {
        outcomes.count();
        poisoned_before(flags, ERR_LENGTH_MISMATCH);
    }
    action poisoned_mode(bit<8> flags) {
        outcomes.count();
        poisoned_before(flags, ERR_MODE_MISMATCH);
    }
    // §6.7: a counted rank's probe of a round whose K is N, which waits for `rank` (the lowest
    // rank of the session's gone ranks the round lacks): ERROR rank_gone, unicast, instead of
    // the pending reply. `bitmap` lists every such rank; the `silences` table then puts the
    // milliseconds the controller last measured for `rank` in `offset`.
    action rank_gone(bit<8> rank) {
        outcomes.count();
        error_view(0x14, ERR_RANK_GONE, 0xFFFFFFFF);
        hdr.dpa.count = 0;
        hdr.dpa.rank = rank;
        hdr.dpa.bitmap_lo = md.gone & ~md.result_bitmap;
        md.gone_hit = 1;
        md.gone_rank = rank;
        route_now();
        hdr.bridged.event = EV_ERROR;
    }
    // Contributions, and every packet of a contributor that carries values: the chunks add
    // them where they lack them (chunk_state.p4 opens a chunk for a new round).
    action counted() {
        outcomes.count();
        route_input(REDUCE_CONTRIBUTE, DELIVER_DROP, 0);
        hdr.bridged.event = EV_AGGREGATED;
    }
    action completed_at_open(bit<8> event) {
        outcomes.count();
        opened_result_view();
        route_input(REDUCE_CONTRIBUTE, DELIVER_MULTICAST, 1);
        hdr.bridged.event = event;
    }
    action completed(bit<8> event) {
        outcomes.count();
        result_view(0x01);
        route_input(REDUCE_CONTRIBUTE, DELIVER_MULTICAST, 1);
        hdr.bridged.event = event;
    }
    action completed_by_probe(bit<8> event) {
        outcomes.count();
        result_view(0x01);
        route_input(REDUCE_SKIP, DELIVER_MULTICAST, 1);
        hdr.bridged.event = event;
    }
    // A counted rank's copy repairs its values on the way (a late rank's adds nothing).
    action copy_to_data(bit<8> event) {
        outcomes.count();
        result_view(0x03);
        route_input(REDUCE_CONTRIBUTE, DELIVER_UNICAST, 1);
        hdr.bridged.event = event;
    }
    // A FROM_OWNER request from a rank other than the owner has no values (§13.3): its copy
    // fetches the result without input passes, as a probe's does.
    action copy_relayed(bit<8> event) {
        outcomes.count();
        result_view(0x03);
        route_input(REDUCE_SKIP, DELIVER_UNICAST, 1);
        hdr.bridged.event = event;
    }
    action copy_to_probe() {
        outcomes.count();
        result_view(0x07);
        route_input(REDUCE_SKIP, DELIVER_UNICAST, 1);
        hdr.bridged.event = EV_SYN;
    }
    // The same for a round of count 0 (§5): no values to add, none in its result.
    action counted_header_only() {
        outcomes.count();
        ig_dprsr_md.drop_ctl = 1;
        hdr.bridged.event = EV_AGGREGATED;
    }
    action completed_at_open_header_only(bit<8> event) {
        outcomes.count();
        opened_result_view();
        route_multicast_now();
        hdr.bridged.event = event;
    }
    action completed_header_only(bit<8> event) {
        outcomes.count();
        result_view(0x01);
        route_multicast_now();
        hdr.bridged.event = event;
    }
    action copy_header_only(bit<8> flags, bit<8> event) {
        outcomes.count();
        result_view(flags);
        route_now();
        hdr.bridged.event = event;
    }
    // A counted rank's retransmission to a round still open: its values ride the input passes
    // again, in case a lost pass left a chunk without them, and are dropped after the last.
    action duplicate() {
        outcomes.count();
        route_input(REDUCE_CONTRIBUTE, DELIVER_DROP, 0);
        hdr.bridged.event = EV_DUPLICATE;
    }
    action duplicate_header_only() {
        outcomes.count();
        ig_dprsr_md.drop_ctl = 1;
        hdr.bridged.event = EV_DUPLICATE;
    }

    table reply {
        key = {
            md.admit : exact;
            md.is_probe : ternary;
            md.gate : ternary;
            md.poison_info[7:0] : ternary;   // the poison code, 0 while not poisoned
            md.mismatch_info[7:0] : ternary; // the code this packet poisons the round with
            md.error_code : ternary;
            md.count_op : ternary;
            md.count : ternary;
            md.short[7:0] : ternary;
            md.op_x : ternary;
            md.full_x[7:0] : ternary;
            md.slot_round[31:16] : ternary;  // the round's count: 0 for a header-only round
            md.relayed : ternary;            // a FROM_OWNER request without values (§13.3)
            md.dup : ternary;                // the sender's bit among the round's arrivals
            md.k_x : ternary;                // 0: the round's K is N
            md.gone : ternary;               // the session's gone ranks (§6.7)
            md.result_bitmap : ternary;      // the round's contributors
        }
        actions = {
            drop_packet; to_cpu; admission_error; seq_ahead; old_reply; syn_reply; poisoned_now;
            poisoned_now_with_sender_copy; poisoned_op; poisoned_type; poisoned_length; poisoned_mode;
            counted; completed_at_open; completed; completed_by_probe; copy_to_data; copy_relayed; copy_to_probe;
            rank_gone; counted_header_only; completed_at_open_header_only; completed_header_only; copy_header_only;
            duplicate; duplicate_header_only;
        }
        const default_action = drop_packet;
        counters = outcomes;
        size = 128;
        // md.count is the count register before the packet (after it for a NEW); 0x100: complete.
        // Each reply with values has a header-only twin first, for a round of count 0.
        const entries = {
            // Admission (§8.1).
            (ADM_DROP, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _) : drop_packet();
            (ADM_CPU, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _) : to_cpu();
            (ADM_ERROR, 0, _, _, _, ERR_MODE_MISMATCH, _, _, _, _, _, _, _, _, _, _, _) : admission_error(0x10, ERR_MODE_MISMATCH);
            (ADM_ERROR, 1, _, _, _, ERR_NOT_JOINED, _, _, _, _, _, _, _, _, _, _, _) : admission_error(0x14, ERR_NOT_JOINED);
            (ADM_ERROR, 1, _, _, _, ERR_SESSION_TAKEN_OVER, _, _, _, _, _, _, _, _, _, _, _) : admission_error(0x14, ERR_SESSION_TAKEN_OVER);
            (ADM_ERROR, 1, _, _, _, ERR_SLOT_OUT_OF_RANGE, _, _, _, _, _, _, _, _, _, _, _) : admission_error(0x14, ERR_SLOT_OUT_OF_RANGE);
            (ADM_ERROR, 1, _, _, _, ERR_K_INVALID, _, _, _, _, _, _, _, _, _, _, _) : admission_error(0x14, ERR_K_INVALID);
            (ADM_ERROR, 0, _, _, _, ERR_NOT_JOINED, _, _, _, _, _, _, _, _, _, _, _) : admission_error(0x10, ERR_NOT_JOINED);
            (ADM_ERROR, 0, _, _, _, ERR_SESSION_TAKEN_OVER, _, _, _, _, _, _, _, _, _, _, _) : admission_error(0x10, ERR_SESSION_TAKEN_OVER);
            (ADM_ERROR, 0, _, _, _, ERR_SLOT_OUT_OF_RANGE, _, _, _, _, _, _, _, _, _, _, _) : admission_error(0x10, ERR_SLOT_OUT_OF_RANGE);
            (ADM_ERROR, 0, _, _, _, ERR_K_INVALID, _, _, _, _, _, _, _, _, _, _, _) : admission_error(0x10, ERR_K_INVALID);

            // SYN probes (§8.2, first rows).
            (ADM_ACCEPT, 1, GATE_PROBE_OTHER, _, _, _, _, 0x100 &&& 0x100, _, _, _, _, _, _, _, _, _) : syn_reply(0x84);
            (ADM_ACCEPT, 1, GATE_PROBE_OTHER, _, _, _, _, _, _, _, _, _, _, _, _, _, _) : syn_reply(0x04);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, ERR_OP_MISMATCH, _, _, _, _, _, _, _, _, _, _, _, _, _) : poisoned_op(0x14);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, ERR_DTYPE_MISMATCH, _, _, _, _, _, _, _, _, _, _, _, _, _) : poisoned_type(0x14);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, ERR_LENGTH_MISMATCH, _, _, _, _, _, _, _, _, _, _, _, _, _) : poisoned_length(0x14);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, ERR_MODE_MISMATCH, _, _, _, _, _, _, _, _, _, _, _, _, _) : poisoned_mode(0x14);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, 0x100 &&& 0x100, _, _, _, 0, _, _, _, _, _) : copy_header_only(0x07, EV_SYN);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, 0x100 &&& 0x100, _, _, _, _, _, _, _, _, _) : copy_to_probe();
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, COUNT_OP_REACTIVE, _, 0, _, 0, 0, _, _, _, _, _) : completed_header_only(EV_COMPLETED);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, COUNT_OP_REACTIVE, _, 0, _, 0, _, _, _, _, _, _) : completed_by_probe(EV_COMPLETED);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, COUNT_OP_REACTIVE, _, 0, _, _, 0, _, _, _, _, _) : completed_header_only(EV_COMPLETED_PARTIAL);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, COUNT_OP_REACTIVE, _, 0, _, _, _, _, _, _, _, _) : completed_by_probe(EV_COMPLETED_PARTIAL);
            // §6.7: a counted rank's probe of a pending round whose K is N, lowest gone rank first.
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, 0, _, _, _) : syn_reply(0x04);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00000001 &&& 0x00000001, 0 &&& 0x00000001) : rank_gone(0);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00000002 &&& 0x00000002, 0 &&& 0x00000002) : rank_gone(1);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00000004 &&& 0x00000004, 0 &&& 0x00000004) : rank_gone(2);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00000008 &&& 0x00000008, 0 &&& 0x00000008) : rank_gone(3);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00000010 &&& 0x00000010, 0 &&& 0x00000010) : rank_gone(4);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00000020 &&& 0x00000020, 0 &&& 0x00000020) : rank_gone(5);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00000040 &&& 0x00000040, 0 &&& 0x00000040) : rank_gone(6);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00000080 &&& 0x00000080, 0 &&& 0x00000080) : rank_gone(7);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00000100 &&& 0x00000100, 0 &&& 0x00000100) : rank_gone(8);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00000200 &&& 0x00000200, 0 &&& 0x00000200) : rank_gone(9);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00000400 &&& 0x00000400, 0 &&& 0x00000400) : rank_gone(10);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00000800 &&& 0x00000800, 0 &&& 0x00000800) : rank_gone(11);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00001000 &&& 0x00001000, 0 &&& 0x00001000) : rank_gone(12);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00002000 &&& 0x00002000, 0 &&& 0x00002000) : rank_gone(13);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00004000 &&& 0x00004000, 0 &&& 0x00004000) : rank_gone(14);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00008000 &&& 0x00008000, 0 &&& 0x00008000) : rank_gone(15);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00010000 &&& 0x00010000, 0 &&& 0x00010000) : rank_gone(16);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00020000 &&& 0x00020000, 0 &&& 0x00020000) : rank_gone(17);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00040000 &&& 0x00040000, 0 &&& 0x00040000) : rank_gone(18);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00080000 &&& 0x00080000, 0 &&& 0x00080000) : rank_gone(19);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00100000 &&& 0x00100000, 0 &&& 0x00100000) : rank_gone(20);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00200000 &&& 0x00200000, 0 &&& 0x00200000) : rank_gone(21);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00400000 &&& 0x00400000, 0 &&& 0x00400000) : rank_gone(22);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x00800000 &&& 0x00800000, 0 &&& 0x00800000) : rank_gone(23);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x01000000 &&& 0x01000000, 0 &&& 0x01000000) : rank_gone(24);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x02000000 &&& 0x02000000, 0 &&& 0x02000000) : rank_gone(25);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x04000000 &&& 0x04000000, 0 &&& 0x04000000) : rank_gone(26);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x08000000 &&& 0x08000000, 0 &&& 0x08000000) : rank_gone(27);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x10000000 &&& 0x10000000, 0 &&& 0x10000000) : rank_gone(28);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x20000000 &&& 0x20000000, 0 &&& 0x20000000) : rank_gone(29);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x40000000 &&& 0x40000000, 0 &&& 0x40000000) : rank_gone(30);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, 0, 0x80000000 &&& 0x80000000, 0 &&& 0x80000000) : rank_gone(31);
            (ADM_ACCEPT, 1, GATE_PROBE_CURRENT, _, _, _, _, _, _, _, _, _, _, _, _, _, _) : syn_reply(0x04);

            // NEW (§8.2): opens the round; complete at once when the target is 1.
            (ADM_ACCEPT, 0, GATE_NEW, _, _, _, _, 0x100 &&& 0x100, _, _, 0, 0, _, _, _, _, _) : completed_at_open_header_only(EV_COMPLETED);
            (ADM_ACCEPT, 0, GATE_NEW, _, _, _, _, 0x100 &&& 0x100, _, _, 0, _, _, _, _, _, _) : completed_at_open(EV_COMPLETED);
            (ADM_ACCEPT, 0, GATE_NEW, _, _, _, _, 0x100 &&& 0x100, _, _, _, 0, _, _, _, _, _) : completed_at_open_header_only(EV_COMPLETED_PARTIAL);
            (ADM_ACCEPT, 0, GATE_NEW, _, _, _, _, 0x100 &&& 0x100, _, _, _, _, _, _, _, _, _) : completed_at_open(EV_COMPLETED_PARTIAL);
            (ADM_ACCEPT, 0, GATE_NEW, _, _, _, _, _, _, _, _, 0, _, _, _, _, _) : counted_header_only();
            (ADM_ACCEPT, 0, GATE_NEW, _, _, _, _, _, _, _, _, _, 1, _, _, _, _) : counted_header_only();
            (ADM_ACCEPT, 0, GATE_NEW, _, _, _, _, _, _, _, _, _, _, _, _, _, _) : counted();
            // OLD and ahead.
            (ADM_ACCEPT, 0, GATE_OLD, _, _, _, _, 0x100 &&& 0x100, _, _, _, _, _, _, _, _, _) : old_reply(0x88);
            (ADM_ACCEPT, 0, GATE_OLD, _, _, _, _, _, _, _, _, _, _, _, _, _, _) : old_reply(0x08);
            (ADM_ACCEPT, 0, GATE_AHEAD, _, _, _, _, _, _, _, _, _, _, _, _, _, _) : seq_ahead();
            // Poisoned earlier (the round's error again), or poisoned by this packet (§8.3).
            (ADM_ACCEPT, 0, GATE_CURRENT, ERR_OP_MISMATCH, _, _, _, _, _, _, _, _, _, _, _, _, _) : poisoned_op(0x10);
            (ADM_ACCEPT, 0, GATE_CURRENT, ERR_DTYPE_MISMATCH, _, _, _, _, _, _, _, _, _, _, _, _, _) : poisoned_type(0x10);
            (ADM_ACCEPT, 0, GATE_CURRENT, ERR_LENGTH_MISMATCH, _, _, _, _, _, _, _, _, _, _, _, _, _) : poisoned_length(0x10);
            (ADM_ACCEPT, 0, GATE_CURRENT, ERR_MODE_MISMATCH, _, _, _, _, _, _, _, _, _, _, _, _, _) : poisoned_mode(0x10);
            (ADM_ACCEPT, 0, GATE_MISMATCH, ERR_OP_MISMATCH, _, _, _, _, _, _, _, _, _, _, _, _, _) : poisoned_op(0x10);
            (ADM_ACCEPT, 0, GATE_MISMATCH, ERR_DTYPE_MISMATCH, _, _, _, _, _, _, _, _, _, _, _, _, _) : poisoned_type(0x10);
            (ADM_ACCEPT, 0, GATE_MISMATCH, ERR_LENGTH_MISMATCH, _, _, _, _, _, _, _, _, _, _, _, _, _) : poisoned_length(0x10);
            (ADM_ACCEPT, 0, GATE_MISMATCH, ERR_MODE_MISMATCH, _, _, _, _, _, _, _, _, _, _, _, _, _) : poisoned_mode(0x10);
            (ADM_ACCEPT, 0, GATE_MISMATCH, 0, ERR_DTYPE_MISMATCH, _, _, _, _, 0, _, _, _, _, _, _, _) : poisoned_now(ERR_DTYPE_MISMATCH);
            (ADM_ACCEPT, 0, GATE_MISMATCH, 0, ERR_LENGTH_MISMATCH, _, _, _, _, 0, _, _, _, _, _, _, _) : poisoned_now(ERR_LENGTH_MISMATCH);
            (ADM_ACCEPT, 0, GATE_MISMATCH, 0, ERR_MODE_MISMATCH, _, _, _, _, 0, _, _, _, _, _, _, _) : poisoned_now(ERR_MODE_MISMATCH);
            (ADM_ACCEPT, 0, GATE_MISMATCH, 0, _, _, _, _, _, _, _, _, _, _, _, _, _) : poisoned_now_with_sender_copy();
            // A new contributor: late (copy), completing (multicast) or counted.
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, COUNT_OP_ADD, 0x100 &&& 0x100, _, _, _, 0, _, _, _, _, _) : copy_header_only(0x03, EV_LATE);
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, COUNT_OP_ADD, 0x100 &&& 0x100, _, _, _, _, _, _, _, _, _) : copy_to_data(EV_LATE);
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, COUNT_OP_ADD, _, 0 &&& 0xFE, _, 0, 0, _, _, _, _, _) : completed_header_only(EV_COMPLETED);
            // §13.3: a relayed round completes only with all N, the owner's values among them.
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, COUNT_OP_ADD, _, 0 &&& 0xFE, _, 0, _, 1, _, _, _, _) : completed_by_probe(EV_COMPLETED);
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, COUNT_OP_ADD, _, 0 &&& 0xFE, _, 0, _, _, _, _, _, _) : completed(EV_COMPLETED);
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, COUNT_OP_ADD, _, 0 &&& 0xFE, _, _, 0, _, _, _, _, _) : completed_header_only(EV_COMPLETED_PARTIAL);
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, COUNT_OP_ADD, _, 0 &&& 0xFE, _, _, _, _, _, _, _, _) : completed(EV_COMPLETED_PARTIAL);
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, COUNT_OP_ADD, _, _, _, _, 0, _, _, _, _, _) : counted_header_only();
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, COUNT_OP_ADD, _, _, _, _, _, 1, _, _, _, _) : counted_header_only();
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, COUNT_OP_ADD, _, _, _, _, _, _, _, _, _, _) : counted();
            // A counted rank's retransmission: copy, reactive completion, or a duplicate.
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, _, 0x100 &&& 0x100, _, _, _, 0, _, _, _, _, _) : copy_header_only(0x03, EV_RETRANSMITTED);
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, _, 0x100 &&& 0x100, _, _, _, _, 1, _, _, _, _) : copy_relayed(EV_RETRANSMITTED);
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, _, 0x100 &&& 0x100, _, _, _, _, _, _, _, _, _) : copy_to_data(EV_RETRANSMITTED);
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, COUNT_OP_REACTIVE, _, 0, _, 0, 0, _, _, _, _, _) : completed_header_only(EV_COMPLETED);
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, COUNT_OP_REACTIVE, _, 0, _, 0, _, _, _, _, _, _) : completed(EV_COMPLETED);
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, COUNT_OP_REACTIVE, _, 0, _, _, 0, _, _, _, _, _) : completed_header_only(EV_COMPLETED_PARTIAL);
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, COUNT_OP_REACTIVE, _, 0, _, _, _, _, _, _, _, _) : completed(EV_COMPLETED_PARTIAL);
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, _, _, _, _, _, 0, _, _, _, _, _) : duplicate_header_only();
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, _, _, _, _, _, _, 1, _, _, _, _) : duplicate_header_only();
            (ADM_ACCEPT, 0, GATE_CURRENT, 0, _, _, _, _, _, _, _, _, _, _, _, _, _) : duplicate();
        }
    }

    // The milliseconds since the controller last heard a gone rank (0xffffffff: it left), as of
    // its last refresh (p4/controller/dpa_controller/liveness.py).
    action set_silence(bit<32> ms) { hdr.dpa.offset = ms; }
    table silences {
        key = { hdr.bridged.session_index : exact; md.gone_rank : exact; }
        actions = { set_silence; NoAction; }
        const default_action = NoAction;
        size = 32 * DPA_SESSIONS;
    }

    apply {
        pass_plan.apply();
        md.k_x = md.slot_round[7:0] ^ md.world_target;
        // The count RegisterActions return the register as the packet found it (slot_state.p4).
        // An ADD completes the round when threshold - 1 <= that (short 0 or 1), a reactive one
        // when threshold <= that (short 0); a counted ADD is one more contributor.
        md.short = md.threshold |-| md.count;
        if (md.count_op == COUNT_OP_ADD && md.count[15:8] == 0) {
            md.contributors = md.count + 1;
            md.full_x = md.count ^ md.world_minus_one;
        } else {
            md.contributors = md.count;
            md.full_x = md.count ^ md.world;
        }
        reply.apply();
        if (md.gone_hit == 1) {
            silences.apply();
        }
    }
}

#endif
