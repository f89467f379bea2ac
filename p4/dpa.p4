// SPDX-License-Identifier: Apache-2.0
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
#include "chunk_state.p4"
#include "reduce.p4"
#include "next_pass.p4"
#include "net.p4"
#include "egress_rewrite.p4"
#include "counters.p4"
#include "deparsers.p4"

// The state pass's metadata and a value pass's values are never in one packet: values are
// parsed only on pass ports, where the ingress touches no metadata (reduce.p4, next_pass.p4),
// and the parser writes no metadata (metadata_t starts zeroed). Without this bf-p4c allocates
// both at once, and they do not fit the PHV of either target. Every field of metadata_t but
// icmp_residual (the ingress deparser reads it for ICMP) is listed: the pragma takes fields or
// headers, not structs.
#define DPA_STATE_ONLY(field) \
    @pa_mutually_exclusive("ingress", field, "hdr.values_lo") \
    @pa_mutually_exclusive("ingress", field, "hdr.values_hi")
DPA_STATE_ONLY("md.is_probe") DPA_STATE_ONLY("md.count_to_k") DPA_STATE_ONLY("md.simulated_drop")
DPA_STATE_ONLY("md.endpoint_hit") DPA_STATE_ONLY("md.identity_hit") DPA_STATE_ONLY("md.pool_hit")
DPA_STATE_ONLY("md.host_hit") DPA_STATE_ONLY("md.k_ok") DPA_STATE_ONLY("md.token_state")
DPA_STATE_ONLY("md.admit") DPA_STATE_ONLY("md.error_code") DPA_STATE_ONLY("md.error_expected")
DPA_STATE_ONLY("md.generation") DPA_STATE_ONLY("md.pool_base") DPA_STATE_ONLY("md.world")
DPA_STATE_ONLY("md.world_minus_one") DPA_STATE_ONLY("md.world_target") DPA_STATE_ONLY("md.world_expected") DPA_STATE_ONLY("md.k_default") DPA_STATE_ONLY("md.open_count")
DPA_STATE_ONLY("md.now") DPA_STATE_ONLY("md.timeout_plus_one") DPA_STATE_ONLY("md.sender_bit")
DPA_STATE_ONLY("md.seq_diff") DPA_STATE_ONLY("md.slot_op_id") DPA_STATE_ONLY("md.slot_seq")
DPA_STATE_ONLY("md.slot_op_length") DPA_STATE_ONLY("md.slot_meta") DPA_STATE_ONLY("md.slot_round")
DPA_STATE_ONLY("md.state_meta") DPA_STATE_ONLY("md.op_x") DPA_STATE_ONLY("md.round_x")
DPA_STATE_ONLY("md.length_x") DPA_STATE_ONLY("md.gate") DPA_STATE_ONLY("md.elapsed")
DPA_STATE_ONLY("md.not_late") DPA_STATE_ONLY("md.poison_info") DPA_STATE_ONLY("md.poison_value")
DPA_STATE_ONLY("md.mismatch_info") DPA_STATE_ONLY("md.mismatch_value") DPA_STATE_ONLY("md.mismatch_expected") DPA_STATE_ONLY("md.poison_expected") DPA_STATE_ONLY("md.dup") DPA_STATE_ONLY("md.threshold")
DPA_STATE_ONLY("md.count") DPA_STATE_ONLY("md.count_op") DPA_STATE_ONLY("md.short")
DPA_STATE_ONLY("md.contributors") DPA_STATE_ONLY("md.full_x") DPA_STATE_ONLY("md.input_port")
DPA_STATE_ONLY("md.result_bitmap") DPA_STATE_ONLY("md.session_hit") DPA_STATE_ONLY("md.count_fit")
DPA_STATE_ONLY("md.random") DPA_STATE_ONLY("md.switch_mac") DPA_STATE_ONLY("md.switch_ip") DPA_STATE_ONLY("md.address_x")
DPA_STATE_ONLY("md.packet_round") DPA_STATE_ONLY("md.is_owner") DPA_STATE_ONLY("md.owner_ok")
DPA_STATE_ONLY("md.relayed") DPA_STATE_ONLY("md.meta_x") DPA_STATE_ONLY("md.gone") DPA_STATE_ONLY("md.k_x")
DPA_STATE_ONLY("md.gone_hit") DPA_STATE_ONLY("md.gone_rank")
#if __TARGET_TOFINO__ == 1
// Tofino2's allocator overlaid md.packet_meta with a value and, by liveness, with
// md.mismatch_expected in one container, then rejected its own allocation ("Container H38
// contains fields which overlap", p4c-barefoot 9.13.4, edgecore): Tofino2 has the room to keep it apart.
DPA_STATE_ONLY("md.packet_meta")
#endif
#undef DPA_STATE_ONLY
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
    ChunkState() chunk_state;
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
        if (ig_prsr_md.parser_err != 0) {
            // Truncated headers (§2: shorter than 48 bytes is malformed).
            ig_dprsr_md.drop_ctl = 1;
        } else if (hdr.bridged.isValid()) {
            // A value pass (next_pass.p4).
            ig_tm_md.rid = RID_DPA;
            // The chunk's state decides what the accumulators do and whether an output pass may
            // read them (chunk_state.p4).
            chunk_state.apply(hdr, md, ig_dprsr_md);
            reduce.apply(hdr, md.cell_op);
            next_pass.apply(hdr, ig_dprsr_md, ig_tm_md);
        } else {
            switch_address.apply();
            if (hdr.dpa.isValid()) {
                // The state pass: admission, the slot's registers, the reply.
                ig_tm_md.rid = RID_DPA;
                hdr.bridged.setValid();
                hdr.bridged.pass_index = 0;
                hdr.bridged.reduce_op = REDUCE_NONE;
                hdr.bridged.delivery = DELIVER_DROP;
                hdr.bridged.mode = MODE_NONE;
                hdr.bridged.owner = 0;
                hdr.bridged.worker_port = ig_intr_md.ingress_port;
                hdr.bridged.sender_mgid = DPA_SENDER_MGID_BASE + (bit<16>)ig_intr_md.ingress_port;
                hdr.bridged.with_values = 0;
                hdr.bridged.event = EV_NONE;
                hdr.bridged.op_id_or_round = hdr.dpa.op_id;
                hdr.bridged.slot = hdr.dpa.slot;
                hdr.bridged.sender_bit = 0;
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
                // Not dpa traffic (net.p4).
                hdr.bridged.setValid();
                hdr.bridged.pass_index = 0;
                hdr.bridged.reduce_op = REDUCE_NONE;
                hdr.bridged.delivery = DELIVER_NET;
                hdr.bridged.event = EV_NONE;
                net.apply(hdr, md, ig_intr_md, ig_tm_md);
            }
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
            rewrite.apply(hdr, md, eg_intr_md, eg_dprsr_md);
            counters.apply(hdr);
        }
    }
}

Pipeline(IngressParser(), Ingress(), IngressDeparser(),
         EgressParser(), Egress(), EgressDeparser()) pipe;

Switch(pipe) main;
