# SPDX-License-Identifier: Apache-2.0
"""The sharded collectives through the switch (docs/protocol.md §13): reduce_scatter_tensor,
reduce_scatter, all_gather_into_tensor, all_gather and broadcast on the dpa process group, checked
against values computed locally, and counted by the embedded switch (so they went through it, not
through Gloo). Shapes that cannot go through the switch (an odd number of 16-bit values to gather,
MAX) fall back and must still be right."""

import pytest
import torch
import torch.distributed as dist

from harness import init_dpa, run_ranks

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _values(rank, count, dtype, device):
    return (torch.arange(count, dtype=torch.int64) % 13 + 3 * rank).to(device=device, dtype=dtype)


def _rounds():
    import dpa._C as C

    counters = C.embedded_switch_counters()
    return None if counters is None else counters["completed_full"]


def sharded_worker(rank, world, init_file, device):
    if device == "cuda":
        torch.cuda.set_device(0)
    init_dpa(rank, world, init_file)
    through_switch = 0
    before = _rounds()
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32):
        for shard in (1, 5, 1000, 70000):
            full = [_values(r, shard * world, dtype, "cpu").long() for r in range(world)]
            total = sum(full)
            mine = total[rank * shard:(rank + 1) * shard]
            output = torch.empty(shard, dtype=dtype, device=device)
            dist.reduce_scatter_tensor(output, _values(rank, shard * world, dtype, device))
            assert torch.equal(output.cpu().long(), mine), (dtype, shard, "sum")
            dist.reduce_scatter_tensor(output, _values(rank, shard * world, dtype, device), op=dist.ReduceOp.AVG)
            expected = mine.double() / world
            tolerance = 0 if dtype == torch.int32 else 0.02 * expected.abs().max().item()
            got = output.cpu().double()
            if dtype == torch.int32:
                expected = torch.div(mine, world, rounding_mode="trunc").double()
            assert (got - expected).abs().max().item() <= tolerance, (dtype, shard, "avg")
            through_switch += 2
    # The list form.
    output = torch.empty(7, dtype=torch.float32, device=device)
    dist.reduce_scatter(output, [_values(rank, 7, torch.float32, device) + r for r in range(world)])
    expected = sum(_values(r, 7, torch.float32, "cpu") + rank for r in range(world))
    assert torch.equal(output.cpu(), expected)
    through_switch += 1

    for dtype, count in ((torch.float32, 1), (torch.float32, 3000), (torch.bfloat16, 10), (torch.int64, 5),
                         (torch.uint8, 8), (torch.bfloat16, 3)):
        output = torch.empty(count * world, dtype=dtype, device=device)
        dist.all_gather_into_tensor(output, _values(rank, count, dtype, device))
        expected = torch.cat([_values(r, count, dtype, "cpu") for r in range(world)])
        assert torch.equal(output.cpu(), expected), (dtype, count, "all_gather_into_tensor")
        through_switch += (count * output.element_size()) % 4 == 0
        parts = [torch.empty(count, dtype=dtype, device=device) for _ in range(world)]
        dist.all_gather(parts, _values(rank, count, dtype, device))
        for r in range(world):
            assert torch.equal(parts[r].cpu(), _values(r, count, dtype, "cpu")), (dtype, count, "all_gather", r)
        through_switch += (count * output.element_size()) % 4 == 0
        for root in range(world):
            tensor = _values(rank, count, dtype, device)
            dist.broadcast(tensor, src=root)
            assert torch.equal(tensor.cpu(), _values(root, count, dtype, "cpu")), (dtype, count, "broadcast", root)
            through_switch += (count * output.element_size()) % 4 == 0
    # MAX has no switch path: Gloo's result, still right.
    output = torch.empty(4, dtype=torch.float32, device=device)
    dist.reduce_scatter_tensor(output, _values(rank, 4 * world, torch.float32, device), op=dist.ReduceOp.MAX)
    assert torch.equal(output.cpu(), _values(world - 1, 4 * world, torch.float32, "cpu")[rank * 4:(rank + 1) * 4])
    dist.barrier()
    after = _rounds()
    dist.destroy_process_group()
    if before is not None:
        # Every operation through the switch completes at least one round; Gloo's none.
        assert after - before >= through_switch, (after - before, through_switch)
    return through_switch


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("world", [2, 3])
def test_sharded_collectives_go_through_the_switch(device, world):
    results = run_ranks(sharded_worker, world, args=(device,), timeout=240)
    assert len(set(results)) == 1
