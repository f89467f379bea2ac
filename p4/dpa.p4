// dpa: in-network allreduce with fastest-K straggler resilience, for Tofino1 (TNA,
// -D__TARGET_TOFINO__=1) and Tofino2 (T2NA, =2) from one source. docs/protocol.md is the
// contract; docs/switch.md has the pass plan and the stage budget. The switch-specific defines
// come from dpa_config.p4, which dpa-p4gen writes from configs/<switch>.json.
#include <core.p4>
#if __TARGET_TOFINO__ == 2
#include <t2na.p4>
#else
#include <tna.p4>
#endif

#include "dpa_config.p4"

#if DPA_TARGET != __TARGET_TOFINO__
#error "dpa_config.p4 was generated for another Tofino generation (DPA_TARGET)"
#endif
#if DPA_CHUNKS > DPA_PIPES
#error "DPA_CHUNKS: every chunk of values needs its own pipe"
#endif

#define DPA_DATA_UDP_LENGTH (8 + 48 + 4 * DPA_PAYLOAD)

#include "types.p4"
#include "headers.p4"
#include "parsers.p4"
#include "admission.p4"
#include "drop_simulator.p4"
#include "slot_state.p4"
#include "exponent.p4"
#include "result_bitmap.p4"
#include "delivery.p4"
#include "reduce.p4"
#include "next_pass.p4"
#include "net.p4"
#include "egress_rewrite.p4"
#include "counters.p4"
#include "deparsers.p4"

control Ingress(inout headers_t hdr,
                inout metadata_t md,
                in ingress_intrinsic_metadata_t ig_intr_md,
                in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Admission() admission;
#if DPA_DROP_SIMULATOR
    DropSimulator() drop_simulator;
#endif
    SlotState() slot_state;
    Exponent() exponent;
    ResultBitmap() result_bitmap;
    Delivery() delivery;
    Reduce() reduce;
    NextPass() next_pass;
    Net() net;

    // The switch's own addresses (replies' source, ARP and ICMP), set by the controller.
    action set_switch_address(bit<48> mac, bit<32> ip) {
        md.switch_mac = mac;
        md.switch_ip = ip;
    }
    table switch_address {
        actions = { set_switch_address; }
        default_action = set_switch_address(0, 0);
        size = 1;
    }

    apply {
        switch_address.apply();
        if (ig_prsr_md.parser_err != 0) {
            // Truncated headers (§2: shorter than 48 bytes is malformed).
            ig_dprsr_md.drop_ctl = 1;
        } else if (hdr.bridged.isValid()) {
            // A value pass (next_pass.p4).
            reduce.apply(hdr);
            next_pass.apply(hdr, ig_dprsr_md, ig_tm_md);
        } else if (hdr.dpa.isValid()) {
            // The state pass: admission, the slot's registers, the reply.
            hdr.bridged.setValid();
            hdr.bridged.pass_index = 0;
            hdr.bridged.reduce_op = REDUCE_NONE;
            hdr.bridged.delivery = DELIVER_DROP;
            hdr.bridged.pad0 = 0;
            hdr.bridged.worker_port = ig_intr_md.ingress_port;
            hdr.bridged.sender_mgid = DPA_SENDER_MGID_BASE + (bit<16>)ig_intr_md.ingress_port;
            hdr.bridged.with_values = 0;
            hdr.bridged.event = EV_NONE;
            hdr.bridged.request_op_id = hdr.dpa.op_id;
            hdr.bridged.slot = hdr.dpa.slot;
            admission.apply(hdr, md, ig_intr_md, ig_prsr_md);
#if DPA_DROP_SIMULATOR
            if (md.admit == ADM_ACCEPT) {
                drop_simulator.apply(hdr, md, ig_dprsr_md);
            }
#endif
            if (md.admit == ADM_ACCEPT && md.simulated_drop == 0) {
                slot_state.apply(hdr, md);
                exponent.apply(hdr, md);
                result_bitmap.apply(hdr, md);
            }
            if (md.simulated_drop == 0) {
                delivery.apply(hdr, md, ig_intr_md, ig_dprsr_md, ig_tm_md);
            }
        } else {
            hdr.bridged.setValid();
            hdr.bridged.pass_index = 0;
            hdr.bridged.reduce_op = REDUCE_NONE;
            hdr.bridged.delivery = DELIVER_NET;
            hdr.bridged.event = EV_NONE;
            net.apply(hdr, md, ig_intr_md, ig_tm_md);
        }
    }
}

control Egress(inout headers_t hdr,
               inout egress_metadata_t md,
               in egress_intrinsic_metadata_t eg_intr_md,
               in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
               inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
               inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    EgressRewrite() rewrite;
    Counters() counters;

    apply {
        if (hdr.dpa.isValid()) {
            rewrite.apply(hdr, eg_intr_md);
            counters.apply(hdr);
        }
    }
}

Pipeline(IngressParser(), Ingress(), IngressDeparser(),
         EgressParser(), Egress(), EgressDeparser()) pipe;

Switch(pipe) main;
