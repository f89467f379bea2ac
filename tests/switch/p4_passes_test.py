# SPDX-License-Identifier: Apache-2.0
"""Whole packets through the P4 program's state pass and every value pass, with lost passes.

p4_model_test.py checks the state pass against the software switch. This test follows each
packet further, as the program forwards it: after the state pass (admission's request shaping,
SlotState, Exponent, ResultBitmap, Delivery) it takes the input and output passes that
next_pass.p4 routes, with the `next_pass` and `pass_plan` entries the controller writes
(p4/controller's next_pass.setup and delivery.setup, applied to the interpreted tables by name,
as bfrt would apply them). Each pass runs ChunkState, Reduce (its Reducer instance) and
NextPass as p4/ writes them, in the pipe of its pass port, whose registers are that pipe's; only
the order of the three (dpa.p4's Ingress) is transcribed here.

The routes are the shared pass ports (one per pipe) or, as with ports.*.loopback_ports, each worker
port's own loopback port per chunk pipe; every pass is checked to go to one of its worker port's
pass ports as it is sent. Workers run rounds on two alternating slots, send their contributions, retransmit at random,
take a multicast result or a unicast copy, and skip a round that an OLD reply says is gone. Each
pass port is a FIFO queue; the scheduler interleaves worker packets and queues at random. For
all but the last LOSSLESS_ROUNDS rounds a fault injector drops internal passes (input and output passes
alike) and replies to workers at random. The test asserts that every result or copy any worker
receives holds exactly the int32 sum of the values of the contributors its header reports, of
the round it reports (no mixture of rounds, no missing or doubled contribution), that the
contributor count agrees with the bitmap, that no ERROR is ever sent, and that once the drops
stop every worker finishes every round. A coverage check requires every const entry and
RegisterAction of ChunkState to run. tests/switch/p4_mutations.json lists changes to p4/ that
make this test fail (entries with "test": "p4_passes_test.py"): without the output passes'
check, the repair, or the chunk's round, lost passes give wrong sums. Standard library only.
"""
import collections
import os
import random
import re
import types
import unittest

from p4_interpreter import Program, key_names, run_control
from p4_model_test import CONST, P4, Packet, P4Slot

# The controller beside the program under test (p4_model_test puts DPA_P4_DIR's on the path,
# so that a mutation of the controller's routing is tested like one of the program).
from dpa_controller import delivery, next_pass  # (the entries the controller writes)

MASK32 = 0xFFFFFFFF
RESULT, OLD, ERROR, COUNT_TO_K, FROM_OWNER = 0x1, 0x8, 0x10, 0x20, 0x2000
WORKER_PORT_BASE = 8
ROUNDS = 60
LOSSLESS_ROUNDS = 10      # the last rounds run without losses: they must all complete
MAX_STEPS = 60000


def program(chunks):
    """The program with one reducer per pipe (two values a chunk), built as p4_model_test's."""
    return Program(P4, dict(DPA_STRAGGLER_AWARE=1, DPA_SLOT_BITS=14, DPA_REDUCERS=1, DPA_CHUNKS=chunks,
                            DPA_PAYLOAD=2 * chunks, DPA_UDP_PORT=48879, DPA_CPU_PORT=64,
                            DPA_DATA_UDP_LENGTH="(8 + 48 + 4 * %d)" % (2 * chunks)))


def pipes_of(chunks):
    """The workers' pipe first, as switch.pipes orders them; chunk c in pipes[c]."""
    return [1, 2, 0, 3][:chunks] if chunks > 2 else [1, 0][:chunks]


def routes_of(config):
    """{worker port: {pipe: the pass port into that pipe}}, as ports.setup returns them: one
    internal recirculation port per pipe shared by every worker (Tofino1 numbering), or with
    `loopback`, each worker port's own front-panel port in each chunk pipe."""
    pipes = pipes_of(config["chunks"])
    routes = {}
    for rank in range(config["world"]):
        if config.get("loopback"):
            routes[WORKER_PORT_BASE + rank] = {pipe: 128 * pipe + 32 + rank for pipe in pipes}
        else:
            routes[WORKER_PORT_BASE + rank] = {pipe: 68 + 128 * pipe for pipe in pipes}
    return routes


class Misrouted(Exception):
    """A pass sent to a port that is not one of its worker port's pass ports."""


class InterpretedTables:
    """The controller's bfrt calls, `program.ingress(instance, table).add_with_<action>(...)`,
    written into the interpreted program's tables: keys by their last name component, action
    parameters by name. A name the program does not have is an error, as in bfrt."""

    def __init__(self, prog):
        with open(os.path.join(P4, "dpa.p4")) as f:
            self.instances = dict((name, control) for control, name in
                                  re.findall(r"^\s*(\w+)\(\)\s+(\w+);", f.read(), flags=re.M))
        self.program = prog

    def ingress(self, *path):
        if len(path) != 2:
            return types.SimpleNamespace(set_default_with_set_switch_address=lambda **_: None)
        control = self.program.controls[self.instances[path[0]]]
        return _TableWriter(self.program, control, control.tables[path[1]])


class _TableWriter:
    def __init__(self, prog, control, table):
        self.control, self.table = control, table
        self.keys = [name.split(".")[-1] for name in key_names(prog, control.name, table.name)]

    def __getattr__(self, name):
        if name.startswith("add_with_"):
            return lambda **fields: self.add(name[len("add_with_"):], fields)
        if name.startswith("set_default_with_"):
            return lambda **fields: self.set_default(name[len("set_default_with_"):], fields)
        raise AttributeError(name)

    def arguments(self, action, fields):
        params, _ = self.control.actions[action]
        args = [fields.pop(param) for param, _ in params]
        if fields:
            raise KeyError("%s.%s has no %s" % (self.table.name, action, sorted(fields)))
        return args

    def add(self, action, fields):
        patterns = [("exact", fields.pop(key)) for key in self.keys]
        self.table.entries.append((patterns, (action, self.arguments(action, fields))))

    def set_default(self, action, fields):
        self.table.default = (action, self.arguments(action, fields))


class Worker:
    """One rank: round t goes to slot t % 2 with seq t // 2 + 1 (two alternating slots)."""

    def __init__(self, rank, config, seed):
        self.rank, self.config, self.seed = rank, config, seed
        self.round, self.sent = 0, False

    def values(self, round_number):
        rng = random.Random(self.seed * 1000003 + self.rank * 1009 + round_number)
        return [rng.randrange(1 << 32) for _ in range(2 * self.config["chunks"])]

    def owner(self, round_number):
        return round_number % self.config["world"]

    def packet(self):
        t = self.round
        flags = COUNT_TO_K if self.config.get("count_to_k") else 0
        values = self.values(t)
        if self.config.get("from_owner"):
            # an all-gather's round (§13.3): the owner's values, every other rank's header alone
            flags |= FROM_OWNER
            values = values if self.rank == self.owner(t) else []
        return Packet(flags=flags, op_id=t + 1, seq=t // 2 + 1, owner=self.owner(t),
                      slot=t % 2, offset=0, op_length=2 * self.config["chunks"], count=2 * self.config["chunks"],
                      rank=self.rank, k=self.config["k"], values=values)

    def done(self):
        return self.round >= ROUNDS


class Switch:
    """The program on C pipes: the state pass's registers per slot in pipes[0], the chunk
    registers per pipe and slot, one FIFO queue per pass port."""

    def __init__(self, prog, config, trace):
        self.program, self.config, self.trace = prog, config, trace
        self.pipes = pipes_of(config["chunks"])
        self.routes = routes_of(config)
        self.pipe_of_port = {port: pipe for own in self.routes.values() for pipe, port in own.items()}
        self.slots = [P4Slot(config["world"], config["k"], config["timeout"]) for _ in range(2)]
        for slot in self.slots:
            slot.program = prog
        self.chunks = {(pipe, slot): {} for pipe in self.pipes for slot in (0, 1)}
        self.queues = {port: collections.deque() for port in self.pipe_of_port}
        self.stats = collections.Counter()

    def state_pass(self, packet, now):
        """What leaves the state pass: [(rank or 'all', header, values)] now, or a frame queued."""
        slot = self.slots[packet.slot]
        state = slot.admit(packet, now, self.trace)
        port = WORKER_PORT_BASE + packet.rank
        state.update({"hdr.dpa.slot": packet.slot, "ig_intr_md.ingress_port": port})
        # dpa.p4's Ingress before admission: the bridged header of a dpa packet
        state.update({"hdr.bridged.pass_index": 0, "hdr.bridged.reduce_op": CONST["REDUCE_NONE"],
                      "hdr.bridged.delivery": CONST["DELIVER_DROP"], "hdr.bridged.worker_port": port,
                      "hdr.bridged.with_values": 0, "hdr.bridged.event": CONST["EV_NONE"],
                      "hdr.bridged.op_id_or_round": packet.op_id, "hdr.bridged.slot": packet.slot,
                      "hdr.bridged.sender_bit": 0})
        for control in ("SlotState", "Exponent", "ResultBitmap", "Delivery"):
            run_control(self.program, control, state, slot.registers, trace=self.trace)
        if state.get("ig_dprsr_md.drop_ctl", 0):
            return []
        frame = dict(hdr={k: v for k, v in state.items() if k.startswith("hdr.")}, values=list(packet.values))
        if state["hdr.bridged.pass_index"] == 1:
            self.enqueue(frame, state["ig_tm_md.ucast_egress_port"])
            return []
        return self.deliver(frame["hdr"], [])

    def enqueue(self, frame, port):
        """A pass towards `port`, which must be one of the packet's worker port's pass ports (its
        own loopback ports, where each worker port has them), and in the pipe of the pass."""
        worker_port = frame["hdr"]["hdr.bridged.worker_port"]
        own = self.routes[worker_port]
        if port not in own.values():
            raise Misrouted("pass %d of a packet from worker port %d went to port %d, not one of its "
                            "pass ports %r" % (frame["hdr"]["hdr.bridged.pass_index"], worker_port, port,
                                               sorted(own.values())))
        self.stats["passes on port %d" % port] += 1
        self.queues[port].append(frame)

    def deliver(self, hdr, values):
        delivery_kind = hdr["hdr.bridged.delivery"]
        header = {name.split(".")[-1]: value for name, value in hdr.items() if name.startswith("hdr.dpa.")}
        if delivery_kind == CONST["DELIVER_UNICAST"]:
            return [(hdr["hdr.bridged.worker_port"] - WORKER_PORT_BASE, header, values)]
        if delivery_kind == CONST["DELIVER_MULTICAST"]:
            return [("all", header, values)]
        raise AssertionError("delivery %d after the state pass or the last value pass" % delivery_kind)

    def value_pass(self, port):
        """The pass at the head of port's queue: what it delivers, if it is the last."""
        frame = self.queues[port].popleft()
        pipe = self.pipe_of_port[port]
        state = dict(frame["hdr"])
        op = state["hdr.bridged.reduce_op"]
        reads = {CONST["REDUCE_READ_LO"]: "hdr.values_lo.v00", CONST["REDUCE_READ_HI"]: "hdr.values_hi.v00"}
        if op not in reads and op != CONST["REDUCE_SKIP"]:
            # parsers.p4 parse_pass_values: the next chunk of values; the pass consumes it
            state["hdr.values_lo.v00"], state["hdr.values_hi.v00"] = frame["values"][:2]
            frame["values"] = frame["values"][2:]
        registers = self.chunks[(pipe, state["hdr.bridged.slot"])]
        # dpa.p4's Ingress, a value pass: chunk_state, reduce, next_pass
        run_control(self.program, "ChunkState", state, registers, trace=self.trace)
        cell_op = state.get("md.cell_op", 0)
        self.stats["cell %d" % cell_op] += 1
        if cell_op == CONST["REDUCE_WRITE"] and state.get("md.chunk_round_x", 0) >> 31:
            # passes of one slot reordered: a contribution of an older round reopened the chunk
            self.stats["older round reopened a chunk"] += 1
        if op == CONST["REDUCE_CONTRIBUTE"] and state["hdr.bridged.event"] in (
                CONST["EV_DUPLICATE"], CONST["EV_RETRANSMITTED"]) and cell_op in (CONST["REDUCE_ADD"],
                                                                                     CONST["REDUCE_WRITE"]):
            self.stats["repaired"] += 1
            if state["hdr.bridged.event"] == CONST["EV_DUPLICATE"]:
                self.stats["repaired before completion"] += 1
        run_control(self.program, "Reduce", state, registers, trace=self.trace, bindings={"cell_op": (cell_op, 8)})
        if state.get("ig_dprsr_md.drop_ctl", 0):
            self.stats["withheld"] += 1
            return []
        if op in reads:
            frame["values"].insert(0, state[reads[op]])  # emitted in front of the later halves
        hits, _ = run_control(self.program, "NextPass", state, {}, trace=self.trace)
        frame["hdr"] = {k: v for k, v in state.items() if k.startswith("hdr.") and not k.startswith("hdr.values")}
        if hits["next_pass"][0] != "last_pass":
            self.enqueue(frame, state["ig_tm_md.ucast_egress_port"])
            return []
        if state.get("ig_dprsr_md.drop_ctl", 0):
            return []
        return self.deliver(frame["hdr"], frame["values"] if state["hdr.bridged.with_values"] else [])


def simulate(prog, config, seed, trace):
    """Runs the workers through ROUNDS rounds. Returns (first wrong reply or None, stats)."""
    rng = random.Random(seed)
    switch = Switch(prog, config, trace)
    workers = [Worker(rank, config, seed) for rank in range(config["world"])]

    def receive(worker, header, values):
        flags = header["flags"]
        if flags & ERROR:
            return "rank %d got an ERROR reply %r" % (worker.rank, header)
        round_number = 2 * (header["seq"] - 1) + header["slot"]
        if flags & RESULT:
            bitmap = header["bitmap_lo"]
            ranks = [r for r in range(32) if bitmap >> r & 1]
            if not ranks or max(ranks) >= config["world"] or len(ranks) != header["contributors"]:
                return "rank %d: a result of round %d reports %d contributors, bitmap %#x" % (
                    worker.rank, round_number, header["contributors"], bitmap)
            if flags & FROM_OWNER:
                if len(ranks) != config["world"]:
                    return "rank %d: a relayed round %d completed without every rank (%#x)" % (
                        worker.rank, round_number, bitmap)
                ranks = [workers[0].owner(round_number)]  # the owner's values, unchanged
            expected = [sum(column) & MASK32 for column in zip(*(workers[r].values(round_number) for r in ranks))]
            if values != expected:
                return ("rank %d: a WRONG SUM for round %d (contributors %#x, flags %#x):\n got      %r\n"
                        " expected %r" % (worker.rank, round_number, bitmap, flags, values, expected))
            switch.stats["results"] += 1
            if round_number == worker.round:
                worker.round, worker.sent = worker.round + 1, False
        elif flags & OLD:
            # a reply to the worker's current round (replies are not delayed): the slot has
            # moved past it, the worker skips ahead
            worker.round, worker.sent = worker.round + 1, False
        return None

    try:
        return run(rng, switch, workers, receive, config)
    except Misrouted as error:
        return str(error), switch.stats


def run(rng, switch, workers, receive, config):
    """The scheduler of simulate: (first failure or None, stats)."""
    send_rate = config.get("send_rates", [0.3] * config["world"])
    slow = set(switch.routes[WORKER_PORT_BASE + config["slow_rank"]].values()) if "slow_rank" in config else set()
    now = 0
    for step in range(MAX_STEPS):
        if all(w.done() for w in workers) and not any(switch.queues.values()):
            return None, switch.stats
        now += 1
        losing = min(w.round for w in workers) < ROUNDS - LOSSLESS_ROUNDS
        busy = [port for port, queue in switch.queues.items() if queue]
        if busy and rng.random() < 0.6:
            # a congested worker's loopback ports are served less often than the others
            port = rng.choices(busy, [0.05 if port in slow else 1 for port in busy])[0]
            if losing and rng.random() < config["drop_rate"]:
                switch.queues[port].popleft()
                switch.stats["lost passes"] += 1
                continue
            replies = switch.value_pass(port)
        else:
            worker = rng.choice(workers)
            if worker.done() or rng.random() > (send_rate[worker.rank] if not worker.sent else 0.05):
                continue
            worker.sent = True
            replies = switch.state_pass(worker.packet(), now)
        for destination, header, values in replies:
            for worker in (workers if destination == "all" else [workers[destination]]):
                if losing and rng.random() < 0.05:
                    switch.stats["lost replies"] += 1
                    continue
                failure = receive(worker, header, values)
                if failure:
                    return failure, switch.stats
    unfinished = ["rank %d at round %d" % (w.rank, w.round) for w in workers if not w.done()]
    return "after %d steps: %s" % (MAX_STEPS, ", ".join(unfinished)), switch.stats


CONFIGURATIONS = {
    # every rank counted, two chunks
    "all_ranks": dict(world=3, k=3, chunks=2, timeout=10 ** 6, drop_rate=0.15, seed=11),
    # preemptive fastest-K over three chunks: late ranks get copies and add nothing
    "preemptive_k2": dict(world=4, k=2, chunks=3, timeout=10 ** 6, drop_rate=0.15, count_to_k=True, seed=12),
    # K = 1: every round completes at its opening, by the fastest rank, the others' packets are
    # late copies, and a copy in flight can meet the slot's next round in a chunk
    "preemptive_k1": dict(world=3, k=1, chunks=3, timeout=10 ** 6, drop_rate=0.15, count_to_k=True, seed=14,
                          send_rates=[0.6, 0.3, 0.3]),
    # reactive fastest-K: a slow rank, rounds completed by a counted rank's retransmission
    "reactive_k2": dict(world=3, k=2, chunks=2, timeout=40, drop_rate=0.15, seed=13,
                        send_rates=[0.3, 0.3, 0.03]),
    # a loopback port per worker port and chunk pipe (ports.*.loopback_ports): the passes of one
    # slot cross different ports, so they can reach a chunk in another order than the state pass
    # sent them (a stale repair can reopen a chunk for an older round)
    "loopback_all_ranks": dict(world=4, k=4, chunks=3, timeout=10 ** 6, drop_rate=0.15, seed=15,
                               loopback=True, slow_rank=3),
    # preemptive fastest-K with a congested rank: a counted rank's copy waits on its own ports
    # while the slot's next round opens the chunks through the others' ports, then reopens them
    # for its own older round, which withholds the newer result until retransmissions repair it
    "loopback_preemptive_k2": dict(world=4, k=2, chunks=3, timeout=10 ** 6, drop_rate=0.15, count_to_k=True,
                                   seed=15, loopback=True, slow_rank=0),
    "loopback_reactive_k2": dict(world=3, k=2, chunks=2, timeout=40, drop_rate=0.15, seed=16,
                                 send_rates=[0.3, 0.3, 0.03], loopback=True),
    # all-gather rounds (FROM_OWNER, §13.3): the owner's values only, header-only requests from
    # the others, results fetched by the others' packets without input passes; K is N
    "relayed": dict(world=3, k=2, chunks=2, timeout=40, drop_rate=0.15, seed=17, from_owner=True),
}


class PassesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.results = {}
        for name, config in CONFIGURATIONS.items():
            chunks = config["chunks"]
            prog = program(chunks)
            tables = InterpretedTables(prog)
            setup = types.SimpleNamespace(program={"DPA_CHUNKS": chunks}, pipes=pipes_of(chunks),
                                          mac=bytes(6), ip=0)
            next_pass.setup(tables, setup, routes_of(config))
            delivery.setup(tables, setup, routes_of(config))
            trace = []
            failure, stats = simulate(prog, config, config["seed"], trace)
            cls.results[name] = (failure, stats, trace, prog)
            if failure and os.environ.get("DPA_P4_MODEL_STOP_AT_FIRST_FAILURE"):
                break  # the mutation test needs one failure, not all of them

    def check(self, name):
        if name not in self.results:
            self.skipTest("not run: an earlier configuration failed")
        failure, stats, _, _ = self.results[name]
        self.assertIsNone(failure, failure)
        # The run must have lost passes, withheld results and repaired chunks, or it proved nothing.
        for what in ("lost passes", "withheld", "repaired", "results"):
            self.assertGreater(stats[what], 0, "%s: no %s (%r)" % (name, what, dict(stats)))

    def check_repairs_before_completion(self, name):
        """A counted rank's retransmission to a round still open repairs its values then (not
        only once the round completed and its result was withheld)."""
        _, stats, _, _ = self.results[name]
        for what in ("repaired before completion",):
            self.assertGreater(stats[what], 0, "%s: no %s (%r)" % (name, what, dict(stats)))

    def test_all_ranks(self):
        self.check("all_ranks")
        self.check_repairs_before_completion("all_ranks")

    def test_preemptive_fastest_k(self):
        self.check("preemptive_k2")

    def test_preemptive_k1(self):
        self.check("preemptive_k1")

    def test_reactive_fastest_k(self):
        self.check("reactive_k2")
        self.check_repairs_before_completion("reactive_k2")

    def test_relayed_rounds_deliver_the_owners_values(self):
        self.check("relayed")

    def test_loopback_ports_per_worker_port(self):
        """Each worker port's passes cross only its own loopback ports (every pass is checked as
        it is sent), every one of them, and the sums stay exact."""
        for name in ("loopback_all_ranks", "loopback_preemptive_k2", "loopback_reactive_k2"):
            self.check(name)
            _, stats, _, _ = self.results[name]
            config = CONFIGURATIONS[name]
            owners = collections.Counter(port for own in routes_of(config).values() for port in own.values())
            self.assertEqual(set(owners.values()), {1}, "a loopback port serves two worker ports")
            for port in owners:
                self.assertGreater(stats["passes on port %d" % port], 0, "%s: port %d carried nothing" % (name, port))
        self.check_repairs_before_completion("loopback_all_ranks")
        # the passes of one slot were reordered across ports, and still no sum was wrong
        stats = self.results["loopback_preemptive_k2"][1]
        self.assertGreater(stats["older round reopened a chunk"], 0, dict(stats))

    def test_every_entry_and_register_action_of_chunk_state_runs(self):
        if len(self.results) < len(CONFIGURATIONS) or any(r[0] for r in self.results.values()):
            self.skipTest("not every configuration passed")
        seen = set()
        for _, _, trace, _ in self.results.values():
            seen.update(trace)
        control = next(iter(self.results.values()))[3].controls["ChunkState"]
        missing = ["%s entry %d (%s)" % (table.name, index, action)
                   for table in control.tables.values()
                   for index, (_, (action, _)) in enumerate(table.entries)
                   if ("table", table.name, index) not in seen]
        missing += ["RegisterAction %s" % name for name in control.register_actions
                    if ("register_action", "ChunkState", name) not in seen]
        self.assertEqual(missing, [])


if __name__ == "__main__":
    unittest.main()
