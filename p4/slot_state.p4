// SPDX-License-Identifier: Apache-2.0
// Per-slot round state (docs/protocol.md §8.2-§8.5): round number, the round's identity
// (op_id, offset, op_length, type and count), its target and K, the straggler timer, the poison
// state, the arrival bitmap and the contribution count. Registers are indexed by the absolute
// slot and live in the pipe of the state pass only; the controller clears them all (the fresh
// state of §8.5) before it acks a generation.
//
// Order of the stages, and why (one access per register per pass):
//   seq             -> the packet's class (d = packet.seq - slot.seq)
//   op/offset/length/meta (count, target), written by NEW, read otherwise
//   round (count, type, K), first arrival (elapsed time), mismatch XORs
//   gate            -> NEW / CURRENT / OLD / AHEAD / MISMATCH / PROBE_*
//   poison          (code and rank, offered and expected values, set by the first mismatch)
//                   |  arrival bitmap (duplicates), side by side
//   count           (contributors, completion; refuses a poisoned round, and gates itself: a
//                    complete round is never counted)
// The bitmap that replies report is the frozen one kept by result_bitmap.p4's register.
#ifndef DPA_SLOT_STATE_P4
#define DPA_SLOT_STATE_P4

struct poison_value_t {
    bit<32> poisoned;  // 1 once the round is poisoned
    bit<32> value;  // the offender's value
}

control SlotState(inout headers_t hdr,
                  inout metadata_t md) {
    Register<bit<32>, slot_index_t>(DPA_SLOTS, 0) seq;
    Register<bit<32>, slot_index_t>(DPA_SLOTS, 0) op_id;
    Register<bit<32>, slot_index_t>(DPA_SLOTS, 0) offset;
    Register<bit<32>, slot_index_t>(DPA_SLOTS, 0) op_length;
    Register<bit<32>, slot_index_t>(DPA_SLOTS, 0) meta;        // count << 16 | owner << 8 | target; target 0: never opened
    Register<bit<32>, slot_index_t>(DPA_SLOTS, 0) round;       // count << 16 | flags' high byte (FLOAT, TO_OWNER, FROM_OWNER) << 8 | K
#if DPA_STRAGGLER_AWARE
    Register<bit<32>, slot_index_t>(DPA_SLOTS, 0) first_arrival;
#endif
    Register<bit<32>, slot_index_t>(DPA_SLOTS, 0) poison_info;  // offender rank << 8 | code
    Register<poison_value_t, slot_index_t>(DPA_SLOTS, {0, 0}) poison_value;
    Register<poison_value_t, slot_index_t>(DPA_SLOTS, {0, 0}) poison_expected;
    Register<bit<32>, slot_index_t>(DPA_SLOTS, 0) arrivals;
    Register<bit<16>, slot_index_t>(DPA_SLOTS, 0) count;       // COUNT_* encoding (types.p4)

    // Serial-number arithmetic (§7.3): d = packet.seq - slot.seq; only d == 1 opens a round.
    RegisterAction<bit<32>, slot_index_t, bit<32>>(seq) seq_step = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = hdr.dpa.seq - value;
            if (hdr.dpa.seq - value == 1) {
                value = hdr.dpa.seq;
            }
        }
    };
    RegisterAction<bit<32>, slot_index_t, bit<32>>(seq) seq_probe = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = hdr.dpa.seq - value;
        }
    };
#define DPA_WRITE_READ(reg, field)                                                         \
    RegisterAction<bit<32>, slot_index_t, bit<32>>(reg) reg##_write = {                    \
        void apply(inout bit<32> value, out bit<32> rv) { value = field; rv = value; }     \
    };                                                                                     \
    RegisterAction<bit<32>, slot_index_t, bit<32>>(reg) reg##_read = {                     \
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; }                    \
    };

    DPA_WRITE_READ(op_id, hdr.dpa.op_id)
    DPA_WRITE_READ(offset, hdr.dpa.offset)
    DPA_WRITE_READ(op_length, hdr.dpa.op_length)
    DPA_WRITE_READ(meta, md.packet_meta)
    DPA_WRITE_READ(round, md.packet_round)
#undef DPA_WRITE_READ
#if DPA_STRAGGLER_AWARE
    // Both return the time since the round opened (§8.4), so the MAU only compares it.
    RegisterAction<bit<32>, slot_index_t, bit<32>>(first_arrival) first_arrival_write = {
        void apply(inout bit<32> value, out bit<32> rv) { value = md.now; rv = 0; }
    };
    RegisterAction<bit<32>, slot_index_t, bit<32>>(first_arrival) first_arrival_read = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = md.now - value; }
    };
#endif

    RegisterAction<bit<32>, slot_index_t, bit<32>>(poison_info) poison_info_clear = {
        void apply(inout bit<32> value, out bit<32> rv) { value = 0; rv = 0; }
    };
    RegisterAction<bit<32>, slot_index_t, bit<32>>(poison_info) poison_info_read = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; }
    };
    // Returns the state before the packet: 0 means this packet poisons the round now.
    RegisterAction<bit<32>, slot_index_t, bit<32>>(poison_info) poison_info_set = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
            if (value == 0) {
                value = md.mismatch_info;
            }
        }
    };
    RegisterAction<poison_value_t, slot_index_t, bit<32>>(poison_value) poison_value_clear = {
        void apply(inout poison_value_t value, out bit<32> rv) { value.poisoned = 0; value.value = 0; rv = 0; }
    };
    RegisterAction<poison_value_t, slot_index_t, bit<32>>(poison_value) poison_value_read = {
        void apply(inout poison_value_t value, out bit<32> rv) { rv = value.value; }
    };
    // The offered value is stored once, by the packet that poisons the round.
    RegisterAction<poison_value_t, slot_index_t, bit<32>>(poison_value) poison_value_set = {
        void apply(inout poison_value_t value, out bit<32> rv) {
            if (value.poisoned == 0) {
                value.poisoned = 1;
                value.value = md.mismatch_value;
            }
            rv = value.value;
        }
    };

    // The round's value the first offender disagreed with (the poisoned replies' `offset`), kept
    // here rather than moved from the slot's words, which would tie those to the header's.
    RegisterAction<poison_value_t, slot_index_t, bit<32>>(poison_expected) poison_expected_clear = {
        void apply(inout poison_value_t value, out bit<32> rv) { value.poisoned = 0; value.value = 0; rv = 0; }
    };
    RegisterAction<poison_value_t, slot_index_t, bit<32>>(poison_expected) poison_expected_read = {
        void apply(inout poison_value_t value, out bit<32> rv) { rv = value.value; }
    };
    RegisterAction<poison_value_t, slot_index_t, bit<32>>(poison_expected) poison_expected_set = {
        void apply(inout poison_value_t value, out bit<32> rv) {
            if (value.poisoned == 0) {
                value.poisoned = 1;
                value.value = md.mismatch_expected;
            }
            rv = value.value;
        }
    };

    // Each returns the sender's bit as the packet found it (md.dup): nonzero for a duplicate.
    RegisterAction<bit<32>, slot_index_t, bit<32>>(arrivals) arrivals_open = {
        void apply(inout bit<32> value, out bit<32> rv) { value = md.sender_bit; rv = 0; }
    };
    RegisterAction<bit<32>, slot_index_t, bit<32>>(arrivals) arrivals_add = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value & md.sender_bit;
            value = value | md.sender_bit;
        }
    };
    RegisterAction<bit<32>, slot_index_t, bit<32>>(arrivals) arrivals_read = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = value & md.sender_bit; }
    };

    // A stateful ALU has one output source per RegisterAction, so every count action returns the
    // register as the packet found it (count_open the value it writes); the reply decides whether
    // the packet completed the round from that and md.threshold (md.short, below).
    // NEW: one contribution, complete at once when the target is 1 (md.open_count = 0x101).
    RegisterAction<bit<16>, slot_index_t, bit<16>>(count) count_open = {
        void apply(inout bit<16> value, out bit<16> rv) { value = md.open_count; rv = value; }
    };
    // A new contributor: counted unless the round is already complete (then it is a late
    // contribution and only fetches a copy). Completes at the threshold: the round's target,
    // or its K once the straggler timeout has passed (reactive fastest-K, §9.3).
    RegisterAction<bit<16>, slot_index_t, bit<16>>(count) count_add = {
        void apply(inout bit<16> value, out bit<16> rv) {
            rv = value;
            if (value < COUNT_COMPLETE) {
                if (value + 1 >= md.threshold) {
                    value = value + (COUNT_COMPLETE + 1);
                } else {
                    value = value + 1;
                }
            }
        }
    };
#if DPA_STRAGGLER_AWARE
    // A counted rank's retransmission or probe after the straggler timeout: completes the
    // round with the contributions it has once they reach its K.
    RegisterAction<bit<16>, slot_index_t, bit<16>>(count) count_reactive = {
        void apply(inout bit<16> value, out bit<16> rv) {
            rv = value;
            if (value < COUNT_COMPLETE && value >= md.threshold) {
                value = value | COUNT_COMPLETE;
            }
        }
    };
#endif
    RegisterAction<bit<16>, slot_index_t, bit<16>>(count) count_read = {
        void apply(inout bit<16> value, out bit<16> rv) { rv = value; }
    };

    Hash<bit<16>>(HashAlgorithm_t.IDENTITY) k_copy;
    Hash<bit<16>>(HashAlgorithm_t.IDENTITY) offered_count;
    Hash<bit<16>>(HashAlgorithm_t.IDENTITY) expected_count;
    Hash<bit<16>>(HashAlgorithm_t.IDENTITY) target_copy;

    // §8.2's case table over the registers read so far.
    action gate_new() { md.gate = GATE_NEW; }
    action gate_current() { md.gate = GATE_CURRENT; }
    action gate_old() { md.gate = GATE_OLD; }
    action gate_ahead() { md.gate = GATE_AHEAD; }
    action gate_probe_current() { md.gate = GATE_PROBE_CURRENT; }
    action gate_probe_other() { md.gate = GATE_PROBE_OTHER; }
    action gate_op_mismatch() {
        md.gate = GATE_MISMATCH;
        md.mismatch_info = 16w0 ++ hdr.dpa.rank ++ ERR_OP_MISMATCH;
        md.mismatch_value = hdr.dpa.op_id;
        md.mismatch_expected = md.slot_op_id;
    }
    action gate_type_mismatch() {
        md.gate = GATE_MISMATCH;
        md.mismatch_info = 16w0 ++ hdr.dpa.rank ++ ERR_DTYPE_MISMATCH;
        // The FLOAT bit alone: the high flag byte also holds the mode (§13), equal here.
        md.mismatch_value = 16w0 ++ 7w0 ++ md.packet_round[8:8] ++ 8w0;
        md.mismatch_expected = 16w0 ++ 7w0 ++ md.slot_round[8:8] ++ 8w0;
    }
    // §13.1: another mode, or another owner of an owned round; the values are `mode | owner`.
    action gate_mode_mismatch() {
        md.gate = GATE_MISMATCH;
        md.mismatch_info = 16w0 ++ hdr.dpa.rank ++ ERR_MODE_MISMATCH;
        md.mismatch_value = 16w0 ++ 2w0 ++ md.packet_round[13:12] ++ 4w0 ++ md.packet_meta[15:8];
        md.mismatch_expected = 16w0 ++ 2w0 ++ md.slot_round[13:12] ++ 4w0 ++ md.slot_meta[15:8];
    }
    action gate_length_mismatch() {
        md.gate = GATE_MISMATCH;
        md.mismatch_info = 16w0 ++ hdr.dpa.rank ++ ERR_LENGTH_MISMATCH;
        md.mismatch_value = hdr.dpa.op_length;
        md.mismatch_expected = md.slot_op_length;
    }
    // The round's count differs (§8.2, after op_length): length_mismatch with the counts as the
    // expected and offered values (src/switch/slot.cpp), which the poison registers keep.
    action gate_count_mismatch() {
        md.gate = GATE_MISMATCH;
        md.mismatch_info = 16w0 ++ hdr.dpa.rank ++ ERR_LENGTH_MISMATCH;
        md.mismatch_value = 16w0 ++ offered_count.get({hdr.dpa.count});
        md.mismatch_expected = 16w0 ++ expected_count.get({md.slot_round[31:16]});
    }
    table gate {
        key = {
            md.is_probe : exact;
            md.seq_diff : ternary;
            md.slot_meta : ternary;
            md.op_x : ternary;
            md.round_x : ternary;
            md.length_x : ternary;
            md.meta_x : ternary;
        }
        actions = {
            gate_new; gate_current; gate_old; gate_ahead; gate_probe_current; gate_probe_other;
            gate_op_mismatch; gate_mode_mismatch; gate_type_mismatch; gate_length_mismatch;
            gate_count_mismatch;
        }
        const default_action = gate_ahead;
        size = 16;
        const entries = {
            // SYN probes: only d == 0 on an opened round looks any further (§8.2).
            (1, 0, 0 &&& 0xFF, _, _, _, _) : gate_probe_other();
            (1, 0, _, _, _, _, _) : gate_probe_current();
            (1, _, _, _, _, _, _) : gate_probe_other();
            (0, 1, _, _, _, _, _) : gate_new();
            (0, 0x80000000 &&& 0x80000000, _, _, _, _, _) : gate_old();
            // d == 0 on a slot never opened in this generation (target 0) is "ahead". round_x
            // bit 8: the packet's FLOAT bit differs from the round's; bits 13..12: its mode;
            // bits 31..16: its count. meta_x bits 15..8: its owner (0 outside owned rounds).
            (0, 0, 0 &&& 0xFF, _, _, _, _) : gate_ahead();
            (0, 0, _, 0, 0 &&& 0xFFFF3100, 0, 0 &&& 0xFF00) : gate_current();
            // Disagreements, checked in §8.2's and §13.1's order: op_id, mode and owner, type,
            // op_length, then count.
            (0, 0, _, 0, 0 &&& 0x3100, 0, 0 &&& 0xFF00) : gate_count_mismatch();
            (0, 0, _, 0, 0 &&& 0x3100, _, 0 &&& 0xFF00) : gate_length_mismatch();
            (0, 0, _, 0, 0 &&& 0x3000, _, 0 &&& 0xFF00) : gate_type_mismatch();
            (0, 0, _, 0, _, _, _) : gate_mode_mismatch();
            (0, 0, _, _, _, _, _) : gate_op_mismatch();
        }
    }

    // The contributions that complete the round for this packet: its K once the straggler
    // timeout has passed (not_late == 0), else its target. Copied through identity hashes, so
    // the count's arithmetic shares no PHV container group with the slot's header-shaped words.
    action threshold_k() { md.threshold = k_copy.get({8w0, md.slot_round[7:0]}); }
    action threshold_target() { md.threshold = target_copy.get({8w0, md.slot_meta[7:0]}); }
    // (Actions that use the hash distribution unit cannot be default actions.)
    table thresholds {
        key = { md.not_late : ternary; }
        actions = { threshold_k; threshold_target; NoAction; }
        const default_action = NoAction;
        size = 2;
        const entries = {
            0 : threshold_k();
            _ : threshold_target();
        }
    }

    // Which count RegisterAction the packet runs (a table: the conditions are too wide for a
    // gateway). poison_info's low byte is the poison code, 0 while not poisoned; dup is the
    // sender's bit in the arrival bitmap.
    action count_open_step() {
        md.count = count_open.execute(hdr.dpa.slot[DPA_SLOT_BITS - 1:0]);
        md.count_op = COUNT_OP_OPEN;
    }
    action count_add_step() {
        md.count = count_add.execute(hdr.dpa.slot[DPA_SLOT_BITS - 1:0]);
        md.count_op = COUNT_OP_ADD;
    }
#if DPA_STRAGGLER_AWARE
    action count_reactive_step() {
        md.count = count_reactive.execute(hdr.dpa.slot[DPA_SLOT_BITS - 1:0]);
        md.count_op = COUNT_OP_REACTIVE;
    }
#endif
    action count_read_step() {
        md.count = count_read.execute(hdr.dpa.slot[DPA_SLOT_BITS - 1:0]);
        md.count_op = COUNT_OP_READ;
    }
    table count_step {
        key = {
            md.gate : exact;
            md.poison_info[7:0] : ternary;
            md.dup : ternary;
            md.not_late : ternary;
        }
        actions = {
            count_open_step; count_add_step;
#if DPA_STRAGGLER_AWARE
            count_reactive_step;
#endif
            count_read_step; NoAction;
        }
        const default_action = NoAction;
        size = 16;
        const entries = {
            (GATE_NEW, _, _, _) : count_open_step();
            (GATE_CURRENT, 0, 0, _) : count_add_step();
#if DPA_STRAGGLER_AWARE
            // A counted rank's retransmission or probe after the straggler timeout.
            (GATE_CURRENT, 0, _, 0) : count_reactive_step();
            (GATE_PROBE_CURRENT, 0, 0, _) : count_read_step();
            (GATE_PROBE_CURRENT, 0, _, 0) : count_reactive_step();
#endif
            (GATE_CURRENT, _, _, _) : count_read_step();
            (GATE_PROBE_CURRENT, _, _, _) : count_read_step();
            (GATE_OLD, _, _, _) : count_read_step();
            (GATE_PROBE_OTHER, _, _, _) : count_read_step();
        }
    }

    action compare_with_round() {
        md.op_x = hdr.dpa.op_id ^ md.slot_op_id;
        md.length_x = hdr.dpa.op_length ^ md.slot_op_length;
        md.round_x = md.packet_round ^ md.slot_round;
        md.meta_x = md.packet_meta ^ md.slot_meta;
    }

    apply {
        slot_index_t index = hdr.dpa.slot[DPA_SLOT_BITS - 1:0];
        if (md.is_probe == 1) {
            md.seq_diff = seq_probe.execute(index);
        } else {
            md.seq_diff = seq_step.execute(index);
        }

        if (md.is_probe == 0 && md.seq_diff == 1) {
            md.slot_op_id = op_id_write.execute(index);
            hdr.dpa.offset = offset_write.execute(index);
            md.slot_op_length = op_length_write.execute(index);
            md.slot_meta = meta_write.execute(index);
            md.slot_round = round_write.execute(index);
#if DPA_STRAGGLER_AWARE
            md.elapsed = first_arrival_write.execute(index);
#endif
        } else {
            md.slot_op_id = op_id_read.execute(index);
            hdr.dpa.offset = offset_read.execute(index);
            md.slot_op_length = op_length_read.execute(index);
            md.slot_meta = meta_read.execute(index);
            md.slot_round = round_read.execute(index);
#if DPA_STRAGGLER_AWARE
            md.elapsed = first_arrival_read.execute(index);
#endif
        }
        compare_with_round();
        md.slot_seq = hdr.dpa.seq - md.seq_diff;
        md.state_meta = md.slot_meta & 0xFF;
        gate.apply();
#if DPA_STRAGGLER_AWARE
        // timed_out = elapsed > timeout  <=>  (timeout + 1) -sat elapsed == 0 (§8.4, unsigned).
        md.not_late = md.timeout_plus_one |-| md.elapsed;
#else
        md.not_late = 1;
#endif

        if (md.gate == GATE_NEW) {
            md.poison_info = poison_info_clear.execute(index);
            md.poison_value = poison_value_clear.execute(index);
            md.poison_expected = poison_expected_clear.execute(index);
        } else if (md.gate == GATE_MISMATCH) {
            md.poison_info = poison_info_set.execute(index);
            md.poison_value = poison_value_set.execute(index);
            md.poison_expected = poison_expected_set.execute(index);
        } else if (md.gate == GATE_CURRENT || md.gate == GATE_PROBE_CURRENT) {
            md.poison_info = poison_info_read.execute(index);
            md.poison_value = poison_value_read.execute(index);
            md.poison_expected = poison_expected_read.execute(index);
        }

        // Not gated by the poison state, so it sits beside the poison registers: a poisoned
        // round never completes (the count refuses it) and replies report the frozen bitmap
        // (result_bitmap.p4), so bits a poisoned round collects are never seen.
        if (md.gate == GATE_NEW) {
            md.dup = arrivals_open.execute(index);
        } else if (md.gate == GATE_CURRENT) {
            md.dup = arrivals_add.execute(index);
        } else if (md.gate == GATE_PROBE_CURRENT) {
            md.dup = arrivals_read.execute(index);
        }
        thresholds.apply();
        count_step.apply();
    }
}

#endif
