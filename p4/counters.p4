// SPDX-License-Identifier: Apache-2.0
// Reply counters, by what the state pass decided (types.p4 EV_*). Counted in the egress, so a
// multicast counts one per rank, as the software switch counts its datagrams; the controller
// prints them (`dpa-switch-controller.sh ... counters`). Drops and contributions that end
// without a reply are counted per entry by the direct counters of admission.p4 (`verdicts`) and
// delivery.p4 (`outcomes`), read in bfshell with the tables' dump(from_hw=True).
#ifndef DPA_COUNTERS_P4
#define DPA_COUNTERS_P4

control Counters(in headers_t hdr) {
    Counter<bit<64>, bit<8>>(EV_COUNT, CounterType_t.PACKETS_AND_BYTES) replies;

    apply {
        replies.count(hdr.bridged.event);
    }
}

#endif
