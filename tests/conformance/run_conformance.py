#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs conformance cases against dpa-switch on loopback: one process per case file.

    run_conformance.py --switch build/src/tools/dpa-switch tests/conformance/cases/[FILE.json|DIR]...

--tofino-payload P adapts every case to a Tofino compiled for P values (dpa_conformance/target.py)
and runs what remains on dpa-switch: the cases a Tofino runs, checked where CI can run them.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dpa_conformance import case as case_module  # noqa: E402
from dpa_conformance import target as target_module  # noqa: E402
from dpa_conformance.driver import CaseFailure, Timing, run_case  # noqa: E402
from dpa_conformance.loopback import DataplaneError, LoopbackDataplane  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--switch", required=True, help="path of the dpa-switch binary")
    parser.add_argument("--reply-timeout", type=float, default=Timing.reply_timeout_s,
                        help="seconds to wait for a step's expected replies")
    parser.add_argument("--grace", type=float, default=Timing.grace_s,
                        help="seconds after a step in which no other datagram may arrive")
    parser.add_argument("--tofino-payload", type=int, metavar="P",
                        help="adapt the cases to a Tofino with this P (and its N, S and clock limits)")
    parser.add_argument("--keep-logs", action="store_true", help="keep each case's switch config and log")
    parser.add_argument("paths", nargs="+", help="case files or directories of them")
    args = parser.parse_args()
    if not Path(args.switch).is_file():
        parser.error(f"--switch {args.switch}: no such file")

    try:
        cases = case_module.load_all(args.paths)
    except case_module.CaseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    skipped = []
    if args.tofino_payload is not None:
        if not 1 <= args.tofino_payload <= 256:
            parser.error(f"--tofino-payload {args.tofino_payload}: P must be 1..256")
        cases, skipped = target_module.adapt_all(cases, target_module.tofino(args.tofino_payload))
        for skip in skipped:
            print(f"skip {skip.case}: {skip.reason}", flush=True)
    timing = Timing(reply_timeout_s=args.reply_timeout, grace_s=args.grace)
    failed = 0
    for case in cases:
        started = time.monotonic()
        dataplane = LoopbackDataplane(args.switch, keep_logs=args.keep_logs)
        try:
            run_case(case, dataplane, timing)
        except (CaseFailure, case_module.CaseError, DataplaneError) as error:
            failed += 1
            print(f"FAIL {case.name} ({type(error).__name__})\n{error}", flush=True)
            continue
        print(f"ok   {case.name} ({len(case.steps)} steps, {time.monotonic() - started:.2f} s)", flush=True)
    print(f"{len(cases) - failed} of {len(cases)} cases passed" + (f", {len(skipped)} skipped" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
