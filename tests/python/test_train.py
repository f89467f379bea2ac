# SPDX-License-Identifier: Apache-2.0
"""python -m dpa.train: a short CPU run of the smallest models on 2 ranks completes every run and
writes a well-formed report (keys, counts, replicas identical where every rank contributes) and
one plot per model, under its own launcher and under torchrun; bad arguments exit 2 naming the
option; the package's ResNets have torchvision's shapes. No timing is asserted."""

import itertools
import json
import os
import random
import subprocess
import sys

import pytest

from dpa.tools import _models, _train_rank, train
from harness import BASE_ENV, free_port
from test_torchrun import stream_flags

STEPS = 3
DELAY_MS = 5.0
# The smallest ResNet at 32x32 and a one-block GPT: seconds per run on 2 cores.
SMALL = ["--image-size", "32", "--batch", "2", "--steps", str(STEPS), "--warmup-steps", "1",
         "--gpt-width", "32", "--gpt-layers", "1", "--gpt-heads", "2", "--vocabulary", "64", "--sequence", "16",
         "--straggler-delay-ms", str(DELAY_MS)]
TINY_GPT_PARAMETERS = 64 * 32 + 16 * 32 + (2 * 2 * 32 + 32 * 96 + 96 + 32 * 32 + 32 + 32 * 128 + 128 + 128 * 32 + 32) \
    + 2 * 32
ROW_KEYS = {"model", "straggler", "run", "label", "backend", "k", "preemptive", "ranks", "batch_per_rank", "steps",
            "warmup_steps", "parameters", "gradient_bytes", "model_source", "straggler_rank", "delayed_steps",
            "delays", "injected_delay_s", "reference_rank", "iteration_ms", "iteration_ms_samples", "samples_per_s",
            "train_seconds", "slowest_rank_seconds", "by_rank", "drift", "dpa", "speedup_vs_gloo", "speedup_vs_dpa",
            "wrap", "losses", "pause", "parameter_difference_to_gloo"}
DPA_KEYS = {"allreduces", "allreduces_per_step", "blocks", "blocks_partial", "partial_block_share", "steps_partial",
            "partial_step_share", "blocks_missed_by_rank", "straggler_blocks_missed", "retransmissions"}
DRIFT_KEYS = {"final", "final_by_rank", "checks", "resyncs", "largest_checked", "check_and_resync_ms"}


def run_train(*arguments, timeout=300):
    return subprocess.run([sys.executable, "-m", "dpa.train", *arguments], env=dict(os.environ, **BASE_ENV),
                          capture_output=True, text=True, timeout=timeout)


def check_row(row, ranks, straggler_rank, resync_threshold, points=1):
    assert set(row) == ROW_KEYS, row
    assert row["wrap"] == "ddp" and len(row["losses"]) == STEPS and row["pause"] is None, row
    # Null where no Gloo run of the same model and straggler model ran before; 0 for Gloo's own.
    difference = row["parameter_difference_to_gloo"]
    assert (difference == 0.0) if row["run"] == "gloo" else (difference is None or difference >= 0), row
    assert row["ranks"] == ranks and row["steps"] == STEPS and row["batch_per_rank"] == 2, row
    assert len(row["iteration_ms_samples"]) == STEPS and len(row["by_rank"]) == ranks, row
    times = row["iteration_ms"]
    assert times["min"] <= times["median"] <= times["p99"] <= times["max"], times
    assert row["gradient_bytes"] == 4 * row["parameters"]
    assert row["parameters"] == {"resnet18": 11_689_512, "gpt": TINY_GPT_PARAMETERS}[row["model"]], row
    slow = row["straggler"] != "none"
    assert row["straggler_rank"] == (straggler_rank if slow else None), row
    # The runs are compared on, and resynchronised from, the lowest rank that is not slow.
    assert row["reference_rank"] == (1 if slow and straggler_rank == 0 else 0), row
    # Only every-step schedules here: persistent (once a step) and fixed with p = 1 (every point).
    assert row["delayed_steps"] == (STEPS if slow else 0), row
    assert row["delays"] == row["delayed_steps"] * (points if row["straggler"] == "fixed" else 1), row
    assert row["injected_delay_s"] == pytest.approx(row["delays"] * DELAY_MS / 1000.0), row
    if slow:
        # The sleeps happen inside the straggler's timed steps (a lower bound, not a timing).
        straggler = row["by_rank"][straggler_rank]
        assert straggler["iteration_ms_mean"] >= row["injected_delay_s"] * 1000.0 / STEPS, row
    assert set(row["drift"]) == DRIFT_KEYS and len(row["drift"]["final_by_rank"]) == ranks, row
    fastest_k = row["run"] in ("reactive", "preemptive")
    assert row["k"] == (ranks - 1 if fastest_k else ranks), row
    # --resync-every 1: one drift check after every step of the fastest-K runs, none elsewhere.
    assert row["drift"]["checks"] == (STEPS if fastest_k else 0), row
    assert 0 <= row["drift"]["resyncs"] <= row["drift"]["checks"], row
    if fastest_k:
        # The last step's check resynchronised the replicas if they were further apart.
        assert max(row["drift"]["final_by_rank"]) <= resync_threshold, row
    else:
        # Every rank receives the same sums: the replicas stay bit-identical.
        assert row["drift"]["final_by_rank"] == [0.0] * ranks, row
    if row["backend"] != "dpa":
        assert row["dpa"] is None, row
        return
    stats = row["dpa"]
    assert set(stats) == DPA_KEYS, stats
    assert stats["allreduces"] >= STEPS and stats["blocks"] >= stats["allreduces"], stats
    assert 0 <= stats["blocks_partial"] <= stats["blocks"] and 0 <= stats["steps_partial"] <= STEPS, stats
    assert len(stats["blocks_missed_by_rank"]) == ranks, stats
    assert (stats["straggler_blocks_missed"] is None) == (not slow), stats
    if not fastest_k:
        assert stats["blocks_partial"] == 0 and stats["blocks_missed_by_rank"] == [0] * ranks, stats


def test_every_run_completes_and_the_report_is_well_formed(tmp_path):
    result = run_train("-n", "2", "--models", "resnet18,gpt", "--stragglers", "none,persistent", *SMALL,
                       "--resync-every", "1", "--resync-threshold", "0", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "train.json").read_text())
    assert report["schema"] == "dpa-train" and report["schema_version"] == 1
    assert report["tool"]["name"] == "dpa.train"
    config = report["config"]
    assert config["ranks"] == 2 and config["launcher"] == "local" and config["k"] == 1
    assert config["runs"] == ["gloo", "dpa", "reactive", "preemptive"] and "nccl" in config["skipped"]
    rows = report["results"]
    assert [(row["model"], row["straggler"], row["run"]) for row in rows] == list(
        itertools.product(["resnet18", "gpt"], ["none", "persistent"], ["gloo", "dpa", "reactive", "preemptive"]))
    for row in rows:
        check_row(row, 2, straggler_rank=1, resync_threshold=0.0)
    for model in ("resnet18", "gpt"):
        assert (tmp_path / f"{model}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"## {model}:" in result.stdout


def test_torchrun_ranks_write_the_report(tmp_path):
    output = tmp_path / "report.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", str(free_port()), *stream_flags(), "-m", "dpa.train", "--models", "gpt",
               "--stragglers", "fixed", "--delay-probability", "1", "--straggler-points", "3",
               "--straggler-rank", "0", "--runs", "dpa,preemptive", *SMALL,
               "--resync", "collective", "--resync-every", "1", "--resync-threshold", "1e-4",
               "--out", str(tmp_path), "--json", str(output)]
    result = subprocess.run(command, env=dict(os.environ, **BASE_ENV), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(output.read_text())
    assert report["config"]["launcher"] == "torchrun" and report["config"]["ranks"] == 2
    assert report["config"]["resync"] == "collective" and report["config"]["delay_points"] == 3
    assert [row["run"] for row in report["results"]] == ["dpa", "preemptive"]
    for row in report["results"]:
        check_row(row, 2, straggler_rank=0, resync_threshold=1e-4, points=3)
    assert (tmp_path / "gpt.png").exists() and not (tmp_path / "train.json").exists()


@pytest.mark.parametrize("arguments, message", [
    (["--models", "resnet18,vgg"], "--models: 'resnet18,vgg': give each of resnet18,resnet50,gpt at most once"),
    (["--stragglers", "none,none"], "--stragglers: 'none,none': give each of none,fixed,random,persistent"),
    (["--runs", "nccl"], "--runs nccl needs --device cuda"),
    (["-n", "1"], "--ranks must be at least 2, got 1"),
    (["-n", "2", "--k", "3"], "--k must be in 1..2 (the ranks), got 3"),
    (["-n", "2", "--straggler-rank", "2"], "--straggler-rank must be a rank in 0..1, got 2"),
    (["--delay-probability", "1.5"], "--delay-probability must be in [0, 1], got 1.5"),
    (["--steps", "0"], "--steps must be at least 1, got 0"),
    (["--image-size", "16"], "--image-size must be at least 32, got 16"),
    (["--models", "resnet18", "--batch", "1"], "--batch must be at least 2 with a ResNet"),
    (["--gpt-width", "30", "--gpt-heads", "4"], "--gpt-width 30 is not a multiple of --gpt-heads 4"),
])
def test_bad_arguments_exit_2_naming_the_option(arguments, message, capsys):
    with pytest.raises(SystemExit) as exit_status:
        train.parse_arguments(arguments)
    assert exit_status.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("name, parameters", [("resnet18", 11_689_512), ("resnet50", 25_557_032)])
def test_the_package_resnets_have_torchvisions_shapes(name, parameters):
    import torch

    model, source = _models.resnet(name, 1000, prefer_torchvision=False)
    assert source == "dpa.tools._models"
    assert sum(p.numel() for p in model.parameters()) == parameters
    assert model(torch.zeros(2, 3, 64, 64)).shape == (2, 1000)


@pytest.mark.parametrize("straggler", ["fixed", "random"])
@pytest.mark.parametrize("points", [1, 3])
def test_delay_schedules_hit_the_share_of_points_with_the_delay_asked_for(straggler, points):
    settings = {"steps": 2000, "delay_ms": 40.0, "delay_probability": 0.15, "seed": 7, "delay_points": points}
    delays = _train_rank.delay_schedule(straggler, settings)
    assert delays == _train_rank.delay_schedule(straggler, settings)  # the same points in every run
    assert len(delays) == 2000 and all(len(step) == points for step in delays)
    delayed = [d for step in delays for d in step if d > 0]
    assert 0.12 * 2000 * points < len(delayed) < 0.18 * 2000 * points
    if straggler == "fixed":
        assert set(delayed) == {0.040}
    else:
        assert all(0.020 <= d <= 0.080 for d in delayed) and len(set(delayed)) > 100
    if points == 1:
        # The draws of the one delay before a step that earlier versions made: the quoted runs keep their steps.
        chooser, earlier = random.Random(f"7/{straggler}"), []
        for _ in range(2000):
            delayed = chooser.random() < 0.15
            scale = chooser.uniform(0.5, 2.0) if straggler == "random" else 1.0
            earlier.append([0.040 * scale if delayed else 0.0])
        assert delays == earlier
    assert _train_rank.delay_schedule("none", settings) == [[0.0] * points] * 2000
    assert _train_rank.delay_schedule("persistent", settings) == [[0.040] + [0.0] * (points - 1)] * 2000
