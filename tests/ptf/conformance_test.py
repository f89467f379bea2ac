# SPDX-License-Identifier: Apache-2.0
"""PTF entry point: every conformance case, adapted to the target, against the switch PTF's
dataplane is wired to.

    ptf --test-dir tests/ptf conformance_test \
        --test-params "port_map='tests/ptf/port_map.json';control='tofino_control:Control';payload='80';..."

`control` names a class implementing dpa_conformance.dataplane.SwitchControl (sessions, counters
and the straggler clock on the target's control plane); it is built once with the test-params
dict and serves every case (a `close()` of it runs after the last). `payload` is the P the
target fixes (a Tofino's DPA_PAYLOAD, or read from `p4_defines` when that param is given): each
case is adapted to it (dpa_conformance.target.tofino: its P, at most 32 ranks, one switch port,
no settable clock) and the cases it cannot run are listed as skipped. Without either the target
is the software switch. `cases` is a comma-separated list of case files or folders.
"""

import importlib
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ptf import testutils  # noqa: E402
from ptf.base_tests import BaseTest  # noqa: E402

from ptf_dataplane import PtfDataplane  # noqa: E402
from dpa_conformance import case as case_module  # noqa: E402
from dpa_conformance import target as target_module  # noqa: E402
from dpa_conformance.case import CaseError  # noqa: E402
from dpa_conformance.driver import run_case  # noqa: E402

DEFAULT_CASES = Path(__file__).resolve().parents[1] / "conformance" / "cases"


def _control(params: dict):
    spec = params.get("control")
    if not spec or ":" not in spec:
        raise ValueError("test param control='module:Class' (a SwitchControl for the target) is required")
    module_name, class_name = spec.split(":", 1)
    return getattr(importlib.import_module(module_name), class_name)(params)


def target_of(params: dict) -> target_module.Target:
    """The target the params describe: a Tofino with P = `payload`, or with the DPA_PAYLOAD of
    `p4_defines`; else the software switch."""
    if "payload" in params:
        return target_module.tofino(int(params["payload"]))
    if "p4_defines" in params:
        text = Path(params["p4_defines"]).read_text()
        found = re.search(r"^\s*#define\s+DPA_PAYLOAD\s+(\d+)", text, re.M)
        if found is None:
            raise ValueError(f"test param p4_defines={params['p4_defines']!r}: no #define DPA_PAYLOAD")
        return target_module.tofino(int(found.group(1)))
    return target_module.SOFTWARE


def run_suite(ptf_dataplane, params: dict, log=print) -> list[str]:
    """Runs every selected case; returns the failures (one message each). A case that raises
    anything is a failure of that case, and the suite goes on."""
    if "port_map" not in params:
        raise ValueError("test param port_map='FILE.json' is required")
    cases = case_module.load_all(params.get("cases", str(DEFAULT_CASES)).split(","))
    target = target_of(params)
    cases, skipped = target_module.adapt_all(cases, target)
    if params.get("skip_clock") == "1":
        cases = [case for case in cases if not case.uses_clock]
    for skip in skipped:
        log(f"skipped on {target.name}: {skip.case}: {skip.reason}")
    control = _control(params)
    failures = []
    try:
        for case in cases:
            dataplane = PtfDataplane.from_file(ptf_dataplane, control, params["port_map"])
            try:
                run_case(case, dataplane)
                log(f"passed: {case.name}")
            except (AssertionError, CaseError) as error:
                failures.append(str(error))
            except Exception as error:  # noqa: BLE001  (a broken case must not hide the others)
                failures.append(f"{case.name}: {type(error).__name__}: {error}")
    finally:
        close = getattr(control, "close", None)
        if close is not None:
            close()
    log(f"{len(cases) - len(failures)} of {len(cases)} cases passed, {len(skipped)} skipped on {target.name}")
    return failures


class Conformance(BaseTest):
    def runTest(self):
        failures = run_suite(self.dataplane, testutils.test_params_get())
        self.assertFalse(failures, "\n\n".join(failures))
