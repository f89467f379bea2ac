// SPDX-License-Identifier: Apache-2.0
// The contributor bitmap that replies report (docs/protocol.md §8.2 "Frozen bitmap"). The
// arrival bitmap of slot_state.p4 must be read before the count register decides whether the
// round is complete, so it cannot be gated by completion; this register follows the count and
// is written only by packets that were counted, which freezes it at completion.
#ifndef DPA_RESULT_BITMAP_P4
#define DPA_RESULT_BITMAP_P4

control ResultBitmap(inout headers_t hdr,
                     inout metadata_t md) {
    Register<bit<32>, slot_index_t>(DPA_SLOTS, 0) contributors;

    RegisterAction<bit<32>, slot_index_t, bit<32>>(contributors) contributors_open = {
        void apply(inout bit<32> value, out bit<32> rv) { value = md.sender_bit; rv = value; }
    };
    // Every earlier arrival of a round that is neither poisoned nor complete was counted, so
    // the register equals the arrival bitmap before a counted packet.
    RegisterAction<bit<32>, slot_index_t, bit<32>>(contributors) contributors_add = {
        void apply(inout bit<32> value, out bit<32> rv) { value = value | md.sender_bit; rv = value; }
    };
    RegisterAction<bit<32>, slot_index_t, bit<32>>(contributors) contributors_read = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; }
    };

    action open() { md.result_bitmap = contributors_open.execute(hdr.dpa.slot[DPA_SLOT_BITS - 1:0]); }
    action add() { md.result_bitmap = contributors_add.execute(hdr.dpa.slot[DPA_SLOT_BITS - 1:0]); }
    action read() { md.result_bitmap = contributors_read.execute(hdr.dpa.slot[DPA_SLOT_BITS - 1:0]); }
    // Written by the packet that opens the round and by every counted contribution (a new
    // sender of a round neither poisoned nor complete); read by the rest.
    table bitmap_step {
        key = {
            md.gate : ternary;
            md.poison_info[7:0] : ternary;  // the poison code, 0 while not poisoned
            md.dup : ternary;
            md.count[15:8] : ternary;       // 1 once the round is complete
        }
        actions = { open; add; read; NoAction; }
        const default_action = NoAction;
        size = 3;
        const entries = {
            (GATE_NEW, _, _, _) : open();
            (GATE_CURRENT, 0, 0, 0) : add();
            (_, _, _, _) : read();
        }
    }

    apply {
        bitmap_step.apply();
    }
}

#endif
