# SPDX-License-Identifier: Apache-2.0
"""Timeouts with torch's meaning (docs/protocol.md §6.7): a rank that is late, even beyond the
C++ API's 10 s DPA_TIMEOUT_MS, fails nothing before the process group's timeout; a rank or a
switch that is gone is reported on the others within seconds, naming it; and the process
group's timeout really fires, naming the rank the operation waited for."""

import datetime
import multiprocessing
import os
import queue
import signal
import tempfile
import threading
import time

import pytest
import torch
import torch.distributed as dist

from dpa.tools._launch import _environment
from harness import BASE_ENV, run_ranks

# Short liveness timeout so that the tests of dead ranks and switches stay short: the embedded
# switch's session takes the workers' setting.
LIVENESS_MS = 2000


def init_with_timeout(rank, world, init_file, seconds):
    import dpa  # noqa: F401 - registers the backend

    dist.init_process_group("dpa", init_method="file://" + init_file, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=seconds))


def late_rank_worker(rank, world, init_file, pause_s):
    assert "DPA_TIMEOUT_MS" not in os.environ, "the process group's timeout must decide"
    import dpa

    init_with_timeout(rank, world, init_file, 60)
    seen = {}
    if rank == 0:
        time.sleep(pause_s)  # a checkpoint: this rank is late, not dead
    else:
        # What the waiting rank reports while it waits, asked from another thread.
        done = threading.Event()

        def watch():
            while not done.wait(0.2):
                wait = dpa.pending()
                if wait is not None and wait["waited_s"] >= 2:
                    seen.update(wait)
                    return

        watcher = threading.Thread(target=watch)
        watcher.start()
    tensor = torch.ones(1000)
    started = time.monotonic()
    dist.all_reduce(tensor)
    waited = time.monotonic() - started
    if rank == 1:
        done.set()
        watcher.join()
    # Exactness of such sums is issue 47's part 2 (docs/protocol.md §10.4 bounds the error).
    assert torch.allclose(tensor, torch.full((1000,), 2.0))
    return waited, seen, dpa.pending()


def test_a_rank_later_than_the_old_10_s_default_fails_nothing():
    pause_s = 12
    results = run_ranks(late_rank_worker, 2, args=(pause_s,), timeout=120)
    waited, seen, after = results[1]
    assert waited >= pause_s - 1, f"rank 1 waited only {waited:.1f} s"
    assert seen.get("ranks") == [0], seen
    assert seen["op_id"] >= 1 and seen["waited_s"] >= 2, seen
    assert after is None, "nothing pends after the all_reduce"


def group_timeout_worker(rank, world, init_file):
    init_with_timeout(rank, world, init_file, 3)
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        started = time.monotonic()
        with pytest.raises(RuntimeError) as error:
            dist.all_reduce(torch.ones(10))
        elapsed = time.monotonic() - started
        store.set("rank0-failed", "1")
        return elapsed, str(error.value)
    # Alive, but never issues the all_reduce (a store wait: no collective with the 3 s timeout).
    store.wait(["rank0-failed"], datetime.timedelta(seconds=60))
    return None


def test_the_process_group_timeout_fires_naming_the_rank_it_waited_for():
    elapsed, message = run_ranks(group_timeout_worker, 2, timeout=120)[0]
    assert 2.9 < elapsed < 8, f"failed after {elapsed:.1f} s, not the process group's 3 s"
    assert "waited 3000 ms for rank 1" in message, message


def die_or_wait_worker(rank, world, init_file, results, victim):
    """Rank `victim` SIGKILLs itself once both ranks joined; the other reports how long after
    the kill its all_reduce failed, and with what."""
    def report(kind, value):
        # The queue's feeder thread must have written it before the process ends abruptly.
        results.put((kind, value))
        results.close()
        results.join_thread()

    try:
        init_with_timeout(rank, world, init_file, 600)
        dist.barrier()
        if rank == victim:
            report("killed", time.time())
            os.kill(os.getpid(), signal.SIGKILL)
        with pytest.raises(RuntimeError) as error:
            dist.all_reduce(torch.ones(1000))
        report("failed", (time.time(), str(error.value)))
    except BaseException as error:  # noqa: BLE001 - reported to the test, which fails
        report("error", repr(error))
    # The peer is gone: close() would wait for it at exit.
    os._exit(0)


def run_with_a_killed_rank(victim, timeout_s=90):
    """Two ranks; returns (seconds from the kill to the survivor's failure, its message)."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    init_file = tempfile.mktemp(prefix="dpa-store-")
    env = {key: value for key, value in BASE_ENV.items() if key not in os.environ}
    env["DPA_LIVENESS_TIMEOUT_MS"] = str(LIVENESS_MS)
    with _environment(env):
        processes = [context.Process(target=die_or_wait_worker, args=(rank, 2, init_file, results, victim))
                     for rank in range(2)]
        for process in processes:
            process.start()
    try:
        outcome = {}
        deadline = time.monotonic() + timeout_s
        while len(outcome) < 2:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no verdict within {timeout_s} s: {outcome}"
            try:
                kind, value = results.get(timeout=remaining)
            except queue.Empty:
                continue
            assert kind != "error", value
            outcome[kind] = value
        failed_at, message = outcome["failed"]
        return failed_at - outcome["killed"], message
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join(10)
        if os.path.exists(init_file):
            os.unlink(init_file)


def test_a_killed_rank_is_reported_within_seconds_naming_it():
    # Rank 0 embeds the switch: rank 1 dies.
    detection_s, message = run_with_a_killed_rank(victim=1)
    print(f"killed rank reported after {detection_s:.2f} s: {message}")
    assert "rank 1" in message and "has not heard rank 1 for" in message, message
    assert detection_s < LIVENESS_MS / 1000 + 3, f"reported {detection_s:.1f} s after the kill"


def test_a_dead_switch_is_reported_within_seconds():
    # Rank 0 embeds the switch: killing it kills the switch.
    detection_s, message = run_with_a_killed_rank(victim=0)
    print(f"dead switch reported after {detection_s:.2f} s: {message}")
    assert "no reply from the switch" in message and "DPA_LIVENESS_TIMEOUT_MS" in message, message
    assert detection_s < LIVENESS_MS / 1000 + 3, f"reported {detection_s:.1f} s after the kill"
