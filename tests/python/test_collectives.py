# SPDX-License-Identifier: Apache-2.0
"""Every c10d collective works through the dpa process group, whatever the installed Gloo lacks
(torch 1.13's has no reduce-scatter, no list all-to-all, no flat all-gather, no bfloat16 or bool,
no AVG): each case below runs on every rank and checks its result against the value computed
locally. The cases are a table; docs/pytorch.md has the matrix of which path carries each."""

import pytest
import torch
import torch.distributed as dist

from harness import init_dpa, run_ranks

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DEVICE = torch.device("cpu")  # the device of the worker's tensors, set by collectives_worker
TYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
         torch.uint8, torch.bool]


def _values(rank, dtype, count=6, device=None):
    """Small integers (exact in every type), different on each rank; bool alternates. On the
    worker's device; device="cpu" for expected values."""
    device = DEVICE if device is None else device
    if dtype == torch.bool:
        return torch.tensor([(rank + i) % 2 == 0 for i in range(count)], device=device)
    return torch.arange(count, dtype=torch.int64).add(rank + 1).to(device=device, dtype=dtype)


def _zeros(count, dtype):
    return torch.zeros(count, dtype=dtype, device=DEVICE)


def _full(count, value, dtype=torch.float32):
    return torch.full((count,), value, dtype=dtype, device=DEVICE)


def _same(actual, expected):
    return torch.equal(actual.cpu(), expected.cpu())


def _sum(world, dtype, count=6):
    total = sum(_values(r, torch.int64, count, "cpu") if dtype != torch.bool
                else _values(r, dtype, count, "cpu").long() for r in range(world))
    return total.bool() if dtype == torch.bool else total.to(dtype)


def broadcast(rank, world, dtype):
    tensor = _values(rank, dtype)
    dist.broadcast(tensor, src=world - 1)
    assert _same(tensor, _values(world - 1, dtype))


def all_reduce_sum(rank, world, dtype):
    tensor = _values(rank, dtype)
    dist.all_reduce(tensor)
    assert _same(tensor, _sum(world, dtype))


def all_reduce_avg(rank, world, dtype):
    if dtype == torch.bool:
        return
    tensor = _values(rank, dtype).mul(world) if dtype.is_floating_point else _values(rank, dtype)
    dist.all_reduce(tensor, op=dist.ReduceOp.AVG)
    expected = (_sum(world, torch.int64).mul(world) // world if dtype.is_floating_point
                else torch.div(_sum(world, torch.int64), world, rounding_mode="trunc"))
    assert _same(tensor, expected.to(dtype)), (tensor, expected)


def all_reduce_max_min_product(rank, world, dtype):
    if dtype == torch.bool:
        return
    tensor = _values(rank, dtype)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    assert _same(tensor, _values(world - 1, dtype))
    tensor = _values(rank, dtype)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    assert _same(tensor, _values(0, dtype))
    tensor = _full(3, 2, dtype)
    dist.all_reduce(tensor, op=dist.ReduceOp.PRODUCT)
    assert _same(tensor, _full(3, 2**world, dtype))


def all_reduce_coalesced(rank, world, dtype):
    tensors = [_values(rank, dtype), _values(rank, dtype, 3)]
    dist.all_reduce_coalesced(tensors)
    assert _same(tensors[0], _sum(world, dtype)) and _same(tensors[1], _sum(world, dtype, 3))


def reduce(rank, world, dtype):
    tensor = _values(rank, dtype)
    dist.reduce(tensor, dst=1)
    if rank == 1:
        assert _same(tensor, _sum(world, dtype))


def all_gather(rank, world, dtype):
    outputs = [_zeros(6, dtype) for _ in range(world)]
    dist.all_gather(outputs, _values(rank, dtype))
    for r in range(world):
        assert _same(outputs[r], _values(r, dtype))


def all_gather_into_tensor(rank, world, dtype):
    output = _zeros(world * 6, dtype)
    dist.all_gather_into_tensor(output, _values(rank, dtype))
    assert _same(output, torch.cat([_values(r, dtype) for r in range(world)]))


def all_gather_coalesced(rank, world, dtype):
    outputs = [[_zeros(6, dtype), _zeros(3, dtype)] for _ in range(world)]
    dist.all_gather_coalesced(outputs, [_values(rank, dtype), _values(rank, dtype, 3)])
    for r in range(world):
        assert _same(outputs[r][0], _values(r, dtype)) and _same(outputs[r][1], _values(r, dtype, 3))


def reduce_scatter(rank, world, dtype):
    output = _zeros(6, dtype)
    dist.reduce_scatter(output, [_values(rank + r, dtype) for r in range(world)])
    expected = sum(_values(r + rank, torch.int64, 6, "cpu") for r in range(world))
    assert _same(output, expected.bool() if dtype == torch.bool else expected.to(dtype))


def reduce_scatter_tensor(rank, world, dtype):
    source = _values(rank, dtype, 6 * world)
    kept = source.clone()
    output = _zeros(6, dtype)
    dist.reduce_scatter_tensor(output, source)
    assert _same(source, kept), "reduce_scatter_tensor changed its input"
    assert _same(output, _sum(world, dtype, 6 * world)[rank * 6:rank * 6 + 6])


def reduce_scatter_tensor_avg(rank, world, dtype):
    if dtype == torch.bool or not (dtype.is_floating_point or dtype in (torch.int32, torch.int64)):
        return
    output = _zeros(6, dtype)
    dist.reduce_scatter_tensor(output, _full(6 * world, 2 * world, dtype),
                               op=dist.ReduceOp.AVG)
    assert _same(output, _full(6, 2 * world, dtype))


def all_to_all_single(rank, world, dtype):
    output = _zeros(2 * world, dtype)
    dist.all_to_all_single(output, _values(rank, dtype, 2 * world))
    expected = torch.cat([_values(r, dtype, 2 * world)[2 * rank:2 * rank + 2] for r in range(world)])
    assert _same(output, expected)


def all_to_all(rank, world, dtype):
    outputs = [_zeros(r + 1, dtype) for r in range(world)]
    dist.all_to_all(outputs, [_values(rank, dtype, rank + 1) for _ in range(world)])
    for r in range(world):
        assert _same(outputs[r], _values(r, dtype, r + 1))


def gather_scatter(rank, world, dtype):
    outputs = [_zeros(6, dtype) for _ in range(world)] if rank == 0 else None
    dist.gather(_values(rank, dtype), outputs, dst=0)
    if rank == 0:
        assert all(_same(outputs[r], _values(r, dtype)) for r in range(world))
    received = _zeros(6, dtype)
    dist.scatter(received, [_values(r, dtype) for r in range(world)] if rank == 0 else None, src=0)
    assert _same(received, _values(rank, dtype))


def send_recv(rank, world, dtype):
    if rank == 0:
        dist.send(_values(7, dtype), dst=world - 1)
        work = dist.irecv(received := _zeros(6, dtype), src=world - 1)
        work.wait()
        assert _same(received, _values(8, dtype))
    elif rank == world - 1:
        received = _zeros(6, dtype)
        dist.recv(received, src=0)
        assert _same(received, _values(7, dtype))
        dist.send(_values(8, dtype), dst=0)


def async_futures(rank, world, dtype):
    """The works of composed collectives complete through their futures, as DDP hooks use them."""
    if dtype == torch.bool:
        return
    output = _zeros(6, dtype)
    work = dist.reduce_scatter_tensor(output, _values(rank, dtype, 6 * world), async_op=True)
    doubled = work.get_future().then(lambda future: future.value()[0] * 2).wait()
    assert _same(doubled, _sum(world, dtype, 6 * world)[rank * 6:rank * 6 + 6] * 2)
    tensor = _values(rank, dtype)
    work = dist.all_reduce(tensor, op=dist.ReduceOp.AVG if dtype.is_floating_point else dist.ReduceOp.SUM,
                           async_op=True)
    work.wait()
    assert work.is_completed()


def object_collectives(rank, world, dtype):
    if dtype != torch.float32:
        return
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank})
    assert gathered == [{"rank": r} for r in range(world)]
    objects = [rank, "x" * rank]
    dist.broadcast_object_list(objects, src=world - 1)
    assert objects == [world - 1, "x" * (world - 1)]


CASES = [broadcast, all_reduce_sum, all_reduce_avg, all_reduce_max_min_product, all_reduce_coalesced,
         reduce, all_gather, all_gather_into_tensor, all_gather_coalesced, reduce_scatter,
         reduce_scatter_tensor, reduce_scatter_tensor_avg, all_to_all_single, all_to_all,
         gather_scatter, send_recv, async_futures, object_collectives]


def collectives_worker(rank, world, init_file, device):
    global DEVICE
    DEVICE = torch.device(device)
    if device == "cuda":
        torch.cuda.set_device(0)  # the ranks share the host's first GPU
    init_dpa(rank, world, init_file)
    assert dist.get_backend() == "dpa"
    failures = []
    for case in CASES:
        for dtype in TYPES:
            try:
                case(rank, world, dtype)
            except Exception as error:  # noqa: BLE001 - every failure is reported with its case
                failures.append(f"{case.__name__}[{dtype}]: {type(error).__name__}: {str(error).splitlines()[0]}")
            # A failed case must not leave the ranks out of step.
            dist.barrier()
    dist.destroy_process_group()
    return failures


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("world", [2, 3])
def test_every_collective_on_every_type(world, device):
    results = run_ranks(collectives_worker, world, args=(device,), timeout=300)
    failures = [f"rank {rank}: {failure}" for rank, failed in enumerate(results) for failure in failed]
    assert not failures, "\n".join(failures)


def destroy_in_flight_worker(rank, world, init_file):
    from torch.distributed import distributed_c10d

    init_dpa(rank, world, init_file)
    store = distributed_c10d._get_default_store()
    if rank == 1:
        # A delegated operation still in flight when the group is destroyed, holding the only
        # reference to a tensor that Python created: Gloo's worker frees it after the peer's
        # half arrives, while this thread sits in the group's destructor.
        dist.all_reduce(torch.full((4,), 2**40, dtype=torch.int64), op=dist.ReduceOp.MAX,
                        async_op=True)
        store.set("test/destroying", b"1")
    else:
        store.wait(["test/destroying"])
        values = torch.full((4,), 2**40 + 1, dtype=torch.int64)
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
        assert values.tolist() == [2**40 + 1] * 4
    dist.destroy_process_group()
    return "destroyed"


def test_destroy_with_a_delegated_operation_in_flight_does_not_deadlock():
    # The group's destructor used to keep the GIL while joining Gloo's worker, which needed it
    # to free that tensor: the rank hung in destroy_process_group.
    for _ in range(3):
        assert run_ranks(destroy_in_flight_worker, 2, timeout=30) == ["destroyed"] * 2
