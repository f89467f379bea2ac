#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every dpa-microbench benchmark runs and checks its own results (ctest: microbench_smoke).

Runs dpa-microbench once with the shortest minimum time, JSON out, and fails when a benchmark
reported an error (BM_WorkerEngine and BM_CrossCoreFloor check every result and skip with an
error otherwise), when one is missing from the run, or when the program fails. No timing is
looked at: this only keeps the benchmarks working.

    microbench_smoke.py DPA_MICROBENCH
"""
import json
import subprocess
import sys

EXPECTED = ("BM_Quantize", "BM_SwitchStateMachine", "BM_WorkerEngine", "BM_CrossCoreFloor")


def main():
    binary = sys.argv[1]
    run = subprocess.run([binary, "--benchmark_min_time=0.001", "--benchmark_format=json"],
                         capture_output=True, text=True, timeout=240)
    if run.returncode != 0:
        sys.exit(f"dpa-microbench exited with {run.returncode}:\n{run.stderr}")
    benchmarks = json.loads(run.stdout)["benchmarks"]
    # A kernel set this CPU lacks (AVX-512 on many hosts) is a skip, not a broken benchmark.
    unavailable = [b["name"] for b in benchmarks if b.get("error_message") == "kernel set unavailable"]
    failed = [f"{b['name']}: {b.get('error_message', '')}" for b in benchmarks
              if b.get("error_occurred") and b["name"] not in unavailable]
    missing = [name for name in EXPECTED if not any(b["name"].startswith(name) for b in benchmarks)]
    for line in failed:
        print("error:", line)
    for name in missing:
        print("missing:", name)
    print(f"{len(benchmarks)} benchmarks ran, {len(failed)} with an error, {len(unavailable)} skipped "
          "(kernel set unavailable on this CPU)")
    sys.exit(1 if failed or missing else 0)


if __name__ == "__main__":
    main()
