# SPDX-License-Identifier: Apache-2.0
"""Failures are errors, never hangs: a rank that never joins an all_reduce makes the others'
fail after DPA_TIMEOUT_MS; bad settings and a mismatched torch are reported by name."""

import os
import re
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from harness import BASE_ENV, init_dpa, run_ranks


def absent_rank_worker(rank, world, init_file):
    init_dpa(rank, world, init_file)
    elapsed = None
    if rank == 0:
        started = time.monotonic()
        with pytest.raises(RuntimeError) as error:
            dist.all_reduce(torch.ones(1000))
        elapsed = time.monotonic() - started
        message = str(error.value)
        assert "rank 0" in message and "DPA_TIMEOUT_MS" in message, message
    # Rank 1 never issued the all_reduce; both meet again in a (Gloo) barrier.
    dist.barrier()
    return elapsed


def test_missing_rank_times_out():
    elapsed = run_ranks(absent_rank_worker, 2, env={"DPA_TIMEOUT_MS": "1000"}, timeout=60)[0]
    assert 0.9 < elapsed < 10, f"the all_reduce failed after {elapsed:.2f} s"


def async_timeout_worker(rank, world, init_file):
    init_dpa(rank, world, init_file)
    if rank == 0:
        work = dist.all_reduce(torch.ones(10), async_op=True)
        future = work.get_future()
        with pytest.raises(RuntimeError, match="timed out|no reply|DPA_TIMEOUT_MS"):
            future.wait()
        with pytest.raises(RuntimeError, match="DPA_TIMEOUT_MS"):
            work.wait()
        assert work.is_completed()
    dist.barrier()
    return True


def test_async_work_and_future_raise():
    run_ranks(async_timeout_worker, 2, env={"DPA_TIMEOUT_MS": "800"}, timeout=60)


def expect_init_error_worker(rank, world, init_file, pattern):
    with pytest.raises(RuntimeError, match=pattern):
        init_dpa(rank, world, init_file)
    return True


def test_unknown_mode_names_the_variable():
    run_ranks(expect_init_error_worker, 1, env={"DPA_TORCH_MODE": "fastest"},
              args=("DPA_TORCH_MODE='fastest'",), timeout=60)


@pytest.mark.parametrize("variable, value, message", [
    ("DPA_WINDOW", "-1", 'DPA_WINDOW="-1": expected an integer in [1, 4096]'),
    ("DPA_WINDOW", "0", 'DPA_WINDOW="0": expected an integer in [1, 4096]'),
    ("DPA_THREADS", "65", 'DPA_THREADS="65": expected an integer in [1, 64]'),
    ("DPA_TIMEOUT_MS", "-5", 'DPA_TIMEOUT_MS="-5": expected an integer in [1, 86400000]'),
    ("DPA_FAULT_DROP", "2", 'DPA_FAULT_DROP="2": expected a number in [0, 1]'),
])
def test_bad_worker_variable_is_named(variable, value, message):
    run_ranks(expect_init_error_worker, 1, env={variable: value}, args=(re.escape(message),), timeout=60)


def test_embedded_switch_too_big_names_the_variables():
    # 64 threads x window 4096 x 2 slots of 2048 values: 4 GiB, over the switch's 1024 MiB budget.
    run_ranks(expect_init_error_worker, 1, env={"DPA_THREADS": "64", "DPA_WINDOW": "4096"},
              args=(r"2 x DPA_THREADS x DPA_WINDOW.*max_memory_mb 1024",), timeout=60)


def mismatched_chunking_worker(rank, world, init_file):
    if rank == 1:
        os.environ["DPA_TORCH_MODE"] = "pipeline"
    with pytest.raises(RuntimeError) as error:
        init_dpa(rank, world, init_file)
    return str(error.value)


def test_ranks_that_chunk_differently_fail_at_init():
    messages = run_ranks(mismatched_chunking_worker, 2, env={"DPA_JOIN_TIMEOUT_MS": "1500"}, timeout=60)
    assert "DPA_TORCH_MODE" in messages[1] and "rank 0 runs worksteal" in messages[1], messages[1]


def test_extension_refuses_another_torch_version():
    # The extension loads at its first use (here dpa.last_stats()), not at import dpa.
    env = dict(os.environ, **BASE_ENV)
    code = "import torch; torch.__version__ = '0.1.0'; import dpa; dpa.last_stats()"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "built against torch" in result.stderr, result.stderr
