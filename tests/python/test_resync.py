"""dpa.Resynchroniser: a rank that missed fastest-K blocks adopts the source's replica, the ranks
that missed nothing never ask and never wait, and bad settings are refused."""

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from harness import init_dpa, run_ranks

STEPS = 6
EVERY = 3


def replica(model, optimizer):
    # numpy: torch tensors would travel through shared memory that dies with the rank process.
    momentum = [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
    return [t.detach().numpy().copy() for t in [*model.parameters(), *model.buffers(), *momentum]]


def straggler_worker(rank, world, init_file):
    import dpa

    init_dpa(rank, world, init_file)
    hold = dist.FileStore(init_file + ".hold", world)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.Linear(64, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    resync = dpa.Resynchroniser(model, optimizer, src=0, every=EVERY)
    straggler = rank == world - 1
    if straggler:
        # Starts only when the others have taken every step: had anything of theirs waited for
        # this rank, the test would fail by the timeout.
        hold.wait(["fast-ranks-done"], timedelta(seconds=90))
    adopted, checkpoints, generator = [], {}, torch.Generator().manual_seed(rank)
    for step in range(STEPS):
        optimizer.zero_grad()
        model(torch.randn(16, 32, generator=generator)).square().mean().backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        with dpa.fastest_k(world - 1, preemptive=True):
            dist.all_reduce(flat)
        offset = 0
        for parameter in model.parameters():
            parameter.grad.copy_(flat[offset:offset + parameter.numel()].view_as(parameter) / world)
            offset += parameter.numel()
        optimizer.step()
        if resync.step():
            adopted.append((step, replica(model, optimizer)))
        if rank == 0 and (step + 1) % EVERY == 0:
            checkpoints[step] = replica(model, optimizer)
    if rank == 0:
        hold.set("fast-ranks-done", "1")
    resync.close()
    return {"adopted": adopted, "checkpoints": checkpoints, "requests": resync.requests, "served": resync.served,
            "copies_left": len(resync._copies)}


def test_a_rank_that_missed_blocks_adopts_the_source_replica_and_the_others_never_wait():
    world = 3
    results = run_ranks(straggler_worker, world, timeout=180)
    source, fast, straggler = results
    assert fast["requests"] == 0 and fast["adopted"] == [], "a rank that missed no block asked for a copy"
    # The straggler missed every block, so it asks at each checkpoint; the source, done with its
    # steps by then, answers each with its replica of that same checkpoint.
    assert [step for step, _ in straggler["adopted"]] == [EVERY - 1, 2 * EVERY - 1]
    assert straggler["requests"] == 2 and source["served"] == 2 and source["copies_left"] == 0
    for step, copy in straggler["adopted"]:
        for ours, theirs in zip(copy, source["checkpoints"][step]):
            assert (ours == theirs).all(), f"step {step}"
    # The two checkpoints' replicas differ: a copy of the newest would not have passed.
    first, second = source["checkpoints"][EVERY - 1], source["checkpoints"][2 * EVERY - 1]
    assert not all((a == b).all() for a, b in zip(first, second))


def bad_settings_worker(rank, world, init_file):
    import dpa

    init_dpa(rank, world, init_file)
    model = nn.Linear(2, 2)
    errors = []
    for kwargs in ({"every": 0}, {"src": world}):
        with pytest.raises(ValueError) as failure:
            dpa.Resynchroniser(model, **kwargs)
        errors.append(str(failure.value))
    resync = dpa.Resynchroniser(model, src=1)
    resync.close()
    with pytest.raises(RuntimeError):
        resync.step()
    return errors


def test_bad_settings_are_refused_naming_them():
    errors = run_ranks(bad_settings_worker, 2)[0]
    assert "every=0" in errors[0] and "src=2" in errors[1] and "world of 2" in errors[1]
