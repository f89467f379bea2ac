# SPDX-License-Identifier: Apache-2.0
"""Runs PyTorch's distributed test suite (distributed_spawn.py) on a backend and reports every
test's outcome: passed, skipped (with the suite's reason) or failed.

    run_suite.py --backend dpa --world-size 2 [--tests FILE] [--jobs 2] [--json OUT]
                 [--expected-failures FILE] [--deadline SECONDS]

--tests names the tests to run, one per line (# comments allowed); without it, the whole suite.
--expected-failures lists tests that fail on this torch for Gloo as well (name, then why); they
are reported, not counted. Without it, expected_failures_torch<major>.<minor>.txt beside this file
is used where there is one for the torch that runs. Exit status 0 when no other test failed, 1 otherwise, 2 for a usage
error. Each test spawns its ranks and carries the suite's own timeout (300 s); --jobs runs that
many tests at once, each in its own process. --deadline stops the run after that many seconds
and reports the tests not reached as "not run", so a bounded run still leaves its outcomes.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def read_list(path):
    """Lines "test_name [why]"; blank lines and lines starting with # are skipped."""
    entries = {}
    with open(path, encoding="utf-8") as listing:
        for line in listing:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, why = line.partition(" ")
            entries[name] = why.strip()
    return entries


def all_tests():
    import distributed_spawn

    return unittest.TestLoader().getTestCaseNames(distributed_spawn.TestDistBackendWithSpawn)


class Outcomes(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.outcomes = {}

    def addSuccess(self, test):  # noqa: N802 - unittest's names
        self.outcomes[test._testMethodName] = {"outcome": "passed"}

    def addSkip(self, test, reason):  # noqa: N802
        self.outcomes[test._testMethodName] = {"outcome": "skipped", "reason": reason}

    def addFailure(self, test, err):  # noqa: N802
        self.outcomes[test._testMethodName] = {"outcome": "failed",
                                               "error": self._exc_info_to_string(err, test)[-2000:]}

    addError = addFailure  # noqa: N815

    def addExpectedFailure(self, test, err):  # noqa: N802
        self.outcomes[test._testMethodName] = {"outcome": "passed", "note": "expected failure"}


def run_in_process(names):
    """Runs `names` here, one after the other; prints one JSON line {name: outcome} per test."""
    import distributed_spawn

    outcomes = {}
    for name in names:
        result = Outcomes()
        started = time.monotonic()
        distributed_spawn.TestDistBackendWithSpawn(name).run(result)
        outcome = result.outcomes.get(name, {"outcome": "failed", "error": "no result"})
        outcome["seconds"] = round(time.monotonic() - started, 2)
        print(f"{name}: {outcome['outcome']} ({outcome['seconds']} s)", file=sys.stderr, flush=True)
        print(json.dumps({name: outcome}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", required=True, choices=["dpa", "gloo"])
    parser.add_argument("-n", "--world-size", type=int, default=2)
    parser.add_argument("--tests", help="file naming the tests to run (default: all)")
    parser.add_argument("--expected-failures", help="file of tests that fail for Gloo too")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", help="write every test's outcome here")
    parser.add_argument("--deadline", type=float, help="stop after this many seconds; tests not reached are 'not run'")
    parser.add_argument("--worker", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.world_size < 2 or args.jobs < 1:
        parser.error("--world-size must be at least 2 and --jobs at least 1")
    os.environ.update(BACKEND=args.backend, WORLD_SIZE=str(args.world_size))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [HERE, os.environ.get("PYTHONPATH")] if p)
    sys.path.insert(0, HERE)
    if args.worker is not None:
        run_in_process(args.worker)
        return 0

    names = list(read_list(args.tests)) if args.tests else all_tests()
    if args.expected_failures is None:
        import torch

        version = ".".join(torch.__version__.split(".")[:2])
        default = os.path.join(HERE, f"expected_failures_torch{version}.txt")
        args.expected_failures = default if os.path.exists(default) else None
    expected = read_list(args.expected_failures) if args.expected_failures else {}
    shards = [names[i::args.jobs] for i in range(args.jobs)]
    started = time.monotonic()
    workers = [subprocess.Popen([sys.executable, __file__, "--backend", args.backend, "-n", str(args.world_size),
                                 "--worker", *shard], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
               for shard in shards if shard]
    outcomes = {}
    deadline_passed = False
    for worker in workers:
        left = None if args.deadline is None else max(0.0, args.deadline - (time.monotonic() - started))
        try:
            out, _ = worker.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            deadline_passed = True
            os.killpg(worker.pid, signal.SIGKILL)  # the worker and the ranks it spawned
            out, _ = worker.communicate()
        lines = out.strip().splitlines()
        if worker.returncode != 0 and not deadline_passed:
            print(f"run_suite: a worker exited with status {worker.returncode}", file=sys.stderr)
            return 1
        for line in lines:
            if line.startswith("{"):  # the tests may print to stdout too
                try:
                    outcomes.update(json.loads(line))
                except json.JSONDecodeError:
                    pass
    for name in names:
        outcomes.setdefault(name, {"outcome": "failed", "error": "not run" + (" (deadline)" if deadline_passed else "")})
    counts = {kind: sum(1 for o in outcomes.values() if o["outcome"] == kind)
              for kind in ("passed", "skipped", "failed")}
    unexpected = sorted(n for n, o in outcomes.items() if o["outcome"] == "failed" and n not in expected)
    not_run = sorted(n for n, o in outcomes.items() if o.get("error", "").startswith("not run"))
    summary = {"backend": args.backend, "world_size": args.world_size, "counts": counts, "not_run": len(not_run),
               "seconds": round(time.monotonic() - started, 1), "unexpected_failures": unexpected,
               "expected_failures": {n: expected[n] for n in expected if outcomes.get(n, {}).get("outcome") == "failed"}}
    print(json.dumps(summary, indent=1))
    for name in unexpected:
        print(f"FAILED {name}:\n{outcomes[name].get('error', '')}", file=sys.stderr)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"summary": summary, "tests": outcomes}, out, indent=1)
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
