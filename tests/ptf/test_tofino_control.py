# SPDX-License-Identifier: Apache-2.0
"""tofino_control.Control against the strict fake bfrt (strict_bfrt.py): every conformance case's
sessions go through the controller to paths the program defines, its counters come back under
the names the cases use, and the fake does reject a path the program lacks."""

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import types
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "conformance"))

import strict_bfrt  # noqa: E402
import tofino_control  # noqa: E402
from dpa_conformance import case as case_module  # noqa: E402
from dpa_conformance import target  # noqa: E402
from dpa_conformance.driver import Driver  # noqa: E402
from dpa_controller import wire  # noqa: E402  (on sys.path via dpa_conformance)

HOSTS = {"h0": ("1/0", 8), "h1": ("2/0", 16), "h2": ("3/0", 24), "stranger": ("4/0", 32)}
DEV_PORTS = {(1, 0): 136, (2, 0): 144, (3, 0): 152, (4, 0): 160, (17, 0): 8}


class FakeCpuPort:
    """The CPU interface: frames queued by the test arrive as punted packets; what the controller
    sends is kept, and `wait_sent(n)` waits (bounded) until n frames have left."""

    def __init__(self):
        self.incoming = queue.Queue()
        self.sent = []
        self.closed = False
        self._changed = threading.Condition()

    def send(self, frame):
        with self._changed:
            self.sent.append(frame)
            self._changed.notify_all()

    def receive(self, timeout_s):
        try:
            return self.incoming.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def wait_sent(self, count, timeout_s=10):
        with self._changed:
            return self._changed.wait_for(lambda: len(self.sent) >= count, timeout_s)

    def close(self):
        self.closed = True


class VerdictEntry:
    def __init__(self, action, event, packets):
        self.action = action
        self.data = {b"event": event, b"$COUNTER_SPEC_PKTS": packets} if event else {b"$COUNTER_SPEC_PKTS": packets}


@unittest.skipUnless(os.environ.get("DPA_P4GEN"), "DPA_P4GEN (the dpa-p4gen binary) is not set")
class TofinoControlTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        config = ROOT / "configs" / "netberg.json"
        defines = subprocess.run([os.environ["DPA_P4GEN"], str(config)], check=True, capture_output=True,
                                 text=True).stdout
        self.payload = int(next(line.split()[2] for line in defines.splitlines() if "DPA_PAYLOAD" in line))
        port_map = {"hosts": {name: {"front_panel": port, "mac": "02:00:00:00:00:%02x" % i, "port": dev}
                              for i, (name, (port, dev)) in enumerate(HOSTS.items())}}
        paths = {}
        for name, text in (("defines", defines), ("port_map", json.dumps(port_map))):
            paths[name] = Path(self.dir.name) / name
            paths[name].write_text(text)
        self.bfrt, self.recorder = strict_bfrt.make(DEV_PORTS)
        self.params = {"bfrt": self.bfrt, "switch_config": str(config), "p4_defines": str(paths["defines"]),
                       "port_map": str(paths["port_map"])}

    def addresses(self, setup):
        return {host: "10.50.0.%d" % (i + 1) for i, host in enumerate(setup.hosts)}

    def test_every_tofino_case_sets_up_through_defined_paths(self):
        cases, skipped = target.adapt_all(case_module.load_all([ROOT / "tests" / "conformance" / "cases"]),
                                          target.tofino(self.payload))
        self.assertTrue(cases)
        self.assertTrue(all(skip.reason for skip in skipped))
        for case in cases:
            with self.subTest(case=case.name):
                control = tofino_control.Control(self.params, FakeCpuPort())
                control.start(case.setup, self.addresses(case.setup), {})
                counters = control.counters()
                for name in ("aggregated", "completed_full", "completed_partial", "duplicates", "errors_sent",
                             "joins", "late_contributions", "old_replies", "retransmitted_results", "syn_replies"):
                    self.assertIn(name, counters)
                self.assertEqual(control.switch_port(0), 4242)
                control.stop()
                methods = {(path, method) for path, method, _ in self.recorder.calls}
                self.assertIn(("dpa.pipe.Ingress.admission.sessions", "add_with_set_session"), methods)

    def test_a_join_binds_each_rank_to_its_hosts_port_through_defined_keys(self):
        case = case_module.load(ROOT / "tests" / "conformance" / "cases" / "forged_source_port.json")
        addresses = self.addresses(case.setup)
        control = tofino_control.Control(self.params, FakeCpuPort())
        control.start(case.setup, addresses, {})
        self.addCleanup(control.stop)
        for _ in range(2):  # a JOIN counts once it is repeated (§6.3 step 5)
            for rank, host in enumerate(("h0", "h1")):
                ip = int.from_bytes(bytes(int(b) for b in addresses[host].split(".")), "big")
                request = wire.JOIN_REQUEST.encode(dict(nonce=rank + 1, world_size=2, threads=1, window=2,
                                                        payload=0), [5000 + rank])
                header = wire.Header(flags=wire.Flag.JOIN, session=7, rank=rank,
                                     count=wire.JOIN_REQUEST.word_count(1))
                control.controller.handle_frame(wire.build_frame(
                    bytes.fromhex("02000000000%d" % rank), bytes(6), ip, 0, 5000 + rank, 4242,
                    header.encode() + request))
        identities = [kwargs for path, method, kwargs in self.recorder.calls
                      if path.endswith("admission.identities") and method == "add_with_identity"]
        # h0 is behind front panel 1/0 (dev port 136), h1 behind 2/0 (144).
        self.assertEqual([(k["rank"], k["ingress_port"]) for k in identities], [(0, 136), (1, 144)])

    def join_frames(self, addresses, hosts=("h0", "h1")):
        """Each rank's JOIN of forged_source_port's session 7, as the CPU port receives it."""
        frames = []
        for rank, host in enumerate(hosts):
            ip = int.from_bytes(bytes(int(b) for b in addresses[host].split(".")), "big")
            request = wire.JOIN_REQUEST.encode(dict(nonce=rank + 1, world_size=2, threads=1, window=2,
                                                    payload=0), [5000 + rank])
            header = wire.Header(flags=wire.Flag.JOIN, session=7, rank=rank,
                                 count=wire.JOIN_REQUEST.word_count(1))
            frames.append(wire.build_frame(bytes.fromhex("02000000000%d" % rank), bytes(6), ip, 0, 5000 + rank,
                                           4242, header.encode() + request))
        return frames

    def test_punted_joins_are_answered_on_the_cpu_port(self):
        case = case_module.load(ROOT / "tests" / "conformance" / "cases" / "forged_source_port.json")
        cpu = FakeCpuPort()
        control = tofino_control.Control(self.params, cpu)
        control.start(case.setup, self.addresses(case.setup), {})
        self.addCleanup(control.stop)
        for frame in self.join_frames(self.addresses(case.setup)) * 2:
            cpu.incoming.put(frame)
        self.assertTrue(cpu.wait_sent(2), "the controller answered %d of 2 JOINs" % len(cpu.sent))
        acks = [wire.parse_frame(frame) for frame in cpu.sent]
        self.assertEqual(sorted(ack.dst_port for ack in acks), [5000, 5001])
        for ack in acks:
            self.assertEqual(wire.Header.decode(ack.payload).flags, wire.Flag.JOIN | wire.Flag.RESULT)

    def test_a_controller_error_on_the_cpu_port_fails_the_case(self):
        case = case_module.load(ROOT / "tests" / "conformance" / "cases" / "forged_source_port.json")
        cpu = FakeCpuPort()
        control = tofino_control.Control(self.params, cpu)
        control.start(case.setup, self.addresses(case.setup), {})
        self.addCleanup(control.stop)

        def broken(frame):
            raise KeyError("no such table")
        control.controller.handle_frame = broken
        cpu.incoming.put(b"frame")
        control._server.join(10)
        with self.assertRaisesRegex(RuntimeError, "stopped serving the CPU port: KeyError"):
            control.counters()

    def test_without_a_cpu_interface_the_control_says_so(self):
        case = case_module.load(ROOT / "tests" / "conformance" / "cases" / "forged_source_port.json")
        control = tofino_control.Control({**self.params, "cpu_interface": ""})
        with self.assertRaisesRegex(ValueError, "cpu_interface"):
            control.start(case.setup, self.addresses(case.setup), {})

    def test_ports_come_up_once_and_stay_up_between_cases(self):
        case = case_module.load(ROOT / "tests" / "conformance" / "cases" / "forged_source_port.json")
        control = tofino_control.Control(self.params, FakeCpuPort())
        for _ in range(3):
            control.start(case.setup, self.addresses(case.setup), {})
            control.stop()
        port_calls = [(method, kwargs.get("DEV_PORT")) for path, method, kwargs in self.recorder.calls
                      if path == "port.port"]
        self.assertEqual(port_calls, [("clear", None), ("add", 136), ("add", 144), ("add", 8)])

    def test_bfrt_is_named_by_a_string_test_param(self):
        module = types.ModuleType("fake_bfshell_namespace")
        module.bfrt = self.bfrt
        sys.modules[module.__name__] = module
        self.addCleanup(sys.modules.pop, module.__name__)
        control = tofino_control.Control({**self.params, "bfrt": "fake_bfshell_namespace:bfrt"}, FakeCpuPort())
        self.assertIs(control.bfrt, self.bfrt)
        for name, message in (("fake_bfshell_namespace:nothing", "bfshell"), ("no_colon", "module:attribute")):
            with self.subTest(name=name), self.assertRaisesRegex(ValueError, message):
                tofino_control.Control({**self.params, "bfrt": name}, FakeCpuPort())

    def test_drops_are_read_from_the_verdict_entries(self):
        answer = self.recorder.answer
        entries = [VerdictEntry("Ingress.admission.drop", 13, 3), VerdictEntry("Ingress.admission.drop", 11, 2),
                   VerdictEntry("Ingress.admission.drop", 11, 1), VerdictEntry("Ingress.admission.accept", 0, 5),
                   VerdictEntry("Ingress.admission.to_cpu", 0, 7)]

        def scripted(path, method, kwargs):
            if path.endswith("admission.verdict") and method == "get":
                return entries
            if path.endswith("admission.verdict") and method == "get_default":
                self.recorder.check(path, method, kwargs)
                return VerdictEntry("Ingress.admission.drop", 9, 4)
            return answer(path, method, kwargs)
        self.recorder.answer = scripted
        case = case_module.load(ROOT / "tests" / "conformance" / "cases" / "forged_source_port.json")
        control = tofino_control.Control(self.params, FakeCpuPort())
        control.start(case.setup, self.addresses(case.setup), {})
        self.addCleanup(control.stop)
        counters = control.counters()
        self.assertEqual({name: counters[name] for name in counters if name.startswith("dropped_")},
                         {"dropped_bad_token": 3, "dropped_unregistered": 3, "dropped_malformed": 4,
                          "dropped_not_joined": 0, "dropped_unknown_session": 0})

    def test_counters_without_rx_tx_are_compared_without_them(self):
        case = case_module.load(ROOT / "tests" / "conformance" / "cases" / "forged_source_port.json")
        values = {"aggregated": 0, "dropped_bad_token": 0}
        dataplane = types.SimpleNamespace(counters=lambda: dict(values))
        driver = Driver(case, dataplane)
        driver.counters = dict(values)
        values["dropped_bad_token"] = 1
        driver._check_counters({"dropped_bad_token": 1}, sent=1, replies=0)
        values["aggregated"] = 1
        with self.assertRaisesRegex(AssertionError, r"aggregated \+1, expected \+0"):
            driver._check_counters({}, sent=1, replies=0)

    def test_the_clock_cannot_be_set(self):
        control = tofino_control.Control(self.params, FakeCpuPort())
        with self.assertRaisesRegex(RuntimeError, "software-only"):
            control.set_clock(5)

    def test_a_host_without_a_front_panel_port_is_named(self):
        case = case_module.load(ROOT / "tests" / "conformance" / "cases" / "forged_source_port.json")
        Path(self.params["port_map"]).write_text(json.dumps({"hosts": {}}))
        with self.assertRaisesRegex(ValueError, "host 'h0'"):
            tofino_control.Control(self.params, FakeCpuPort()).start(case.setup, self.addresses(case.setup), {})

    def test_the_fake_rejects_what_the_program_lacks(self):
        program = self.bfrt.dpa.pipe
        with self.assertRaisesRegex(AttributeError, "no action"):
            program.Ingress.admission.sessions.add_with_set_sessions(index=0)
        with self.assertRaisesRegex(AttributeError, "defines no"):
            program.Ingress.slot_state.bitmap.mod(REGISTER_INDEX=0, f1=0)
        with self.assertRaisesRegex(AttributeError, "no control instance"):
            program.Ingress.slots.seq.mod(REGISTER_INDEX=0, f1=0)
        program.Ingress.slot_state.seq.mod(REGISTER_INDEX=0, f1=0)
        identity = dict(session=7, src_addr=1, src_port=2, rank=0, slot_start=0, slot_end=3, MATCH_PRIORITY=1,
                        thread=0)
        with self.assertRaisesRegex(AttributeError, "key fields"):
            program.Ingress.admission.identities.add_with_identity(**identity)  # no ingress port
        with self.assertRaisesRegex(AttributeError, "key fields"):
            program.Ingress.admission.identities.add_with_identity(**identity, ingress_port=8, slot=0)
        program.Ingress.admission.identities.add_with_identity(**identity, ingress_port=8)


if __name__ == "__main__":
    unittest.main()
