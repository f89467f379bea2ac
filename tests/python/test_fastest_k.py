# SPDX-License-Identifier: Apache-2.0
"""Fastest-K choices: a thread's dpa.fastest_k() scope, the process default of
dpa.set_default_fastest_k(), and what dpa.last_stats() reports about them."""

import threading
from datetime import timedelta
import time

import pytest
import torch
import torch.distributed as dist

from harness import init_dpa, run_ranks

LATE_SECONDS = 0.6


def timed_all_reduce(tensor, late):
    if late:
        time.sleep(LATE_SECONDS)
    started = time.monotonic()
    dist.all_reduce(tensor)
    return time.monotonic() - started


def scopes_worker(rank, world, init_file):
    import dpa

    init_dpa(rank, world, init_file)
    late = rank == world - 1
    seen = {}

    # A scope on this thread: preemptive K = 1 completes every block at the first arrival.
    with dpa.fastest_k(1, preemptive=True):
        seconds = timed_all_reduce(torch.ones(5000), late)
    seen["scope"] = (seconds, dpa.last_stats())
    dist.barrier()

    # The scope does not leak to other threads or outlive its block.
    assert dpa._C.thread_fastest_k() == (None, None)
    other = []
    with dpa.fastest_k(1):
        thread = threading.Thread(target=lambda: other.append(dpa._C.thread_fastest_k()))
        thread.start()
        thread.join()
    assert other == [(None, None)]

    # The process default, and a scope that overrides it back to every rank.
    dpa.set_default_fastest_k(1, preemptive=True)
    seen["default"] = (timed_all_reduce(torch.ones(5000), late), dpa.last_stats())
    dist.barrier()
    with dpa.fastest_k(world):
        seen["override"] = (timed_all_reduce(torch.ones(5000), False), dpa.last_stats())
    dpa.set_default_fastest_k(None)
    with pytest.raises(ValueError):
        dpa.set_default_fastest_k(-1)
    return seen


def test_fastest_k_scope_and_default():
    world = 2
    results = run_ranks(scopes_worker, world)
    fast = results[0]
    for case in ("scope", "default"):
        seconds, stats = fast[case]
        assert seconds < LATE_SECONDS / 2, f"{case}: the fast rank waited {seconds:.3f} s"
        assert stats["min_contributors"] == 1 and stats["blocks_partial"] == stats["blocks"], stats
    _, stats = fast["override"]
    assert stats["min_contributors"] == world and stats["blocks_full"] == stats["blocks"], stats
    # The late rank still completes; its blocks hold the fast rank's partial result.
    for case in ("scope", "default"):
        _, stats = results[world - 1][case]
        assert stats["blocks"] > 0 and stats["contributed"] == 0, stats


def environment_worker(rank, world, init_file):
    import dpa

    init_dpa(rank, world, init_file)
    seconds = timed_all_reduce(torch.ones(5000), rank == world - 1)
    return seconds, dpa.last_stats()


def test_fastest_k_from_environment():
    world = 2
    results = run_ranks(environment_worker, world, env={"DPA_K": "1", "DPA_PREEMPTIVE": "1"})
    seconds, stats = results[0]
    assert seconds < LATE_SECONDS / 2, f"the fast rank waited {seconds:.3f} s"
    assert stats["min_contributors"] == 1 and stats["blocks_partial"] == stats["blocks"], stats


def subgroup_worker(rank, world, init_file):
    import dpa

    init_dpa(rank, world, init_file)
    # A second dpa group has its own embedded switch and session; both stay usable.
    pair = dist.new_group([0, 1], backend="dpa")
    tensor = torch.full((3000,), float(rank + 1))
    if rank < 2:
        with dpa.fastest_k(2):
            dist.all_reduce(tensor, group=pair)
        assert (tensor - 3.0).abs().max() < 1e-5, tensor
    whole = torch.full((10,), 1, dtype=torch.int32)
    dist.all_reduce(whole)
    assert whole.tolist() == [world] * 10
    return True


def test_second_dpa_group():
    run_ranks(subgroup_worker, 3)


def sleeping_rank_worker(rank, world, init_file, elements, operations):
    import dpa

    init_dpa(rank, world, init_file)
    store = dist.FileStore(init_file + ".fast", world)
    own = 10.0 ** rank
    tensor = torch.full((elements,), own)
    if rank == world - 1:
        # Sends nothing, and reads nothing from its inbox, until the others are done: shared
        # memory lends it the switch's buffers meanwhile, which must not stall the others.
        store.wait(["fast-ranks-done"], timedelta(seconds=90))
    with dpa.fastest_k(world - 1, preemptive=True):
        for _ in range(operations):
            dist.all_reduce(tensor.fill_(own))
    stats = dpa.last_stats()
    if rank == 0:
        store.set("fast-ranks-done", "1")
    dist.barrier()
    return tensor[:4].tolist(), stats["blocks_partial"], stats["blocks"]


@pytest.mark.parametrize("transport", ["shm", "udp"])
def test_fast_ranks_finish_while_a_rank_sleeps(transport):
    # 12 operations of 3 MB each: many more results than the switch's shared-memory buffers hold.
    world, elements, operations = 3, 750_000, 12
    values = run_ranks(sleeping_rank_worker, world, args=(elements, operations),
                       env={"DPA_TRANSPORT": transport, "DPA_TIMEOUT_MS": "20000"}, timeout=150)
    for rank in range(world - 1):
        ours, partial, blocks = values[rank]
        assert ours == [11.0] * 4, f"rank {rank}: the fast ranks' sum 1 + 10, got {ours}"
        assert partial == blocks > 0
    # The late rank gets the stored result where the slot still holds it, else keeps its own 100.
    late, _, _ = values[world - 1]
    assert all(value in (11.0, 100.0) for value in late), late
