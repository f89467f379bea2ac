# SPDX-License-Identifier: Apache-2.0
"""The job sizing on the embedded switch (docs/configuration.md §8): agreed by every rank, overridden by
the DPA_* variables, small tensors on the small-payload session, and small CPU operations run on
the calling thread in the default worksteal mode."""

import os

import pytest
import torch
import torch.distributed as dist

from harness import dpa_backend, init_dpa, run_ranks


def sizing_worker(rank, world, init_file):
    init_dpa(rank, world, init_file)
    backend = dpa_backend()
    sizing = dict(field.split("=") for field in backend.sizing.split())
    # Both sessions reduce correctly: a small and a large tensor.
    small = torch.full((1000,), float(rank + 1))
    large = torch.full((40000,), float(rank + 1))
    dist.all_reduce(small)
    dist.all_reduce(large)
    expected = float(sum(range(1, world + 1)))
    assert torch.all(small == expected) and torch.all(large == expected)
    return sizing, backend.payload_for(1000), backend.payload_for(40000)


def test_every_rank_uses_rank_0s_sizing():
    results = run_ranks(sizing_worker, 2, timeout=120)
    assert results[0] == results[1]
    sizing, small_payload, large_payload = results[0]
    cores = len(os.sched_getaffinity(0))
    threads = max(1, min(4, (cores + 1) // 2))
    assert int(sizing["threads"]) == threads
    assert int(sizing["switch_threads"]) == max(threads, min(8, cores // 2))  # 2 ranks: few per host
    assert (small_payload, large_payload) == (1024, 16000)
    assert 1 <= int(sizing["window"]) <= 64


def test_variables_override_the_sizing():
    env = {"DPA_THREADS": "2", "DPA_WINDOW": "5", "DPA_PAYLOAD": "1024", "DPA_SWITCH_THREADS": "1"}
    sizing, small_payload, large_payload = run_ranks(sizing_worker, 2, env=env, timeout=120)[1]
    assert (sizing["threads"], sizing["window"], sizing["payload"]) == ("2", "5", "1024")
    assert sizing["switch_threads"] == "1" and sizing["small_payload"] == "0"
    # DPA_PAYLOAD chooses one payload for everything.
    assert (small_payload, large_payload) == (1024, 1024)


def lone_override_worker(rank, world, init_file):
    if rank == 1:
        os.environ["DPA_WINDOW"] = "3"
    init_dpa(rank, world, init_file)


def test_a_rank_that_overrides_alone_fails_naming_the_setting():
    with pytest.raises(RuntimeError) as failure:
        run_ranks(lone_override_worker, 2, env={"DPA_JOIN_TIMEOUT_MS": "20000"}, timeout=120)
    assert "window" in str(failure.value)


def inline_worker(rank, world, init_file):
    init_dpa(rank, world, init_file)
    small = torch.ones(1000, dtype=torch.int32)  # int32: sums are exact
    # Small CPU operations with nothing queued run on the calling thread: done on return.
    completed = [dist.all_reduce(small, async_op=True).is_completed() for _ in range(5)]
    large = torch.ones(1 << 18, dtype=torch.int32)
    work = dist.all_reduce(large, async_op=True)
    work.wait()
    assert torch.all(small == world**5) and torch.all(large == world), (completed, small[:3], large[:3])
    return completed


def test_small_cpu_operations_run_inline_in_worksteal_mode():
    for completed in run_ranks(inline_worker, 2, env={"DPA_TORCH_MODE": "worksteal"}, timeout=120):
        assert completed == [True] * 5
