# SPDX-License-Identifier: Apache-2.0
"""Inputs and verification of python -m dpa.bench.

Every rank derives its input of every operation from the run's seed, and checks its result against
the exact sum of all ranks' inputs (float64, int64 for int32): on CPU tensors the ranks add their
own inputs up over Gloo after the timed region, one all_reduce instead of each rank generating
all N inputs again; on a GPU each rank generates all N (count_wrong). Float inputs are uniform in
[-1, 1) on a 2^-23 grid (exact in float32, rounded once to float16/bfloat16); int32 inputs are
uniform in [-2^19, 2^19), so sums of up to 4096 ranks neither overflow nor wrap."""

import math

DTYPES = ("float32", "float16", "bfloat16", "int32")
INT_HALF_RANGE = 1 << 19
MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF
VERIFY_CHUNK = 1 << 20  # elements count_wrong_against checks at a time
# Unit roundoff and half the smallest subnormal of each float dtype: the error of one rounding to
# that dtype is at most ROUNDOFF * |value| + TINY.
ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
TINY = {"float32": 2.0**-150, "float16": 2.0**-25, "bfloat16": 2.0**-134}


def splitmix64(value):
    """A 64-bit mix (SplitMix64's finaliser) of a Python int."""
    value = (value + 0x9E3779B97F4A7C15) & MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK64
    return value ^ (value >> 31)


def derive_seed(*parts):
    """One 63-bit seed from the run's seed and the ids of an operation (backend, size, op, rank)."""
    seed = 0
    for part in parts:
        seed = splitmix64(seed ^ (part & MASK64))
    return seed >> 1


def _multiply32(values, constant):
    """(values * constant) mod 2^32 for int64 tensors of 32-bit values, without int64 overflow:
    the constant is applied in 16-bit halves so that no product reaches 2^63."""
    low = values * (constant & 0xFFFF)
    high = ((values * (constant >> 16)) & 0xFFFF) << 16
    return (low + high) & MASK32


def _mix32(values):
    """murmur3's 32-bit finaliser on int64 tensors of 32-bit values (a bijection of 32-bit values)."""
    values = values ^ (values >> 16)
    values = _multiply32(values, 0x85EBCA6B)
    values = values ^ (values >> 13)
    values = _multiply32(values, 0xC2B2AE35)
    return values ^ (values >> 16)


def hashed_bits(seed, count, device):
    """`count` pseudo-random 32-bit values (int64 tensor) on `device`, a function of the seed and
    the element index only: the same on every device model and torch version. (torch's CUDA
    generator is not: its values depend on the launch grid, so on the GPU model.)"""
    import torch

    if count >= 1 << 32:
        raise ValueError(f"dpa.bench: {count} elements: inputs are indexed with 32 bits")
    key = splitmix64(seed)
    index = torch.arange(count, dtype=torch.int64, device=device)
    return _mix32(_mix32(index ^ (key & MASK32)) ^ (key >> 32))


def rank_input(seed, count, dtype, device, out=None):
    """The input `seed` names: `count` values of `dtype` (a torch dtype) on `device`. On the CPU,
    with `out` (a tensor of `count` values of `dtype`) they are written there: a fresh 64 MiB
    tensor is a fresh mapping of zeroed pages, whose faults cost about as much as generating its
    values.

    CPU tensors come from torch's CPU generator (Mersenne Twister, serial, so the same on every
    CPU); CUDA tensors from hashed_bits, computed on the GPU."""
    import torch

    if device.type == "cpu":
        generator = torch.Generator().manual_seed(seed)
        if dtype == torch.int32:
            return torch.randint(-INT_HALF_RANGE, INT_HALF_RANGE, (count,), generator=generator, dtype=torch.int32,
                                 out=out)
        # rand is a multiple of 2^-24 in [0, 1): times 2 minus 1 is exact in float32. In place: each
        # temporary of a 64 MiB input was a fresh mapping (0.15 s per input, 0.08 in place, on the
        # 2-core VM).
        if dtype == torch.float32:
            return torch.rand(count, generator=generator, out=out).mul_(2).sub_(1)
        values = torch.rand(count, generator=generator).mul_(2).sub_(1)
        return values.to(dtype) if out is None else out.copy_(values)
    return hashed_input(seed, count, dtype, device)


def hashed_input(seed, count, dtype, device):
    """rank_input's values on a GPU (or any device): from hashed_bits, on the same grids."""
    import torch

    bits = hashed_bits(seed, count, device)
    if dtype == torch.int32:
        return ((bits >> 12) - INT_HALF_RANGE).to(torch.int32)
    return ((bits >> 8).to(torch.float32) * 2.0**-23 - 1).to(dtype)


def dpa_bound(exact, world, dtype_name):
    """docs/protocol.md §10.4 for a SUM of `world` ranks: |result - exact| <= A + 2^-23 (|exact|
    + A), A = N 2^(e+h-32), with e = 1: every input lies in [-1, 1], so |v| < 2^1 in every block,
    and the bound only grows with e. float16 and bfloat16 are reduced in float32 and rounded to
    their dtype once."""
    h = math.ceil(math.log2(world)) if world > 1 else 0
    absolute = world * 2.0 ** (h - 31)
    bound = absolute + 2.0**-23 * (exact.abs() + absolute)
    if dtype_name != "float32":
        bound = bound + ROUNDOFF[dtype_name] * (exact.abs() + bound) + TINY[dtype_name]
    return bound


def summation_bound(abs_sum, world, dtype_name):
    """Any order of world - 1 additions in the dtype (Gloo, NCCL): gamma_(N-1) * sum |x_i|, with
    gamma_k = k u / (1 - k u), plus the subnormal part of each rounding."""
    additions = world - 1
    u = ROUNDOFF[dtype_name]
    gamma = additions * u / (1 - additions * u)
    return gamma * abs_sum + additions * TINY[dtype_name]


def reference_parts(values, dtype_name, backend, out=None):
    """One rank's share of an operation's reference, widened exactly: its input as int64 (int32)
    or float64, and for Gloo's and NCCL's summation bound its magnitude too (rows of one tensor),
    written into `out` where given (reference_shape's shape and dtype, on the values' device).
    The sum of all ranks' shares is exact in any order: int32 inputs are integers, float inputs
    lie on a grid no finer than 2^-30 within [-1, 1], so every partial sum of up to 2^22 ranks is a
    float64."""
    import torch

    shape, dtype = reference_shape(values.numel(), dtype_name, backend)
    parts = out if out is not None else torch.empty(shape, dtype=dtype, device=values.device)
    parts[0].copy_(values)
    if shape[0] == 2:
        torch.abs(parts[0], out=parts[1])
    return parts


def reference_shape(count, dtype_name, backend):
    """The shape and torch dtype of reference_parts for `count` values: one row (the values), two
    for Gloo's and NCCL's float bound (the values and their magnitudes)."""
    import torch

    if dtype_name == "int32":
        return (1, count), torch.int64
    return (1 if backend == "dpa" else 2, count), torch.float64


def count_wrong_against(result, reference, world, dtype_name, backend):
    """Elements of `result` (an all_reduce SUM of `world` ranks) that differ from the exact sum by
    more than `backend`'s bound: exact for int32, the block floating point bound for dpa, the
    summation bound for Gloo and NCCL. `reference` is the sum over the ranks of reference_parts.
    NaN counts as wrong. On the CPU it checks in chunks: whole-tensor float64 temporaries of a 64
    MiB result were fresh mappings each time, whose page faults took most of a second per
    operation (a GPU's caching allocator reuses its blocks, and each chunk would cost a sync)."""
    import torch

    count = result.numel()
    step = VERIFY_CHUNK if result.device.type == "cpu" else max(count, 1)
    wrong = 0
    for begin in range(0, count, step):
        end = min(begin + step, count)
        part = result[begin:end]
        if dtype_name == "int32":
            wrong += int((part.to(torch.int64) != reference[0, begin:end]).sum())
            continue
        exact = reference[0, begin:end]
        if backend == "dpa":
            bound = dpa_bound(exact, world, dtype_name)
        else:
            bound = summation_bound(reference[1, begin:end], world, dtype_name)
        within = (part.to(torch.float64) - exact).abs() <= bound
        wrong += (end - begin) - int(within.sum())
    return wrong


def count_wrong(result, seeds, dtype_name, backend):
    """count_wrong_against with the reference computed here from every rank's input (`seeds`, one
    per rank): for one process that holds no group."""
    reference = sum(reference_parts(rank_input(seed, result.numel(), result.dtype, result.device), dtype_name,
                                    backend) for seed in seeds)
    return count_wrong_against(result, reference, len(seeds), dtype_name, backend)


def corrupt(result, world):
    """Makes one element of `result` wrong (--inject-wrong): int32 by 1 (checked exactly), floats
    by 64 N, beyond every bound above (the widest, bfloat16 summed in bfloat16, stays below
    N^2 / 256 for inputs of magnitude at most 1)."""
    import torch

    result[result.numel() // 2] += 1 if result.dtype == torch.int32 else 64 * world
