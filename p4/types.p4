// SPDX-License-Identifier: Apache-2.0
// Constants and small types shared by every control. Values that differ per switch come from
// the generated dpa_config.p4 (dpa-p4gen); everything here is fixed by docs/protocol.md.
#ifndef DPA_TYPES_P4
#define DPA_TYPES_P4

typedef bit<DPA_SLOT_BITS> slot_index_t;
typedef bit<8> session_index_t;

// Worker ports the pass tables can route (pass_plan, next_pass): every worker port is in the
// workers' pipe (switch.pipes[0]), which has at most 64 front-panel dev ports (one per lane). The
// controller refuses more (config.MAX_WORKER_PORTS).
#define DPA_WORKER_PORTS 64

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_ARP = 0x0806;
const bit<8> IP_PROTO_UDP = 17;
const bit<8> IP_PROTO_ICMP = 1;

// docs/protocol.md §2-§3.
const bit<8> DPA_VERSION = 2;
const bit<16> DPA_HEADER_BYTES = 48;
const bit<16> FLAG_RESULT = 0x0001;
const bit<16> FLAG_RETRANSMIT = 0x0002;
const bit<16> FLAG_SYN = 0x0004;
const bit<16> FLAG_OLD = 0x0008;
const bit<16> FLAG_ERROR = 0x0010;
const bit<16> FLAG_COUNT_TO_K = 0x0020;
const bit<16> FLAG_JOIN = 0x0040;
const bit<16> FLAG_COMPLETE = 0x0080;
const bit<16> FLAG_FLOAT = 0x0100;
const bit<16> FLAG_LEAVE = 0x0200;
const bit<16> FLAG_KEEPALIVE = 0x0800;  // §6.7: to the controller, like LEAVE
const bit<16> FLAG_TO_OWNER = 0x1000;    // §13: an owned round's values go to its owner only
const bit<16> FLAG_FROM_OWNER = 0x2000;  // §13: an owned round's values come from its owner only

// An owned round's mode (§13), as flags[13:12] hold it and the bridged header carries it.
const bit<2> MODE_NONE = 0;
const bit<2> MODE_TO_OWNER = 1;
const bit<2> MODE_FROM_OWNER = 2;

// docs/protocol.md §4 (the codes the data path sends; JOIN errors come from the controller).
const bit<8> ERR_SLOT_OUT_OF_RANGE = 9;
const bit<8> ERR_SEQ_AHEAD = 10;
const bit<8> ERR_OP_MISMATCH = 11;
const bit<8> ERR_NOT_JOINED = 12;
const bit<8> ERR_K_INVALID = 13;
const bit<8> ERR_DTYPE_MISMATCH = 15;
const bit<8> ERR_LENGTH_MISMATCH = 16;
const bit<8> ERR_SESSION_TAKEN_OVER = 18;
const bit<8> ERR_RANK_GONE = 21;
const bit<8> ERR_MODE_MISMATCH = 22;

// Admission verdicts (admission.p4).
const bit<8> ADM_NONE = 0;            // not a dpa data packet (or not yet decided)
const bit<8> ADM_ACCEPT = 1;          // reaches the slot state machine
const bit<8> ADM_ERROR = 2;           // header-only ERROR to the sender (md.error_code)
const bit<8> ADM_DROP = 3;            // silent drop (md.event says why)
const bit<8> ADM_CPU = 4;             // JOIN, LEAVE, a request of another size: the controller

// How a request's `count` fits its size (admission.p4): §2's decoder and §5's canonical sizes.
const bit<2> COUNT_FIT_MALFORMED = 0;   // 4 * count exceeds the payload
const bit<2> COUNT_FIT_CANONICAL = 1;   // header only with count 0, or P values with 1 <= count <= P
const bit<2> COUNT_FIT_OTHER_SIZE = 2;  // P values with count 0: the controller answers bad_length
const bit<2> COUNT_FIT_RELAYED = 3;     // FROM_OWNER header only with 1 <= count <= P: canonical from a
                                        // rank other than the owner (§13.4); bit 0 as CANONICAL's

// Slot gates (slot_state.p4): what the packet may do once the round's registers are read.
const bit<8> GATE_NONE = 0;
const bit<8> GATE_NEW = 1;            // opens the next round
const bit<8> GATE_CURRENT = 2;        // data for the current round, agreeing with it
const bit<8> GATE_OLD = 3;
const bit<8> GATE_AHEAD = 4;
const bit<8> GATE_MISMATCH = 5;       // data for the current round that disagrees: poisons it
const bit<8> GATE_PROBE_CURRENT = 6;  // SYN for the current, opened round
const bit<8> GATE_PROBE_OTHER = 7;    // SYN for another round or a slot never opened

// Reduce operations. `bridged.reduce_op` is what a value pass asks for; the chunk's state
// (chunk_state.p4) turns it into `md.cell_op`, what the accumulators of that pass do (reduce.p4):
// REDUCE_WRITE, REDUCE_ADD, a read, or nothing.
const bit<8> REDUCE_NONE = 0;         // strip the pass's values, touch no register
const bit<8> REDUCE_WRITE = 1;        // cell: the accumulators take the packet's values (the chunk opens a round)
const bit<8> REDUCE_ADD = 2;          // cell: add the packet's values
const bit<8> REDUCE_READ_LO = 3;      // output pass: emit the first half of a chunk, if the chunk holds the result
const bit<8> REDUCE_READ_HI = 4;      // output pass: emit the second half of a chunk, likewise
const bit<8> REDUCE_SKIP = 5;         // a probe fetching a result: no values to parse or add
const bit<8> REDUCE_CONTRIBUTE = 6;   // input pass: the sender's values belong in the round if
                                      // bridged.sender_bit is set; the chunk adds them once

// Delivery of a packet after its last pass (next_pass.p4).
const bit<8> DELIVER_DROP = 0;
const bit<8> DELIVER_UNICAST = 1;     // back to the sender (copies, OLD, SYN, ERROR)
const bit<8> DELIVER_MULTICAST = 2;   // every rank of the generation (rank = RID)
const bit<8> DELIVER_POISONED = 3;    // multicast, plus a copy with the sender's op_id to it
const bit<8> DELIVER_CPU = 4;
const bit<8> DELIVER_NET = 5;        // not dpa traffic (net.p4): the egress leaves it alone

// Multicast replication id of the extra copy a poisoned round sends to its offender.
const bit<16> RID_SENDER = 0xFFFF;
// The ingress RID (ig_tm_md.rid) of every dpa packet. The PRE applies L2 pruning (the
// level2_exclusion_id's port set, which net.p4's flood uses to skip the ingress port) only to
// copies of nodes whose RID equals the ingress RID; no node has this one, so no rank's copy is
// ever pruned (left at 0, rank 0's copies matched the RID of its node and were pruned on a
// port in prune set 0, i.e. a worker on dev port 0).
const bit<16> RID_DPA = 0xFFFE;

// Counter indices (counters.p4); the controller prints them under the software switch's names.
const bit<8> EV_NONE = 0;
const bit<8> EV_AGGREGATED = 1;
const bit<8> EV_COMPLETED = 2;        // completed_full (EV_COMPLETED_PARTIAL: fewer than N)
const bit<8> EV_RETRANSMITTED = 3;
const bit<8> EV_DUPLICATE = 4;
const bit<8> EV_LATE = 5;
const bit<8> EV_OLD = 6;
const bit<8> EV_SYN = 7;
const bit<8> EV_ERROR = 8;
const bit<8> EV_MALFORMED = 9;
const bit<8> EV_UNKNOWN_SESSION = 10;
const bit<8> EV_UNREGISTERED = 11;
const bit<8> EV_NOT_JOINED = 12;
const bit<8> EV_BAD_TOKEN = 13;
const bit<8> EV_CONTROL = 14;         // JOIN/LEAVE punted to the controller
const bit<8> EV_SIMULATED_DROP = 15;
const bit<8> EV_COMPLETED_PARTIAL = 16;
const bit<32> EV_COUNT = 17;      // size of the reply counter

// Count register encoding (slot_state.p4): contributors in the low byte, COUNT_COMPLETE once
// the round completed.
const bit<16> COUNT_COMPLETE = 0x100;

// Which count RegisterAction a packet ran (slot_state.p4), for the reply decision.
const bit<8> COUNT_OP_NONE = 0;
const bit<8> COUNT_OP_OPEN = 1;
const bit<8> COUNT_OP_ADD = 2;
const bit<8> COUNT_OP_REACTIVE = 3;
const bit<8> COUNT_OP_READ = 4;

#endif
