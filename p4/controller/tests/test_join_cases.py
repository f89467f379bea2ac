# SPDX-License-Identifier: Apache-2.0
"""The conformance cases about JOIN and LEAVE (tests/conformance/cases/join.json,
session_theft.json, join_restart.json) against the Tofino controller's JOIN logic: the case driver
sends each step's datagrams as the program would punt them to the CPU port (a JOIN or LEAVE to the
switch's UDP port), the controller (through tests/ptf/tofino_control.py, on the strict fake bfrt)
answers, and its replies and counters are checked as the software switch's are.

Without the pipeline, a step that sends anything else (data, probes) or to a second switch port
is left out and named, and a case runs with the controller's one switch port. What the pipeline
itself does with those packets is p4_model_test.py's, and the model's (docs/switch.md)."""

import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "ptf"))
sys.path.insert(0, str(ROOT / "tests" / "conformance"))

import strict_bfrt  # noqa: E402
import tofino_control  # noqa: E402
from dpa_conformance import case as case_module  # noqa: E402
from dpa_conformance import wire  # noqa: E402
from dpa_conformance.dataplane import Dataplane, Received, Setup  # noqa: E402
from dpa_conformance.driver import Timing, run_case  # noqa: E402

CASES = ROOT / "tests" / "conformance" / "cases"
FRONT_PANEL = ("1/0", "2/0", "3/0", "4/0")
DEV_PORTS = {(1, 0): 136, (2, 0): 144, (3, 0): 152, (4, 0): 160, (17, 0): 8}
SWITCH_MAC, SWITCH_IP = bytes.fromhex("0200000000fe"), 0x0A3200FE


class PuntOnlyCpuPort:
    """The CPU port of a switch with no pipeline: nothing arrives on its own (the dataplane hands
    the controller each punted frame), and what the controller sends is kept for polling."""

    def __init__(self):
        self.sent = []
        self._idle = threading.Event()

    def send(self, frame):
        self.sent.append(frame)

    def receive(self, timeout_s):
        self._idle.wait(timeout_s)
        return None

    def close(self):
        self._idle.set()


def punted(datagram: bytes) -> bool:
    """What admission.p4's verdict sends to the CPU port: a JOIN or a LEAVE."""
    header = wire.Header.decode(datagram)
    return header is not None and bool(header.flags & (wire.Flag.JOIN | wire.Flag.LEAVE))


def one_switch_port(value):
    """`value` (a step) as a switch of one port answers it: a JOIN reply lists only port 0."""
    if isinstance(value, list):
        return [one_switch_port(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: one_switch_port(item) for key, item in value.items()}
    if "join_reply" in out and "switch_ports" in out["join_reply"]:
        out["join_reply"] = {**out["join_reply"], "switch_ports": 1, "ports": out["join_reply"]["ports"][:1]}
    return out


def controller_steps(case):
    """The case's steps that only the controller answers (for a switch of one port), and the
    notes of those left out."""
    kept, left_out = [], []
    for index, step in enumerate(case.steps):
        sends = step.get("send", [])
        sends = sends if isinstance(sends, list) else [sends]
        if all(spec.get("to_switch", 0) == 0 and ("join" in spec or "LEAVE" in spec.get("header", {}).get("flags", ()))
               for spec in sends):
            kept.append(one_switch_port(step))
        else:
            left_out.append(f"steps[{index}]: {step.get('note', '(no note)')}")
    return kept, left_out


class ControllerDataplane(Dataplane):
    def __init__(self, control, port_map):
        self.control = control
        self.port_map = port_map
        self.ports, self.hosts, self.addresses = {}, {}, {}

    def open(self, setup: Setup) -> None:
        self.hosts = dict(setup.endpoints)
        self.addresses = {host: "10.50.0.%d" % (i + 1) for i, host in enumerate(setup.hosts)}
        self.ports = {name: 40000 + i for i, name in enumerate(sorted(setup.endpoints))}
        self.control.start(setup, self.addresses, dict(self.ports))

    def close(self) -> None:
        self.control.stop()

    def endpoint_port(self, endpoint: str) -> int:
        return self.ports[endpoint]

    def host_address(self, host: str) -> str:
        return self.addresses[host]

    def switch_port(self, index: int) -> int | None:
        return self.control.switch_port(index)

    def _ip(self, endpoint):
        return int.from_bytes(bytes(int(b) for b in self.addresses[self.hosts[endpoint]].split(".")), "big")

    def send(self, endpoint: str, switch_index: int, datagram: bytes) -> None:
        if switch_index != 0 or not punted(datagram):
            raise AssertionError(f"{endpoint}: only JOIN and LEAVE to switch port 0 reach the controller")
        mac = bytes.fromhex(self.port_map["hosts"][self.hosts[endpoint]]["mac"].replace(":", ""))
        self.control.controller.handle_frame(wire.build_frame(
            mac, SWITCH_MAC, self._ip(endpoint), SWITCH_IP, self.ports[endpoint],
            self.control.switch_port(0), datagram))

    def poll(self, timeout_s: float) -> Received | None:
        sent = self.control.cpu_port.sent
        while sent:
            frame = wire.parse_frame(sent.pop(0))
            for name, port in self.ports.items():
                if port == frame.dst_port and self._ip(name) == frame.dst_ip:
                    return Received(endpoint=name, source_port=frame.src_port, datagram=frame.payload)
            return Received(endpoint=f"<to port {frame.dst_port}>", source_port=frame.src_port,
                            datagram=frame.payload)
        return None

    def settle(self, datagrams_sent: int, timeout_s: float) -> None:
        """handle_frame answered before send() returned."""

    def set_clock(self, ticks: int) -> None:
        raise AssertionError("the controller has no straggler clock")

    def counters(self) -> dict[str, int] | None:
        return self.control.counters()


@unittest.skipUnless(os.environ.get("DPA_P4GEN"), "DPA_P4GEN (the dpa-p4gen binary) is not set")
class JoinCasesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        config = ROOT / "configs" / "netberg.json"
        defines = subprocess.run([os.environ["DPA_P4GEN"], str(config)], check=True, capture_output=True,
                                 text=True).stdout
        self.defines = defines
        self.port_map = {"hosts": {name: {"front_panel": FRONT_PANEL[i], "mac": "02:00:00:00:00:%02x" % (i + 1)}
                                   for i, name in enumerate(("h0", "h1", "h2", "stranger"))}}
        paths = {}
        for name, text in (("defines", defines), ("port_map", json.dumps(self.port_map))):
            paths[name] = Path(self.dir.name) / name
            paths[name].write_text(text)
        self.bfrt, _ = strict_bfrt.make(DEV_PORTS)
        self.params = {"bfrt": self.bfrt, "switch_config": str(config), "p4_defines": str(paths["defines"]),
                       "port_map": str(paths["port_map"])}

    def run_join_case(self, name):
        case = case_module.load(CASES / f"{name}.json")
        steps, left_out = controller_steps(case)
        case = dataclasses.replace(case, steps=tuple(steps), setup=dataclasses.replace(case.setup, switch_threads=1))
        # The JOIN logic only reports P: the controller takes the case's own, so the bytes of its
        # payload_mismatch and pool checks are the case's.
        (payload,) = {s.payload for s in case.setup.sessions}
        Path(self.params["p4_defines"]).write_text(
            re.sub(r"#define DPA_PAYLOAD \d+", f"#define DPA_PAYLOAD {payload}", self.defines))
        control = tofino_control.Control(self.params, PuntOnlyCpuPort())
        try:
            run_case(case, ControllerDataplane(control, self.port_map), Timing(reply_timeout_s=0.5, grace_s=0.0))
        finally:
            control.close()
        return steps, left_out

    def test_join(self):
        steps, left_out = self.run_join_case("join")
        self.assertGreaterEqual(len(steps), 14)
        self.assertEqual(len(left_out), 1, left_out)  # the JOIN on switch port 1
        self.assertIn("switch port 1", left_out[0])

    def test_session_theft(self):
        steps, left_out = self.run_join_case("session_theft")
        self.assertEqual(len(steps), 8)
        self.assertEqual(len(left_out), 2, left_out)  # the job's round; data with the old token

    def test_join_restart(self):
        steps, _ = self.run_join_case("join_restart")
        self.assertTrue(steps)


if __name__ == "__main__":
    unittest.main()
