# SPDX-License-Identifier: Apache-2.0
"""conformance_test.run_suite, PTF's entry point, with PTF stood in for: the cases reach the
driver adapted to the target (P, N, S, clock), the skipped ones are named, one SwitchControl
serves the whole suite and is closed after it, and a case that fails in any way is reported
while the others still run."""

import json
import sys
import tempfile
import types
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "conformance"))

# PTF itself is not installed here: conformance_test needs only these two names of it.
_ptf = types.ModuleType("ptf")
_ptf.testutils = types.SimpleNamespace(test_params_get=dict)
_ptf.base_tests = types.SimpleNamespace(BaseTest=unittest.TestCase)
sys.modules.setdefault("ptf", _ptf)
sys.modules.setdefault("ptf.testutils", _ptf.testutils)
sys.modules.setdefault("ptf.base_tests", _ptf.base_tests)

import conformance_test  # noqa: E402
from dpa_conformance import case as case_module  # noqa: E402

CASES = ROOT / "tests" / "conformance" / "cases"


class RecordingControl:
    built = []

    def __init__(self, params):
        self.params = params
        self.closed = False
        RecordingControl.built.append(self)

    def close(self):
        self.closed = True


class ConformanceSuiteTest(unittest.TestCase):
    def setUp(self):
        RecordingControl.built = []
        module = types.ModuleType("recording_control")
        module.Control = RecordingControl
        sys.modules[module.__name__] = module
        self.addCleanup(sys.modules.pop, module.__name__)
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.port_map = Path(self.dir.name) / "port_map.json"
        self.port_map.write_text(json.dumps({"switch": {"mac": "02:00:00:00:00:fe", "ip": "10.50.0.254"},
                                             "hosts": {}}))
        self.ran = []
        original = conformance_test.run_case
        conformance_test.run_case = lambda case, dataplane: self.ran.append((case, dataplane.control))
        self.addCleanup(setattr, conformance_test, "run_case", original)
        self.log = []

    def run_suite(self, **params):
        return conformance_test.run_suite(object(), {"port_map": str(self.port_map), "control":
                                                     "recording_control:Control", "cases": str(CASES), **params},
                                          self.log.append)

    def test_cases_reach_the_driver_adapted_to_the_tofino_p(self):
        self.assertEqual(self.run_suite(payload="80"), [])
        everything = case_module.load_all([CASES])
        self.assertTrue(self.ran)
        self.assertLess(len(self.ran), len(everything))
        for case, _ in self.ran:
            self.assertFalse(case.uses_clock, case.name)
            self.assertTrue(all(s.payload == 80 for s in case.setup.sessions), case.name)
            self.assertTrue(all(s.world_size <= 32 for s in case.setup.sessions), case.name)
        skipped = [line for line in self.log if line.startswith("skipped on tofino")]
        self.assertEqual(len(skipped) + len(self.ran), len(everything))
        self.assertIn(f"{len(self.ran)} of {len(self.ran)} cases passed, {len(skipped)} skipped on tofino",
                      self.log[-1])

    def test_the_p_comes_from_the_program_defines(self):
        defines = Path(self.dir.name) / "dpa_config.p4"
        defines.write_text("#define DPA_PAYLOAD 256\n#define DPA_UDP_PORT 4242\n")
        self.run_suite(p4_defines=str(defines))
        self.assertTrue(all(s.payload == 256 for case, _ in self.ran for s in case.setup.sessions))
        defines.write_text("#define DPA_UDP_PORT 4242\n")
        with self.assertRaisesRegex(ValueError, "DPA_PAYLOAD"):
            self.run_suite(p4_defines=str(defines))

    def test_without_a_payload_the_cases_run_as_written(self):
        self.run_suite()
        self.assertEqual(len(self.ran), len(case_module.load_all([CASES])))

    def test_one_control_serves_every_case_and_is_closed(self):
        self.run_suite(payload="80")
        self.assertEqual(len(RecordingControl.built), 1)
        self.assertTrue(all(control is RecordingControl.built[0] for _, control in self.ran))
        self.assertTrue(RecordingControl.built[0].closed)

    def test_a_case_that_raises_is_a_failure_and_the_suite_goes_on(self):
        calls = []

        def failing(case, dataplane):
            calls.append(case.name)
            if len(calls) == 1:
                raise KeyError("rx_packets")
            if len(calls) == 2:
                raise AssertionError(f"{case.name}: a reply is missing")
        conformance_test.run_case = failing
        failures = self.run_suite(payload="80")
        self.assertEqual(len(failures), 2)
        self.assertIn("KeyError", failures[0])
        self.assertIn("a reply is missing", failures[1])
        self.assertGreater(len(calls), 2)
        self.assertTrue(RecordingControl.built[0].closed)


if __name__ == "__main__":
    unittest.main()
