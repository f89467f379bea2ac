// SPDX-License-Identifier: Apache-2.0
// Block exponents (docs/protocol.md §10.2): the round keeps the opener's exp_used and the
// maximum exp_next of its contributors. Codes are biased (e ^ 0x80), so the signed maximum is
// the unsigned maximum and a cleared register reads as "no exponent" (§2, §8.5).
#ifndef DPA_EXPONENT_P4
#define DPA_EXPONENT_P4

control Exponent(inout headers_t hdr,
                 inout metadata_t md) {
    Register<bit<8>, slot_index_t>(DPA_SLOTS, 0) exp_used;
    Register<bit<8>, slot_index_t>(DPA_SLOTS, 0) exp_max;

    RegisterAction<bit<8>, slot_index_t, bit<8>>(exp_used) exp_used_write = {
        void apply(inout bit<8> value, out bit<8> rv) { value = hdr.dpa.exp_used; rv = value; }
    };
    RegisterAction<bit<8>, slot_index_t, bit<8>>(exp_used) exp_used_read = {
        void apply(inout bit<8> value, out bit<8> rv) { rv = value; }
    };

    RegisterAction<bit<8>, slot_index_t, bit<8>>(exp_max) exp_max_open = {
        void apply(inout bit<8> value, out bit<8> rv) { value = hdr.dpa.exp_next; rv = value; }
    };
    RegisterAction<bit<8>, slot_index_t, bit<8>>(exp_max) exp_max_add = {
        void apply(inout bit<8> value, out bit<8> rv) {
            value = max(value, hdr.dpa.exp_next);
            rv = value;
        }
    };
    RegisterAction<bit<8>, slot_index_t, bit<8>>(exp_max) exp_max_read = {
        void apply(inout bit<8> value, out bit<8> rv) { rv = value; }
    };

    // The slot's codes go straight into the header's exp_used and exp_next, which only replies
    // with the slot's view carry (delivery.p4); an error reply echoes the request's, so poisoned
    // rounds, disagreeing and early packets do not touch them. Only a counted contribution (a
    // new sender of a round neither poisoned nor complete) raises the maximum (§8.2 Add).
    // One stateful ALU per action: a table for each register, with the same key.
    action used_write() { hdr.dpa.exp_used = exp_used_write.execute(hdr.dpa.slot[DPA_SLOT_BITS - 1:0]); }
    action used_read() { hdr.dpa.exp_used = exp_used_read.execute(hdr.dpa.slot[DPA_SLOT_BITS - 1:0]); }
    table exp_used_step {
        key = {
            md.gate : exact;
            md.poison_info[7:0] : ternary;  // the poison code, 0 while not poisoned
        }
        actions = { used_write; used_read; NoAction; }
        const default_action = NoAction;
        size = 8;
        const entries = {
            (GATE_NEW, _) : used_write();
            (GATE_OLD, _) : used_read();
            (GATE_PROBE_OTHER, _) : used_read();
            (GATE_CURRENT, 0) : used_read();
            (GATE_PROBE_CURRENT, 0) : used_read();
        }
    }

    action max_open() { hdr.dpa.exp_next = exp_max_open.execute(hdr.dpa.slot[DPA_SLOT_BITS - 1:0]); }
    action max_add() { hdr.dpa.exp_next = exp_max_add.execute(hdr.dpa.slot[DPA_SLOT_BITS - 1:0]); }
    action max_read() { hdr.dpa.exp_next = exp_max_read.execute(hdr.dpa.slot[DPA_SLOT_BITS - 1:0]); }
    table exp_max_step {
        key = {
            md.gate : exact;
            md.poison_info[7:0] : ternary;  // the poison code, 0 while not poisoned
            md.dup : ternary;
            md.count[15:8] : ternary;       // 1 once the round is complete
        }
        actions = { max_open; max_add; max_read; NoAction; }
        const default_action = NoAction;
        size = 8;
        const entries = {
            (GATE_NEW, _, _, _) : max_open();
            (GATE_OLD, _, _, _) : max_read();
            (GATE_PROBE_OTHER, _, _, _) : max_read();
            (GATE_CURRENT, 0, 0, 0) : max_add();
            (GATE_CURRENT, 0, _, _) : max_read();
            (GATE_PROBE_CURRENT, 0, _, _) : max_read();
        }
    }

    apply {
        exp_used_step.apply();
        exp_max_step.apply();
    }
}

#endif
