// SPDX-License-Identifier: Apache-2.0
// What each chunk of a slot holds (docs/switch.md, "Failure model of the internal passes"). The
// state pass commits a contribution (count, bitmaps) before its values reach the chunks in later
// passes through the traffic manager, which may drop any of them. So each chunk pipe keeps, per
// slot, the round whose sum its accumulators hold and the ranks whose values they hold, and the
// value pass decides from them, before the accumulators (reduce.p4):
//
//   input pass of a contributor (bridged.sender_bit set): a round other than the chunk's opens it
//     (WRITE, the ranks become the sender), whichever contribution of the round comes first, so a
//     lost opening write cannot leave the previous round's sums in it; a sender already among the
//     ranks adds nothing (a repair that finds its values there); any other sender is added once;
//   input pass of a non-contributor (a late rank's copy): nothing;
//   output pass: reads only if the chunk holds the result's round and exactly its
//     contributors (dpa.bitmap_lo); otherwise the result or copy is withheld (dropped).
//   A FROM_OWNER round (§13.3) has one rank with values, its owner (admission sends the other
//   ranks' requests, header only, to no input pass): the owner's input pass opens the chunk for
//   the round, so its values replace whatever the chunk held, and an output pass reads once the
//   chunk holds the round, which only the owner's values can have opened (the result's bitmap
//   lists every rank, the chunk's ranks the owner alone, so they are not compared).
//
// A lost value pass thus means a missing result, never a wrong sum: the rank whose values are
// missing gets no result, retransmits, and the state pass sends a counted rank's retransmission
// through the input passes again (delivery.p4), which adds what the chunks lack. Passes of one
// slot reach a chunk in the order the state pass sent them (the same pass ports, FIFO), so a
// round other than the chunk's is a newer one; were they reordered, the output check would still
// withhold every mixed result.
//
// Two 32-bit registers, each one stateful ALU: a Tofino1 ALU returns one word, and the input pass
// needs two answers (did the round change, was the sender there). Their writes follow the
// stateful ALU's shapes: an unconditional write with the difference as output, and the arrival
// bitmap's OR with the sender's bit as found as output (slot_state.p4's arrivals_add).
#ifndef DPA_CHUNK_STATE_P4
#define DPA_CHUNK_STATE_P4

control ChunkState(inout headers_t hdr,
                   inout metadata_t md,
                   inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    // The round the chunk's sums belong to, as a chunk round: its seq XOR its generation's token
    // (bridged.op_id_or_round, delivery.p4's route_input).
    Register<bit<32>, slot_index_t>(DPA_SLOTS, 0) rounds;
    Register<bit<32>, slot_index_t>(DPA_SLOTS, 0) ranks;   // the ranks whose values they hold

    // Both return the packet's chunk round minus the chunk's (0: the same round of the same
    // generation).
    RegisterAction<bit<32>, slot_index_t, bit<32>>(rounds) rounds_open = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = hdr.bridged.op_id_or_round - value;
            value = hdr.bridged.op_id_or_round;
        }
    };
    RegisterAction<bit<32>, slot_index_t, bit<32>>(rounds) rounds_read = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = hdr.bridged.op_id_or_round - value; }
    };

    RegisterAction<bit<32>, slot_index_t, bit<32>>(ranks) ranks_open = {
        void apply(inout bit<32> value, out bit<32> rv) { value = hdr.bridged.sender_bit; rv = 0; }
    };
    // Returns the sender's bit as the chunk had it: nonzero when its values are already there.
    RegisterAction<bit<32>, slot_index_t, bit<32>>(ranks) ranks_add = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value & hdr.bridged.sender_bit;
            value = value | hdr.bridged.sender_bit;
        }
    };
    // Zero when the chunk holds exactly the contributors the result reports.
    RegisterAction<bit<32>, slot_index_t, bit<32>>(ranks) ranks_check = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = value ^ hdr.dpa.bitmap_lo; }
    };

    action open_round() { md.chunk_round_x = rounds_open.execute(hdr.bridged.slot[DPA_SLOT_BITS - 1:0]); }
    action read_round() { md.chunk_round_x = rounds_read.execute(hdr.bridged.slot[DPA_SLOT_BITS - 1:0]); }
    // Only a contributor's values may open a round in the chunk.
    table round_step {
        key = {
            hdr.bridged.reduce_op : exact;
            hdr.bridged.sender_bit : ternary;
        }
        actions = { open_round; read_round; NoAction; }
        const default_action = NoAction;
        size = 4;
        const entries = {
            (REDUCE_CONTRIBUTE, 0) : NoAction();
            (REDUCE_CONTRIBUTE, _) : open_round();
            (REDUCE_READ_LO, _) : read_round();
            (REDUCE_READ_HI, _) : read_round();
        }
    }

    action open_ranks() { md.chunk_ranks_x = ranks_open.execute(hdr.bridged.slot[DPA_SLOT_BITS - 1:0]); }
    action add_rank() { md.chunk_ranks_x = ranks_add.execute(hdr.bridged.slot[DPA_SLOT_BITS - 1:0]); }
    action check_ranks() { md.chunk_ranks_x = ranks_check.execute(hdr.bridged.slot[DPA_SLOT_BITS - 1:0]); }
    // An output pass's header is the result's, whose flags carry the round's mode (§13.1).
    table ranks_step {
        key = {
            hdr.bridged.reduce_op : exact;
            hdr.bridged.sender_bit : ternary;
            md.chunk_round_x : ternary;
            hdr.dpa.flags[13:13] : ternary @name("from_owner");
        }
        actions = { open_ranks; add_rank; check_ranks; NoAction; }
        const default_action = NoAction;
        size = 7;
        const entries = {
            (REDUCE_CONTRIBUTE, 0, _, _) : NoAction();
            (REDUCE_CONTRIBUTE, _, 0, _) : add_rank();
            (REDUCE_CONTRIBUTE, _, _, _) : open_ranks();
            (REDUCE_READ_LO, _, _, 1) : NoAction();
            (REDUCE_READ_HI, _, _, 1) : NoAction();
            (REDUCE_READ_LO, _, _, _) : check_ranks();
            (REDUCE_READ_HI, _, _, _) : check_ranks();
        }
    }

    action cell(bit<8> op) { md.cell_op = op; }
    // The chunk does not hold the result the header reports: no reply from this packet.
    action withhold() { ig_dprsr_md.drop_ctl = 1; }
    table cell_step {
        key = {
            hdr.bridged.reduce_op : exact;
            hdr.bridged.sender_bit : ternary;
            md.chunk_round_x : ternary;
            md.chunk_ranks_x : ternary;
            hdr.dpa.flags[13:13] : ternary @name("from_owner");
        }
        actions = { cell; withhold; }
        const default_action = cell(REDUCE_NONE);
        size = 10;
        const entries = {
            (REDUCE_CONTRIBUTE, 0, _, _, _) : cell(REDUCE_NONE);
            (REDUCE_CONTRIBUTE, _, 0, 0, _) : cell(REDUCE_ADD);
            (REDUCE_CONTRIBUTE, _, 0, _, _) : cell(REDUCE_NONE);
            (REDUCE_CONTRIBUTE, _, _, _, _) : cell(REDUCE_WRITE);
            (REDUCE_READ_LO, _, 0, _, 1) : cell(REDUCE_READ_LO);
            (REDUCE_READ_HI, _, 0, _, 1) : cell(REDUCE_READ_HI);
            (REDUCE_READ_LO, _, 0, 0, 0) : cell(REDUCE_READ_LO);
            (REDUCE_READ_HI, _, 0, 0, 0) : cell(REDUCE_READ_HI);
            (REDUCE_READ_LO, _, _, _, _) : withhold();
            (REDUCE_READ_HI, _, _, _, _) : withhold();
        }
    }

    apply {
        round_step.apply();
        ranks_step.apply();
        cell_step.apply();
    }
}

#endif
