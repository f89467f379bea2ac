// The contributor bitmap that replies report (docs/protocol.md §8.2 "Frozen bitmap"). The
// arrival bitmap of slot_state.p4 must be read before the count register decides whether the
// round is complete, so it cannot be gated by completion; this register follows the count and
// is written only by packets that were counted, which freezes it at completion.
#ifndef DPA_RESULT_BITMAP_P4
#define DPA_RESULT_BITMAP_P4

control ResultBitmap(inout headers_t hdr,
                     inout metadata_t md) {
    Register<bit<32>, slot_index_t>(DPA_SLOTS, 0) contributors;

    RegisterAction<bit<32>, slot_index_t, bit<32>>(contributors) contributors_set = {
        void apply(inout bit<32> value, out bit<32> rv) { value = md.bitmap_now; rv = value; }
    };
    RegisterAction<bit<32>, slot_index_t, bit<32>>(contributors) contributors_read = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; }
    };

    apply {
        slot_index_t index = hdr.dpa.slot[DPA_SLOT_BITS - 1:0];
        if (md.gate == GATE_NEW ||
            (md.gate == GATE_CURRENT && md.poison_info == 0 && md.dup == 0 &&
             md.count[15:8] == 0)) {
            md.result_bitmap = contributors_set.execute(index);
        } else if (md.gate != GATE_NONE) {
            md.result_bitmap = contributors_read.execute(index);
        }
    }
}

#endif
