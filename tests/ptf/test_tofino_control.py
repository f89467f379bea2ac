# SPDX-License-Identifier: Apache-2.0
"""tofino_control.Control against the strict fake bfrt (strict_bfrt.py): every conformance case's
sessions go through the controller to paths the program defines, its counters come back under
the names the cases use, and the fake does reject a path the program lacks."""

import json
import os
import subprocess
import sys
import tempfile
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
from dpa_controller import wire  # noqa: E402  (on sys.path via dpa_conformance)

HOSTS = {"h0": ("1/0", 8), "h1": ("2/0", 16), "h2": ("3/0", 24), "stranger": ("4/0", 32)}
DEV_PORTS = {(1, 0): 136, (2, 0): 144, (3, 0): 152, (4, 0): 160, (17, 0): 8}


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
                control = tofino_control.Control(self.params)
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
        control = tofino_control.Control(self.params)
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

    def test_the_clock_cannot_be_set(self):
        control = tofino_control.Control(self.params)
        with self.assertRaisesRegex(RuntimeError, "software-only"):
            control.set_clock(5)

    def test_a_host_without_a_front_panel_port_is_named(self):
        case = case_module.load(ROOT / "tests" / "conformance" / "cases" / "forged_source_port.json")
        Path(self.params["port_map"]).write_text(json.dumps({"hosts": {}}))
        with self.assertRaisesRegex(ValueError, "host 'h0'"):
            tofino_control.Control(self.params).start(case.setup, self.addresses(case.setup), {})

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
