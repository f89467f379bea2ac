// SPDX-License-Identifier: Apache-2.0
// Admission (docs/protocol.md §8.1): who sent the packet, for which session and generation,
// and whether it may reach a slot. Every lookup is keyed on packet fields only, so they all sit
// in the first stage; one ternary table then applies §8.1's order in its entry priorities.
//
// Tables the controller writes (p4/controller/dpa_controller/admission.py):
//   sessions    session id -> index, N, default K, timeout ticks + 1, pool base, groups, generation,
//               the generation's gone ranks (§6.7, rewritten as keepalives stop or ranks leave)
//   tokens      (session, token) -> the generation's token, or the previous generation's
//   endpoints   (session, ipv4.src, udp.src) -> a member endpoint of the generation
//   identities  (session, ipv4.src, udp.src, rank, slot range of its thread, ingress dev port)
//               -> thread: the dev port is the one the config puts the rank's host behind
//   pools       (session, slot range [base, base + T*2W)) -> slot in the generation's slots
//   hosts       (session, ipv4.src ternary) -> a registered worker host (mask 0: any host)
//   k_limits    (session, k range [0, N]) -> k is valid
//   owner_limits (session, owner range [0, N - 1]) -> an owned round's owner is valid (§13.4)
#ifndef DPA_ADMISSION_P4
#define DPA_ADMISSION_P4

control Admission(inout headers_t hdr,
                  inout metadata_t md,
                  in ingress_intrinsic_metadata_t ig_intr_md,
                  in ingress_intrinsic_metadata_from_parser_t ig_prsr_md) {
    DirectCounter<bit<64>>(CounterType_t.PACKETS) verdicts;
    // Accepted packets per session: the controller samples it to tell whether a generation
    // still holds its session (docs/protocol.md §6.3 step 4).
    Counter<bit<64>, session_index_t>(DPA_SESSIONS, CounterType_t.PACKETS) activity;

    action set_session(session_index_t index, bit<8> world, bit<8> k_default,
                       bit<32> timeout_plus_one, bit<32> pool_base, bit<16> mgid,
                       bit<32> generation, bit<32> gone) {
        md.session_hit = 1;
        md.gone = gone;
        md.world = (bit<16>)world;
        md.world_target = world;
        md.world_expected = (bit<32>)world;
        md.k_default = k_default;
        md.timeout_plus_one = timeout_plus_one;
        md.pool_base = pool_base;
        md.generation = generation;
        hdr.bridged.session_index = index;
        hdr.bridged.mgid = mgid;
        // §8.4: the straggler clock is the global timestamp in 65.536 us ticks.
        md.now = ig_prsr_md.global_tstamp[47:16];
    }
    table sessions {
        key = { hdr.dpa.session : exact; }
        actions = { set_session; NoAction; }
        const default_action = NoAction;
        size = DPA_SESSIONS;
    }

    action token_current() { md.token_state = 1; }
    action token_previous() { md.token_state = 2; }
    table tokens {
        key = { hdr.dpa.session : exact; hdr.dpa.token : exact; }
        actions = { token_current; token_previous; NoAction; }
        const default_action = NoAction;
        size = 2 * DPA_SESSIONS;
    }

    action endpoint_member() { md.endpoint_hit = 1; }
    table endpoints {
        key = { hdr.dpa.session : exact; hdr.ipv4.src_addr : exact; hdr.udp.src_port : exact; }
        actions = { endpoint_member; NoAction; }
        const default_action = NoAction;
        size = DPA_IDENTITIES;
    }

    // The identity rule of §8.1 in one lookup: the endpoint is the member (rank, thread) the
    // header claims, the slot belongs to that thread, and the packet entered on the member's
    // port. The port binds the identity to the wire: replies other than multicast leave by the
    // ingress port, so without it a sender on another port that forges a member's address and
    // knows the token could fetch results with a probe (docs/switch.md, "Identity and the
    // ingress port"). A miss is §8.1 row 9: dropped, counted in dropped_unregistered.
    action identity(bit<8> thread) {
        md.identity_hit = 1;
        hdr.bridged.thread = thread;
    }
    table identities {
        key = {
            hdr.dpa.session : exact;
            hdr.ipv4.src_addr : exact;
            hdr.udp.src_port : exact;
            hdr.dpa.rank : exact;
            hdr.dpa.slot[15:0] : range @name("slot");
            ig_intr_md.ingress_port : exact;
        }
        actions = { identity; NoAction; }
        const default_action = NoAction;
        size = DPA_IDENTITIES;
    }

    action in_pool() { md.pool_hit = 1; }
    table pools {
        key = { hdr.dpa.session : exact; hdr.dpa.slot[15:0] : range @name("slot"); }
        actions = { in_pool; NoAction; }
        const default_action = NoAction;
        size = DPA_SESSIONS;
    }

    action registered_host() { md.host_hit = 1; }
    table hosts {
        key = { hdr.dpa.session : exact; hdr.ipv4.src_addr : ternary; }
        actions = { registered_host; NoAction; }
        const default_action = NoAction;
        size = DPA_HOSTS;
    }

    action k_valid() { md.k_ok = 1; }
    table k_limits {
        key = { hdr.dpa.session : exact; hdr.dpa.k : range; }
        actions = { k_valid; NoAction; }
        const default_action = NoAction;
        size = DPA_SESSIONS;
    }

    // Byte 36 is the owner in a request of an owned round (§13.1).
    action owner_valid() { md.owner_ok = 1; }
    table owner_limits {
        key = { hdr.dpa.session : exact; hdr.dpa.contributors : range @name("owner"); }
        actions = { owner_valid; NoAction; }
        const default_action = NoAction;
        size = DPA_SESSIONS;
    }

    // The owner a NEW stores (§13.1), in the byte of the meta word the slot keeps it in: the
    // request's owner in an owned round, 0 otherwise (a round without a mode has no owner).
    action owned_round() { md.packet_meta[15:8] = hdr.dpa.contributors; }
    table owners {
        key = { hdr.dpa.flags[13:12] : exact @name("mode"); }
        actions = { owned_round; NoAction; }
        const default_action = NoAction;
        size = 2;
        const entries = {
            MODE_TO_OWNER : owned_round();
            MODE_FROM_OWNER : owned_round();
        }
    }

    // 1 << rank without a variable shift (ranks >= 32 are never members on Tofino, §12).
    action rank_bit(bit<32> bit_value) { md.sender_bit = bit_value; }
    table rank_bits {
        key = { hdr.dpa.rank : exact; }
        actions = { rank_bit; NoAction; }
        const default_action = NoAction;
        size = 32;
        const entries = {
            0 : rank_bit(32w1 << 0);   1 : rank_bit(32w1 << 1);   2 : rank_bit(32w1 << 2);
            3 : rank_bit(32w1 << 3);   4 : rank_bit(32w1 << 4);   5 : rank_bit(32w1 << 5);
            6 : rank_bit(32w1 << 6);   7 : rank_bit(32w1 << 7);   8 : rank_bit(32w1 << 8);
            9 : rank_bit(32w1 << 9);   10 : rank_bit(32w1 << 10); 11 : rank_bit(32w1 << 11);
            12 : rank_bit(32w1 << 12); 13 : rank_bit(32w1 << 13); 14 : rank_bit(32w1 << 14);
            15 : rank_bit(32w1 << 15); 16 : rank_bit(32w1 << 16); 17 : rank_bit(32w1 << 17);
            18 : rank_bit(32w1 << 18); 19 : rank_bit(32w1 << 19); 20 : rank_bit(32w1 << 20);
            21 : rank_bit(32w1 << 21); 22 : rank_bit(32w1 << 22); 23 : rank_bit(32w1 << 23);
            24 : rank_bit(32w1 << 24); 25 : rank_bit(32w1 << 25); 26 : rank_bit(32w1 << 26);
            27 : rank_bit(32w1 << 27); 28 : rank_bit(32w1 << 28); 29 : rank_bit(32w1 << 29);
            30 : rank_bit(32w1 << 30); 31 : rank_bit(32w1 << 31);
        }
    }

    // The round's K and target if this packet opens it (§8.2 NEW): k, or the session default
    // when k = 0; the target is K with COUNT_TO_K, else N; a FROM_OWNER round's both are N
    // (§13.3: every rank needs the owner's values). Each goes into the byte of the word the
    // slot's registers store (headers.p4), whose other bytes are written apart.
    action round_relayed() { md.packet_round[7:0] = md.world_target; md.packet_meta[7:0] = md.world_target; }
    action round_default_n() { md.packet_round[7:0] = md.k_default; md.packet_meta[7:0] = md.world_target; }
    action round_default_k() { md.packet_round[7:0] = md.k_default; md.packet_meta[7:0] = md.k_default; }
    action round_packet_n() { md.packet_round[7:0] = hdr.dpa.k; md.packet_meta[7:0] = md.world_target; }
    action round_packet_k() { md.packet_round[7:0] = hdr.dpa.k; md.packet_meta[7:0] = hdr.dpa.k; }
    table round_parameters {
        key = { hdr.dpa.k : ternary; md.count_to_k : ternary; hdr.dpa.flags[13:12] : ternary @name("mode"); }
        actions = { round_relayed; round_default_n; round_default_k; round_packet_n; round_packet_k; }
        const default_action = round_packet_n;
        size = 5;
        const entries = {
            (_, _, MODE_FROM_OWNER) : round_relayed();
            (0, 0, _) : round_default_n();
            (0, 1, _) : round_default_k();
            (_, 0, _) : round_packet_n();
            (_, 1, _) : round_packet_k();
        }
    }

    // §2's decoder and §5's sizes: a header-only request (a SYN probe, or data with count 0: the
    // exponent-priming request) must have count 0; a request with P values count <= P, and count
    // 0 there is a request of another size (bad_length). An owned request (§13) may be header
    // only with any count: a probe of an owned round and a FROM_OWNER request with count <= P
    // (RELAYED: canonical from a rank other than the owner, the verdict decides) are canonical,
    // other data of that shape is another size (bad_length). A table: the comparisons are too
    // wide for one gateway.
    action count_fit(bit<2> fit) { md.count_fit = fit; }
    table count_fits {
        key = { hdr.udp.length : ternary; hdr.dpa.count : range; hdr.dpa.flags : ternary; }
        actions = { count_fit; }
        const default_action = count_fit(COUNT_FIT_MALFORMED);
        size = 10;
        const entries = {
            (8 + DPA_HEADER_BYTES, 0 .. 0, _) : count_fit(COUNT_FIT_CANONICAL);
            (8 + DPA_HEADER_BYTES, _, (FLAG_TO_OWNER | FLAG_SYN) &&& (FLAG_TO_OWNER | FLAG_SYN)) : count_fit(COUNT_FIT_CANONICAL);
            (8 + DPA_HEADER_BYTES, _, (FLAG_FROM_OWNER | FLAG_SYN) &&& (FLAG_FROM_OWNER | FLAG_SYN)) : count_fit(COUNT_FIT_CANONICAL);
            (8 + DPA_HEADER_BYTES, 1 .. DPA_PAYLOAD, FLAG_FROM_OWNER &&& FLAG_FROM_OWNER) : count_fit(COUNT_FIT_RELAYED);
            (8 + DPA_HEADER_BYTES, _, FLAG_TO_OWNER &&& FLAG_TO_OWNER) : count_fit(COUNT_FIT_OTHER_SIZE);
            (8 + DPA_HEADER_BYTES, _, FLAG_FROM_OWNER &&& FLAG_FROM_OWNER) : count_fit(COUNT_FIT_OTHER_SIZE);
            (8 + DPA_HEADER_BYTES, _, _) : count_fit(COUNT_FIT_MALFORMED);
            (_, 0 .. 0, _) : count_fit(COUNT_FIT_OTHER_SIZE);
            (_, 1 .. DPA_PAYLOAD, _) : count_fit(COUNT_FIT_CANONICAL);
        }
    }

    // A round whose target is 1 (N = 1 or K = 1) completes with the packet that opens it. A
    // table rather than a comparison: bf-p4c would slice the target's word at bit 1 for it.
    action open_complete() { md.open_count = COUNT_COMPLETE | 1; }
    action open_one() { md.open_count = 1; }
    table open_counts {
        key = { md.packet_meta[7:0] : exact; }
        actions = { open_complete; open_one; }
        const default_action = open_one;
        size = 2;
        const entries = {
            0 : open_complete();
            1 : open_complete();
        }
    }

    action accept() { verdicts.count(); md.admit = ADM_ACCEPT; }
    action drop(bit<8> event) { verdicts.count(); md.admit = ADM_DROP; hdr.bridged.event = event; }
    action to_cpu() { verdicts.count(); md.admit = ADM_CPU; hdr.bridged.event = EV_CONTROL; }
    action error_not_joined() {
        verdicts.count();
        md.admit = ADM_ERROR; md.error_code = ERR_NOT_JOINED; md.error_expected = 0;
    }
    action error_taken_over() {
        verdicts.count();
        md.admit = ADM_ERROR; md.error_code = ERR_SESSION_TAKEN_OVER; md.error_expected = md.generation;
    }
    action error_slot_out_of_range() {
        verdicts.count();
        md.admit = ADM_ERROR; md.error_code = ERR_SLOT_OUT_OF_RANGE; md.error_expected = md.pool_base;
    }
    action error_k_invalid() {
        verdicts.count();
        md.admit = ADM_ERROR; md.error_code = ERR_K_INVALID; md.error_expected = md.world_expected;
    }
    action error_owner_invalid() {
        verdicts.count();
        md.admit = ADM_ERROR; md.error_code = ERR_MODE_MISMATCH; md.error_expected = md.world_expected;
    }

    // §8.1 in priority order, for requests of a canonical size (§5: header only for a SYN probe
    // and for data with count 0, header + P values for other data; §13.4: a FROM_OWNER request
    // is header only from a rank other than the owner, with values from the owner). Every entry
    // requires a well-formed request (§2): version 2, error 0, reserved 0, rank < 64, no
    // reply-only or unknown flag (0xCC9B = ~0x3fff | RESULT | RETRANSMIT | OLD | ERROR |
    // COMPLETE, plus KEEPALIVE and AUTH, which the program does not take), not both TO_OWNER and
    // FROM_OWNER, `count` within the payload (count_fit). A well-formed request of another size
    // goes to the controller, which applies §8.1 to it in the same order (its decode check needs
    // the payload size the pipeline cannot compare with `count`, and it ends in bad_length or a
    // drop). Anything else misses every entry: dropped as malformed. An owned data request whose
    // owner is not below N gets mode_mismatch (§13.4, after k_invalid); probes are not checked.
#define DPA_WELL_FORMED(flags) DPA_VERSION, 0, 0, flags, 0 &&& 0xC0
#define DPA_HEADER_ONLY DPA_WELL_FORMED(0 &&& 0xCC9B)
#define DPA_DATA DPA_WELL_FORMED(0 &&& 0xCC9F)
#define DPA_TO_OWNER_DATA DPA_WELL_FORMED(0x1000 &&& 0xDC9F)
#define DPA_FROM_OWNER_DATA DPA_WELL_FORMED(0x2000 &&& 0xEC9F)
// Header-only rows take CANONICAL and RELAYED (bit 0 set) alike.
#define DPA_FITS_HEADER_ONLY COUNT_FIT_CANONICAL &&& 1
    table verdict {
        key = {
            hdr.dpa.version : exact;
            hdr.dpa.error_code : exact;
            hdr.dpa.reserved : exact;
            hdr.dpa.flags : ternary;
            hdr.dpa.rank : ternary;
            hdr.udp.length : ternary;
            md.count_fit : ternary;
            md.session_hit : ternary;
            md.endpoint_hit : ternary;
            md.host_hit : ternary;
            md.token_state : ternary;
            md.pool_hit : ternary;
            md.identity_hit : ternary;
            md.k_ok : ternary;
            md.is_owner : ternary;
            md.owner_ok : ternary;
        }
        actions = {
            accept; drop; to_cpu; error_not_joined; error_taken_over; error_slot_out_of_range;
            error_k_invalid; error_owner_invalid;
        }
        const default_action = drop(EV_MALFORMED);
        counters = verdicts;
        size = 48;
        const entries = {
            // §2: TO_OWNER and FROM_OWNER together do not decode.
            (DPA_WELL_FORMED(0x3000 &&& 0x3000), _, _, _, _, _, _, _, _, _, _, _) : drop(EV_MALFORMED);
            // 3, 4, 4½: JOIN, LEAVE and KEEPALIVE run on the control plane (§6.3, §6.5, §6.7),
            // which also answers a JOIN for an unknown session.
            (DPA_WELL_FORMED(0x0040 &&& 0xFCDB), _, _, _, _, _, _, _, _, _, _, _) : to_cpu();
            (DPA_WELL_FORMED(0x0200 &&& 0xFE9B), _, _, _, _, _, _, _, _, _, _, _) : to_cpu();
            (DPA_WELL_FORMED(0x0800 &&& 0xFE9B), _, _, _, _, _, _, _, _, _, _, _) : to_cpu();
            // §13.4: the owner's FROM_OWNER request without its values, or another rank's with
            // values, is another size (bad_length, from the controller).
            (DPA_FROM_OWNER_DATA, 56, COUNT_FIT_RELAYED, _, _, _, _, _, _, _, 1, _) : to_cpu();
            (DPA_FROM_OWNER_DATA, DPA_DATA_UDP_LENGTH, COUNT_FIT_CANONICAL, _, _, _, _, _, _, _, 0, _) : to_cpu();

            // Header only: SYN probes and data with count 0 (and §13's header-only forms). 1:
            // count beyond the (empty) payload.
            (DPA_HEADER_ONLY, 56, COUNT_FIT_MALFORMED, _, _, _, _, _, _, _, _, _) : drop(EV_MALFORMED);
            // 2: unknown session. 5: not a member endpoint (a registered host learns it).
            (DPA_HEADER_ONLY, 56, DPA_FITS_HEADER_ONLY, 0, _, _, _, _, _, _, _, _) : drop(EV_UNKNOWN_SESSION);
            (DPA_HEADER_ONLY, 56, DPA_FITS_HEADER_ONLY, 1, 0, 1, _, _, _, _, _, _) : error_not_joined();
            (DPA_HEADER_ONLY, 56, DPA_FITS_HEADER_ONLY, 1, 0, 0, _, _, _, _, _, _) : drop(EV_UNREGISTERED);
            // 6: token. 7: slot outside the generation's T*2W slots.
            (DPA_HEADER_ONLY, 56, DPA_FITS_HEADER_ONLY, 1, 1, _, 2, _, _, _, _, _) : error_taken_over();
            (DPA_HEADER_ONLY, 56, DPA_FITS_HEADER_ONLY, 1, 1, _, 0, _, _, _, _, _) : drop(EV_BAD_TOKEN);
            (DPA_HEADER_ONLY, 56, DPA_FITS_HEADER_ONLY, 1, 1, _, 1, 0, _, _, _, _) : error_slot_out_of_range();
            // 8: the header's rank, or the slot's thread, is not this endpoint's, or the packet
            // did not enter on the member's port. 11: k > N. 12: an owned round's owner >= N.
            (DPA_HEADER_ONLY, 56, DPA_FITS_HEADER_ONLY, 1, 1, _, 1, 1, 0, _, _, _) : drop(EV_UNREGISTERED);
            (DPA_HEADER_ONLY, 56, DPA_FITS_HEADER_ONLY, 1, 1, _, 1, 1, 1, 0, _, _) : error_k_invalid();
            (DPA_TO_OWNER_DATA, 56, DPA_FITS_HEADER_ONLY, 1, 1, _, 1, 1, 1, 1, _, 0) : error_owner_invalid();
            (DPA_FROM_OWNER_DATA, 56, DPA_FITS_HEADER_ONLY, 1, 1, _, 1, 1, 1, 1, _, 0) : error_owner_invalid();
            (DPA_HEADER_ONLY, 56, DPA_FITS_HEADER_ONLY, 1, 1, _, 1, 1, 1, 1, _, _) : accept();

            // Data with exactly P values: the same rows. Count 0 there (COUNT_FIT_OTHER_SIZE)
            // matches none of them: another size.
            (DPA_DATA, DPA_DATA_UDP_LENGTH, COUNT_FIT_MALFORMED, _, _, _, _, _, _, _, _, _) : drop(EV_MALFORMED);
            (DPA_DATA, DPA_DATA_UDP_LENGTH, COUNT_FIT_CANONICAL, 0, _, _, _, _, _, _, _, _) : drop(EV_UNKNOWN_SESSION);
            (DPA_DATA, DPA_DATA_UDP_LENGTH, COUNT_FIT_CANONICAL, 1, 0, 1, _, _, _, _, _, _) : error_not_joined();
            (DPA_DATA, DPA_DATA_UDP_LENGTH, COUNT_FIT_CANONICAL, 1, 0, 0, _, _, _, _, _, _) : drop(EV_UNREGISTERED);
            (DPA_DATA, DPA_DATA_UDP_LENGTH, COUNT_FIT_CANONICAL, 1, 1, _, 2, _, _, _, _, _) : error_taken_over();
            (DPA_DATA, DPA_DATA_UDP_LENGTH, COUNT_FIT_CANONICAL, 1, 1, _, 0, _, _, _, _, _) : drop(EV_BAD_TOKEN);
            (DPA_DATA, DPA_DATA_UDP_LENGTH, COUNT_FIT_CANONICAL, 1, 1, _, 1, 0, _, _, _, _) : error_slot_out_of_range();
            (DPA_DATA, DPA_DATA_UDP_LENGTH, COUNT_FIT_CANONICAL, 1, 1, _, 1, 1, 0, _, _, _) : drop(EV_UNREGISTERED);
            (DPA_DATA, DPA_DATA_UDP_LENGTH, COUNT_FIT_CANONICAL, 1, 1, _, 1, 1, 1, 0, _, _) : error_k_invalid();
            (DPA_TO_OWNER_DATA, DPA_DATA_UDP_LENGTH, COUNT_FIT_CANONICAL, 1, 1, _, 1, 1, 1, 1, _, 0) : error_owner_invalid();
            (DPA_FROM_OWNER_DATA, DPA_DATA_UDP_LENGTH, COUNT_FIT_CANONICAL, 1, 1, _, 1, 1, 1, 1, _, 0) : error_owner_invalid();
            (DPA_DATA, DPA_DATA_UDP_LENGTH, COUNT_FIT_CANONICAL, 1, 1, _, 1, 1, 1, 1, _, _) : accept();

            // Another size (a probe with values, data of the wrong length, P values with count 0).
            (DPA_WELL_FORMED(0 &&& 0xCC9B), _, _, _, _, _, _, _, _, _, _, _) : to_cpu();
        }
    }
#undef DPA_FITS_HEADER_ONLY
#undef DPA_FROM_OWNER_DATA
#undef DPA_TO_OWNER_DATA
#undef DPA_DATA
#undef DPA_HEADER_ONLY
#undef DPA_WELL_FORMED

    apply {
        if (hdr.dpa.isValid()) {
            md.is_probe = hdr.dpa.flags[2:2];
            md.count_to_k = hdr.dpa.flags[5:5];
            md.packet_meta[31:16] = hdr.dpa.count;
            md.packet_round[31:16] = hdr.dpa.count;
            md.packet_round[15:8] = hdr.dpa.flags[15:8];
            count_fits.apply();
            sessions.apply();
            tokens.apply();
            endpoints.apply();
            // Range matches take at most 20 bits: slots have 14 (switch.program.slots <= 16384),
            // so a slot with any of the high 16 bits set is in no pool.
            if (hdr.dpa.slot[31:16] == 0) {
                identities.apply();
                pools.apply();
            }
            hosts.apply();
            k_limits.apply();
            owner_limits.apply();
            owners.apply();
            if (hdr.dpa.rank == hdr.dpa.contributors) {
                md.is_owner = 1;
            } else if (hdr.dpa.flags[13:13] == 1) {
                md.relayed = 1;
            }
            rank_bits.apply();
            round_parameters.apply();
            verdict.apply();
            if (md.admit == ADM_ACCEPT) {
                activity.count(hdr.bridged.session_index);
            }
            md.world_minus_one = md.world - 1;
            open_counts.apply();
        }
    }
}

#endif
