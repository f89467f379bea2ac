#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Throughput model of the Tofino program's pass plan (docs/switch.md, "Throughput model").

For each shipped config it runs the controller's own `delivery.setup` and `next_pass.setup`
(p4/controller) against a recorder and follows each worker port's entries: `pass_plan` gives the
pass port of its first input pass, `next_pass` the port of every later pass. The pass ports are
the config's shared `switch.pass_ports` (one per pipe, every worker's packets cross them) or each
worker port's own `loopback_ports`. With the program's packet shapes (p4/headers.p4, reduce.p4:
an input pass consumes one chunk of values, an output pass emits one half of a chunk in front of
what later passes emitted) it computes the bytes each port carries per round of N contributions
and the per-worker goodput that the busiest port allows.

    throughput_model.py                  print the tables (Markdown)
    throughput_model.py --check DOC      exit 1 unless DOC holds exactly these tables between
                                         the begin and end markers

Assumptions (printed with the tables): one round of each slot has N contributions (K = N, no
loss, no retransmission), so N input-pass packets and one result per round; every frame costs
24 bytes beyond its L2 header and payload on any port (FCS 4, preamble and inter-frame gap 20);
internal recirculation ports run at RECIRCULATION_GBPS; the worker ports' pipe has 32 / pipes
front-panel ports (both shipped boxes have 32), each four 100G lanes on Tofino2. With a loopback
port per worker port, a worker's ports carry its own contributions and the output passes of the
rounds it completes: 1/N of them when the completer changes from round to round, all of them
when the same worker always completes (the last one to send, e.g. a slow host under K = N).
"""
import argparse
import json
import pathlib
import sys
import types

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "p4" / "controller"))
from dpa_controller import delivery, next_pass  # noqa: E402  (the entries the controller writes)

CONFIGS = ("edgecore", "edgecore-linerate", "netberg")
WORLD_SIZES = (4, 8, 16, 32)
# Tofino1's recirculation port of a pipe is one 100G port (docs/switch.md); the rate of Tofino2's
# is not in the open documentation, so the model assumes the same (see docs/switch.md).
RECIRCULATION_GBPS = {1: 100, 2: 100}
FRONT_PANEL_PORTS = 32
WIRE_OVERHEAD = 24                      # FCS, preamble, inter-frame gap
HEADERS = 14 + 20 + 8 + 48              # Ethernet, IPv4, UDP, dpa (p4/headers.p4)
BRIDGED = 25                            # bridged_h (p4/headers.p4): 200 bits
BEGIN = "<!-- throughput_model.py: begin -->"
END = "<!-- throughput_model.py: end -->"


class Recorder:
    """The bfrt calls of delivery.setup and next_pass.setup: {table: [(action, fields)]}."""

    def __init__(self):
        self.entries = {}

    def ingress(self, *path):
        table = self.entries.setdefault(path[-1], [])

        class Table:
            def __getattr__(self, name):
                action = name.split("_with_", 1)[1]
                return lambda **fields: table.append((action, fields))
        return Table()


def gbps(speed):
    return int(speed.rstrip("G"))


class Plan:
    """One config's pass plan, as the controller writes it."""

    def __init__(self, name, config):
        switch = config["switch"]
        self.name = name
        self.tofino = switch["tofino"]
        self.pipes = switch["pipes"]
        self.reducers = switch["program"]["reducers"]
        self.chunks = switch["program"]["chunks"]
        self.payload = 2 * self.reducers * self.chunks           # P
        self.half = 4 * self.reducers                             # bytes of one half of a chunk
        workers = {n: p for n, p in config["ports"].items() if p.get("host")}   # in the config's order
        self.first_worker = next(iter(workers))
        self.worker_gbps = {gbps(p["speed"]) for p in workers.values()}.pop()
        self.ports = []                                           # port id -> (label, Gb/s, pipe)
        shared = {}
        for port in switch.get("pass_ports", []):
            if "dev_port" in port:
                self.ports.append(("recirculation %d" % port["dev_port"], RECIRCULATION_GBPS[self.tofino],
                                   port["pipe"]))
            else:
                self.ports.append(("loopback %s (%s)" % (port["port"], port["speed"]), gbps(port["speed"]),
                                   port["pipe"]))
            shared.setdefault(port["pipe"], len(self.ports) - 1)
        routes = {}                                               # worker index -> {pipe: port id}
        for index, port in enumerate(workers.values()):
            own = {}
            for loopback in port.get("loopback_ports", []):
                self.ports.append(("loopback %s (%s)" % (loopback["port"], loopback["speed"]),
                                   gbps(loopback["speed"]), loopback["pipe"]))
                own[loopback["pipe"]] = len(self.ports) - 1
            routes[index] = own or shared
        self.loopback_per_worker = routes[0] is not shared
        self.configured_workers = len(workers)
        lanes = 4 if self.tofino == 2 else 1
        self.pipe_ports = FRONT_PANEL_PORTS // len(self.pipes) * lanes
        recorder = Recorder()
        setup = types.SimpleNamespace(program={"DPA_CHUNKS": self.chunks}, pipes=self.pipes, mac=bytes(6), ip=0)
        delivery.setup(recorder, setup, routes)
        next_pass.setup(recorder, setup, routes)
        self.entries = recorder.entries
        self.routes = routes

    def table_entries(self):
        return len(self.entries["pass_plan"]) + len(self.entries["next_pass"])

    def passes(self, worker):
        """[(port id, values bytes the packet carries into that pass, 'input' or 'output')] of a
        completing contribution from `worker`, in order, from the controller's entries."""
        first = {f["worker_port"]: f["input_port"] for _, f in self.entries["pass_plan"]}
        later = {(f["worker_port"], f["pass_index"], f["with_values"]): (action, f["port"])
                 for action, f in self.entries["next_pass"]}
        route = [(first[worker], "input")]        # delivery.p4 route_input: pass_plan's port
        index = 1
        while (worker, index, 1) in later:
            action, port = later[(worker, index, 1)]
            route.append((port, "input" if action == "continue_input" else "output"))
            index += 1
        carried, chunks_left, halves = [], self.chunks, 0
        for port, kind in route:
            if kind == "input":
                carried.append((port, chunks_left * 2 * self.half, kind))
                chunks_left -= 1
            else:
                carried.append((port, halves * self.half, kind))
                halves += 1
        assert chunks_left == 0 and halves == 2 * self.chunks, "the plan does not move every value"
        return carried

    def port_bytes(self, worker):
        """port id -> [wire bytes per counted contribution, wire bytes per result] of `worker`'s
        packets."""
        load = {}
        for port, values, kind in self.passes(worker):
            load.setdefault(port, [0, 0])[0 if kind == "input" else 1] += BRIDGED + HEADERS + values + WIRE_OVERHEAD
        return load

    def own_ports(self):
        """Each worker's pass ports, which must be its own with loopback ports."""
        used = {worker: set(self.port_bytes(worker)) for worker in self.routes}
        if self.loopback_per_worker:
            for worker, ports in used.items():
                others = set().union(*(p for w, p in used.items() if w != worker))
                assert not ports & others, "a loopback port carries two workers' passes"
        return used

    def worker_frame(self):
        return HEADERS + 4 * self.payload + WIRE_OVERHEAD

    def line_rate(self):
        return 4 * self.payload * self.worker_gbps / self.worker_frame()

    def goodput(self, world, result_share=None):
        """(per-worker goodput in Gb/s, bottleneck) for rounds of `world` contributions. Shared
        pass ports carry every worker's contributions and every result; a worker's own loopback
        ports carry its contribution and `result_share` of the results (1 / world by default)."""
        times = {"worker port": self.worker_frame() * 8 / self.worker_gbps}
        for worker in self.routes:
            for port, (per_contribution, per_result) in self.port_bytes(worker).items():
                label, rate, pipe = self.ports[port]
                if self.loopback_per_worker:
                    share = 1 / world if result_share is None else result_share
                    label = "own loopback, pipe %d" % pipe
                    times[label] = max(times.get(label, 0), (per_contribution + share * per_result) * 8 / rate)
                else:
                    times[label] = (world * per_contribution + per_result) * 8 / rate
        bottleneck = max(times, key=times.get)
        return 4 * self.payload * 8 / times[bottleneck], bottleneck


def tables(plans):
    shared = [plan for plan in plans if not plan.loopback_per_worker]
    own = [plan for plan in plans if plan.loopback_per_worker]
    header = "| config | line rate | " + " | ".join("N = %d" % n for n in WORLD_SIZES) + " |"
    rule = "|---|---:|" + "---|" * len(WORLD_SIZES)
    lines = [BEGIN, "",
             "Passes per packet (1 = the state pass alone), C = `program.chunks`:", "",
             "| config | P | C | counted contribution | counted rank's retransmission (repair) "
             "| completing contribution (result) | copy or probe fetching a result |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for plan in plans:
        c = plan.chunks
        lines.append("| %s | %d | %d | %d | %d | %d | %d |" % (plan.name, plan.payload, c, 1 + c, 1 + c,
                                                               1 + 3 * c, 1 + 3 * c))
    lines += ["", "Wire bytes each port carries (frame + 24) per contribution and per result of the "
              "worker ports whose packets cross it; a worker's request and its result are one frame "
              "each. With loopback ports, the first worker port's (every worker port has its own, "
              "alike):", "",
              "| config | port (pipe) | Gb/s | per contribution | per result |",
              "|---|---|---:|---:|---:|"]
    for plan in plans:
        lines.append("| %s | worker port%s | %d | %d (request) | %d (its copy) |"
                     % (plan.name, " " + plan.first_worker if plan.loopback_per_worker else "",
                        plan.worker_gbps, plan.worker_frame(), plan.worker_frame()))
        for port, (per_contribution, per_result) in sorted(plan.port_bytes(0).items(),
                                                           key=lambda item: plan.pipes.index(plan.ports[item[0]][2])):
            label, rate, pipe = plan.ports[port]
            lines.append("| %s | %s (pipe %d) | %d | %d | %d |"
                         % (plan.name, label, pipe, rate, per_contribution, per_result))
    lines += ["", "Per-worker goodput (values in, Gb/s) with N workers on 100 GbE, and the port "
              "that limits it; line rate is the worker port's own limit. Shared pass ports "
              "(`switch.pass_ports`):", "", header, rule]
    for plan in shared:
        cells = []
        for world in WORLD_SIZES:
            rate, bottleneck = plan.goodput(world)
            cell = "%.1f (%s)" % (rate, bottleneck)
            if world > plan.pipe_ports:
                cell += ", more workers than the %d 100G ports of pipe %d" % (plan.pipe_ports, plan.pipes[0])
            cells.append(cell)
        lines.append("| %s | %.1f | %s |" % (plan.name, plan.line_rate(), " | ".join(cells)))
    lines += ["", "A loopback port per worker port and chunk pipe (`ports.*.loopback_ports`), "
              "the completer changing from round to round (each worker's ports carry 1/N of the "
              "results), and the same worker completing every round (its ports carry every result):",
              "", header, rule]
    for plan in own:
        for share, what in ((None, "changing completer"), (1, "fixed completer")):
            cells = []
            for world in WORLD_SIZES:
                cell = "%.1f (%s)" % plan.goodput(world, share)
                if world > plan.configured_workers:
                    cell += ", more workers than its %d worker ports" % plan.configured_workers
                cells.append(cell)
            lines.append("| %s, %s | %.1f | %s |" % (plan.name, what, plan.line_rate(), " | ".join(cells)))
    lines += ["", "What the pass routing costs (no PRE replication in either mode; the per-chunk "
              "state's registers are the same):", "",
              "| config | worker ports | pass ports (front-panel ports in loopback) | `pass_plan` + `next_pass` entries |",
              "|---|---:|---|---:|"]
    for plan in plans:
        used = plan.own_ports()
        ports = set().union(*used.values())
        front_panel = sum(1 for port in ports if plan.ports[port][0].startswith("loopback"))
        lines.append("| %s | %d | %d (%d) | %d |" % (plan.name, plan.configured_workers, len(ports),
                                                    front_panel, plan.table_entries()))
    lines += ["", "Assumed: K = N and no loss; recirculation ports at %s Gb/s (Tofino1, Tofino2); "
              "24 bytes per frame beyond L2 on every port." % " and ".join(
                  str(RECIRCULATION_GBPS[t]) for t in (1, 2)), "", END]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", metavar="DOC", help="compare with the tables in DOC")
    args = parser.parse_args()
    plans = [Plan(name, json.loads((ROOT / "configs" / (name + ".json")).read_text()))
             for name in CONFIGS]
    text = tables(plans)
    if not args.check:
        sys.stdout.write(text)
        return 0
    doc = pathlib.Path(args.check).read_text()
    if BEGIN not in doc or END not in doc:
        print("throughput_model: %s has no %s ... %s block" % (args.check, BEGIN, END))
        return 1
    found = doc[doc.index(BEGIN):doc.index(END) + len(END)] + "\n"
    if found != text:
        print("throughput_model: the tables in %s differ from the model; replace them with:\n%s"
              % (args.check, text))
        return 1
    print("throughput_model: %s matches the model" % args.check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
