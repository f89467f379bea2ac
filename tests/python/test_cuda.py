# SPDX-License-Identifier: Apache-2.0
"""CUDA tensors through dpa: staged through pinned host memory on side streams that wait for the
caller's stream, with the block floating point on the GPU where the extension has the kernels.
Skipped where torch sees no CUDA device (every rank may share one GPU)."""

import functools

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from harness import PAYLOAD, init_dpa, run_ranks
from test_allreduce import DTYPES, MODES, check, make_input
from test_ddp import STEPS, make_batch, make_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def cuda_worker(rank, world, init_file):
    init_dpa(rank, world, init_file)
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    seed = 0
    for dtype in DTYPES:
        for size in [0, 1, 2049, (1 << 20) + 3]:
            seed += 1
            inputs = [make_input(r, (size,), dtype, seed) for r in range(world)]
            for op_name, op in (("SUM", dist.ReduceOp.SUM), ("AVG", dist.ReduceOp.AVG)):
                source = inputs[rank].to(device)
                tensor = torch.zeros_like(source)
                stream = torch.cuda.Stream(device)
                with torch.cuda.stream(stream):
                    # The values land only after a long kernel on the caller's stream; the
                    # all_reduce is issued right away and must wait for them.
                    torch.cuda._sleep(20_000_000)
                    tensor.copy_(source)
                    dist.all_reduce(tensor, op=op)
                    result = tensor.cpu()
                check(result, inputs, op_name, world, f"cuda {dtype} {op_name} size {size}")

    # Non-contiguous, a list, and asynchronous operations waited for through their futures.
    seed += 1
    inputs = [make_input(r, (64, 80), torch.float16, seed) for r in range(world)]
    base = inputs[rank].to(device)
    view = base.t()[::2]
    dist.all_reduce(view)
    check(view.cpu(), [i.t()[::2] for i in inputs], "SUM", world, "cuda non-contiguous")
    assert torch.equal(base.t()[1::2].cpu(), inputs[rank].t()[1::2])
    lists = [[make_input(r, (3000,), torch.float32, seed), make_input(r, (7,), torch.int32, seed)]
             for r in range(world)]
    mine = [t.to(device) for t in lists[rank]]
    options = dist.AllreduceOptions()
    options.reduceOp = dist.ReduceOp.SUM
    dist.distributed_c10d._get_default_group().allreduce(mine, options).wait()
    for index, tensor in enumerate(mine):
        check(tensor.cpu(), [lists[r][index] for r in range(world)], "SUM", world, f"cuda list {index}")
    tensors = [make_input(rank, (70000,), torch.bfloat16, seed + j).to(device) for j in range(4)]
    futures = [dist.all_reduce(t, async_op=True).get_future() for t in tensors]
    torch.futures.wait_all(futures)
    for j, tensor in enumerate(tensors):
        check(tensor.cpu(), [make_input(r, (70000,), torch.bfloat16, seed + j) for r in range(world)],
              "SUM", world, f"cuda async {j}")
    return True


@pytest.mark.parametrize("mode", list(MODES))
def test_cuda_allreduce(mode):
    run_ranks(cuda_worker, 2, env=MODES[mode], timeout=300)


def edge_input(rank, size, dtype, seed):
    """make_input plus the edge cases of block floating point: a block of zeros, denormals, a
    NaN (rank 1), an infinity (rank 2) and values beyond 2^126 (float32, bfloat16)."""
    values = make_input(rank, (size,), torch.float32, seed)
    blocks = [values[b:b + PAYLOAD] for b in range(0, size, PAYLOAD)]
    if len(blocks) > 5:
        blocks[1].zero_()
        blocks[2].mul_(2.0**-140 if dtype != torch.float16 else 2.0**-20)
        if rank == 1:
            blocks[3][7] = float("nan")
        if rank == 2:
            blocks[4][0] = float("-inf")
        if dtype != torch.float16:
            blocks[5][1] = 2.0**127
    return values.to(dtype)


def same_bits(a, b):
    """Bit for bit, except that a NaN need only be a NaN: torch's own CPU conversion to bfloat16
    writes NaN as 0xffff or 0x7fc0 depending on the element's position."""
    nan = torch.isnan(a)
    if not torch.equal(nan, torch.isnan(b)):
        return False
    integer = {4: torch.int32, 2: torch.int16}[a.element_size()]
    return torch.equal(a[~nan].view(integer), b[~nan].view(integer))


def cuda_bits_worker(rank, world, init_file):
    init_dpa(rank, world, init_file)
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    seed = 100
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for size in [1, 2049, 7 * PAYLOAD + 5, (1 << 20) + 3]:
            seed += 1
            data = edge_input(rank, size, dtype, seed)
            for op_name, op in (("SUM", dist.ReduceOp.SUM), ("AVG", dist.ReduceOp.AVG)):
                on_host = data.clone()
                dist.all_reduce(on_host, op=op)
                on_device = data.to(device)
                dist.all_reduce(on_device, op=op)
                assert same_bits(on_device.cpu(), on_host), f"{dtype} {op_name} size {size}"
    return True


@pytest.mark.parametrize("blocks", ["auto", "gpu"])
@pytest.mark.parametrize("mode", ["worksteal", "pipeline"])
def test_cuda_result_equals_the_cpu_result_bit_for_bit(mode, blocks):
    # auto: below DPA_TORCH_CUDA_BLOCKS_MIN_BYTES these sizes take the host's block floating
    # point; gpu: the kernels for every size.
    env = {**MODES[mode], "DPA_TORCH_CUDA_BLOCKS": blocks}
    run_ranks(cuda_bits_worker, 3, env=env, timeout=300)


def cuda_ddp_worker(rank, world, init_file, hook):
    import dpa

    init_dpa(rank, world, init_file)
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    gloo = dist.new_group(backend="gloo")
    model = DDP(make_model().to(device), device_ids=[device.index])
    if hook:
        dpa.register_ddp_hook(model)
    reference = DDP(make_model(), process_group=gloo)  # CPU twin over Gloo
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(STEPS):
        inputs, targets = make_batch(rank, step)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(inputs.to(device)), targets.to(device)).backward()
        optimizer.step()
        reference_optimizer.zero_grad()
        nn.functional.mse_loss(reference(inputs), targets).backward()
        reference_optimizer.step()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        # Loose: GPU and CPU kernels round differently; this catches wrong sums or averaging.
        assert (ours.detach().cpu() - theirs.detach()).abs().max() < 1e-4
    return True


@pytest.mark.parametrize("hook", [True, False], ids=["dpa_hook", "plain_ddp"])
def test_cuda_ddp(hook):
    # Without the hook DDP waits on the all_reduce's future, which must order the caller's stream
    # after the copies back (the work completes before they end).
    run_ranks(functools.partial(cuda_ddp_worker, hook=hook), 2, timeout=300)
