// SPDX-License-Identifier: Apache-2.0
// Optional loss for tests (DPA_DROP_SIMULATOR): drops a session's requests with a probability
// the controller sets per session as a range of a 16-bit random draw, before they reach any
// state, as a lossy link would.
#ifndef DPA_DROP_SIMULATOR_P4
#define DPA_DROP_SIMULATOR_P4

control DropSimulator(inout headers_t hdr,
                      inout metadata_t md,
                      inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Random<bit<16>>() random;

    action simulate_drop() {
        md.simulated_drop = 1;
        ig_dprsr_md.drop_ctl = 1;
        hdr.bridged.event = EV_SIMULATED_DROP;
    }
    table drop_rates {
        key = { hdr.dpa.session : exact; md.random : range; }
        actions = { simulate_drop; NoAction; }
        const default_action = NoAction;
        size = DPA_SESSIONS;
    }

    apply {
        md.random = random.get();
        drop_rates.apply();
    }
}

#endif
