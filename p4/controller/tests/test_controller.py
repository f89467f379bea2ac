# SPDX-License-Identifier: Apache-2.0
"""The controller against a recording fake of bfrt: the exact table writes and register clears
of a join, a rejoin, a second session, and the errors of bad configs and bad JOINs."""
import copy
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fake_bfrt  # noqa: E402
from dpa_controller import config as cfg  # noqa: E402
from dpa_controller import controller, next_pass, pre, wire  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

DEFINES = """#define DPA_TARGET 1
#define DPA_MODEL 1
#define DPA_PIPES 2
#define DPA_CHUNKS 2
#define DPA_REDUCERS 32
#define DPA_PAYLOAD 128
#define DPA_SLOTS 64
#define DPA_SLOT_BITS 6
#define DPA_SESSIONS 4
#define DPA_IDENTITIES 256
#define DPA_HOSTS 16
#define DPA_L2_ENTRIES 64
#define DPA_PASS_PORTS 4
#define DPA_UDP_PORT 4242
#define DPA_CPU_PORT 64
#define DPA_SENDER_MGID_BASE 4096
#define DPA_STRAGGLER_AWARE 1
#define DPA_DROP_SIMULATOR 0
"""

W1, W2, W3 = 0x0A000001, 0x0A000002, 0x0A000003
MAC = {W1: bytes.fromhex("000000000001"), W2: bytes.fromhex("000000000002"),
       W3: bytes.fromhex("000000000003")}
SWITCH_MAC = bytes.fromhex("00000000fe01")
SWITCH_IP = 0x0A0000FE
DEV_PORTS = {(1, 0): 0, (1, 1): 1, (1, 2): 2, (17, 0): 128}
HOST_DEV_PORT = {W1: 0, W2: 1, W3: 2}  # CONFIG's ports: w1 behind 1/0, w2 behind 1/1, w3 behind 1/2

CONFIG = {
    "switch": {"name": "test", "tofino": 1, "model": True, "mac": "00:00:00:00:fe:01",
               "ip": "10.0.0.254", "udp_port": 4242, "cpu_port": 64, "cpu_interface": "veth251",
               "flood_mgid": 1, "pipes": [0, 1],
               "pass_ports": [{"pipe": 0, "dev_port": 68},
                              {"pipe": 1, "port": "17/0", "speed": "100G", "fec": "rs"}]},
    "hosts": {"w1": {"mac": "00:00:00:00:00:01", "ip": "10.0.0.1"},
              "w2": {"mac": "00:00:00:00:00:02", "ip": "10.0.0.2"},
              "w3": {"mac": "00:00:00:00:00:03", "ip": "10.0.0.3"}},
    "ports": {"1/0": {"speed": "100G", "fec": "none", "autoneg": False, "host": "w1"},
              "1/1": {"speed": "100G", "fec": "none", "autoneg": False, "host": "w2"},
              "1/2": {"speed": "100G", "fec": "none", "autoneg": False, "host": "w3"}},
    "sessions": [
        {"id": 7, "world_size": 2, "k": 0, "pool_base": 0, "pool_size": 4,
         "straggler_timeout_us": 10000, "idle_timeout_ms": 1000, "mgid": 2, "workers": ["w1", "w2"]},
        {"id": 8, "world_size": 2, "k": 1, "pool_base": 8, "pool_size": 2,
         "straggler_timeout_us": 1000, "mgid": 3, "workers": []},
    ],
}

# The shared pass ports' plan for CONFIG (pipes [0, 1]: pass port 68 into pipe 0, 128 into pipe 1).
SHARED_PLAN = [
    ("add_with_continue_input", dict(pass_index=1, with_values=0, port=128)),
    ("add_with_continue_input", dict(pass_index=1, with_values=1, port=128)),
    ("add_with_continue_output", dict(pass_index=2, with_values=1, port=128, reduce_op=4)),
    ("add_with_continue_output", dict(pass_index=3, with_values=1, port=128, reduce_op=3)),
    ("add_with_continue_output", dict(pass_index=4, with_values=1, port=68, reduce_op=4)),
    ("add_with_continue_output", dict(pass_index=5, with_values=1, port=68, reduce_op=3)),
]
SHARED_PIPE = {68: 0, 128: 1}
# Front-panel loopback ports: 2/L in pipe 0 (beside the workers), 3/L in pipe 1.
LOOPBACK_DEV_PORTS = {(2, 0): 4, (2, 1): 5, (2, 2): 6, (3, 0): 132, (3, 1): 133, (3, 2): 134}
LOOPBACK_DEFINES = DEFINES.replace("DPA_PASS_PORTS 4", "DPA_PASS_PORTS 8")


def loopback_config():
    """CONFIG with a loopback port per worker port and chunk pipe instead of shared pass ports."""
    config = copy.deepcopy(CONFIG)
    del config["switch"]["pass_ports"]
    for lane, name in enumerate(("1/0", "1/1", "1/2")):
        config["ports"][name]["loopback_ports"] = [
            {"pipe": 0, "port": "2/%d" % lane, "speed": "100G"},
            {"pipe": 1, "port": "3/%d" % lane, "speed": "100G"}]
    return config


REGISTERS = [("slot_state", r) for r in ("seq", "op_id", "offset", "op_length", "meta", "round",
                                         "first_arrival", "poison_info", "poison_value", "poison_expected",
                                         "arrivals", "count")] + \
            [("exponent", "exp_used"), ("exponent", "exp_max"), ("result_bitmap", "contributors"),
             ("chunk_state", "rounds"), ("chunk_state", "ranks")]


class Tokens:
    """Deterministic job tokens: each generation draws its token, then one secret per rank of
    `world` (0x5EC00 + the draw's index)."""

    def __init__(self, *tokens, world=2):
        self.tokens = list(tokens)
        self.world = world
        self.draws = 0

    def getrandbits(self, bits):
        self.draws += 1
        if (self.draws - 1) % (self.world + 1) == 0:
            return self.tokens.pop(0)
        return 0x5EC00 + self.draws


def join_frame(session, rank, nonce, ip, port, threads=1, window=1, token=0, world=2, payload=0,
               ports=None, offset=0):
    ports = ports or [port + t for t in range(threads)]
    request = wire.JOIN_REQUEST.encode(dict(nonce=nonce, world_size=world, threads=threads,
                                            window=window, payload=payload), ports)
    header = wire.Header(flags=wire.Flag.JOIN, session=session, rank=rank, token=token, offset=offset,
                         count=wire.JOIN_REQUEST.word_count(len(ports)))
    return wire.build_frame(MAC[ip], SWITCH_MAC, ip, SWITCH_IP, port, 4242,
                            header.encode() + request)


def decode_sent(frame):
    parsed = wire.parse_frame(frame)
    return parsed, wire.Header.decode(parsed.payload)


class Harness:
    def __init__(self, tokens=(0x1111, 0x2222, 0x3333), config=CONFIG, activity=None, defines=DEFINES):
        self.bfrt, self.recorder = fake_bfrt.make(DEV_PORTS, activity)
        self.sent = []
        self.now = 0
        self.config = cfg.load(json.dumps(config), defines)
        self.controller = controller.Controller(self.bfrt, self.config, self.sent.append,
                                                lambda: self.now, Tokens(*tokens))
        self.controller.setup()
        self.recorder.calls.clear()

    def secret(self, rank, session=7):
        return self.controller.joins[session].current.secrets[rank]

    def join_both(self, session=7, nonces=(11, 22), token=0, ips=(W1, W2), ports=(5000, 6000), **kw):
        """With a token, each rank proves its rejoin with its secret (§6.4)."""
        offsets = [self.secret(rank, session) if token else 0 for rank in range(2)]
        for _ in range(2):  # a JOIN counts once it is repeated (§6.3 step 5)
            for rank, (nonce, ip, port) in enumerate(zip(nonces, ips, ports)):
                self.controller.handle_frame(join_frame(session, rank, nonce, ip, port, token=token,
                                                        offset=offsets[rank], **kw))

    def calls_on(self, suffix):
        return [(m, k) for p, m, k in self.recorder.calls if p.endswith(suffix)]


def whole_clears():
    """No other session holds a generation: each slot register is reset whole, one call each."""
    return [("dpa.pipe.Ingress.%s.%s" % (control, name), "clear", {}) for control, name in REGISTERS]


def range_clears(first, count):
    """Another session holds a generation: only the new generation's slots, one write each, in
    one driver batch."""
    expected = [("", "batch_begin", {})]
    for control, name in REGISTERS:
        fields = ("poisoned", "value") if name in ("poison_value", "poison_expected") else ("f1",)
        for index in range(first, first + count):
            expected.append(("dpa.pipe.Ingress.%s.%s" % (control, name), "mod",
                             dict(REGISTER_INDEX=index, **{f: 0 for f in fields})))
    return expected + [("", "batch_end", {})]


def publish_calls(session, sid, index, token, generation, members, threads=1, window=1, mgid=2,
                  node_base=0x10000):
    """members: [(rank, ip, first port)]; each rank's identities are bound to the dev port of
    its host's port in CONFIG (w1 on 1/0 = dev port 0, w2 on 1/1 = 1, w3 on 1/2 = 2)."""
    calls = [("dpa.pipe.Ingress.admission.sessions", "mod_with_set_session",
              dict(session=sid, index=index, world=2, k_default=session["k"] or 2,
                   timeout_plus_one=wire.timeout_ticks(session["straggler_timeout_us"]) + 1,
                   pool_base=session["pool_base"], mgid=mgid, generation=generation, gone=0)),
             ("dpa.pipe.Ingress.admission.tokens", "add_with_token_current", dict(session=sid, token=token))]
    span = 2 * window
    for rank, ip, port in members:
        for t in range(threads):
            first = session["pool_base"] + t * span
            calls.append(("dpa.pipe.Ingress.admission.endpoints", "add_with_endpoint_member",
                          dict(session=sid, src_addr=ip, src_port=port + t)))
            calls.append(("dpa.pipe.Ingress.admission.identities", "add_with_identity",
                          dict(session=sid, src_addr=ip, src_port=port + t, rank=rank,
                               slot_start=first, slot_end=first + span - 1,
                               ingress_port=HOST_DEV_PORT[ip], MATCH_PRIORITY=1, thread=t)))
    calls.append(("dpa.pipe.Ingress.admission.pools", "add_with_in_pool",
                  dict(session=sid, slot_start=session["pool_base"],
                       slot_end=session["pool_base"] + threads * span - 1, MATCH_PRIORITY=1)))
    for rank, ip, port in members:
        for t in range(threads):
            calls.append(("dpa.pipe.Egress.rewrite.destinations", "add_with_set_destination",
                          dict(session_index=index, egress_rid=rank, thread=t,
                               mac=int.from_bytes(MAC[ip], "big"), ip=ip, port=port + t)))
    return calls


def group_calls(index, mgid, rank_ports):
    calls, nodes = [], []
    for rank, port in enumerate(rank_ports):
        node = 0x10000 + index * 64 + rank
        calls.append(("pre.node", "add", dict(MULTICAST_NODE_ID=node, MULTICAST_RID=rank,
                                              MULTICAST_LAG_ID=[], DEV_PORT=[port])))
        nodes.append(node)
    calls.append(("pre.mgid", "add", dict(MGID=mgid, MULTICAST_NODE_ID=nodes,
                                          MULTICAST_NODE_L1_XID_VALID=[False] * len(nodes),
                                          MULTICAST_NODE_L1_XID=[0] * len(nodes))))
    return calls


class JoinTest(unittest.TestCase):
    def test_join_clears_the_pool_then_publishes_then_acks(self):
        h = Harness()
        h.join_both()
        session = CONFIG["sessions"][0]
        expected = whole_clears() + publish_calls(session, 7, 0, 0x1111, 1, [(0, W1, 5000), (1, W2, 6000)]) \
            + group_calls(0, 2, [0, 1])
        self.assertEqual(h.recorder.calls, expected)
        self.assertEqual(len(h.sent), 2)
        for frame, (ip, port) in zip(h.sent, ((W1, 5000), (W2, 6000))):
            parsed, header = decode_sent(frame)
            self.assertEqual((parsed.dst_ip, parsed.dst_port, parsed.src_ip, parsed.src_port),
                             (ip, port, SWITCH_IP, 4242))
            self.assertEqual(header.flags, wire.Flag.JOIN | wire.Flag.RESULT)
            self.assertEqual((header.token, header.seq, header.bitmap), (0x1111, 1, 0b11))
            words = parsed.payload[48:]
            self.assertEqual(int.from_bytes(words[0:4], "big"), 128)  # P from the program
            self.assertEqual(int.from_bytes(words[12:16], "big"), 153)  # 10 ms in ticks

    def test_a_lost_ack_is_answered_without_touching_the_switch(self):
        h = Harness()
        h.join_both()
        h.recorder.calls.clear()
        h.sent.clear()
        h.controller.handle_frame(join_frame(7, 1, 22, W2, 6000))
        self.assertEqual(h.recorder.calls, [])
        self.assertEqual(len(h.sent), 1)
        self.assertEqual(decode_sent(h.sent[0])[1].seq, 1)

    def test_rejoin_retires_the_old_generation_first(self):
        h = Harness()
        h.join_both()
        h.recorder.calls.clear()
        h.now = 5_000_000  # the generation still holds the session: only members may rejoin
        h.join_both(nonces=(33, 44), token=0x1111, ports=(5100, 6100))
        session = CONFIG["sessions"][0]
        retire = [("dpa.pipe.Ingress.admission.tokens", "delete", dict(session=7, token=0x1111)),
                  ("dpa.pipe.Ingress.admission.tokens", "add_with_token_previous",
                   dict(session=7, token=0x1111))]
        for rank, ip, port in ((0, W1, 5000), (1, W2, 6000)):
            retire += [("dpa.pipe.Ingress.admission.endpoints", "delete",
                        dict(session=7, src_addr=ip, src_port=port)),
                       ("dpa.pipe.Ingress.admission.identities", "delete",
                        dict(session=7, src_addr=ip, src_port=port, rank=rank, slot_start=0, slot_end=1,
                             ingress_port=HOST_DEV_PORT[ip], MATCH_PRIORITY=1))]
        retire.append(("dpa.pipe.Ingress.admission.pools", "delete", dict(session=7, slot_start=0, slot_end=1,
                                                                                    MATCH_PRIORITY=1)))
        retire += [("dpa.pipe.Egress.rewrite.destinations", "delete",
                    dict(session_index=0, egress_rid=rank, thread=0)) for rank in (0, 1)]
        regroup = [("pre.mgid", "delete", dict(MGID=2))] + \
            [("pre.node", "delete", dict(MULTICAST_NODE_ID=0x10000 + rank)) for rank in (0, 1)] + \
            group_calls(0, 2, [0, 1])
        expected = retire + whole_clears() + \
            publish_calls(session, 7, 0, 0x2222, 2, [(0, W1, 5100), (1, W2, 6100)]) + regroup
        self.assertEqual(h.recorder.calls, expected)
        self.assertEqual(decode_sent(h.sent[-1])[1].token, 0x2222)

    def test_another_job_is_refused_while_the_session_is_held(self):
        h = Harness(activity={0: 5})
        h.join_both()
        h.recorder.calls.clear()
        h.sent.clear()
        h.now = 500_000_000
        h.controller.handle_frame(join_frame(7, 0, 99, W1, 7000))
        header = decode_sent(h.sent[-1])[1]
        self.assertEqual((header.error, header.offset), (wire.Error.SESSION_BUSY, 1))
        self.assertEqual([c for c in h.recorder.calls if c[1] != "get"], [])
        self.assertEqual(h.controller.counts["joins_refused"], 1)

    def test_an_idle_generation_frees_the_session(self):
        h = Harness()
        h.join_both()
        h.now = 2_000_000_000  # idle_timeout_ms 1000, the activity counter never moved
        h.sent.clear()
        h.join_both(nonces=(55, 66), ports=(5200, 6200))
        self.assertEqual(decode_sent(h.sent[-1])[1].seq, 2)

    def test_a_second_session_touches_only_its_own_slots_and_entries(self):
        h = Harness()
        h.join_both()
        h.recorder.calls.clear()
        h.join_both(session=8, nonces=(1, 2), ips=(W1, W3), ports=(5300, 7300))
        session = CONFIG["sessions"][1]
        expected = range_clears(8, 2) + \
            publish_calls(session, 8, 1, 0x2222, 1, [(0, W1, 5300), (1, W3, 7300)], mgid=3) + \
            group_calls(1, 3, [0, 2])
        self.assertEqual(h.recorder.calls, expected)

    def test_threads_disagreement_names_the_rank_to_every_rank(self):
        h = Harness(config=dict(CONFIG, sessions=[dict(CONFIG["sessions"][0], pool_size=16)]))
        for _ in range(2):
            h.controller.handle_frame(join_frame(7, 0, 11, W1, 5000, threads=2))
            h.controller.handle_frame(join_frame(7, 1, 22, W2, 6000, threads=1))
        errors = [decode_sent(f) for f in h.sent]
        self.assertEqual([(p.dst_ip, p.dst_port) for p, _ in errors], [(W1, 5000), (W2, 6000)])
        for _, header in errors:
            # A tie: the lowest rank's value is the reference, so rank 1 is named.
            self.assertEqual((header.error, header.rank, header.offset), (wire.Error.THREADS_MISMATCH, 1, 2))
        self.assertEqual(errors[0][1].bitmap, 1 << 32 | W2)
        self.assertEqual(h.recorder.calls, [])

    def test_join_errors_go_to_the_sender(self):
        h = Harness()
        cases = [
            (join_frame(9, 0, 1, W1, 5000), wire.Error.UNKNOWN_SESSION, 0),
            (join_frame(7, 2, 1, W1, 5000), wire.Error.RANK_OUT_OF_RANGE, 2),
            (join_frame(7, 1, 1, W1, 5000), wire.Error.NOT_REGISTERED, 0),
            (join_frame(7, 0, 1, W1, 5000, world=3), wire.Error.WORLD_SIZE_MISMATCH, 2),
            (join_frame(7, 0, 1, W1, 5000, payload=64), wire.Error.PAYLOAD_MISMATCH, 128),
            (join_frame(7, 0, 1, W1, 5000, window=3), wire.Error.POOL_TOO_SMALL, 4),
        ]
        for frame, code, expected in cases:
            h.sent.clear()
            h.controller.handle_frame(frame)
            header = decode_sent(h.sent[0])[1]
            self.assertEqual((header.flags, header.error, header.offset),
                             (wire.Flag.ERROR | wire.Flag.JOIN, code, expected), code)

    def test_leave_frees_the_session_for_another_job(self):
        h = Harness(activity={0: 1})
        h.join_both()
        leave = wire.Header(flags=wire.Flag.LEAVE, session=7, rank=0, token=0x1111, offset=h.secret(0))
        h.controller.handle_frame(wire.build_frame(MAC[W1], SWITCH_MAC, W1, SWITCH_IP, 5000, 4242,
                                                   leave.encode()))
        self.assertEqual(h.controller.counts["leaves"], 1)
        h.sent.clear()
        h.join_both(nonces=(77, 88), ports=(5400, 6400))
        self.assertEqual(decode_sent(h.sent[-1])[1].seq, 2)

    def test_each_rank_gets_its_own_secret_and_a_leave_needs_it(self):
        h = Harness(activity={0: 1})
        h.join_both()
        acks = {decode_sent(f)[0].dst_port: decode_sent(f)[1] for f in h.sent[-2:]}
        self.assertEqual({port: ack.offset for port, ack in acks.items()}, {5000: h.secret(0), 6000: h.secret(1)})
        self.assertNotEqual(h.secret(0), h.secret(1))
        for offset in (0, h.secret(1)):
            leave = wire.Header(flags=wire.Flag.LEAVE, session=7, rank=0, token=0x1111, offset=offset)
            h.controller.handle_frame(wire.build_frame(MAC[W1], SWITCH_MAC, W1, SWITCH_IP, 5000, 4242,
                                                       leave.encode()))
        self.assertEqual((h.controller.counts["leaves"], h.controller.counts["dropped_unregistered"]), (0, 2))

    def test_a_rejoin_with_the_token_but_not_the_secret_is_refused(self):
        h = Harness()
        h.join_both()
        h.sent.clear()
        h.controller.handle_frame(join_frame(7, 0, 99, W1, 7000, token=0x1111, offset=h.secret(1)))
        self.assertEqual(decode_sent(h.sent[-1])[1].error, wire.Error.SESSION_BUSY)

    def test_first_come_holds_a_rank_until_its_claim_lapses(self):
        h = Harness()
        h.controller.handle_frame(join_frame(7, 0, 11, W1, 5000))
        h.now = 100_000_000
        h.controller.handle_frame(join_frame(7, 0, 12, W1, 5100))  # another source of rank 0's host
        parsed, header = decode_sent(h.sent[-1])
        self.assertEqual((parsed.dst_port, header.error, header.offset), (5100, wire.Error.RANK_CONTENDED, 0))
        self.assertEqual(header.bitmap, 1 << 48 | W1 << 16 | 5000)  # one JOIN heard from the holder
        self.assertEqual(h.controller.counts["joins_contended"], 1)
        h.sent.clear()
        h.now = 600_000_000  # unconfirmed for 500 ms: the claim gives way
        h.controller.handle_frame(join_frame(7, 0, 12, W1, 5100))
        self.assertEqual(h.sent, [])
        h.controller.handle_frame(join_frame(7, 0, 12, W1, 5100))  # confirmed: now it holds
        h.now = 1_500_000_000  # long after the first claim, within the entry's 1 s
        h.controller.handle_frame(join_frame(7, 0, 11, W1, 5000))
        self.assertEqual(decode_sent(h.sent[-1])[1].error, wire.Error.RANK_CONTENDED)

    def test_joins_beyond_a_sources_rate_get_no_reply(self):
        h = Harness()
        for _ in range(17):  # a burst of 16, then over the rate
            h.controller.handle_frame(join_frame(7, 5, 1, W1, 5000))
        self.assertEqual(len(h.sent), 16)
        self.assertEqual(h.controller.counts["joins_rate_limited"], 1)
        h.controller.handle_frame(join_frame(7, 5, 1, W1, 5001))  # another source has its own bucket
        h.now = 50_000_000  # one interval later, one more from the first
        h.controller.handle_frame(join_frame(7, 5, 1, W1, 5000))
        self.assertEqual((len(h.sent), h.controller.counts["joins_rate_limited"]), (18, 1))

    def test_requests_of_another_size_get_section_8_1_in_order(self):
        h = Harness()
        h.join_both()
        h.recorder.calls.clear()

        def send(ip, port, payload, **fields):
            h.sent.clear()
            header = wire.Header(**dict(dict(session=7, rank=0, token=0x1111, op_id=1, slot=0, seq=1,
                                             count=1), **fields))
            h.controller.handle_frame(wire.build_frame(MAC[ip], SWITCH_MAC, ip, SWITCH_IP, port, 4242,
                                                       header.encode() + payload))
            return [decode_sent(f)[1] for f in h.sent]

        short = bytes(8)  # P is 128 values
        self.assertEqual([(r.error, r.offset) for r in send(W1, 5000, short)], [(wire.Error.BAD_LENGTH, 128)])
        self.assertEqual([(r.error, r.offset) for r in send(W1, 5000, short, slot=2)],
                         [(wire.Error.SLOT_OUT_OF_RANGE, 0)])  # T*2W = 2 slots
        self.assertEqual(send(W1, 5000, short, slot=1, rank=1), [])  # rank 1's slot, rank 0's socket
        self.assertEqual(send(W1, 5000, short, flags=wire.Flag.SYN, count=0), [])  # a probe with values
        self.assertEqual([r.error for r in send(W1, 5999, short)], [wire.Error.NOT_JOINED])
        self.assertEqual(send(W3, 7000, short), [])  # not a host of the session
        self.assertEqual(send(W1, 5000, short, token=0x9999), [])  # not the generation's token
        self.assertEqual(send(W1, 5000, bytes(6)), [])  # §2: not a whole number of words
        self.assertEqual(send(W1, 5000, short, count=3), [])  # §2: count beyond the payload
        # §13.4: an owned request's header-only forms decode, and the owner's FROM_OWNER request
        # without values, or a TO_OWNER one with a count, is another size: bad_length
        for flags in (wire.Flag.FROM_OWNER, wire.Flag.TO_OWNER):
            replies = send(W1, 5000, b"", flags=flags, contributors=0)
            self.assertEqual([(r.error, r.offset, r.flags) for r in replies],
                             [(wire.Error.BAD_LENGTH, 128, wire.Flag.ERROR | flags)])
        self.assertEqual(send(W1, 5000, b"", flags=wire.Flag.TO_OWNER | wire.Flag.FROM_OWNER), [])  # §2
        self.assertEqual(h.recorder.calls, [])


class LivenessTest(unittest.TestCase):
    """§6.7 on Tofino: KEEPALIVEs reach the controller (admission.p4 punts them), which writes the
    gone ranks into the session's entry and each one's silence into `silences`."""
    TIMEOUT_NS = 5000 * 1_000_000  # the sessions' default liveness_timeout_ms

    def keepalive(self, h, ip=W2, port=6000, rank=1, token=0x1111, payload=b""):
        header = wire.Header(flags=wire.Flag.KEEPALIVE, session=7, rank=rank, token=token)
        h.controller.handle_frame(wire.build_frame(MAC[ip], SWITCH_MAC, ip, SWITCH_IP, port, 4242,
                                                   header.encode() + payload))

    def gone_writes(self, h):
        return [(m, k.get("gone"), k.get("gone_rank"), k.get("ms")) for p, m, k in h.recorder.calls
                if p.endswith(("admission.sessions", "delivery.silences"))]

    def test_a_silent_rank_is_gone_and_a_keepalive_brings_it_back(self):
        h = Harness()
        h.join_both()
        h.recorder.calls.clear()
        h.now += self.TIMEOUT_NS
        h.controller.poll()
        self.assertEqual(h.recorder.calls, [])  # the JOIN heard both; not silent longer than the timeout yet
        h.now += 1_000_000
        self.keepalive(h)  # rank 1 is alive; rank 0 stays silent
        h.controller.poll()
        self.assertEqual(self.gone_writes(h), [("add_with_set_silence", None, 0, 5001),
                                               ("mod_with_set_session", 0b01, None, None)])
        h.recorder.calls.clear()
        h.now += 2_000_000
        h.controller.poll()  # the silence grows: only `silences` changes
        self.assertEqual(self.gone_writes(h), [("mod_with_set_silence", None, 0, 5003)])
        h.recorder.calls.clear()
        self.keepalive(h, ip=W1, port=5000, rank=0)
        h.controller.poll()
        self.assertEqual(self.gone_writes(h), [("delete", None, 0, None), ("mod_with_set_session", 0, None, None)])
        self.assertEqual(h.controller.counts["dropped_unregistered"], 0)

    def test_a_rank_that_left_is_gone_at_once(self):
        h = Harness()
        h.join_both()
        h.recorder.calls.clear()
        leave = wire.Header(flags=wire.Flag.LEAVE, session=7, rank=1, token=0x1111, offset=h.secret(1))
        h.controller.handle_frame(wire.build_frame(MAC[W2], SWITCH_MAC, W2, SWITCH_IP, 6000, 4242, leave.encode()))
        h.controller.poll()
        self.assertEqual(self.gone_writes(h), [("add_with_set_silence", None, 1, 0xFFFFFFFF),
                                               ("mod_with_set_session", 0b10, None, None)])

    def test_keepalives_are_checked_as_section_8_1_row_4_5(self):
        h = Harness()
        h.join_both()
        h.recorder.calls.clear()
        h.sent.clear()
        self.keepalive(h, payload=bytes(4))
        self.assertEqual(h.controller.counts["dropped_malformed"], 1)
        for ip, port, rank, token in ((W2, 6000, 0, 0x1111),   # another rank's socket
                                      (W2, 6001, 1, 0x1111),   # not a socket of the rank
                                      (W2, 6000, 1, 0x9999)):  # not the generation's token
            self.keepalive(h, ip, port, rank, token)
        self.assertEqual(h.controller.counts["dropped_unregistered"], 3)
        h.now += self.TIMEOUT_NS + 1
        h.controller.poll()  # none of them was heard: both ranks are gone
        self.assertEqual([k["gone"] for _, k in h.calls_on("admission.sessions")], [0b11])
        self.assertEqual(h.sent, [])  # a keepalive gets no reply

    def test_a_new_generation_starts_with_every_rank_heard(self):
        h = Harness()
        h.join_both()
        h.now += self.TIMEOUT_NS + 1
        h.controller.poll()
        h.recorder.calls.clear()
        h.join_both(nonces=(33, 44), token=0x1111, ports=(5100, 6100))  # the job rejoins: a new generation
        silences = [(m, k.get("gone_rank")) for m, k in h.calls_on("delivery.silences")]
        self.assertEqual(silences, [("delete", 0), ("delete", 1)])
        self.assertEqual([k["gone"] for m, k in h.calls_on("admission.sessions")], [0])
        h.recorder.calls.clear()
        h.controller.poll()
        self.assertEqual(h.recorder.calls, [])


def program_slot_registers():
    """The slot registers p4/ declares in the controls of the state pass and the chunks' round and
    ranks (not the accumulators)."""
    registers = set()
    for control, source in (("slot_state", "slot_state.p4"), ("exponent", "exponent.p4"),
                            ("result_bitmap", "result_bitmap.p4"), ("chunk_state", "chunk_state.p4")):
        with open(os.path.join(HERE, "..", "..", source)) as f:
            text = re.sub(r"//[^\n]*", "", f.read())
        registers |= {"dpa.pipe.Ingress.%s.%s" % (control, name)
                      for name in re.findall(r"\bRegister<[^;]*?>\s*\([^;]*?\)\s*(\w+)\s*;", text)}
    return registers


class SlotClearTest(unittest.TestCase):
    """What a new generation's register clear touches, and how many bfrt calls it takes."""

    def test_alone_each_slot_register_of_the_program_is_reset_with_one_call(self):
        for aware, expected in ((1, program_slot_registers()),
                                (0, program_slot_registers() - {"dpa.pipe.Ingress.slot_state.first_arrival"})):
            h = Harness(defines=DEFINES.replace("DPA_STRAGGLER_AWARE 1", "DPA_STRAGGLER_AWARE %d" % aware))
            h.join_both()
            register_calls = [(p, m) for p, m, _ in h.recorder.calls if p in program_slot_registers()]
            self.assertEqual(sorted(register_calls), sorted((p, "clear") for p in expected))
            self.assertEqual(len(register_calls), 16 + aware)

    def test_beside_another_generation_exactly_the_new_range_is_written(self):
        config = copy.deepcopy(CONFIG)
        config["sessions"][0]["pool_size"] = 16
        config["sessions"][1]["pool_base"] = 16
        h = Harness(config=config)
        h.join_both(session=8, nonces=(1, 2), ips=(W1, W3), ports=(5300, 7300))
        h.recorder.calls.clear()
        h.join_both(threads=2, window=2)  # T*2W = 8 of session 7's 16 slots
        writes = [(p, k["REGISTER_INDEX"], tuple(sorted(k.items()))) for p, m, k in h.recorder.calls
                  if p in program_slot_registers() and m == "mod"]
        self.assertEqual(sorted((p, i) for p, i, _ in writes),
                         sorted((p, i) for p in program_slot_registers() for i in range(8)))
        self.assertTrue(all(value == 0 for _, _, fields in writes for name, value in fields
                            if name != "REGISTER_INDEX"))
        self.assertNotIn("clear", [m for _, m, _ in h.recorder.calls])
        self.assertEqual(len(writes), 17 * 8)
        batch = [m for p, m, _ in h.recorder.calls if p == ""]
        self.assertEqual(batch, ["batch_begin", "batch_end"])
        first, last = (i for i, (p, _, _) in enumerate(h.recorder.calls) if p == "")
        self.assertEqual(last - first - 1, len(writes))  # every write inside the one batch

    def test_identities_are_bound_to_the_port_of_each_ranks_copies(self):
        h = Harness()
        h.join_both()
        h.join_both(session=8, nonces=(1, 2), ips=(W1, W3), ports=(5300, 7300))
        nodes = {}  # session index -> rank -> the ports of its copies (setup's nodes are not recorded)
        for _, kwargs in h.calls_on("pre.node"):
            index = (kwargs["MULTICAST_NODE_ID"] - pre.SESSION_NODE_BASE) // 64
            nodes.setdefault(index, {})[kwargs["MULTICAST_RID"]] = kwargs["DEV_PORT"]
        bound = {}
        for method, kwargs in h.calls_on("admission.identities"):
            bound.setdefault(kwargs["session"], {})[kwargs["rank"]] = [kwargs["ingress_port"]]
        self.assertEqual(bound, {7: nodes[0], 8: nodes[1]})
        self.assertEqual(bound, {7: {0: [0], 1: [1]}, 8: {0: [0], 1: [2]}})


class SetupTest(unittest.TestCase):
    def test_setup_writes_ports_groups_passes_and_sessions(self):
        bfrt, recorder = fake_bfrt.make(DEV_PORTS)
        config = cfg.load(json.dumps(CONFIG), DEFINES)
        controller.Controller(bfrt, config, None, lambda: 0).setup()
        calls = recorder.calls
        self.assertIn(("port.port", "add", dict(DEV_PORT=128, SPEED="BF_SPEED_100G",
                                                 FEC="BF_FEC_TYP_REED_SOLOMON",
                                                 AUTO_NEGOTIATION="PM_AN_FORCE_DISABLE",
                                                 PORT_ENABLE=True, LOOPBACK_MODE="BF_LPBK_MAC_NEAR")), calls)
        self.assertIn(("dpa.pipe.IngressParser.pass_ports", "add", dict(f1=68, f1_mask=0x1FF)), calls)
        pass_plan = [k for p, m, k in calls if p.endswith("delivery.pass_plan")]
        self.assertEqual(pass_plan, [dict(worker_port=w, input_port=68) for w in (0, 1, 2)])
        self.assertIn(("dpa.pipe.Ingress.admission.hosts", "add_with_registered_host",
                       dict(session=8, src_addr=0, src_addr_mask=0, MATCH_PRIORITY=1)), calls)
        self.assertIn(("dpa.pipe.Ingress.admission.k_limits", "add_with_k_valid",
                       dict(session=7, k_start=0, k_end=2, MATCH_PRIORITY=1)), calls)
        # Shared pass ports: every worker port's packets take the same ones.
        next_pass_calls = [(m, k) for p, m, k in calls if p.endswith("next_pass.next_pass")]
        self.assertEqual(next_pass_calls, [(method, dict(worker_port=w, **fields)) for w in (0, 1, 2)
                                           for method, fields in SHARED_PLAN])

    def test_loopback_ports_give_each_worker_port_its_own_passes(self):
        bfrt, recorder = fake_bfrt.make({**DEV_PORTS, **LOOPBACK_DEV_PORTS})
        config = cfg.load(json.dumps(loopback_config()), LOOPBACK_DEFINES)
        self.assertTrue(config.loopback_per_worker)
        controller.Controller(bfrt, config, None, lambda: 0).setup()
        calls = recorder.calls
        own = {0: {0: 4, 1: 132}, 1: {0: 5, 1: 133}, 2: {0: 6, 1: 134}}  # worker -> pipe -> loopback
        for port in (4, 5, 6, 132, 133, 134):
            self.assertIn(("port.port", "add", dict(DEV_PORT=port, SPEED="BF_SPEED_100G", FEC="BF_FEC_TYP_NONE",
                                                     AUTO_NEGOTIATION="PM_AN_FORCE_DISABLE", PORT_ENABLE=True,
                                                     LOOPBACK_MODE="BF_LPBK_MAC_NEAR")), calls)
        value_set = sorted(k["f1"] for p, m, k in calls if p.endswith("IngressParser.pass_ports"))
        self.assertEqual(value_set, [4, 5, 6, 132, 133, 134])
        pass_plan = [k for p, m, k in calls if p.endswith("delivery.pass_plan")]
        self.assertEqual(pass_plan, [dict(worker_port=w, input_port=own[w][0]) for w in (0, 1, 2)])
        next_pass_calls = [(m, k) for p, m, k in calls if p.endswith("next_pass.next_pass")]
        self.assertEqual(next_pass_calls, [
            (method, dict(worker_port=w, **dict(fields, port=own[w][SHARED_PIPE[fields["port"]]])))
            for w in (0, 1, 2) for method, fields in SHARED_PLAN])
        # No port carries another worker's passes.
        for w in (0, 1, 2):
            used = {k["port"] for _, k in next_pass_calls if k["worker_port"] == w}
            used.add(own[w][0])
            self.assertEqual(used, set(own[w].values()))

    def test_a_loopback_port_in_another_pipe_is_refused(self):
        bfrt, _ = fake_bfrt.make({**DEV_PORTS, **LOOPBACK_DEV_PORTS, (2, 1): 140})
        config = cfg.load(json.dumps(loopback_config()), LOOPBACK_DEFINES)
        with self.assertRaisesRegex(cfg.ConfigError, r"^ports.1/1.loopback_ports\[0\]: 2/1 is dev port 140, "
                                                     r"in pipe 1, not 0"):
            controller.Controller(bfrt, config, None, lambda: 0).setup()

    def test_reset_clears_what_the_controller_writes_and_forgets_generations(self):
        h = Harness()
        h.join_both()
        h.recorder.calls.clear()
        h.controller.reset()
        cleared = {p for p, m, _ in h.recorder.calls if m == "clear"}
        for table in ("admission.sessions", "admission.tokens", "admission.identities",
                      "next_pass.next_pass", "net.forwarding", "slot_state.seq", "slot_state.count",
                      "exponent.exp_max", "result_bitmap.contributors", "chunk_state.rounds",
                      "chunk_state.ranks"):
            self.assertIn("dpa.pipe.Ingress." + table, cleared)
        self.assertTrue({"dpa.pipe.Egress.rewrite.destinations", "pre.mgid", "pre.node",
                         "port.port"} <= cleared)
        h.recorder.calls.clear()
        h.sent.clear()
        h.controller.setup()
        h.recorder.calls.clear()
        h.join_both(nonces=(5, 6))
        self.assertNotIn("delete", [m for _, m, _ in h.recorder.calls])  # nothing to retire
        self.assertEqual(decode_sent(h.sent[-1])[1].seq, 1)

    def test_a_worker_port_outside_the_workers_pipe_is_refused(self):
        bfrt, _ = fake_bfrt.make({**DEV_PORTS, (1, 2): 130})
        config = cfg.load(json.dumps(CONFIG), DEFINES)
        with self.assertRaisesRegex(cfg.ConfigError, r"^ports.1/2: dev port 130 is in pipe 1"):
            controller.Controller(bfrt, config, None, lambda: 0).setup()

    def test_one_chunk_needs_no_input_hop(self):
        self.assertEqual(next_pass.plan(1, [1], {1: 196}),
                         [(1, 1, "continue_output", dict(port=196, reduce_op=4)),
                          (2, 1, "continue_output", dict(port=196, reduce_op=3))])


def replicate(calls, mgid, ingress_rid, exclusion_id):
    """The PRE's copies of a packet for `mgid` as (node RID, dev port), from the recorded pre
    calls: a copy is pruned when its node's RID equals the ingress RID and its port is in the
    prune set of the packet's level2_exclusion_id."""
    nodes, groups, prune = {}, {}, {}
    for path, method, kwargs in calls:
        if path == "pre.node" and method == "add":
            nodes[kwargs["MULTICAST_NODE_ID"]] = (kwargs["MULTICAST_RID"], kwargs["DEV_PORT"])
        elif path == "pre.node" and method == "delete":
            del nodes[kwargs["MULTICAST_NODE_ID"]]
        elif path == "pre.mgid" and method == "add":
            groups[kwargs["MGID"]] = kwargs["MULTICAST_NODE_ID"]
        elif path == "pre.mgid" and method == "delete":
            del groups[kwargs["MGID"]]
        elif path == "pre.prune" and method == "add":
            prune[kwargs["MULTICAST_L2_XID"]] = set(kwargs["DEV_PORT"])
    copies = []
    for node in groups[mgid]:
        rid, ports = nodes[node]
        copies += [(rid, port) for port in ports
                   if not (rid == ingress_rid and port in prune.get(exclusion_id, ()))]
    return sorted(copies)


def p4_constant(name):
    with open(os.path.join(HERE, "..", "..", "types.p4")) as f:
        return int(re.search(r"const bit<16> %s = (\w+);" % name, f.read()).group(1), 0)


class MulticastTest(unittest.TestCase):
    def joined(self):
        bfrt, recorder = fake_bfrt.make(DEV_PORTS)
        config = cfg.load(json.dumps(CONFIG), DEFINES)
        sent = []
        control = controller.Controller(bfrt, config, sent.append, lambda: 0, Tokens(0x1111, 0x2222))
        control.setup()
        for _ in range(2):
            for rank, (nonce, ip, port) in enumerate(zip((11, 22), (W1, W2), (5000, 6000))):
                control.handle_frame(join_frame(7, rank, nonce, ip, port))
        return recorder.calls

    def test_every_rank_gets_its_copy_rank_0_on_dev_port_0_included(self):
        calls = self.joined()
        self.assertEqual(pre.RID_DPA, p4_constant("RID_DPA"))
        # w1 (rank 0) is on dev port 0, whose flood prune set is level2_exclusion_id 0: the id
        # every dpa packet carries, as the program never sets it.
        self.assertEqual(replicate(calls, 2, pre.RID_DPA, 0), [(0, 0), (1, 1)])
        # What the program sent before it set the ingress RID: rank 0's copy was pruned.
        self.assertEqual(replicate(calls, 2, 0, 0), [(1, 1)])
        # A poisoned round's offender copy, from either worker port.
        base = int(re.search(r"#define DPA_SENDER_MGID_BASE (\d+)", DEFINES).group(1))
        for port in (0, 1):
            self.assertEqual(replicate(calls, base + port, pre.RID_DPA, 0), [(pre.RID_SENDER, port)])

    def test_the_program_sets_the_ingress_rid_on_both_dpa_paths(self):
        with open(os.path.join(HERE, "..", "..", "dpa.p4")) as f:
            source = f.read()
        for branch in ("// A value pass (next_pass.p4).", "// The state pass: admission"):
            following = source[source.index(branch):].split("\n")[1].strip()
            self.assertEqual(following, "ig_tm_md.rid = RID_DPA;", branch)

    def test_the_flood_skips_only_its_ingress_port(self):
        calls = self.joined()
        for port in (0, 1, 2):
            self.assertEqual(replicate(calls, CONFIG["switch"]["flood_mgid"], 0, port),
                             [(0, p) for p in (0, 1, 2) if p != port])


class ConfigTest(unittest.TestCase):
    def assert_rejected(self, mutate, key, defines=DEFINES):
        config = copy.deepcopy(CONFIG)
        mutate(config)
        with self.assertRaises(cfg.ConfigError) as raised:
            cfg.load(json.dumps(config), defines)
        self.assertTrue(str(raised.exception).startswith(key), str(raised.exception))

    def test_bad_configs_name_the_key(self):
        self.assert_rejected(lambda c: c["switch"].pop("mac"), "switch.mac")
        self.assert_rejected(lambda c: c["switch"].update(tofino=2), "switch.tofino")
        self.assert_rejected(lambda c: c["switch"].update(pipes=[0]), "switch.pipes")
        self.assert_rejected(lambda c: c["hosts"]["w1"].update(ip="10.0.0"), "hosts.w1.ip")
        self.assert_rejected(lambda c: c["ports"]["1/0"].update(speed="7G"), "ports.1/0.speed")
        self.assert_rejected(lambda c: c["ports"]["1/0"].update(host="w9"), "ports.1/0.host")
        self.assert_rejected(lambda c: c["switch"]["pass_ports"].pop(1), "switch.pass_ports")
        self.assert_rejected(lambda c: c["switch"]["pass_ports"][0].update(dev_port=196),
                             "switch.pass_ports[0].dev_port")
        self.assert_rejected(lambda c: c["sessions"][0].update(world_size=33), "sessions[0].world_size")
        self.assert_rejected(lambda c: c["sessions"][0].update(k=3), "sessions[0].k")
        self.assert_rejected(lambda c: c["sessions"][1].update(pool_base=2), "sessions[1].pool_base")
        self.assert_rejected(lambda c: c["sessions"][0].update(pool_size=100), "sessions[0].pool_size")
        self.assert_rejected(lambda c: c["sessions"][0].update(workers=["w1", "w2", "w3"]),
                             "sessions[0].workers")
        self.assert_rejected(lambda c: c["sessions"][0].update(mgid=1), "sessions[0].mgid")
        self.assert_rejected(lambda c: c["sessions"][0].update(drop_rate=0.1), "sessions[0].drop_rate")
        self.assert_rejected(lambda c: c["sessions"][0].update(auth_key_file="/etc/dpa/s1.key"),
                             "sessions[0].auth_key_file")
        self.assert_rejected(lambda c: None, "dpa_config.p4", defines="#define DPA_TARGET 1\n")

    def test_bad_loopback_ports_name_the_key(self):
        def rejected(mutate, key, defines=LOOPBACK_DEFINES):
            config = loopback_config()
            mutate(config)
            with self.assertRaises(cfg.ConfigError) as raised:
                cfg.load(json.dumps(config), defines)
            self.assertTrue(str(raised.exception).startswith(key), str(raised.exception))
        lanes = lambda c, name: c["ports"][name]["loopback_ports"]  # noqa: E731
        rejected(lambda c: c["ports"]["1/1"].pop("loopback_ports"), "ports.1/1.loopback_ports: missing")
        rejected(lambda c: lanes(c, "1/0").pop(1), "ports.1/0.loopback_ports: no loopback port in pipe 1")
        rejected(lambda c: lanes(c, "1/0")[1].update(pipe=0), "ports.1/0.loopback_ports[1].pipe")
        rejected(lambda c: lanes(c, "1/0")[1].update(pipe=2), "ports.1/0.loopback_ports[1].pipe")
        rejected(lambda c: lanes(c, "1/1")[0].update(port="2/0"), "ports.1/1.loopback_ports[0].port")
        rejected(lambda c: lanes(c, "1/1")[0].update(port="1/0"), "ports.1/1.loopback_ports[0].port")
        rejected(lambda c: lanes(c, "1/1")[0].update(speed="7G"), "ports.1/1.loopback_ports[0].speed")
        rejected(lambda c: lanes(c, "1/1")[0].update(dev_port=68), "ports.1/1.loopback_ports[0].dev_port")
        rejected(lambda c: lanes(c, "1/1").append({"pipe": 0}), "ports.1/1.loopback_ports[2].pipe")
        rejected(lambda c: c["ports"]["1/1"].update(loopback_ports={}), "ports.1/1.loopback_ports")
        rejected(lambda c: c["ports"].update({"5/0": {"speed": "100G", "loopback_ports": []}}),
                 "ports.5/0.loopback_ports")
        rejected(lambda c: c["switch"].update(pass_ports=CONFIG["switch"]["pass_ports"]), "switch.pass_ports")
        rejected(lambda c: None, "switch.program.pass_ports", defines=DEFINES)

    def test_more_worker_ports_than_the_pass_tables_route(self):
        config = copy.deepcopy(CONFIG)
        for i in range(cfg.MAX_WORKER_PORTS - 2):
            config["ports"]["9/%d" % i] = {"speed": "10G", "host": "w1"}
        with self.assertRaisesRegex(cfg.ConfigError, r"^ports: 65 worker ports \(with a host\), but the "
                                                     r"program's pass tables route 64"):
            cfg.load(json.dumps(config), DEFINES)
        with open(os.path.join(HERE, "..", "..", "types.p4")) as f:
            self.assertIn("#define DPA_WORKER_PORTS %d\n" % cfg.MAX_WORKER_PORTS, f.read())

    def test_not_json(self):
        with self.assertRaisesRegex(cfg.ConfigError, "not valid JSON"):
            cfg.load("{", DEFINES)


@unittest.skipUnless(os.environ.get("DPA_P4GEN"), "DPA_P4GEN (the dpa-p4gen binary) is not set")
class ShippedConfigTest(unittest.TestCase):
    def test_every_switch_config_loads_against_its_generated_program(self):
        configs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "configs")
        for name in ("netberg.json", "edgecore.json", "edgecore-linerate.json", "tofino-model.json"):
            path = os.path.join(configs, name)
            defines = subprocess.run([os.environ["DPA_P4GEN"], path], check=True,
                                     capture_output=True, text=True).stdout
            with open(path) as f:
                loaded = cfg.load(f.read(), defines)
            self.assertTrue(loaded.sessions, name)


if __name__ == "__main__":
    unittest.main()
