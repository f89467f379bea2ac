# SPDX-License-Identifier: Apache-2.0
"""Ranks that disagree on an all_reduce fail in that operation, every one of them, with both
values named; the next matched all_reduce works (the ranks rejoin the session by themselves)."""

import pytest
import torch
import torch.distributed as dist

from harness import init_dpa, run_ranks


def size_mismatch_worker(rank, world, init_file):
    init_dpa(rank, world, init_file)
    with pytest.raises(RuntimeError) as error:
        dist.all_reduce(torch.ones(1000 + rank))
    message = str(error.value)
    assert "element count" in message and "1000" in message and "1001" in message, message
    matched = torch.ones(10)
    dist.all_reduce(matched)
    assert torch.allclose(matched, torch.full((10,), 2.0)), (rank, matched.tolist())
    return message


def test_size_mismatch_fails_on_every_rank_then_matched_operations_work():
    run_ranks(size_mismatch_worker, 2, env={"DPA_TIMEOUT_MS": "5000"}, timeout=90)


def dtype_mismatch_worker(rank, world, init_file):
    init_dpa(rank, world, init_file)
    tensor = torch.ones(4096, dtype=torch.int32 if rank == 0 else torch.float32)
    with pytest.raises(RuntimeError, match="data type") as error:
        dist.all_reduce(tensor)
    message = str(error.value)
    assert "int32" in message and "float32" in message, message
    matched = torch.arange(6, dtype=torch.int32)
    dist.all_reduce(matched)
    assert matched.tolist() == [0, 2, 4, 6, 8, 10]
    return message


def test_dtype_mismatch_fails_on_every_rank_then_matched_operations_work():
    run_ranks(dtype_mismatch_worker, 2, env={"DPA_TIMEOUT_MS": "5000"}, timeout=90)


def repeated_mismatch_worker(rank, world, init_file, rounds):
    init_dpa(rank, world, init_file)
    for round_ in range(rounds):
        tensor = torch.ones(4096, dtype=torch.int32 if rank == 0 else torch.float32)
        with pytest.raises(RuntimeError, match="data type"):
            dist.all_reduce(tensor)
        matched = torch.arange(6, dtype=torch.int32)
        dist.all_reduce(matched)
        assert matched.tolist() == [0, 2, 4, 6, 8, 10], (round_, matched.tolist())


def test_every_rejoin_of_many_reaches_the_switch_and_the_next_operation_works():
    """Each failed operation makes the ranks rejoin over shared memory with new queues. They used
    to take the old queues' ports, and the switch read some of their packets from an old owner's
    buffers (a stale JOIN: the rejoin hung; an old data type: the next operation failed)."""
    run_ranks(repeated_mismatch_worker, 2, env={"DPA_TIMEOUT_MS": "5000", "DPA_JOIN_TIMEOUT_MS": "10000"},
              args=(25,), timeout=120)
