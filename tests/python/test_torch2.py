# SPDX-License-Identifier: Apache-2.0
"""torch 2.x users of c10d on backend "dpa": functional collectives, DTensor, FSDP, FSDP2, DDP
under torch.compile and the device-keyed backend string. Skipped on torch 1.13 (none of these
exists there); run on CPU, and on CUDA where the host has a GPU (the ranks share it)."""

import pytest
import torch
import torch.distributed as dist

from harness import run_ranks

pytestmark = pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2, reason="torch 2.x APIs")
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _init(rank, world, init_file, device, backend="dpa"):
    import dpa  # noqa: F401 - registers the backend

    if device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(backend, init_method="file://" + init_file, rank=rank, world_size=world)
    return torch.device(device)


def functional_and_dtensor_worker(rank, world, init_file, device_type):
    import torch.distributed._functional_collectives as funcol

    device = _init(rank, world, init_file, device_type)
    group = dist.group.WORLD
    values = torch.arange(4 * world, dtype=torch.float32, device=device) + rank
    total = sum(torch.arange(4 * world, dtype=torch.float32) + r for r in range(world)).to(device)
    assert torch.equal(funcol.all_reduce(values, "sum", group).wait(), total)
    shard = funcol.reduce_scatter_tensor(values, "sum", scatter_dim=0, group=group).wait()
    assert torch.equal(shard, total[rank * 4:rank * 4 + 4])
    gathered = funcol.all_gather_tensor(values[:4], gather_dim=0, group=group).wait()
    assert torch.equal(gathered, torch.cat([torch.arange(4, dtype=torch.float32, device=device) + r
                                            for r in range(world)]))

    try:
        from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
    except ImportError:  # torch < 2.5
        from torch.distributed._tensor import Replicate, Shard, distribute_tensor
        from torch.distributed._tensor.placement_types import _Partial as Partial
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device_type, (world,))
    full = torch.arange(8 * world, dtype=torch.float32, device=device)
    sharded = distribute_tensor(full, mesh, [Shard(0)])
    assert torch.equal(sharded.redistribute(mesh, [Replicate()]).to_local(), full)
    from torch.distributed.tensor import DTensor

    partial = DTensor.from_local(torch.full((2 * world,), float(rank + 1), device=device), mesh, [Partial()])
    expected = float(sum(range(1, world + 1)))
    assert torch.equal(partial.redistribute(mesh, [Replicate()]).to_local(),
                       torch.full((2 * world,), expected, device=device))
    assert torch.equal(partial.redistribute(mesh, [Shard(0)]).to_local(),
                       torch.full((2,), expected, device=device))
    dist.destroy_process_group()
    return "ok"


def _env(device):
    # On a host with a GPU, FSDP and DeviceMesh pick it by themselves: hide it from CPU runs.
    return {"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {}


@pytest.mark.parametrize("device", DEVICES)
def test_functional_collectives_and_dtensor(device):
    assert run_ranks(functional_and_dtensor_worker, 2, args=(device,), env=_env(device), timeout=180) == ["ok"] * 2


def _model(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)


def _train(model, device, steps=3):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1)
    for _ in range(steps):
        # The same batch on every rank: the averaged gradient is a rank's own.
        loss = model(torch.randn(8, 16, device=device)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def sharded_training_worker(rank, world, init_file, device_type, wrapper):
    device = _init(rank, world, init_file, device_type)
    reference = _model(device)
    _train(reference, device)
    model = _model(device)
    if wrapper in ("fsdp", "fsdp_hook"):
        from torch.distributed.fsdp import FullyShardedDataParallel

        import dpa

        model = FullyShardedDataParallel(model, use_orig_params=True,
                                         device_id=device if device_type == "cuda" else None)
        if wrapper == "fsdp_hook":
            # K = N: the hook's AVG through the switch must train as FSDP's own division does.
            dpa.register_fsdp_hook(model, k=world)
        _train(model, device)
        with FullyShardedDataParallel.summon_full_params(model):
            trained = [p.detach().clone() for p in model.parameters()]
    elif wrapper in ("fsdp2", "fsdp2_hook"):
        import dpa

        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:  # torch < 2.6
            from torch.distributed._composable.fsdp import fully_shard
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        if wrapper == "fsdp2_hook":
            # K = N: the custom reduce-scatter's AVG must train as FSDP2's own division does.
            dpa.register_fsdp_hook(model, k=world)
        _train(model, device)
        trained = [p.full_tensor().detach() for p in model.parameters()]
    else:  # DDP under torch.compile
        model = torch.compile(torch.nn.parallel.DistributedDataParallel(model), backend="aot_eager")
        _train(model, device)
        trained = [p.detach() for p in model.parameters()]
    difference = max(float((a - b).abs().max()) for a, b in zip(trained, reference.parameters()))
    dist.destroy_process_group()
    return difference


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("wrapper", ["fsdp", "fsdp_hook", "fsdp2", "fsdp2_hook", "ddp_compiled"])
def test_sharded_and_compiled_training_matches_a_single_process(wrapper, device):

    # Identical batches: every rank's gradient is the average, so training equals one process's
    # up to dpa's float error (protocol.md §10.4).
    try:
        differences = run_ranks(sharded_training_worker, 2, args=(device, wrapper), env=_env(device), timeout=300)
    except RuntimeError as error:
        # Recent torch refuses FSDP (v1) without an accelerator; FSDP2 still runs on the CPU.
        if "FSDP needs a non-CPU accelerator device" in str(error):
            pytest.skip("this torch's FSDP (v1) needs an accelerator")
        raise
    assert max(differences) < 1e-5, differences


def device_keyed_worker(rank, world, init_file):
    _init(rank, world, init_file, "cuda", backend="cpu:gloo,cuda:dpa")
    on_cuda = torch.full((4,), float(rank + 1), device="cuda")
    on_cpu = torch.full((4,), float(rank + 1))
    dist.all_reduce(on_cuda)
    dist.all_reduce(on_cpu)
    group = dist.distributed_c10d._get_default_group()
    # The CUDA tensors went to dpa's backend object, the CPU ones to Gloo's.
    cuda_backend = type(group._get_backend(torch.device("cuda"))).__name__
    dist.destroy_process_group()
    return float(on_cuda[0]), float(on_cpu[0]), cuda_backend


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_device_keyed_backend_string():
    for cuda_sum, cpu_sum, cuda_backend in run_ranks(device_keyed_worker, 2, timeout=120):
        assert cuda_sum == cpu_sum == 3.0
        assert cuda_backend == "ProcessGroupDpa"
