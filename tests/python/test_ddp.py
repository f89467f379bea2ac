# SPDX-License-Identifier: Apache-2.0
"""DistributedDataParallel over dpa: training matches a Gloo-trained twin within the float bound
(with DDP's own all_reduce and with dpa's AVG comm hook), and the hook finishes with fastest-K
when one rank straggles."""

import copy
import math
import time

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from harness import init_dpa, run_ranks

STEPS = 5
LEARNING_RATE = 0.1


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 4))


def make_batch(rank, step):
    generator = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(16, 20, generator=generator), torch.randn(16, 4, generator=generator)


def train_step(model, optimizer, rank, step):
    inputs, targets = make_batch(rank, step)
    optimizer.zero_grad()
    nn.functional.mse_loss(model(inputs), targets).backward()
    optimizer.step()


def gradient_bound(module, rank, step, world, gloo):
    """How far one averaged gradient element may be from the exact average: the SUM bound of
    protocol.md §10.4 with the largest exponent of any rank's local gradient (no block has a
    larger one), not divided by N (DDP divides before or after; this is the looser)."""
    local = copy.deepcopy(module)
    inputs, targets = make_batch(rank, step)
    nn.functional.mse_loss(local(inputs), targets).backward()
    largest = torch.tensor([max(p.grad.abs().max().item() for p in local.parameters())])
    dist.all_reduce(largest, op=dist.ReduceOp.MAX, group=gloo)
    e = math.ceil(math.log2(largest.item()))
    h = math.ceil(math.log2(world))
    return world * (2.0 ** (e + h - 32) + 2.0 ** (e - 24)) + 2.0**-22 * largest.item()


def ddp_twin_worker(rank, world, init_file, use_hook):
    import dpa

    init_dpa(rank, world, init_file)
    gloo = dist.new_group(backend="gloo")
    model = DDP(make_model())  # the default group: dpa
    twin = DDP(make_model(), process_group=gloo)
    if use_hook:
        dpa.register_ddp_hook(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=LEARNING_RATE)

    tolerance = 0.0
    largest_difference = 0.0
    for step in range(STEPS):
        tolerance += LEARNING_RATE * gradient_bound(twin.module, rank, step, world, gloo)
        train_step(model, optimizer, rank, step)
        train_step(twin, twin_optimizer, rank, step)
        stats = dpa.last_stats()
        assert stats["blocks_full"] == stats["blocks"] > 0, stats
        for ours, theirs in zip(model.parameters(), twin.parameters()):
            difference = (ours - theirs).abs().max().item()
            largest_difference = max(largest_difference, difference)
            # 4x: later gradients are taken at parameters already that far apart; plus one
            # float32 rounding of each update.
            allowed = 4 * tolerance + (step + 1) * 2.0**-23 * theirs.abs().max().item()
            assert difference <= allowed, f"step {step}: parameters differ by {difference} > {allowed}"
    # Replicas of the dpa-trained model stay identical across ranks.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    assert all(torch.equal(gathered[0], g) for g in gathered)
    return largest_difference


def test_ddp_matches_gloo_twin():
    run_ranks(ddp_twin_worker, 2, args=(False,))


def test_ddp_hook_matches_gloo_twin():
    run_ranks(ddp_twin_worker, 2, args=(True,))


def straggler_worker(rank, world, init_file, straggler, sleep_seconds):
    import dpa

    init_dpa(rank, world, init_file)
    model = DDP(make_model())
    dpa.register_ddp_hook(model, k=world - 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    per_step = []
    for step in range(3):
        inputs, targets = make_batch(rank, step)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), targets)
        if rank == straggler and step == 1:
            time.sleep(sleep_seconds)
        started = time.monotonic()
        loss.backward()
        per_step.append((time.monotonic() - started, dpa.last_stats()))
        optimizer.step()
    return per_step


def test_ddp_hook_fastest_k_with_straggler():
    world, straggler, sleep_seconds = 2, 1, 1.0
    results = run_ranks(straggler_worker, world, args=(straggler, sleep_seconds))
    for rank, per_step in enumerate(results):
        if rank == straggler:
            continue
        seconds, stats = per_step[1]
        assert seconds < sleep_seconds / 2, f"rank {rank} waited {seconds:.3f} s for the straggler"
        assert stats["min_contributors"] < world, stats
        assert stats["blocks_partial"] > 0, stats


def resynchronise_worker(rank, world, init_file, bucket_bytes):
    import dpa
    from dpa import _resync

    _resync.RESYNC_BUCKET_BYTES = bucket_bytes
    init_dpa(rank, world, init_file)
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    with torch.no_grad():  # replicas that drifted apart, buffers and momentum included
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.add_(rank + 1)
        for state in optimizer.state.values():
            state["momentum_buffer"].add_(rank + 1)
    dpa.resynchronise(model, src=1, optimizer=optimizer)
    momentum = [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
    # numpy: torch tensors would travel through shared memory that dies with the rank process.
    return [t.detach().numpy().copy() for t in [*model.parameters(), *model.buffers(), *momentum]]


@pytest.mark.parametrize("bucket_bytes", [256 * 1024 * 1024, 40])
def test_resynchronise_copies_parameters_buffers_and_optimizer_state_from_src(bucket_bytes):
    # 40 bytes: most tensors in a bucket of their own, the 8x8 weight alone over the limit.
    world = 3
    replicas = run_ranks(resynchronise_worker, world, args=(bucket_bytes,))
    assert len(replicas[1]) == 4 + 3 + 4
    for rank in range(world):
        for ours, theirs in zip(replicas[rank], replicas[1]):
            assert (ours == theirs).all(), f"rank {rank} differs from rank 1"
