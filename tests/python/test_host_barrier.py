# SPDX-License-Identifier: Apache-2.0
"""dpa.bench's shared-memory barrier: ranks of one host get it and no rank leaves it before every
rank has arrived; ranks that do not all share a host (or /dev/shm) fall back to Gloo's barrier
alone, all of them; a rank that never arrives is named; the file is gone once the ranks mapped it.
Ranks are threads here, gathering through a Python barrier, so each case is bounded by its
timeouts. No timing is asserted."""

import os
import threading

import pytest

from dpa.tools import _host_barrier
from dpa.tools._host_barrier import SharedMemoryBarrier

WAIT_S = 30


class ThreadGather:
    """gather_objects for `world` threads: every thread gets every thread's value, in rank order."""

    def __init__(self, world):
        self.values = [None] * world
        self.meeting = threading.Barrier(world, timeout=WAIT_S)

    def __call__(self, rank):
        def gather(value):
            self.values[rank] = value
            self.meeting.wait()
            gathered = list(self.values)
            self.meeting.wait()
            return gathered
        return gather


def on_threads(world, body):
    """body(rank, gather) on `world` threads; returns their results, raising the first error."""
    gather = ThreadGather(world)
    results, errors = [None] * world, []

    def rank_main(rank):
        try:
            results[rank] = body(rank, gather(rank))
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            errors.append(error)
            gather.meeting.abort()

    threads = [threading.Thread(target=rank_main, args=(rank,)) for rank in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
        assert not thread.is_alive(), "a rank did not finish"
    if errors:
        raise errors[0]
    return results


def barrier_files():
    return {name for name in os.listdir(_host_barrier.SHM_DIRECTORY) if name.startswith("dpa-bench-barrier-")}


def test_no_rank_leaves_before_every_rank_arrived():
    world, rounds = 4, 200
    before = barrier_files()
    arrived = [0] * rounds
    lock = threading.Lock()

    def body(rank, gather):
        barrier = SharedMemoryBarrier.for_one_host(rank, world, gather)
        assert barrier is not None
        try:
            seen = []
            for round_index in range(rounds):
                with lock:
                    arrived[round_index] += 1
                barrier.wait()
                seen.append(arrived[round_index])
            return seen
        finally:
            barrier.close()

    for seen in on_threads(world, body):
        assert seen == [world] * rounds
    assert barrier_files() == before


def test_ranks_on_different_hosts_all_fall_back():
    # Rank 1 is in another network namespace: no rank gets the barrier. The first value a rank
    # gathers is its host identity.
    identities = ["boot=a net=1:1 shm=1:1", "boot=a net=1:2 shm=1:1", "boot=a net=1:1 shm=1:1"]

    def body(rank, gather):
        calls = []

        def gather_as_if_elsewhere(value):
            calls.append(value)
            return gather(identities[rank] if len(calls) == 1 else value)

        return SharedMemoryBarrier.for_one_host(rank, 3, gather_as_if_elsewhere)

    assert on_threads(3, body) == [None, None, None]


def test_one_rank_alone_has_no_barrier():
    assert on_threads(1, lambda rank, gather: SharedMemoryBarrier.for_one_host(rank, 1, gather)) == [None]


def test_a_rank_that_never_arrives_is_named(monkeypatch):
    monkeypatch.setattr(_host_barrier, "ARRIVAL_TIMEOUT_S", 0.2)

    def body(rank, gather):
        barrier = SharedMemoryBarrier.for_one_host(rank, 3, gather)
        try:
            if rank != 2:
                barrier.wait()
        finally:
            gather(None)  # rank 2 stays away until the others have given up
            barrier.close()

    with pytest.raises(RuntimeError, match=r"ranks \[2\] did not reach the shared-memory barrier 1 within"):
        on_threads(3, body)


def test_ranks_fall_back_together_when_the_barrier_file_cannot_be_made(tmp_path, monkeypatch):
    # A "directory" that is a file: every rank sees one host, and rank 0 fails to create the file.
    not_a_directory = tmp_path / "shm"
    not_a_directory.write_text("")
    monkeypatch.setattr(_host_barrier, "SHM_DIRECTORY", str(not_a_directory))
    assert on_threads(3, lambda rank, gather: SharedMemoryBarrier.for_one_host(rank, 3, gather)) == [None] * 3
