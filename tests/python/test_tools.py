"""python -m dpa.demo end to end, on small settings: the report it writes holds every run asked
for, and bad arguments are refused with a message that names the option (python -m dpa.bench:
test_bench.py). The launcher they share (dpa._launch): each rank's environment is in force from its
start, and a rank that overruns is reported with its stacks."""

import json
import os
import subprocess
import sys

import pytest

from harness import BASE_ENV, run_ranks


def run_module(module, *arguments, timeout=300):
    return subprocess.run([sys.executable, "-m", module, *arguments], env=dict(os.environ, **BASE_ENV),
                          capture_output=True, text=True, timeout=timeout)


def test_demo_trains_every_run_and_reports_fastest_k(tmp_path):
    result = run_module("dpa.demo", "-n", "2", "--epochs", "3", "--straggler-delay-ms", "20",
                        "--delay-probability", "0.3", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "demo.json").read_text())
    assert (tmp_path / "demo.png").stat().st_size > 0
    runs = {run["run"]: run for run in report["runs"]}
    assert sorted(runs) == ["dpa", "gloo", "preemptive", "reactive"]
    for run in runs.values():
        assert [point["epoch"] for point in run["curve"]] == [1, 2, 3]
        assert run["steps"] > 0 and run["ms_per_step"] > 0
        # Ten classes: three epochs of SGD on the digits get far beyond guessing.
        assert run["final_accuracy"] > 0.5, run
    # K = N waits for both ranks, so both replicas stay identical.
    assert runs["dpa"]["rank0_ops_completed_without_all"] == 0
    assert runs["dpa"]["straggler_drift"] == 0.0
    assert runs["gloo"]["straggler_drift"] == 0.0
    # Preemptive fastest-K with K = 1 of 2 completes blocks with the first rank.
    assert runs["preemptive"]["rank0_blocks_partial"] > 0
    assert runs["preemptive"]["rank0_mean_min_contributors"] < 2
    assert "dpa, preemptive fastest-K" in result.stdout


@pytest.mark.parametrize("module, arguments, message", [
    ("dpa.demo", ["--runs", "gloo,nccl"], "--runs: unknown run(s) ['nccl']"),
    ("dpa.demo", ["--ranks", "4", "--k", "5"], "--k must be in 1..4, got 5"),
    ("dpa.demo", ["-n", "3", "--straggler-rank", "3"], "--straggler-rank must be a rank in 0..2, got 3"),
])
def test_bad_arguments_name_the_option(module, arguments, message):
    result = run_module(module, *arguments, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr


def threads_worker(rank, world, init_file):
    import torch

    return torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")


def test_ranks_start_with_their_environment(monkeypatch):
    # Unpickling the worker imports torch before any code of the rank runs, so torch must find
    # the rank's OMP_NUM_THREADS at spawn, not the parent's.
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert run_ranks(threads_worker, 2, timeout=60) == [(1, "1"), (1, "1")]
    assert os.environ["OMP_NUM_THREADS"] == "2"


def stuck_worker(rank, world, init_file):
    import threading

    if rank == 1:
        threading.Event().wait()  # never set: the rank overruns
    return rank


def test_a_rank_that_overruns_is_reported_with_its_stacks():
    with pytest.raises(RuntimeError) as failure:
        run_ranks(stuck_worker, 2, timeout=3)
    message = str(failure.value)
    assert message.startswith("ranks [1] did not finish within 3 s")
    assert "--- rank 1 (still running) ---" in message
    assert "in stuck_worker" in message
