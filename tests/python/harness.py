"""Runs a function on N ranks in fresh processes and checks dpa's float error bound.

Every rank is a spawned process with its own environment; the parent collects each rank's return
value (or traceback), bounds the whole run with a timeout, and kills whatever is left over.
"""

import math
import multiprocessing
import os
import queue
import socket
import tempfile
import time
import traceback

import numpy as np

# Keeps N ranks on a 2-core machine from fighting over intra-op threads, and Gloo on loopback.
BASE_ENV = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
PAYLOAD = 2048  # the embedded switch's default packet payload (values per block)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(fn, rank, world, init_file, env, args, results):
    os.environ.update(env)
    import torch.distributed as dist

    try:
        value = fn(rank, world, init_file, *args)
        results.put((rank, "ok", value))
    except BaseException:  # noqa: B902 - report everything, including assertion failures
        results.put((rank, "error", traceback.format_exc()))
        return
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(fn, world, env=None, args=(), timeout=120):
    """Runs fn(rank, world, init_file, *args) on `world` processes; returns the values by rank.

    fn usually calls dist.init_process_group("dpa", init_method="file://" + init_file, ...).
    A rank that raises fails the run with its traceback; a run that exceeds `timeout` seconds
    fails, and every process still alive is killed."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    full_env = dict(BASE_ENV, **(env or {}))
    init_file = tempfile.mktemp(prefix="dpa-test-store-")
    processes = [
        context.Process(target=_child, args=(fn, rank, world, init_file, full_env, args, results))
        for rank in range(world)
    ]
    for process in processes:
        process.start()
    deadline = time.monotonic() + timeout
    values, errors = {}, {}
    try:
        while len(values) + len(errors) < world:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"ranks {sorted(set(range(world)) - set(values) - set(errors))} did not "
                    f"finish within {timeout} s; errors so far: {errors}"
                )
            try:
                rank, status, value = results.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in processes) and not errors:
                    dead = {r: p.exitcode for r, p in enumerate(processes) if p.exitcode}
                    raise AssertionError(f"rank processes died: exit codes {dead}")
                continue
            (values if status == "ok" else errors)[rank] = value
            if errors:
                break
        if errors:
            rank = min(errors)
            raise AssertionError(f"rank {rank} failed:\n{errors[rank]}")
        for process in processes:
            process.join(max(deadline - time.monotonic(), 5))
            if process.exitcode is None:
                raise AssertionError(f"a rank did not exit within {timeout} s after finishing")
        return [values[rank] for rank in range(world)]
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join(5)
        if os.path.exists(init_file):
            os.unlink(init_file)


def init_dpa(rank, world, init_file):
    import torch.distributed as dist

    import dpa  # noqa: F401 - registers the backend

    dist.init_process_group("dpa", init_method="file://" + init_file, rank=rank, world_size=world)


def block_exponents(max_abs, payload=PAYLOAD):
    """Per block, the smallest e with |v| <= 2^e for the block's largest |v| (protocol.md §10.1)."""
    blocks = math.ceil(len(max_abs) / payload) if len(max_abs) else 0
    padded = np.zeros(blocks * payload)
    padded[: len(max_abs)] = max_abs
    block_max = padded.reshape(blocks, payload).max(axis=1)
    mantissa, exponent = np.frexp(block_max)
    e = exponent - (mantissa == 0.5)
    return np.maximum(e, -96), block_max


def float_bound(inputs, payload=PAYLOAD, contributors=None):
    """protocol.md §10.4: |result - exact| <= N (2^(e+h-32) + 2^(e-24)) + 2^-23 |exact| for SUM;
    for AVG (pass `contributors`) the exact value and the bound are divided by the contributors.
    `inputs`: one float64 array of each rank's fp32 values. Returns (exact, bound) per element."""
    stacked = np.stack(inputs)
    n = stacked.shape[0]
    h = math.ceil(math.log2(n)) if n > 1 else 0
    exact = stacked.sum(axis=0)
    if stacked.shape[1] == 0:
        return exact, exact.copy()  # nothing to bound
    e, block_max = block_exponents(np.abs(stacked).max(axis=0), payload)
    per_block = n * (np.exp2(e + h - 32) + np.exp2(e - 24))
    per_block[block_max == 0] = 0.0
    bound = np.repeat(per_block, payload)[: stacked.shape[1]] + 2.0**-23 * np.abs(exact)
    if contributors:
        exact, bound = exact / contributors, bound / contributors
    return exact, bound
