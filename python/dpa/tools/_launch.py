# SPDX-License-Identifier: Apache-2.0
"""Runs one function on N ranks, each in a fresh spawned process (used by dpa.demo, dpa.bench
and the tests).

The parent collects every rank's return value or traceback, bounds the run with a timeout that
starts once every rank is up (importing torch takes seconds on some hosts, and is not the run's
fault), bounds the start-up separately, and kills whatever is still alive when it returns, so a
hung rank never outlives the run."""

import contextlib
import faulthandler
import multiprocessing
import os
import queue
import signal
import socket
import tempfile
import time
import traceback

# Keeps N ranks on a small machine from fighting over intra-op threads, and Gloo on loopback;
# like torchrun, a value the caller set in the environment wins (OMP_NUM_THREADS=3 gives each
# rank three cores for its compute).
LOCAL_ENV = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
STACK_DUMP_SIGNAL = signal.SIGUSR1
STACK_DUMP_GRACE_S = 1.0
STARTUP_TIMEOUT_S = 300.0  # spawning a rank and importing torch and dpa, generously


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(fn, rank, world, init_file, results, args):
    import torch.distributed as dist

    # The parent asks a rank that overran for its Python stacks before killing it.
    faulthandler.register(STACK_DUMP_SIGNAL, file=open(_stacks_path(init_file, rank), "w"),
                          all_threads=True)
    results.put((rank, "started", None))
    try:
        value = fn(rank, world, init_file, *args)
        results.put((rank, "ok", value))
    except BaseException:  # noqa: B902 - report everything, including assertion failures
        results.put((rank, "error", traceback.format_exc()))
        return
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@contextlib.contextmanager
def _environment(variables):
    """os.environ with `variables` set, restored on exit."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _stacks_path(init_file, rank):
    return f"{init_file}-stacks-{rank}"


def _stacks_of_running_ranks(processes, init_file, started):
    """The Python stacks of every rank still running, as text for an error message."""
    alive = {rank: process for rank, process in enumerate(processes) if process.is_alive()}
    starting = sorted(rank for rank in alive if rank not in started)
    alive = {rank: process for rank, process in alive.items() if rank in started}
    text = "".join(f"\n--- rank {rank}: still starting (spawning, importing), no stacks yet ---\n"
                   for rank in starting)
    for process in alive.values():
        os.kill(process.pid, STACK_DUMP_SIGNAL)
    if not alive:
        return text
    # Only on the way to killing them: the handler writes within milliseconds, and nothing
    # says when it has.
    time.sleep(STACK_DUMP_GRACE_S)
    for rank in alive:
        try:
            with open(_stacks_path(init_file, rank)) as dump:
                text += f"\n--- rank {rank} (still running) ---\n{dump.read()}"
        except OSError as error:
            text += f"\n--- rank {rank}: no stacks ({error}) ---\n"
    return text


def run_ranks(fn, world, env=None, args=(), timeout=120):
    """Runs fn(rank, world, init_file, *args) on `world` processes; returns the values by rank.

    fn usually calls dist.init_process_group(backend, init_method="file://" + init_file, ...).
    `env` is added to LOCAL_ENV (whose variables the caller's environment overrides) in every
    rank. A rank that raises fails the run with its traceback (RuntimeError); a run that exceeds
    `timeout` seconds once every rank has started, or ranks that take STARTUP_TIMEOUT_S to start,
    fail it, and every process still alive is killed."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    defaults = {key: value for key, value in LOCAL_ENV.items() if key not in os.environ}
    full_env = dict(defaults, **(env or {}))
    init_file = tempfile.mktemp(prefix="dpa-store-")
    processes = [
        context.Process(target=_child, args=(fn, rank, world, init_file, results, args))
        for rank in range(world)
    ]
    # A spawned process starts with the parent's environment, and unpickling fn imports torch
    # before any code of the child runs: the variables must be set at spawn for OpenMP and torch
    # to see them (N ranks of 16 intra-op threads each crawl on a 16-core host).
    with _environment(full_env):
        for process in processes:
            process.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    values, errors, started = {}, {}, set()
    try:
        while len(values) + len(errors) < world:
            remaining = deadline - time.monotonic()
            if remaining <= 0 and len(started) < world:
                raise RuntimeError(
                    f"ranks {sorted(set(range(world)) - started)} did not start within "
                    f"{STARTUP_TIMEOUT_S:g} s" + _stacks_of_running_ranks(processes, init_file, started))
            if remaining <= 0:
                raise RuntimeError(
                    f"ranks {sorted(set(range(world)) - set(values) - set(errors))} did not "
                    f"finish within {timeout} s; errors so far: {errors}"
                    + _stacks_of_running_ranks(processes, init_file, started)
                )
            try:
                rank, status, value = results.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in processes) and not errors:
                    dead = {r: p.exitcode for r, p in enumerate(processes) if p.exitcode}
                    raise RuntimeError(f"rank processes died: exit codes {dead}")
                continue
            if status == "started":
                started.add(rank)
                if len(started) == world:
                    deadline = time.monotonic() + timeout
                continue
            (values if status == "ok" else errors)[rank] = value
            if errors:
                break
        if errors:
            rank = min(errors)
            raise RuntimeError(f"rank {rank} failed:\n{errors[rank]}")
        for process in processes:
            process.join(max(deadline - time.monotonic(), 5))
            if process.exitcode is None:
                raise RuntimeError(f"a rank did not exit within {timeout} s after finishing"
                                   + _stacks_of_running_ranks(processes, init_file, started))
        return [values[rank] for rank in range(world)]
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join(5)
        for path in [init_file] + [_stacks_path(init_file, rank) for rank in range(world)]:
            if os.path.exists(path):
                os.unlink(path)
