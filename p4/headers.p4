// SPDX-License-Identifier: Apache-2.0
// Packet headers (docs/protocol.md §1-§2) and the metadata that rides between passes.
#ifndef DPA_HEADERS_P4
#define DPA_HEADERS_P4

header ethernet_h {
    bit<48> dst_addr;
    bit<48> src_addr;
    bit<16> ether_type;
}

header arp_h {
    bit<16> hw_type;
    bit<16> proto_type;
    bit<8>  hw_len;
    bit<8>  proto_len;
    bit<16> opcode;
    bit<48> sender_hw;
    bit<32> sender_ip;
    bit<48> target_hw;
    bit<32> target_ip;
}

header ipv4_h {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  diffserv;
    bit<16> total_len;
    bit<16> identification;
    bit<3>  flags;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdr_checksum;
    bit<32> src_addr;
    bit<32> dst_addr;
}

header icmp_h {
    bit<8>  type;
    bit<8>  code;
    bit<16> checksum;
}

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

// The 48-byte dpa header, field for field as docs/protocol.md §2. The 64-bit bitmap is two
// words: the program uses the low one (32 ranks, §12) and keeps the high one zero in replies.
header dpa_h {
    bit<8>  version;
    bit<8>  error_code;
    bit<16> flags;
    bit<32> session;
    bit<32> token;
    bit<32> op_id;
    bit<32> slot;
    bit<32> seq;
    bit<32> offset;
    bit<32> op_length;
    bit<16> count;
    bit<8>  rank;
    bit<8>  k;
    bit<8>  contributors;
    bit<8>  exp_used;
    bit<8>  exp_next;
    bit<8>  reserved;
    bit<32> bitmap_hi;
    bit<32> bitmap_lo;
}

// One half of a pass's values: value i goes to the low word of reducer i's register cell in
// `values_lo` and to the high word in `values_hi` (reduce.p4).
header values_h {
    bit<32> v00;
#if DPA_REDUCERS > 1
    bit<32> v01;
#endif
#if DPA_REDUCERS > 2
    bit<32> v02;
#endif
#if DPA_REDUCERS > 3
    bit<32> v03;
#endif
#if DPA_REDUCERS > 4
    bit<32> v04;
#endif
#if DPA_REDUCERS > 5
    bit<32> v05;
#endif
#if DPA_REDUCERS > 6
    bit<32> v06;
#endif
#if DPA_REDUCERS > 7
    bit<32> v07;
#endif
#if DPA_REDUCERS > 8
    bit<32> v08;
#endif
#if DPA_REDUCERS > 9
    bit<32> v09;
#endif
#if DPA_REDUCERS > 10
    bit<32> v10;
#endif
#if DPA_REDUCERS > 11
    bit<32> v11;
#endif
#if DPA_REDUCERS > 12
    bit<32> v12;
#endif
#if DPA_REDUCERS > 13
    bit<32> v13;
#endif
#if DPA_REDUCERS > 14
    bit<32> v14;
#endif
#if DPA_REDUCERS > 15
    bit<32> v15;
#endif
#if DPA_REDUCERS > 16
    bit<32> v16;
#endif
#if DPA_REDUCERS > 17
    bit<32> v17;
#endif
#if DPA_REDUCERS > 18
    bit<32> v18;
#endif
#if DPA_REDUCERS > 19
    bit<32> v19;
#endif
#if DPA_REDUCERS > 20
    bit<32> v20;
#endif
#if DPA_REDUCERS > 21
    bit<32> v21;
#endif
#if DPA_REDUCERS > 22
    bit<32> v22;
#endif
#if DPA_REDUCERS > 23
    bit<32> v23;
#endif
#if DPA_REDUCERS > 24
    bit<32> v24;
#endif
#if DPA_REDUCERS > 25
    bit<32> v25;
#endif
#if DPA_REDUCERS > 26
    bit<32> v26;
#endif
#if DPA_REDUCERS > 27
    bit<32> v27;
#endif
#if DPA_REDUCERS > 28
    bit<32> v28;
#endif
#if DPA_REDUCERS > 29
    bit<32> v29;
#endif
#if DPA_REDUCERS > 30
    bit<32> v30;
#endif
#if DPA_REDUCERS > 31
    bit<32> v31;
#endif
}

// Carried in front of the Ethernet header from one pass to the next, and from the last ingress
// pass to the egress. Fixed layout (no @flexible): a loopback port hands it to the next pass's
// parser as packet bytes.
header bridged_h {
    bit<8>  pass_index;     // the pass the packet is about to take (0: the state pass)
    bit<8>  reduce_op;      // REDUCE_* for that pass
    bit<8>  delivery;       // DELIVER_* after the last pass
    bit<2>  mode;           // the round's MODE_* (§13): which copies of a result take its values
    bit<5>  owner;          // the round's owner (ranks < 32, §12)
    bit<9>  worker_port;    // ingress port of the request: unicast replies leave here
    bit<16> mgid;           // the session's multicast group
    bit<16> sender_mgid;    // the group that reaches only worker_port (poisoned rounds)
    bit<8>  session_index;
    bit<8>  thread;         // worker thread owning the slot: multicast copies go to its port
    bit<8>  with_values;    // 1: the reply carries P values, 0: header only
    bit<8>  event;          // counter index of what the state pass decided
    // From the state pass to the egress: the sender's op_id, for its copy of a poisoned round's
    // error (delivered from the state pass). Through value passes, which a poisoned round's
    // error never takes: the chunk round, the result's seq XOR the generation's token, so that a
    // chunk's round names the generation too (chunk_state.p4).
    bit<32> op_id_or_round;
    bit<32> slot;           // the request's slot (registers use its low DPA_SLOT_BITS)
    bit<32> sender_bit;     // the sender's bit if it is one of the round's contributors, else 0
                            // (chunk_state.p4: whose values an input pass may add)
}

struct headers_t {
    bridged_h  bridged;
    ethernet_h ethernet;
    arp_h      arp;
    ipv4_h     ipv4;
    icmp_h     icmp;
    udp_h      udp;
    dpa_h      dpa;
    values_h   values_lo;
    values_h   values_hi;
}

// Per-pass scratch of the state pass and, at the end, of the value passes (not carried between passes).
// Zero at the start of the ingress, as the parser and state passes assume for every flag they
// only set (bf-p4c otherwise leaves a field read before written uninitialised).
@pa_auto_init_metadata
struct metadata_t {
    bit<1>  is_probe;
    bit<1>  count_to_k;
    bit<1>  simulated_drop;
    bit<1>  endpoint_hit;   // (ipv4.src, udp.src) is a member endpoint of some generation
    bit<1>  identity_hit;   // ... of this session, with this rank, for a slot of its thread
    bit<1>  pool_hit;       // the slot lies in the generation's T·2W slots
    bit<1>  host_hit;       // ipv4.src is a registered host of the session
    bit<1>  k_ok;           // k <= N
    bit<2>  token_state;    // 0 unknown, 1 the generation's, 2 the previous generation's
    bit<1>  is_owner;       // rank == the owner byte (§13; meaningful in owned rounds only)
    bit<1>  owner_ok;       // owner < N (owner_limits)
    bit<1>  relayed;        // a FROM_OWNER request from a rank other than the owner: no values
    bit<8>  admit;          // ADM_*
    bit<8>  error_code;
    bit<32> error_expected;
    bit<32> generation;
    bit<32> pool_base;
    // N three times, each from the sessions table's action data: the count chain's 16-bit
    // arithmetic, the target byte a NEW stores, and k_invalid's expected value. bf-p4c puts
    // every field an instruction ties to another into one group of 16 containers, so the
    // arithmetic and the header-shaped words share no field (docs/switch.md).
    bit<16> world;
    bit<16> world_minus_one;
    bit<8>  world_target;
    bit<32> world_expected;
    bit<8>  k_default;
    bit<32> gone;           // §6.7: the generation's ranks that left or went silent (the controller's)
    bit<8>  k_x;            // the round's K XOR N: 0 when the round needs every rank
    bit<1>  gone_hit;       // the reply is rank_gone for md.gone_rank
    bit<8>  gone_rank;
    bit<16> open_count;     // of a NEW: the count register's first value
    bit<32> now;            // ticks: global timestamp bits 47..16 (§8.4)
    bit<32> timeout_plus_one;
    bit<32> sender_bit;

    bit<32> seq_diff;       // packet.seq - slot.seq (serial arithmetic)
    bit<32> slot_op_id;
    bit<32> slot_seq;       // the slot's round: packet.seq - seq_diff
    bit<32> slot_op_length;
    bit<32> slot_meta;      // count << 16 | target
    bit<32> slot_round;     // count << 16 | flags' high byte (the FLOAT bit) << 8 | K
    bit<32> state_meta;     // slot_meta without the count (replies other than results)
    bit<32> op_x;           // packet XOR slot: zero when they agree
    bit<32> round_x;        // bits 31..16: the packet's count differs from the round's; bit 8: its type
    bit<32> length_x;
    bit<32> meta_x;         // bits 15..8: the packet's owner differs from the round's (§13)
    bit<8>  gate;           // GATE_*
    bit<32> elapsed;        // now - first arrival of the round (0 for a NEW)
    bit<32> not_late;       // (timeout + 1) -sat elapsed: zero once the round timed out
    bit<32> poison_info;    // offender rank << 8 | code, 0 while not poisoned
    bit<32> poison_value;   // the offender's value
    bit<32> mismatch_info;  // what this packet would poison the round with
    bit<32> mismatch_value;
    bit<32> mismatch_expected;  // the round's value it disagrees with (the error's `offset`)
    bit<32> poison_expected;    // the poisoned round's expected value (poison_expected register)
    bit<32> dup;            // the sender's bit in the arrival bitmap before this packet
    bit<16> threshold;      // contributions that complete the round for this packet
    bit<16> count;          // count register result (COUNT_* encoding)
    bit<8>  count_op;       // COUNT_OP_*
    bit<16> short;          // threshold -sat the count before the packet (the count's verdict)
    bit<16> contributors;   // contributors after the packet
    bit<16> full_x;         // low byte: contributors XOR N, zero for a full round
    bit<9>  input_port;     // pass port of the first input pass (pass_plan)
    bit<32> result_bitmap;  // contributors (frozen at completion)
    bit<16> icmp_residual;  // ICMP checksum of everything but type, code and checksum
    bit<1>  session_hit;
    bit<2>  count_fit;      // COUNT_FIT_*: how `count` fits the request's size
    bit<16> random;         // drop simulator draw
    bit<48> switch_mac;
    bit<32> switch_ip;
    bit<32> address_x;      // net.p4: the address asked for XOR switch_ip
    // What a NEW stores, laid out as the reply's header words need them: count and target
    // where `count` and `k` sit in the dpa header's ninth word, the flags' high byte where it
    // sits in the first (delivery.p4 then copies each word from one source), and the count again
    // above the round's type and K, where the gate compares it (§8.2). Whole bytes: a
    // single-bit slice would make bf-p4c slice every word tied to it.
    bit<32> packet_meta;    // count << 16 | owner << 8 (owned rounds, else 0) | target (K with COUNT_TO_K, else N; N for FROM_OWNER)
    bit<32> packet_round;   // count << 16 | flags' high byte (FLOAT, §2) << 8 | K (the packet's k, or the session default)

    // The value pass's (chunk_state.p4), beside the values.
    bit<32> chunk_round_x;  // the packet's round (dpa.seq) minus the chunk's: 0 for the same round
    bit<32> chunk_ranks_x;  // input pass: the sender's bit as the chunk had it; output pass: the
                            // chunk's ranks XOR the result's contributors (0: exactly them)
    bit<8>  cell_op;        // REDUCE_*: what the accumulators of this pass do
}

// The egress reads only headers and its intrinsic metadata, and keeps one scratch field.
struct egress_metadata_t {
    bit<5> owner_x;         // the copy's rank XOR the round's owner: 0 for the owner's copy
}

#endif
