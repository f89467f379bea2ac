// SPDX-License-Identifier: Apache-2.0
// The accumulators (docs/protocol.md §8.2 Add/NEW): DPA_REDUCERS paired register cells per
// pipe, so one pass adds 2 * DPA_REDUCERS values (32 cells: 64 values). The chunk of values a
// pass handles is the one its pipe owns: chunk c lives in the pipe of value pass c + 1, so the
// registers are indexed by the slot alone. Sums wrap (two's complement), as the software switch
// adds; quantisation leaves headroom for N contributions (§10.3, §12).
//
// What the cells do in a pass is chunk_state.p4's decision (`cell_op`): WRITE when the chunk opens
// a round, ADD for a contributor whose values the chunk lacks, a read in an output pass whose
// chunk holds the result, nothing otherwise.
//
// A Tofino1 stateful ALU returns one 32-bit word, so an output pass reads one half of a chunk
// (lo or hi) from every cell and emits it as one values header in front of the halves that
// later passes of the packet already emitted.
#ifndef DPA_REDUCE_P4
#define DPA_REDUCE_P4

struct value_pair_t {
    bit<32> lo;
    bit<32> hi;
}

control Reducer(inout bit<32> lo_value,
                inout bit<32> hi_value,
                in bit<8> op,
                in slot_index_t index) {
    Register<value_pair_t, slot_index_t>(DPA_SLOTS, {0, 0}) cells;

    RegisterAction<value_pair_t, slot_index_t, bit<32>>(cells) write = {
        void apply(inout value_pair_t value) {
            value.lo = lo_value;
            value.hi = hi_value;
        }
    };
    RegisterAction<value_pair_t, slot_index_t, bit<32>>(cells) add = {
        void apply(inout value_pair_t value) {
            value.lo = value.lo + lo_value;
            value.hi = value.hi + hi_value;
        }
    };
    RegisterAction<value_pair_t, slot_index_t, bit<32>>(cells) read_lo = {
        void apply(inout value_pair_t value, out bit<32> rv) { rv = value.lo; }
    };
    RegisterAction<value_pair_t, slot_index_t, bit<32>>(cells) read_hi = {
        void apply(inout value_pair_t value, out bit<32> rv) { rv = value.hi; }
    };

    action write_cell() { write.execute(index); }
    action add_cell() { add.execute(index); }
    action read_lo_cell() { lo_value = read_lo.execute(index); }
    action read_hi_cell() { hi_value = read_hi.execute(index); }

    // One table with one action per operation, not an if-chain: each branch of a chain becomes
    // a logical table of its own, and Tofino1's 16 logical tables per stage cannot hold four per
    // register for 32 registers (p4c-barefoot's table placement failed exactly so).
    table operate {
        key = { op : exact; }
        actions = { write_cell; add_cell; read_lo_cell; read_hi_cell; NoAction; }
        const entries = {
            REDUCE_WRITE : write_cell();
            REDUCE_ADD : add_cell();
            REDUCE_READ_LO : read_lo_cell();
            REDUCE_READ_HI : read_hi_cell();
        }
        const default_action = NoAction;
        size = 4;
    }

    apply {
        operate.apply();
    }
}

control Reduce(inout headers_t hdr, in bit<8> cell_op) {
    Reducer() r00;
#if DPA_REDUCERS > 1
    Reducer() r01;
#endif
#if DPA_REDUCERS > 2
    Reducer() r02;
#endif
#if DPA_REDUCERS > 3
    Reducer() r03;
#endif
#if DPA_REDUCERS > 4
    Reducer() r04;
#endif
#if DPA_REDUCERS > 5
    Reducer() r05;
#endif
#if DPA_REDUCERS > 6
    Reducer() r06;
#endif
#if DPA_REDUCERS > 7
    Reducer() r07;
#endif
#if DPA_REDUCERS > 8
    Reducer() r08;
#endif
#if DPA_REDUCERS > 9
    Reducer() r09;
#endif
#if DPA_REDUCERS > 10
    Reducer() r10;
#endif
#if DPA_REDUCERS > 11
    Reducer() r11;
#endif
#if DPA_REDUCERS > 12
    Reducer() r12;
#endif
#if DPA_REDUCERS > 13
    Reducer() r13;
#endif
#if DPA_REDUCERS > 14
    Reducer() r14;
#endif
#if DPA_REDUCERS > 15
    Reducer() r15;
#endif
#if DPA_REDUCERS > 16
    Reducer() r16;
#endif
#if DPA_REDUCERS > 17
    Reducer() r17;
#endif
#if DPA_REDUCERS > 18
    Reducer() r18;
#endif
#if DPA_REDUCERS > 19
    Reducer() r19;
#endif
#if DPA_REDUCERS > 20
    Reducer() r20;
#endif
#if DPA_REDUCERS > 21
    Reducer() r21;
#endif
#if DPA_REDUCERS > 22
    Reducer() r22;
#endif
#if DPA_REDUCERS > 23
    Reducer() r23;
#endif
#if DPA_REDUCERS > 24
    Reducer() r24;
#endif
#if DPA_REDUCERS > 25
    Reducer() r25;
#endif
#if DPA_REDUCERS > 26
    Reducer() r26;
#endif
#if DPA_REDUCERS > 27
    Reducer() r27;
#endif
#if DPA_REDUCERS > 28
    Reducer() r28;
#endif
#if DPA_REDUCERS > 29
    Reducer() r29;
#endif
#if DPA_REDUCERS > 30
    Reducer() r30;
#endif
#if DPA_REDUCERS > 31
    Reducer() r31;
#endif

    apply {
        slot_index_t index = hdr.bridged.slot[DPA_SLOT_BITS - 1:0];
        // An output pass fills the half it reads; an input pass consumes its chunk, so the next
        // pass parses the next one.
        if (hdr.bridged.reduce_op == REDUCE_READ_LO) {
            hdr.values_lo.setValid();
        } else if (hdr.bridged.reduce_op == REDUCE_READ_HI) {
            hdr.values_hi.setValid();
        }
        r00.apply(hdr.values_lo.v00, hdr.values_hi.v00, cell_op, index);
#if DPA_REDUCERS > 1
        r01.apply(hdr.values_lo.v01, hdr.values_hi.v01, cell_op, index);
#endif
#if DPA_REDUCERS > 2
        r02.apply(hdr.values_lo.v02, hdr.values_hi.v02, cell_op, index);
#endif
#if DPA_REDUCERS > 3
        r03.apply(hdr.values_lo.v03, hdr.values_hi.v03, cell_op, index);
#endif
#if DPA_REDUCERS > 4
        r04.apply(hdr.values_lo.v04, hdr.values_hi.v04, cell_op, index);
#endif
#if DPA_REDUCERS > 5
        r05.apply(hdr.values_lo.v05, hdr.values_hi.v05, cell_op, index);
#endif
#if DPA_REDUCERS > 6
        r06.apply(hdr.values_lo.v06, hdr.values_hi.v06, cell_op, index);
#endif
#if DPA_REDUCERS > 7
        r07.apply(hdr.values_lo.v07, hdr.values_hi.v07, cell_op, index);
#endif
#if DPA_REDUCERS > 8
        r08.apply(hdr.values_lo.v08, hdr.values_hi.v08, cell_op, index);
#endif
#if DPA_REDUCERS > 9
        r09.apply(hdr.values_lo.v09, hdr.values_hi.v09, cell_op, index);
#endif
#if DPA_REDUCERS > 10
        r10.apply(hdr.values_lo.v10, hdr.values_hi.v10, cell_op, index);
#endif
#if DPA_REDUCERS > 11
        r11.apply(hdr.values_lo.v11, hdr.values_hi.v11, cell_op, index);
#endif
#if DPA_REDUCERS > 12
        r12.apply(hdr.values_lo.v12, hdr.values_hi.v12, cell_op, index);
#endif
#if DPA_REDUCERS > 13
        r13.apply(hdr.values_lo.v13, hdr.values_hi.v13, cell_op, index);
#endif
#if DPA_REDUCERS > 14
        r14.apply(hdr.values_lo.v14, hdr.values_hi.v14, cell_op, index);
#endif
#if DPA_REDUCERS > 15
        r15.apply(hdr.values_lo.v15, hdr.values_hi.v15, cell_op, index);
#endif
#if DPA_REDUCERS > 16
        r16.apply(hdr.values_lo.v16, hdr.values_hi.v16, cell_op, index);
#endif
#if DPA_REDUCERS > 17
        r17.apply(hdr.values_lo.v17, hdr.values_hi.v17, cell_op, index);
#endif
#if DPA_REDUCERS > 18
        r18.apply(hdr.values_lo.v18, hdr.values_hi.v18, cell_op, index);
#endif
#if DPA_REDUCERS > 19
        r19.apply(hdr.values_lo.v19, hdr.values_hi.v19, cell_op, index);
#endif
#if DPA_REDUCERS > 20
        r20.apply(hdr.values_lo.v20, hdr.values_hi.v20, cell_op, index);
#endif
#if DPA_REDUCERS > 21
        r21.apply(hdr.values_lo.v21, hdr.values_hi.v21, cell_op, index);
#endif
#if DPA_REDUCERS > 22
        r22.apply(hdr.values_lo.v22, hdr.values_hi.v22, cell_op, index);
#endif
#if DPA_REDUCERS > 23
        r23.apply(hdr.values_lo.v23, hdr.values_hi.v23, cell_op, index);
#endif
#if DPA_REDUCERS > 24
        r24.apply(hdr.values_lo.v24, hdr.values_hi.v24, cell_op, index);
#endif
#if DPA_REDUCERS > 25
        r25.apply(hdr.values_lo.v25, hdr.values_hi.v25, cell_op, index);
#endif
#if DPA_REDUCERS > 26
        r26.apply(hdr.values_lo.v26, hdr.values_hi.v26, cell_op, index);
#endif
#if DPA_REDUCERS > 27
        r27.apply(hdr.values_lo.v27, hdr.values_hi.v27, cell_op, index);
#endif
#if DPA_REDUCERS > 28
        r28.apply(hdr.values_lo.v28, hdr.values_hi.v28, cell_op, index);
#endif
#if DPA_REDUCERS > 29
        r29.apply(hdr.values_lo.v29, hdr.values_hi.v29, cell_op, index);
#endif
#if DPA_REDUCERS > 30
        r30.apply(hdr.values_lo.v30, hdr.values_hi.v30, cell_op, index);
#endif
#if DPA_REDUCERS > 31
        r31.apply(hdr.values_lo.v31, hdr.values_hi.v31, cell_op, index);
#endif
        if (hdr.bridged.reduce_op != REDUCE_READ_LO && hdr.bridged.reduce_op != REDUCE_READ_HI) {
            hdr.values_lo.setInvalid();
            hdr.values_hi.setInvalid();
        }
    }
}

#endif
