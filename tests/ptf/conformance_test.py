# SPDX-License-Identifier: Apache-2.0
"""PTF entry point: every conformance case against the switch PTF's dataplane is wired to.

    ptf --test-dir tests/ptf conformance_test \
        --test-params "port_map='tests/ptf/port_map.json';control='my_tofino_control:Control';cases='tests/conformance/cases'"

`control` names a class implementing dpa_conformance.dataplane.SwitchControl (sessions, counters
and the straggler clock on the target's control plane); it is built with the test-params dict.
`skip_clock='1'` leaves out the cases that set the straggler clock, for a target whose timer
cannot be set.
"""

import importlib
import sys
from pathlib import Path

from ptf import testutils
from ptf.base_tests import BaseTest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ptf_dataplane import PtfDataplane  # noqa: E402
from dpa_conformance import case as case_module  # noqa: E402
from dpa_conformance.driver import run_case  # noqa: E402


def _control(params: dict):
    spec = params.get("control")
    if not spec or ":" not in spec:
        raise ValueError("test param control='module:Class' (a SwitchControl for the target) is required")
    module_name, class_name = spec.split(":", 1)
    return getattr(importlib.import_module(module_name), class_name)(params)


class Conformance(BaseTest):
    def runTest(self):
        params = testutils.test_params_get()
        if "port_map" not in params:
            raise ValueError("test param port_map='FILE.json' is required")
        cases = case_module.load_all(params.get("cases", str(case_module.GOLDEN_DIR.parent / "conformance" / "cases"))
                                     .split(","))
        if params.get("skip_clock") == "1":
            cases = [case for case in cases if not case.uses_clock]
        failures = []
        for case in cases:
            dataplane = PtfDataplane.from_file(self.dataplane, _control(params), params["port_map"])
            try:
                run_case(case, dataplane)
            except AssertionError as error:
                failures.append(str(error))
        self.assertFalse(failures, "\n\n".join(failures))
