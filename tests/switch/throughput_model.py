#!/usr/bin/env python3
"""Throughput model of the Tofino program's pass plan (docs/switch.md, "Throughput model").

For each shipped config it takes the pass plan the controller writes (p4/controller's
`next_pass.plan` and `delivery`'s first input port: pass p of a data packet enters pipes[p - 1]
through that pipe's pass port) and the program's packet shapes (p4/headers.p4, reduce.p4: an
input pass consumes one chunk of values, an output pass emits one half of a chunk in front of
what later passes emitted), and computes the bytes each port carries per round of N
contributions and the per-worker goodput that the busiest port allows at 100 GbE.

    throughput_model.py                  print the tables (Markdown)
    throughput_model.py --check DOC      exit 1 unless DOC holds exactly these tables between
                                         the begin and end markers

Assumptions (printed with the tables): one round of each slot has N contributions (K = N, no
loss, no retransmission), so N input-pass packets and one result per round; every frame costs
24 bytes beyond its L2 header and payload on any port (FCS 4, preamble and inter-frame gap 20);
internal recirculation ports run at RECIRCULATION_GBPS; the worker ports' pipe has 32 / pipes
front-panel ports (both shipped boxes have 32), each four 100G lanes on Tofino2.
"""
import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "p4" / "controller"))
from dpa_controller import next_pass  # noqa: E402  (the plan the controller writes)

CONFIGS = ("edgecore", "netberg")
WORLD_SIZES = (4, 8, 16, 32)
WORKER_GBPS = 100
# Tofino1's recirculation port of a pipe is one 100G port (docs/switch.md); the rate of Tofino2's
# is not in the open documentation, so the model assumes the same (see docs/switch.md).
RECIRCULATION_GBPS = {1: 100, 2: 100}
FRONT_PANEL_PORTS = 32
WIRE_OVERHEAD = 24                      # FCS, preamble, inter-frame gap
HEADERS = 14 + 20 + 8 + 48              # Ethernet, IPv4, UDP, dpa (p4/headers.p4)
BRIDGED = 25                            # bridged_h (p4/headers.p4): 200 bits
BEGIN = "<!-- throughput_model.py: begin -->"
END = "<!-- throughput_model.py: end -->"


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
        self.ports = {}                                           # pipe -> (label, Gb/s)
        for port in switch["pass_ports"]:
            if "dev_port" in port:
                self.ports[port["pipe"]] = ("recirculation %d" % port["dev_port"],
                                            RECIRCULATION_GBPS[self.tofino])
            else:
                self.ports[port["pipe"]] = ("loopback %s (%s)" % (port["port"], port["speed"]),
                                            int(port["speed"].rstrip("G")))
        lanes = 4 if self.tofino == 2 else 1
        self.worker_ports = FRONT_PANEL_PORTS // len(self.pipes) * lanes

    def passes(self):
        """[(pipe, values bytes the packet carries into that pass, 'input' or 'output')] of a
        completing contribution, in order, from the controller's entries."""
        entries = {(p, with_values): (action, params)
                   for p, with_values, action, params in
                   next_pass.plan(self.chunks, self.pipes, {pipe: pipe for pipe in self.pipes})}
        route = [(self.pipes[0], "input")]        # delivery.p4 route_input: pass_plan's port
        index = 1
        while (index, 1) in entries:
            action, params = entries[(index, 1)]
            route.append((params["port"], "input" if action == "continue_input" else "output"))
            index += 1
        carried, chunks_left, halves = [], self.chunks, 0
        for pipe, kind in route:
            if kind == "input":
                carried.append((pipe, chunks_left * 2 * self.half, kind))
                chunks_left -= 1
            else:
                carried.append((pipe, halves * self.half, kind))
                halves += 1
        assert chunks_left == 0 and halves == 2 * self.chunks, "the plan does not move every value"
        return carried

    def port_bytes(self):
        """pipe -> (wire bytes per counted contribution, wire bytes per result)."""
        load = {pipe: [0, 0] for pipe in self.pipes}
        for pipe, values, kind in self.passes():
            load[pipe][0 if kind == "input" else 1] += BRIDGED + HEADERS + values + WIRE_OVERHEAD
        return load

    def worker_frame(self):
        return HEADERS + 4 * self.payload + WIRE_OVERHEAD

    def goodput(self, world):
        """(per-worker goodput in Gb/s, bottleneck) for rounds of `world` contributions."""
        times = {"worker port": self.worker_frame() * 8 / WORKER_GBPS}
        for pipe, (per_contribution, per_result) in self.port_bytes().items():
            label, gbps = self.ports[pipe]
            times[label] = (world * per_contribution + per_result) * 8 / gbps
        bottleneck = max(times, key=times.get)
        return 4 * self.payload * 8 / times[bottleneck], bottleneck

    def design_goodput(self, world):
        """The same for the per-worker-port design of docs/switch.md (not implemented): the state
        pass sends one copy per chunk to the worker's own loopback port in that chunk's pipe,
        whose egress keeps only that chunk; the round's completer fetches the result over its
        own loopback ports with today's output passes, so each worker's ports carry 1/N of them
        on average."""
        times = {"worker port": self.worker_frame() * 8 / WORKER_GBPS}
        chunk = 2 * self.half
        per_result = {pipe: 0 for pipe in self.pipes}
        for pipe, values, kind in self.passes():
            if kind == "output":
                per_result[pipe] += BRIDGED + HEADERS + values + WIRE_OVERHEAD
        for pipe in self.pipes:
            per_contribution = BRIDGED + HEADERS + chunk + WIRE_OVERHEAD
            times["loopback, pipe %d" % pipe] = \
                (per_contribution + per_result[pipe] / world) * 8 / WORKER_GBPS
        bottleneck = max(times, key=times.get)
        return 4 * self.payload * 8 / times[bottleneck], bottleneck


def tables(plans):
    lines = [BEGIN, "",
             "Passes per packet (1 = the state pass alone), C = `program.chunks`:", "",
             "| config | P | C | counted contribution | counted rank's retransmission (repair) "
             "| completing contribution (result) | copy or probe fetching a result |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for plan in plans:
        c = plan.chunks
        lines.append("| %s | %d | %d | %d | %d | %d | %d |" % (plan.name, plan.payload, c, 1 + c, 1 + c,
                                                               1 + 3 * c, 1 + 3 * c))
    lines += ["", "Wire bytes each port carries (frame + 24); a worker's request and its result "
              "are one frame each:", "",
              "| config | port (pipe) | Gb/s | per contribution | per result |",
              "|---|---|---:|---:|---:|"]
    for plan in plans:
        lines.append("| %s | worker port | %d | %d (request) | %d (its copy) |"
                     % (plan.name, WORKER_GBPS, plan.worker_frame(), plan.worker_frame()))
        for pipe in plan.pipes:
            label, gbps = plan.ports[pipe]
            per_contribution, per_result = plan.port_bytes()[pipe]
            lines.append("| %s | %s (pipe %d) | %d | %d | %d |"
                         % (plan.name, label, pipe, gbps, per_contribution, per_result))
    lines += ["", "Per-worker goodput (values in, Gb/s) with N workers on %d GbE, and the port "
              "that limits it; line rate is the worker port's own limit:" % WORKER_GBPS, "",
              "| config | line rate | " + " | ".join("N = %d" % n for n in WORLD_SIZES) + " |",
              "|---|---:|" + "---|" * len(WORLD_SIZES)]
    for plan in plans:
        line_rate = 4 * plan.payload * WORKER_GBPS / plan.worker_frame()
        cells = []
        for world in WORLD_SIZES:
            gbps, bottleneck = plan.goodput(world)
            cell = "%.1f (%s)" % (gbps, bottleneck)
            if world > plan.worker_ports:
                cell += ", more workers than the %d 100G ports of pipe %d" % (plan.worker_ports,
                                                                              plan.pipes[0])
            cells.append(cell)
        lines.append("| %s | %.1f | %s |" % (plan.name, line_rate, " | ".join(cells)))
    lines += ["", "Design of [Toward line rate](#toward-line-rate-a-design-not-implemented) "
              "(**not implemented**), the same assumptions, loopback ports at %d G:" % WORKER_GBPS,
              "", "| config | line rate | " + " | ".join("N = %d" % n for n in WORLD_SIZES) + " |",
              "|---|---:|" + "---|" * len(WORLD_SIZES)]
    for plan in plans:
        line_rate = 4 * plan.payload * WORKER_GBPS / plan.worker_frame()
        # Each worker port of pipes[0] needs a loopback partner in the same pipe (chunk 0).
        most = plan.worker_ports // 2
        cells = ["%.1f (%s)" % plan.design_goodput(world)
                 + (", more workers than pipe %d's %d port pairs" % (plan.pipes[0], most)
                    if world > most else "") for world in WORLD_SIZES]
        lines.append("| %s | %.1f | %s |" % (plan.name, line_rate, " | ".join(cells)))
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
