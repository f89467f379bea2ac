# SPDX-License-Identifier: Apache-2.0
"""python -m dpa.bench: its report holds every size and backend asked for, every result is
verified (and a deliberately corrupted one is caught, with exit status 1, under its own launcher
and under torchrun), bad arguments exit 2 naming the option. The input generators and bounds are
checked directly. No timing is asserted."""

import json
import os
import subprocess
import sys

import pytest
import torch

from dpa.tools import _bench_data
from harness import BASE_ENV, free_port
from test_torchrun import stream_flags

SMALL = ["--sizes", "4KiB,100000", "--iterations", "3", "--warmup", "1"]
ROW_KEYS = {"backend", "collective", "method", "bytes", "elements", "dtype", "device", "ranks", "iterations", "warmup", "time_us", "algbw",
            "busbw", "p50_us", "p99_us", "barrier_skew_us", "after_last_start_us", "wrong", "checked", "dpa"}
DPA_COUNTER_KEYS = {"retransmissions", "timeouts", "syn_probes", "udp_drops", "switch_rounds",
                    "switch_probe_answers", "switch_duplicates", "switch_copies", "switch_late"}


def run_bench(*arguments, timeout=300):
    return subprocess.run([sys.executable, "-m", "dpa.bench", *arguments], env=dict(os.environ, **BASE_ENV),
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_every_size_and_backend_is_measured_and_verified(tmp_path, dtype):
    output = tmp_path / "bench.json"
    result = run_bench("-n", "2", "--dtype", dtype, *SMALL, "--json", str(output))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(output.read_text())
    assert report["schema"] == "dpa-bench" and report["schema_version"] == 1
    assert report["tool"]["name"] == "dpa.bench"
    assert report["config"]["ranks"] == 2 and report["config"]["launcher"] == "local"
    # Both ranks share this host and its /dev/shm: they also meet in shared memory.
    assert report["config"]["barrier"] == "gloo, then shared memory"
    assert "barrier: gloo, then shared memory" in result.stdout
    assert report["wrong"] == 0
    rows = report["results"]
    assert [(row["bytes"], row["backend"]) for row in rows] == [
        (4096, "dpa"), (4096, "gloo"), (100000, "dpa"), (100000, "gloo")]
    for row in rows:
        assert set(row) == ROW_KEYS, row
        assert row["elements"] == row["bytes"] // 4 and row["dtype"] == dtype and row["device"] == "cpu", row
        # warmup + back-to-back + after-a-barrier operations, every element of every rank's result.
        assert row["checked"] == (1 + 3 + 3) * row["elements"] * 2, row
        assert row["wrong"] == 0, row
        assert row["busbw"] == pytest.approx(row["algbw"] * 2 * (2 - 1) / 2)
        assert row["p50_us"] <= row["p99_us"], row
        # Both ranks run on this kernel: the latency view is split.
        for split in (row["barrier_skew_us"], row["after_last_start_us"]):
            assert 0 <= split["p50_us"] <= split["p99_us"], row
    assert "after the last start" in result.stdout
    assert rows[0]["dpa"]["payload"] > 0 and rows[1]["dpa"] is None
    for details in (rows[0]["dpa"], rows[2]["dpa"]):
        counters = {key: value for key, value in details.items() if key not in ("mode", "payload", "sizing")}
        assert set(counters) == DPA_COUNTER_KEYS and all(v >= 0 for v in counters.values()), details
        # The embedded switch cannot answer more probes than the ranks sent.
        assert details["switch_probe_answers"] <= details["retransmissions"] + details["syn_probes"], details
        # Its counters are read at all: each of the size's 7 operations completed at least one
        # round there (a float32 one an exponent round too).
        assert details["switch_rounds"] >= (1 + 3 + 3) * (2 if dtype == "float32" else 1), details
    assert "#wrong" in result.stdout and " 100000 " in result.stdout
    assert "# embedded switch:" in result.stdout and "probes answered" in result.stdout


def test_half_precision_is_verified_and_a_backend_without_it_is_named(tmp_path):
    # Gloo lacks bfloat16 in some torch versions (1.13): it is then left out, with the reason.
    output = tmp_path / "bench.json"
    result = run_bench("-n", "2", "--dtype", "bfloat16", "--sizes", "4KiB,64KiB", "--iterations", "2",
                       "--warmup", "1", "--json", str(output))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(output.read_text())
    backends = [row["backend"] for row in report["results"]]
    skipped = report["config"]["skipped"]
    assert backends == (["dpa", "dpa"] if "gloo" in skipped else ["dpa", "gloo", "dpa", "gloo"]), report
    if skipped:
        assert "Gloo cannot all_reduce bfloat16" in skipped["gloo"] and "not measured: gloo" in result.stdout
    assert all(row["wrong"] == 0 and row["elements"] == row["bytes"] // 2 for row in report["results"])


def test_a_corrupted_result_is_reported_and_fails_the_run(tmp_path):
    output = tmp_path / "bench.json"
    result = run_bench("-n", "2", *SMALL, "--inject-wrong", "--barrier", "gloo", "--json", str(output))
    assert result.returncode == 1, result.stdout + result.stderr
    assert json.loads(output.read_text())["config"]["barrier"] == "gloo"
    rows = json.loads(output.read_text())["results"]
    # One element of one rank's result per size and backend.
    assert [row["wrong"] for row in rows] == [1, 1, 1, 1], rows
    assert "dpa.bench: 4 wrong elements" in result.stderr


@pytest.mark.parametrize("collective, methods", [
    ("reduce_scatter", {"dpa": "reduce_scatter_tensor", "gloo": "all_reduce, keeping the shard"}),
    ("all_gather", {"dpa": "all_gather_into_tensor", "gloo": "all_gather into views"}),
    ("broadcast", {"dpa": None, "gloo": None}),
])
def test_the_sharded_collectives_are_measured_verified_and_a_corruption_is_caught(tmp_path, collective, methods):
    output = tmp_path / "bench.json"
    # 4100 B: 1025 float32 elements, cut to 1024 for 2 ranks' shards (reduce-scatter, all-gather).
    result = run_bench("-n", "2", "--collective", collective, "--sizes", "4100,64KiB", "--iterations", "3",
                       "--warmup", "1", "--inject-wrong", "--json", str(output))
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(output.read_text())
    assert report["config"]["collective"] == collective
    rows = report["results"]
    assert all(row["collective"] == collective for row in rows)
    assert {row["backend"]: row["method"] for row in rows} == methods
    whole = 1024 if collective != "broadcast" else 1025
    assert [row["elements"] for row in rows] == [whole, whole, 16384, 16384]
    # The injected element, once per size and backend; nothing else wrong.
    assert [row["wrong"] for row in rows] == [1, 1, 1, 1], rows
    shard = {"reduce_scatter": 0.5, "all_gather": 1, "broadcast": 1}[collective]
    assert all(row["checked"] == (1 + 2 * 3) * row["elements"] * shard * 2 for row in rows), rows


def test_torchrun_ranks_report_a_corrupted_result_and_fail(tmp_path):
    output = tmp_path / "bench.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", str(free_port()), *stream_flags(), "-m", "dpa.bench", "--sizes", "4KiB",
               "--iterations", "2", "--warmup", "0", "--backends", "dpa", "--inject-wrong", "--json", str(output)]
    result = subprocess.run(command, env=dict(os.environ, **BASE_ENV), capture_output=True, text=True, timeout=300)
    assert result.returncode != 0, result.stdout + result.stderr
    report = json.loads(output.read_text())
    assert report["config"]["launcher"] == "torchrun" and report["config"]["ranks"] == 2
    assert [(row["backend"], row["wrong"]) for row in report["results"]] == [("dpa", 1)]


@pytest.mark.parametrize("arguments, message", [
    (["--sizes", "4KB"], "--sizes: '4KB' is not a size"),
    (["--sizes", "4097"], "--sizes: 4097 B is not a positive multiple of the 4 B of one float32 element"),
    (["--backends", "dpa,mpi"], "--backends: 'dpa,mpi': give each of dpa,gloo,nccl at most once"),
    (["--backends", "nccl"], "--backends nccl needs --device cuda"),
    (["--iterations", "0"], "--iterations must be at least 1, got 0"),
    (["-n", "0"], "--ranks must be at least 1, got 0"),
    (["--barrier", "mpi"], "--barrier: invalid choice: 'mpi'"),
    (["--collective", "all_to_all"], "--collective: invalid choice: 'all_to_all'"),
    (["--collective", "reduce_scatter", "-n", "3", "--sizes", "8", "--backends", "dpa"],
     "--sizes 8: fewer float32 elements than the 3 ranks' shards of a reduce_scatter"),
])
def test_bad_arguments_exit_2_naming_the_option(arguments, message):
    result = run_bench(*arguments, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr


def reference_mix32(value):
    value ^= value >> 16
    value = (value * 0x85EBCA6B) & 0xFFFFFFFF
    value ^= value >> 13
    value = (value * 0xC2B2AE35) & 0xFFFFFFFF
    return value ^ (value >> 16)


def test_hashed_inputs_match_the_reference_mix():
    # The CUDA inputs, computed here on the CPU: the same function of seed and index everywhere.
    seed = _bench_data.derive_seed(1, 2, 3)
    key = _bench_data.splitmix64(seed)
    bits = _bench_data.hashed_bits(seed, 1000, torch.device("cpu")).tolist()
    assert bits == [reference_mix32(reference_mix32(i ^ (key & 0xFFFFFFFF)) ^ (key >> 32)) for i in range(1000)]
    assert len(set(bits)) == 1000


@pytest.mark.parametrize("generate", [_bench_data.rank_input, _bench_data.hashed_input])
@pytest.mark.parametrize("dtype", _bench_data.DTYPES)
def test_inputs_are_reproducible_and_on_their_grid(dtype, generate):
    # hashed_input is what CUDA ranks run; here it runs on the CPU.
    torch_dtype = getattr(torch, dtype)
    cpu = torch.device("cpu")
    first = generate(7, 4096, torch_dtype, cpu)
    assert torch.equal(first, generate(7, 4096, torch_dtype, cpu))
    assert not torch.equal(first, generate(8, 4096, torch_dtype, cpu))
    assert first.dtype == torch_dtype
    values = first.double()
    if dtype == "int32":
        assert int(values.min()) >= -_bench_data.INT_HALF_RANGE and int(values.max()) < _bench_data.INT_HALF_RANGE
    else:
        assert float(values.min()) >= -1 and float(values.max()) <= 1
        if dtype == "float32":
            assert torch.equal(values * 2**23, (values * 2**23).round())  # exact on the 2^-23 grid
    assert len(set(values.tolist())) > 1000  # spread, not a handful of values


@pytest.mark.parametrize("dtype", _bench_data.DTYPES)
def test_inputs_and_references_written_into_reused_tensors_equal_fresh_ones(dtype):
    # dpa.bench refills its CPU pool and scratch tensors instead of allocating new ones: stale
    # contents (another seed's input, a reduced result) must not survive a refill.
    torch_dtype = getattr(torch, dtype)
    cpu = torch.device("cpu")
    fresh = _bench_data.rank_input(31, 4096, torch_dtype, cpu)
    stale = _bench_data.rank_input(32, 4096, torch_dtype, cpu) * 3
    refilled = _bench_data.rank_input(31, 4096, torch_dtype, cpu, out=stale)
    assert torch.equal(refilled, fresh) and refilled.dtype == torch_dtype
    assert refilled.data_ptr() == stale.data_ptr()
    for backend in ("dpa", "gloo"):
        shape, wide = _bench_data.reference_shape(4096, dtype, backend)
        out = torch.full(shape, 12345, dtype=wide)
        written = _bench_data.reference_parts(fresh, dtype, backend, out=out)
        assert written.data_ptr() == out.data_ptr()
        assert torch.equal(written, _bench_data.reference_parts(fresh, dtype, backend))
        assert torch.equal(written[0], fresh.to(wide))
        if shape[0] == 2:
            assert torch.equal(written[1], fresh.to(wide).abs())


def test_rounds_that_refill_the_pool_are_verified(tmp_path):
    # A pool of two 4 KiB tensors: 5 operations per view take three rounds, each refilling the
    # tensors the previous round's results were written into; every result checks out.
    output = tmp_path / "bench.json"
    result = run_bench("-n", "2", "--sizes", "4KiB", "--iterations", "5", "--warmup", "1", "--pool-bytes", "8KiB",
                       "--json", str(output))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(output.read_text())
    assert report["wrong"] == 0
    for row in report["results"]:
        assert row["wrong"] == 0 and row["checked"] == (1 + 5 + 5) * row["elements"] * 2, row


@pytest.mark.parametrize("backend", ["dpa", "gloo"])
@pytest.mark.parametrize("dtype", _bench_data.DTYPES)
def test_the_exact_sum_passes_and_a_small_error_is_caught(backend, dtype):
    torch_dtype = getattr(torch, dtype)
    seeds = [11, 12, 13, 14]
    inputs = [_bench_data.rank_input(seed, 5000, torch_dtype, torch.device("cpu")) for seed in seeds]
    exact = sum(x.double() for x in inputs)
    result = exact.to(torch_dtype)  # the exact sum, rounded once to the dtype
    assert _bench_data.count_wrong(result, seeds, dtype, backend) == 0
    # A sum that leaves out one rank's largest contribution.
    index = int(inputs[2].double().abs().argmax())
    result[index] = (exact[index] - inputs[2][index].double()).to(torch_dtype)
    assert _bench_data.count_wrong(result, seeds, dtype, backend) == 1
    result[index] = float("nan") if dtype != "int32" else exact[index] + 1
    assert _bench_data.count_wrong(result, seeds, dtype, backend) == 1


@pytest.mark.parametrize("backend", ["dpa", "gloo"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_wrong_elements_are_counted_in_every_chunk_of_a_large_result(backend, dtype, monkeypatch):
    # The check runs chunk by chunk: an error in the first, a middle and the short last chunk
    # each counts, and the elements around the chunks' edges are checked once.
    monkeypatch.setattr(_bench_data, "VERIFY_CHUNK", 1000)
    torch_dtype = getattr(torch, dtype)
    seeds = [21, 22, 23]
    count = 3 * 1000 + 7
    inputs = [_bench_data.rank_input(seed, count, torch_dtype, torch.device("cpu")) for seed in seeds]
    result = sum(x.double() for x in inputs).to(torch_dtype)
    assert _bench_data.count_wrong(result, seeds, dtype, backend) == 0
    for index in (0, 999, 1000, 1500, count - 1):
        result[index] += 1 if dtype == "int32" else 64 * len(seeds)
    assert _bench_data.count_wrong(result, seeds, dtype, backend) == 5


@pytest.mark.parametrize("dtype", _bench_data.DTYPES)
def test_the_reference_is_the_same_in_any_order(dtype):
    # The ranks add their widened inputs over Gloo in whatever order its algorithm takes: that is
    # only a valid reference if every order gives the same, exact sum.
    torch_dtype = getattr(torch, dtype)
    parts = [_bench_data.reference_parts(_bench_data.rank_input(seed, 4096, torch_dtype, torch.device("cpu")),
                                         dtype, "gloo") for seed in range(64)]
    forward = torch.zeros_like(parts[0])
    for part in parts:
        forward += part
    backward = torch.zeros_like(parts[0])
    for part in reversed(parts):
        backward += part
    pairwise = parts
    while len(pairwise) > 1:
        pairwise = [pairwise[i] + pairwise[i + 1] for i in range(0, len(pairwise), 2)]
    assert torch.equal(forward, backward) and torch.equal(forward, pairwise[0])
    if dtype != "int32":
        # And it is the exact sum: widening to 128 bits is not available, so check against a
        # sum of integers on the inputs' finest grid (2^-30).
        scaled = sum((part[0] * 2.0**30).to(torch.int64) for part in parts)
        assert torch.equal((forward[0] * 2.0**30).to(torch.int64), scaled)
