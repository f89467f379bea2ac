"""The P4 state pass against the software switch's rules, without a P4 compiler.

The `gate` and `reply` tables' const entries are read from p4/slot_state.p4 and p4/delivery.p4 and
matched in priority order; the RegisterActions and the reply actions are modelled here as the P4
writes them. The oracle is docs/protocol.md §8.2 as src/switch/slot.cpp runs it (step_slot and
reply_header, transcribed). Random packet sequences on one slot (N = 3, every K, probes, stale and
early rounds, disagreements, COUNT_TO_K, header-only rounds of count 0, a moving clock) must give the
same action, the same reply header, the same values or none, and the same accumulator in both; the
straggler-unaware build must behave as a software switch whose straggler timeout never ends.
Standard library only.
"""
import os
import random
import re
import unittest

P4 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "p4")
MASK32 = 0xFFFFFFFF

RESULT, RETRANSMIT, SYN, OLD, ERROR, COUNT_TO_K, COMPLETE, FLOAT = (
    0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x80, 0x100)
OP_MISMATCH, DTYPE_MISMATCH, LENGTH_MISMATCH, SEQ_AHEAD = 11, 15, 16, 10


def read(name):
    with open(os.path.join(P4, name)) as f:
        return re.sub(r"//[^\n]*", "", f.read())


def constants():
    values = {}
    for name, value in re.findall(r"const bit<\d+> (\w+) = (\w+);", read("types.p4")):
        values[name] = int(value, 0)
    return values


CONST = constants()


def parse_entries(source, table):
    """[(patterns, action, args)]: a pattern is None (don't care) or (value, mask)."""
    body = source[source.index("table %s {" % table):]
    body = body[body.index("const entries = {") + len("const entries = {"):]
    body = body[:body.index("\n        }\n")]
    entries = []
    for key, action, args in re.findall(r"\(([^;]*?)\)\s*:\s*(\w+)\(([^)]*)\);", body):
        patterns = []
        for item in (part.strip() for part in key.split(",")):
            if item == "_":
                patterns.append(None)
            elif "&&&" in item:
                value, mask = (CONST[x.strip()] if x.strip() in CONST else int(x.strip(), 0)
                               for x in item.split("&&&"))
                patterns.append((value, mask))
            else:
                patterns.append((CONST[item] if item in CONST else int(item, 0), MASK32))
        parsed_args = [CONST[a.strip()] if a.strip() in CONST else int(a.strip(), 0)
                       for a in args.split(",") if a.strip()]
        entries.append((patterns, action, parsed_args))
    default = re.search(r"const default_action = (\w+)(?:\(([^)]*)\))?;",
                        source[source.index("table %s {" % table):])
    default_args = [CONST[a.strip()] if a.strip() in CONST else int(a.strip(), 0)
                    for a in (default.group(2) or "").split(",") if a.strip()]
    entries.append(([None] * len(entries[0][0]), default.group(1), default_args))  # a miss
    return entries


def expand_admission_macros(source, data_length):
    """admission.p4's entry macros, expanded as the preprocessor would (one level each)."""
    macros = dict(re.findall(r"#define (DPA_HEADER_ONLY|DPA_DATA) (.*)", source))
    well_formed = re.search(r"#define DPA_WELL_FORMED\(flags\) (.*)", source).group(1)
    for name, body in macros.items():
        flags = re.search(r"DPA_WELL_FORMED\((.*)\)", body).group(1)
        source = re.sub(r"\b%s\b(?!\s)" % name, well_formed.replace("flags", flags), source)
    source = re.sub(r"DPA_WELL_FORMED\(([^)]*)\)", lambda m: well_formed.replace("flags", m.group(1)), source)
    return source.replace("DPA_DATA_UDP_LENGTH", str(data_length))


GATE = parse_entries(read("slot_state.p4"), "gate")
REPLY = parse_entries(read("delivery.p4"), "reply")
DATA_LENGTH = 8 + 48 + 4 * 128
VERDICT = parse_entries(expand_admission_macros(read("admission.p4"), DATA_LENGTH), "verdict")


def lookup(entries, keys):
    for patterns, action, args in entries:
        if all(p is None or (k & p[1]) == (p[0] & p[1]) for p, k in zip(patterns, keys)):
            return action, args
    raise AssertionError("no entry for %r" % (keys,))


class Packet:
    def __init__(self, **fields):
        self.flags = 0
        self.op_id = self.seq = self.offset = self.op_length = self.count = 0
        self.rank = self.k = 0
        self.exp_used = self.exp_next = 0  # biased codes
        self.value = 0
        self.__dict__.update(fields)

    def probe(self):
        return bool(self.flags & SYN)


# ---------------------------------------------------------------- the P4 model

class P4Slot:
    def __init__(self, world, k_default, timeout, straggler_aware=True):
        self.world, self.k_default, self.timeout = world, k_default, timeout
        self.straggler_aware = straggler_aware  # DPA_STRAGGLER_AWARE
        self.r = dict(seq=0, op_id=0, offset=0, op_length=0, meta=0, round=0, first_arrival=0,
                      poison_info=0, poison_set=0, poison_value=0, expected_set=0, poison_expected=0,
                      arrivals=0, count=0,
                      exp_used=0, exp_max=0, contributors=0)
        self.acc = 0

    def step(self, p, now):
        r, md = self.r, {}
        probe = int(p.probe())
        # admission.p4: the round's K and target if the packet opens it.
        round_k = p.k if p.k else self.k_default
        round_target = round_k if p.flags & COUNT_TO_K else self.world
        packet_meta = p.count << 16 | round_target
        packet_round = p.count << 16 | (p.flags & FLOAT) | round_k
        open_count = 0x101 if round_target <= 1 else 1
        sender_bit = 1 << p.rank
        # seq
        d = (p.seq - r["seq"]) & MASK32
        if not probe and d == 1:
            r["seq"] = p.seq
        # op/offset/length/meta/round/first_arrival/exp_used
        if not probe and d == 1:
            r.update(op_id=p.op_id, offset=p.offset, op_length=p.op_length, meta=packet_meta,
                     round=packet_round, first_arrival=now, exp_used=p.exp_used)
        op_x = p.op_id ^ r["op_id"]
        length_x = p.op_length ^ r["op_length"]
        round_x = packet_round ^ r["round"]
        gate, gargs = lookup(GATE, (probe, d, r["meta"], op_x, round_x, length_x))
        mismatch_info = mismatch_value = mismatch_expected = 0
        if gate == "gate_op_mismatch":
            mismatch_info, mismatch_value, mismatch_expected = p.rank << 8 | OP_MISMATCH, p.op_id, r["op_id"]
        elif gate == "gate_type_mismatch":
            mismatch_info = p.rank << 8 | DTYPE_MISMATCH
            mismatch_value, mismatch_expected = packet_round & 0x100, r["round"] & 0x100
        elif gate == "gate_length_mismatch":
            mismatch_info = p.rank << 8 | LENGTH_MISMATCH
            mismatch_value, mismatch_expected = p.op_length, r["op_length"]
        elif gate == "gate_count_mismatch":
            mismatch_info = p.rank << 8 | LENGTH_MISMATCH
            mismatch_value, mismatch_expected = p.count, r["round"] >> 16
        g = {"gate_new": "NEW", "gate_current": "CURRENT", "gate_old": "OLD", "gate_ahead": "AHEAD",
             "gate_probe_current": "PROBE_CURRENT", "gate_probe_other": "PROBE_OTHER"}.get(gate, "MISMATCH")
        elapsed = (now - r["first_arrival"]) & MASK32
        not_late = max(self.timeout + 1 - elapsed, 0) if self.straggler_aware else 1
        # poison
        poison_info = poison_value = poison_expected = 0
        if g == "NEW":
            r.update(poison_info=0, poison_set=0, poison_value=0, expected_set=0, poison_expected=0)
        elif g == "MISMATCH":
            poison_info = r["poison_info"]
            if r["poison_info"] == 0:
                r["poison_info"] = mismatch_info
            if r["poison_set"] == 0:
                r["poison_set"], r["poison_value"] = 1, mismatch_value
            if r["expected_set"] == 0:
                r["expected_set"], r["poison_expected"] = 1, mismatch_expected
            poison_value, poison_expected = r["poison_value"], r["poison_expected"]
        elif g in ("CURRENT", "PROBE_CURRENT"):
            poison_info, poison_value, poison_expected = r["poison_info"], r["poison_value"], r["poison_expected"]
        # arrivals: each RegisterAction returns the sender's bit as the packet found it
        dup = 0
        if g == "NEW":
            r["arrivals"] = sender_bit
        elif g == "CURRENT":
            dup = r["arrivals"] & sender_bit
            r["arrivals"] |= sender_bit
        elif g == "PROBE_CURRENT":
            dup = r["arrivals"] & sender_bit
        threshold = (r["round"] & 0xFF) if not_late == 0 else (r["meta"] & 0xFF)
        # count: every RegisterAction returns the register as the packet found it, except
        # count_open, which returns what it writes.
        count_op, count = "NONE", 0
        if g == "NEW":
            r["count"] = open_count
            count, count_op = r["count"], "OPEN"
        elif g == "CURRENT" and poison_info == 0 and dup == 0:
            count = v = r["count"]
            if v < 0x100:
                r["count"] = v + 0x101 if v + 1 >= threshold else v + 1
            count_op = "ADD"
        elif (self.straggler_aware and g in ("CURRENT", "PROBE_CURRENT") and poison_info == 0 and
              dup != 0 and not_late == 0):
            count = v = r["count"]
            if v < 0x100 and v >= threshold:
                r["count"] = v | 0x100
            count_op = "REACTIVE"
        elif g in ("CURRENT", "PROBE_CURRENT", "OLD", "PROBE_OTHER"):
            count, count_op = r["count"], "READ"
        accepted_add = g == "CURRENT" and poison_info == 0 and dup == 0 and not count & 0x100
        # delivery.p4's apply: the count's verdict, the contributors after the packet, full or not.
        short = max(threshold - count, 0) & 0xFF
        if count_op == "ADD" and not count & 0x100:
            contributors = (count + 1) & 0xFF
            full_x = (count ^ (self.world - 1)) & 0xFF
        else:
            contributors = count & 0xFF
            full_x = (count ^ self.world) & 0xFF
        # exponent.p4 (straight into the header's exp_used, exp_next), result_bitmap.p4
        exp_used, exp_next = p.exp_used, p.exp_next
        if g == "NEW":
            r["exp_max"] = p.exp_next
            r["contributors"] = sender_bit
            exp_used, exp_next = r["exp_used"], r["exp_max"]
        elif g in ("OLD", "PROBE_OTHER") or (g in ("CURRENT", "PROBE_CURRENT") and poison_info == 0):
            if accepted_add:
                r["exp_max"] = max(r["exp_max"], p.exp_next)
            exp_used, exp_next = r["exp_used"], r["exp_max"]
        if accepted_add:
            r["contributors"] |= sender_bit
        # delivery.p4
        keys = (CONST["ADM_ACCEPT"], probe, CONST["GATE_" + g], poison_info & 0xFF, mismatch_info & 0xFF,
                0, CONST["COUNT_OP_" + count_op], count, short, op_x, full_x, r["round"] >> 16)
        action, args = lookup(REPLY, keys)
        return self._reply(action, args, p, d, contributors, exp_used, exp_next, poison_info, poison_value,
                           poison_expected)

    def _reply(self, action, args, p, d, contributors, exp_used, exp_next, poison_info, poison_value,
               poison_expected):
        r = self.r
        slot_float = r["round"] & FLOAT

        def slot_view(flags, seq, with_count):
            return dict(flags=slot_float | flags, error=0, op_id=r["op_id"], seq=seq,
                        offset=r["offset"], op_length=r["op_length"], k=r["meta"] & 0xFF,
                        contributors=contributors, exp_used=exp_used, exp_next=exp_next,
                        bitmap=r["contributors"], count=r["meta"] >> 16 if with_count else 0,
                        rank=p.rank)

        def error_view(flags, code, expected, **extra):
            h = dict(flags=(p.flags & FLOAT) | flags, error=code, op_id=p.op_id, seq=p.seq,
                     offset=expected, op_length=p.op_length, k=p.k, contributors=0,
                     exp_used=p.exp_used, exp_next=p.exp_next, bitmap=0, count=0, rank=p.rank)
            h.update(extra)
            return h

        slot_seq = (p.seq - d) & MASK32
        reduce_op = None
        with_values = action in ("completed_at_open", "completed", "completed_by_probe", "copy_to_data",
                                 "copy_to_probe")
        if action == "syn_reply":
            kind, header = "unicast_syn", slot_view(args[0], slot_seq, False)
        elif action == "old_reply":
            kind, header = "unicast_old", slot_view(args[0], slot_seq, False)
        elif action == "seq_ahead":
            kind, header = "error_seq_ahead", error_view(0x10, SEQ_AHEAD, slot_seq)
        elif action in ("poisoned_now", "poisoned_now_with_sender_copy"):
            kind = "multicast_error" + ("+sender" if action.endswith("copy") else "")
            code = args[0] if action == "poisoned_now" else OP_MISMATCH
            header = error_view(0x10, code, poison_expected, op_id=r["op_id"], bitmap=poison_value)
        elif action in ("poisoned_op", "poisoned_type", "poisoned_length"):
            code = {"poisoned_op": OP_MISMATCH, "poisoned_length": LENGTH_MISMATCH,
                    "poisoned_type": DTYPE_MISMATCH}[action]
            kind = "unicast_error"
            header = error_view(args[0], code, poison_expected, rank=poison_info >> 8 & 0xFF,
                                count=poison_info >> 16, bitmap=poison_value)
        elif action == "counted":
            kind, header, reduce_op = "counted", None, args[0]
        elif action == "completed_at_open":
            kind, header, reduce_op = "multicast_result", slot_view(0x01, p.seq, True), CONST["REDUCE_WRITE"]
        elif action == "completed":
            kind, header, reduce_op = "multicast_result", slot_view(0x01, slot_seq, True), args[0]
        elif action == "completed_by_probe":
            kind, header = "multicast_result", slot_view(0x01, slot_seq, True)
        elif action == "copy_to_data":
            kind, header = "unicast_result", slot_view(0x03, slot_seq, True)
        elif action == "copy_to_probe":
            kind, header = "unicast_result", slot_view(0x07, slot_seq, True)
        elif action == "counted_header_only":
            kind, header = "counted", None
        elif action == "completed_at_open_header_only":
            kind, header = "multicast_result", slot_view(0x01, p.seq, True)
        elif action == "completed_header_only":
            kind, header = "multicast_result", slot_view(0x01, slot_seq, True)
        elif action == "copy_header_only":
            kind, header = "unicast_result", slot_view(args[0], slot_seq, True)
        elif action == "duplicate":
            kind, header = "duplicate", None
        else:
            raise AssertionError("unexpected reply action " + action)
        if reduce_op == CONST["REDUCE_WRITE"]:
            self.acc = p.value
        elif reduce_op == CONST["REDUCE_ADD"]:
            self.acc = (self.acc + p.value) & MASK32
        return kind, header, with_values, self.acc


# ---------------------------------------------------------------- the oracle: src/switch/slot.cpp

class SoftwareSlot:
    def __init__(self, world, k_default, timeout):
        self.world, self.k_default, self.timeout = world, k_default, timeout
        self.s = self.fresh()
        self.acc = 0

    @staticmethod
    def fresh():
        return dict(seq=0, op_id=0, offset=0, op_length=0, bitmap=0, first_arrival=0, count=0,
                    flags=0, contributors=0, k=0, target=0, exp_used=0, exp_max=0, complete=False,
                    error=0, error_expected=0, error_offered=0, error_rank=0)

    def reactive(self, now):
        s = self.s
        return ((now - s["first_arrival"]) & MASK32) > self.timeout and s["contributors"] >= s["k"]

    def step(self, h, now):
        s, bit = self.s, 1 << h.rank
        diff = (h.seq - s["seq"]) & MASK32
        diff = diff - (1 << 32) if diff >= 1 << 31 else diff
        opened = s["target"] != 0

        def poison(code, expected, offered):
            s.update(error=code, error_expected=expected, error_offered=offered, error_rank=h.rank)
            return "multicast_error"

        if h.probe():
            if diff != 0 or not opened:
                action = "unicast_syn"
            elif s["error"]:
                action = "unicast_error"
            elif s["complete"]:
                action = "unicast_result"
            elif s["bitmap"] & bit and self.reactive(now):
                s["complete"] = True
                action = "multicast_result"
            else:
                action = "unicast_syn"
        elif diff == 1:
            self.s = s = self.fresh()
            s.update(seq=h.seq, op_id=h.op_id, offset=h.offset, op_length=h.op_length, count=h.count,
                     flags=h.flags & FLOAT, bitmap=bit, contributors=1)
            s["k"] = h.k if h.k else self.k_default
            s["target"] = s["k"] if h.flags & COUNT_TO_K else self.world
            s.update(exp_used=h.exp_used, exp_max=h.exp_next, first_arrival=now)
            if h.count:  # a header-only request (count 0) leaves the accumulators as they are
                self.acc = h.value
            s["complete"] = s["contributors"] >= s["target"]
            action = "multicast_result" if s["complete"] else "counted"
        elif diff < 0:
            action = "unicast_old"
        elif diff > 1 or not opened:
            action = "error_seq_ahead"
        elif s["error"]:
            action = "unicast_error"
        elif h.op_id != s["op_id"]:
            action = poison(OP_MISMATCH, s["op_id"], h.op_id)
        elif (h.flags & FLOAT) != s["flags"]:
            action = poison(DTYPE_MISMATCH, s["flags"], h.flags & FLOAT)
        elif h.op_length != s["op_length"]:
            action = poison(LENGTH_MISMATCH, s["op_length"], h.op_length)
        elif h.count != s["count"]:
            action = poison(LENGTH_MISMATCH, s["count"], h.count)
        elif s["complete"]:
            action = "unicast_result"
        elif s["bitmap"] & bit:
            if self.reactive(now):
                s["complete"] = True
                action = "multicast_result"
            else:
                action = "duplicate"
        else:
            if h.count:
                self.acc = (self.acc + h.value) & MASK32
            s["bitmap"] |= bit
            s["contributors"] += 1
            s["exp_max"] = max(s["exp_max"], h.exp_next)
            if s["contributors"] >= s["target"] or self.reactive(now):
                s["complete"] = True
                action = "multicast_result"
            else:
                action = "counted"
        return self.reply(action, h)

    def reply(self, action, h):
        s = self.s
        complete = COMPLETE if s["complete"] else 0
        view = dict(error=0, op_id=s["op_id"], seq=s["seq"], offset=s["offset"],
                    op_length=s["op_length"], rank=h.rank, k=s["target"], contributors=s["contributors"],
                    exp_used=s["exp_used"], exp_next=s["exp_max"], bitmap=s["bitmap"], count=0)

        def error_reply(code, expected):
            return dict(flags=ERROR | (h.flags & (SYN | FLOAT)), error=code, op_id=h.op_id, seq=h.seq,
                        offset=expected, op_length=h.op_length, k=h.k, contributors=0,
                        exp_used=h.exp_used, exp_next=h.exp_next, bitmap=0, count=0, rank=h.rank)

        def poisoned():
            e = error_reply(s["error"], s["error_expected"])
            e.update(op_id=s["op_id"], seq=s["seq"], rank=s["error_rank"], bitmap=s["error_offered"])
            return e

        # §5: a result carries P values unless its round's count is 0; other replies none.
        with_values = s["count"] != 0
        if action in ("counted", "duplicate"):
            return action, None, False, self.acc
        if action == "multicast_result":
            return action, dict(view, flags=RESULT | s["flags"], count=s["count"]), with_values, self.acc
        if action == "unicast_result":
            return action, dict(view, flags=RESULT | RETRANSMIT | s["flags"] | (h.flags & SYN),
                                count=s["count"]), with_values, self.acc
        if action == "unicast_old":
            return action, dict(view, flags=OLD | complete | s["flags"]), False, self.acc
        if action == "unicast_syn":
            return action, dict(view, flags=SYN | complete | s["flags"]), False, self.acc
        if action == "error_seq_ahead":
            return action, error_reply(SEQ_AHEAD, s["seq"]), False, self.acc
        if action == "multicast_error":
            kind = action + ("+sender" if h.op_id != s["op_id"] else "")
            return kind, poisoned(), False, self.acc
        e = poisoned()
        e["op_id"] = h.op_id
        return action, e, False, self.acc


def admission_oracle(canonical, count_fit, session, endpoint, host, token, pool, identity, k_ok):
    """docs/protocol.md §2, §5 and §8.1 in order, for a well-formed request (not JOIN/LEAVE)."""
    if not canonical or count_fit == CONST["COUNT_FIT_OTHER_SIZE"]:
        return "to_cpu"  # the controller finishes §8.1 for other sizes
    if count_fit == CONST["COUNT_FIT_MALFORMED"]:
        return "drop", "EV_MALFORMED"
    if not session:
        return "drop", "EV_UNKNOWN_SESSION"
    if not endpoint:
        return "error_not_joined" if host else ("drop", "EV_UNREGISTERED")
    if token != 1:
        return "error_taken_over" if token == 2 else ("drop", "EV_BAD_TOKEN")
    if not pool:
        return "error_slot_out_of_range"
    if not identity:
        return "drop", "EV_UNREGISTERED"
    return "accept" if k_ok else "error_k_invalid"


class AdmissionTest(unittest.TestCase):
    def verdict(self, flags, length, *hits):
        action, args = lookup(VERDICT, (2, 0, 0, flags, 5, length) + hits)
        return (action, [k for k, v in CONST.items() if k.startswith("EV_") and v == args[0]][0]) \
            if args else action

    def test_every_combination_follows_section_8_1(self):
        import itertools
        fits = {name: CONST["COUNT_FIT_" + name] for name in ("MALFORMED", "CANONICAL", "OTHER_SIZE")}
        # A SYN probe and a data request of count 0 are header only (56 UDP bytes); other data
        # carries P values, where count 0 is a request of another size.
        kinds = {"probe": (SYN, 56, ("MALFORMED", "CANONICAL")),
                 "priming": (0, 56, ("MALFORMED", "CANONICAL")),
                 "data": (0, DATA_LENGTH, ("MALFORMED", "CANONICAL", "OTHER_SIZE"))}
        for kind, (flags, canonical_length, fit_names) in kinds.items():
            for canonical, fit, *hits in itertools.product((0, 1), fit_names, (0, 1), (0, 1), (0, 1),
                                                           (0, 1, 2), (0, 1), (0, 1), (0, 1)):
                length = canonical_length if canonical else canonical_length + 4
                self.assertEqual(self.verdict(flags, length, fits[fit], *hits),
                                 admission_oracle(canonical, fits[fit], *hits), (kind, canonical, fit, hits))

    def test_join_leave_go_to_the_controller_and_bad_headers_are_dropped(self):
        anything = (56, 1, 0, 0, 0, 0, 0, 0, 0)
        self.assertEqual(self.verdict(0x0040, *anything), "to_cpu")
        self.assertEqual(self.verdict(0x0200, *anything), "to_cpu")
        for flags in (RESULT, RETRANSMIT, OLD, ERROR, COMPLETE, 0x8000):
            self.assertEqual(self.verdict(flags, *anything), ("drop", "EV_MALFORMED"), flags)
            self.assertEqual(self.verdict(flags | 0x0040, *anything), ("drop", "EV_MALFORMED"), flags)
        self.assertEqual(lookup(VERDICT, (9, 0, 0, 0, 0) + anything)[0], "drop")  # version
        self.assertEqual(lookup(VERDICT, (2, 0, 1, 0, 0) + anything)[0], "drop")  # reserved
        self.assertEqual(lookup(VERDICT, (2, 10, 0, 0, 0) + anything)[0], "drop")  # error code
        self.assertEqual(lookup(VERDICT, (2, 0, 0, 0, 64) + anything)[0], "drop")  # rank 64


class P4ModelTest(unittest.TestCase):
    def test_tables_were_read(self):
        self.assertGreaterEqual(len(GATE), 10)
        self.assertGreaterEqual(len(REPLY), 30)

    def run_sequences(self, world, k_default, seed, sequences=300, length=40, straggler_aware=True):
        rng = random.Random(seed)
        for sequence in range(sequences):
            timeout = rng.choice([0, 3, 1000])
            p4 = P4Slot(world, k_default, timeout, straggler_aware)
            # The straggler-unaware build behaves as a switch whose straggler timeout never ends.
            sw = SoftwareSlot(world, k_default, timeout if straggler_aware else MASK32)
            now, round_seq, op_id = 0, 1, 1
            round_count = rng.choice([0, 3])  # 0: the header-only exponent-priming round (§5)
            for step in range(length):
                now = (now + rng.choice([0, 1, 2, 5])) & MASK32
                if rng.random() < 0.15:
                    round_seq += 1
                    op_id += rng.choice([0, 1])
                    round_count = rng.choice([0, 3])
                seq = (round_seq + rng.choice([-2, -1, 0, 0, 0, 1, 2])) & MASK32
                flags = (SYN if rng.random() < 0.2 else 0) | (COUNT_TO_K if rng.random() < 0.3 else 0) | \
                    (FLOAT if rng.random() < 0.05 else 0)
                packet = Packet(flags=flags, rank=rng.randrange(world), seq=seq,
                                op_id=op_id + (1 if rng.random() < 0.05 else 0),
                                op_length=100 + (1 if rng.random() < 0.05 else 0), offset=rng.randrange(3),
                                count=round_count if rng.random() < 0.9 else rng.randrange(4),
                                k=rng.randrange(world + 1),
                                exp_used=rng.randrange(256), exp_next=rng.randrange(256),
                                value=rng.randrange(1 << 32))
                if packet.probe():
                    packet.count = 0
                expected = sw.step(packet, now)
                actual = p4.step(packet, now)
                self.assertEqual(actual, expected, "sequence %d step %d: %r" % (sequence, step, packet.__dict__))

    def test_three_ranks_default_k(self):
        self.run_sequences(world=3, k_default=3, seed=1)

    def test_three_ranks_k2(self):
        self.run_sequences(world=3, k_default=2, seed=2)

    def test_the_straggler_unaware_build_never_completes_reactively(self):
        self.run_sequences(world=3, k_default=2, seed=4, straggler_aware=False)

    def test_one_rank(self):
        self.run_sequences(world=1, k_default=1, seed=3, sequences=100)


if __name__ == "__main__":
    unittest.main()
