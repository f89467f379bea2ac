# SPDX-License-Identifier: Apache-2.0
"""Every collective other than dpa's all_reduce is Gloo's, through the dpa process group: the
results must be Gloo's. Operations Gloo itself lacks in this torch are reported as skipped."""

import pytest
import torch
import torch.distributed as dist

from harness import init_dpa, run_ranks

UNSUPPORTED = "unsupported"


def _attempt(results, name, run):
    try:
        run()
        results[name] = "ok"
    except RuntimeError as error:
        message = str(error)
        if any(phrase in message for phrase in ("does not support", "not supported", "no support")):
            results[name] = f"{UNSUPPORTED}: {message.splitlines()[0]}"
        else:
            raise


def collectives_worker(rank, world, init_file):
    init_dpa(rank, world, init_file)
    assert dist.get_backend() == "dpa"
    results = {}

    def broadcast():
        tensor = torch.full((5,), float(rank))
        dist.broadcast(tensor, src=world - 1)
        assert torch.equal(tensor, torch.full((5,), float(world - 1)))

    def all_gather():
        outputs = [torch.zeros(3, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(outputs, torch.full((3,), rank, dtype=torch.int64))
        assert [int(t[0]) for t in outputs] == list(range(world))

    def all_gather_into_tensor():
        output = torch.zeros(world * 2)
        dist.all_gather_into_tensor(output, torch.full((2,), float(rank)))
        assert torch.equal(output, torch.arange(world).float().repeat_interleave(2))

    def reduce_scatter():
        output = torch.zeros(2)
        dist.reduce_scatter(output, [torch.full((2,), float(r + rank)) for r in range(world)])
        assert torch.equal(output, torch.full((2,), float(rank * world + sum(range(world)))))

    def reduce_scatter_tensor():
        output = torch.zeros(2)
        dist.reduce_scatter_tensor(output, torch.arange(world * 2).float())
        assert torch.equal(output, torch.arange(world * 2).float()[rank * 2:rank * 2 + 2] * world)

    def barrier():
        dist.barrier()

    def all_to_all_single():
        output = torch.zeros(world, dtype=torch.int64)
        dist.all_to_all_single(output, torch.arange(world, dtype=torch.int64) + 10 * rank)
        assert torch.equal(output, torch.arange(world, dtype=torch.int64) * 10 + rank)

    def all_to_all():
        outputs = [torch.zeros(1) for _ in range(world)]
        dist.all_to_all(outputs, [torch.full((1,), float(10 * rank + r)) for r in range(world)])
        assert [float(t) for t in outputs] == [float(10 * r + rank) for r in range(world)]

    def send_recv():
        tensor = torch.full((4,), float(rank))
        if rank == 0:
            dist.send(tensor, dst=1)
        elif rank == 1:
            dist.recv(tensor, src=0)
            assert torch.equal(tensor, torch.zeros(4))

    def gather_scatter_reduce():
        outputs = [torch.zeros(1) for _ in range(world)] if rank == 0 else None
        dist.gather(torch.full((1,), float(rank)), outputs, dst=0)
        if rank == 0:
            assert [float(t) for t in outputs] == [float(r) for r in range(world)]
        received = torch.zeros(1)
        dist.scatter(received, [torch.full((1,), float(r * 3)) for r in range(world)] if rank == 0 else None, src=0)
        assert float(received) == rank * 3
        total = torch.full((2,), float(rank + 1))
        dist.reduce(total, dst=0)
        if rank == 0:
            assert torch.equal(total, torch.full((2,), float(sum(range(1, world + 1)))))

    def all_reduce_delegated():
        # Reductions, dtypes and devices dpa does not do go to Gloo.
        values = torch.tensor([rank, -rank], dtype=torch.int64)
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
        assert values.tolist() == [world - 1, 0]
        wide = torch.full((3,), 2**40 + rank, dtype=torch.int64)
        dist.all_reduce(wide)
        assert wide.tolist() == [world * 2**40 + sum(range(world))] * 3
        doubles = torch.full((3,), 0.5 + rank, dtype=torch.float64)
        dist.all_reduce(doubles, op=dist.ReduceOp.MIN)
        assert doubles.tolist() == [0.5] * 3
        product = torch.full((2,), 2.0)
        dist.all_reduce(product, op=dist.ReduceOp.PRODUCT)
        assert product.tolist() == [2.0**world] * 2

    for name, run in [("broadcast", broadcast), ("all_gather", all_gather),
                      ("all_gather_into_tensor", all_gather_into_tensor),
                      ("reduce_scatter", reduce_scatter), ("reduce_scatter_tensor", reduce_scatter_tensor),
                      ("barrier", barrier), ("all_to_all_single", all_to_all_single),
                      ("all_to_all", all_to_all), ("send_recv", send_recv),
                      ("gather_scatter_reduce", gather_scatter_reduce),
                      ("all_reduce_delegated", all_reduce_delegated)]:
        _attempt(results, name, run)
        # Failed attempts must not leave the ranks out of step.
        dist.barrier()
    return results


@pytest.fixture(scope="module", params=[2, 4], ids=["world2", "world4"])
def collective_results(request):
    return run_ranks(collectives_worker, request.param, timeout=180)


REQUIRED = ["broadcast", "all_gather", "all_gather_into_tensor", "barrier", "send_recv",
            "gather_scatter_reduce", "all_reduce_delegated"]
OPTIONAL = ["reduce_scatter", "reduce_scatter_tensor", "all_to_all_single", "all_to_all"]


@pytest.mark.parametrize("name", REQUIRED)
def test_delegated_collective(collective_results, name):
    for rank, results in enumerate(collective_results):
        assert results[name] == "ok", f"rank {rank}: {name}: {results[name]}"


@pytest.mark.parametrize("name", OPTIONAL)
def test_delegated_collective_if_gloo_has_it(collective_results, name):
    statuses = {results[name] for results in collective_results}
    if any(status.startswith(UNSUPPORTED) for status in statuses):
        pytest.skip(f"Gloo in torch {torch.__version__} lacks it: {sorted(statuses)[0]}")
    assert statuses == {"ok"}


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
