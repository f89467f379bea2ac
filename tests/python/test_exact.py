# SPDX-License-Identifier: Apache-2.0
"""Exact where Gloo is exact (docs/protocol.md §10.4): all_reduce through dpa of torch.ones and of
integer-valued counts equals the exact sum, bit for bit, and AVG equals that sum divided by the
world size, as Gloo's sum followed by a division; float32, float16 and bfloat16, worlds 2 and 3,
sizes from one value to several blocks; CPU tensors, and CUDA tensors with the block floating point
on the GPU where torch sees a CUDA device (every rank may share one GPU)."""

import pytest
import torch
import torch.distributed as dist

from harness import init_dpa, run_ranks

SIZES = [1, 1000, 5000, (1 << 18) + 3]
# Largest count per rank whose sums every dtype holds exactly at world 3: float32 holds integers
# to 2^24, float16 to 2048, bfloat16 to 256.
COUNT_LIMIT = {torch.float32: (1 << 24) // 3, torch.float16: 2048 // 3, torch.bfloat16: 256 // 3}


def counts(rank, size, dtype, seed):
    """Rank `rank`'s integer counts; every rank can rebuild every other rank's."""
    generator = torch.Generator().manual_seed(seed * 100 + rank)
    return torch.randint(0, COUNT_LIMIT[dtype] + 1, (size,), generator=generator).to(dtype)


def exact_worker(rank, world, init_file, device_type):
    init_dpa(rank, world, init_file)
    gloo = dist.new_group(backend="gloo")
    device = torch.device(device_type, rank % torch.cuda.device_count()) if device_type == "cuda" else None
    if device is not None:
        torch.cuda.set_device(device)

    def reduced(tensor, op=dist.ReduceOp.SUM):
        """all_reduce through dpa on the case's device; the result on the CPU."""
        on_device = tensor.to(device) if device is not None else tensor.clone()
        dist.all_reduce(on_device, op=op)
        return on_device.cpu()

    checked = 0
    for dtype in COUNT_LIMIT:
        for size in SIZES:
            what = f"{dtype} size {size}"
            ones = reduced(torch.ones(size, dtype=dtype))
            assert torch.equal(ones, torch.full((size,), world, dtype=dtype)), (
                f"{what}: ones summed to {ones[0].item()!r}, not {world}")
            ones = reduced(torch.ones(size, dtype=dtype), dist.ReduceOp.AVG)
            assert torch.equal(ones, torch.ones(size, dtype=dtype)), f"{what}: ones averaged to {ones[0].item()!r}"

            inputs = [counts(r, size, dtype, size) for r in range(world)]
            exact = torch.stack([i.long() for i in inputs]).sum(0)
            total = reduced(inputs[rank])
            assert torch.equal(total.long(), exact), f"{what}: a summed count differs from the exact sum"
            gloo_total = inputs[rank].to(torch.float32, copy=True)
            dist.all_reduce(gloo_total, group=gloo)
            assert torch.equal(total.float(), gloo_total), f"{what}: the summed counts differ from Gloo's"
            average = reduced(inputs[rank], dist.ReduceOp.AVG)
            # Gloo's way (torch 1.13's Gloo has no AVG): the exact float32 sum divided in float32.
            assert torch.equal(average, (gloo_total / world).to(dtype)), f"{what}: AVG differs from sum-then-divide"
            checked += 1
    return checked


@pytest.mark.parametrize("world", [2, 3])
def test_integer_valued_floats_are_exact(world):
    assert run_ranks(exact_worker, world, args=("cpu",), timeout=240) == [len(COUNT_LIMIT) * len(SIZES)] * world


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("world", [2, 3])
def test_integer_valued_cuda_floats_are_exact(world):
    # gpu: every size takes the GPU's exponent and dequantisation kernels (quant/cuda).
    checked = run_ranks(exact_worker, world, env={"DPA_TORCH_CUDA_BLOCKS": "gpu"}, args=("cuda",), timeout=240)
    assert checked == [len(COUNT_LIMIT) * len(SIZES)] * world
