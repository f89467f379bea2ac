# SPDX-License-Identifier: Apache-2.0
"""Test helpers: ranks in fresh processes (dpa.tools._launch), dpa initialisation, and dpa's float
error bound (protocol.md §10.4)."""

import math

import numpy as np

# The launcher ships with the package (dpa.demo and dpa.bench use it too).
from dpa.tools._launch import LOCAL_ENV as BASE_ENV
from dpa.tools._launch import free_port, run_ranks  # noqa: F401 - re-exported for the tests

PAYLOAD = 1024  # values per block of small operations on the embedded switch (job_sizing.hpp)


def dpa_backend():
    """The default group's dpa backend object (torch 2.x wraps it; torch 1.13 returns it)."""
    import torch
    import torch.distributed as dist

    group = dist.distributed_c10d._get_default_group()
    return group._get_backend(torch.device("cpu")) if hasattr(group, "_get_backend") else group


def block_payload(count):
    """Values per block of a `count`-element all_reduce on the default dpa group."""
    return dpa_backend().payload_for(count)


def init_dpa(rank, world, init_file):
    import torch.distributed as dist

    import dpa  # noqa: F401 - registers the backend

    dist.init_process_group("dpa", init_method="file://" + init_file, rank=rank, world_size=world)


def block_exponents(max_abs, payload=PAYLOAD):
    """Per block, the smallest e with |v| < 2^e for the block's largest |v| (protocol.md §10.1)."""
    blocks = math.ceil(len(max_abs) / payload) if len(max_abs) else 0
    padded = np.zeros(blocks * payload)
    padded[: len(max_abs)] = max_abs
    block_max = padded.reshape(blocks, payload).max(axis=1)
    _, exponent = np.frexp(block_max)  # block_max = m 2^exponent, m in [0.5, 1): below 2^exponent
    return np.maximum(exponent, -96), block_max


def float_bound(inputs, payload, contributors=None):
    """protocol.md §10.4: |result - exact| <= A + 2^-23 (|exact| + A), A = N 2^(e+h-32), for SUM;
    for AVG (pass `contributors`) the exact value and the bound are divided by the contributors.
    `inputs`: one float64 array of each rank's fp32 values; `payload`: values per block
    (block_payload). Returns (exact, bound) per element."""
    stacked = np.stack(inputs)
    n = stacked.shape[0]
    h = math.ceil(math.log2(n)) if n > 1 else 0
    exact = stacked.sum(axis=0)
    if stacked.shape[1] == 0:
        return exact, exact.copy()  # nothing to bound
    e, block_max = block_exponents(np.abs(stacked).max(axis=0), payload)
    per_block = n * np.exp2(e + h - 32)
    per_block[block_max == 0] = 0.0
    absolute = np.repeat(per_block, payload)[: stacked.shape[1]]
    bound = absolute + 2.0**-23 * (np.abs(exact) + absolute)
    if contributors:
        exact, bound = exact / contributors, bound / contributors
    return exact, bound
