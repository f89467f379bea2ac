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
    // rounds, disagreeing and early packets do not touch them.
    apply {
        slot_index_t index = hdr.dpa.slot[DPA_SLOT_BITS - 1:0];
        if (md.gate == GATE_NEW) {
            hdr.dpa.exp_used = exp_used_write.execute(index);
            hdr.dpa.exp_next = exp_max_open.execute(index);
        } else if (md.gate == GATE_OLD || md.gate == GATE_PROBE_OTHER ||
                   ((md.gate == GATE_CURRENT || md.gate == GATE_PROBE_CURRENT) && md.poison_info == 0)) {
            hdr.dpa.exp_used = exp_used_read.execute(index);
            // Only a counted contribution raises the maximum (§8.2 Add).
            if (md.gate == GATE_CURRENT && md.dup == 0 && md.count[15:8] == 0) {
                hdr.dpa.exp_next = exp_max_add.execute(index);
            } else {
                hdr.dpa.exp_next = exp_max_read.execute(index);
            }
        }
    }
}

#endif
