# SPDX-License-Identifier: Apache-2.0
"""A minimal data-parallel training job on backend "dpa", for torchrun:

    torchrun --nproc_per_node 4 python/examples/train.py

Each rank fits the same linear model to its own shard of a synthetic regression problem with
DDP; gradients are averaged through dpa (the embedded switch in rank 0 when no DPA_SWITCH is
set). Rank 0 prints the loss and the dpa job sizing; every rank checks that the replicas agree.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import dpa  # noqa: F401 - registers the backend "dpa"


def main(steps=200):
    dist.init_process_group("dpa")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    truth = torch.randn(256, 1)
    model = DistributedDataParallel(torch.nn.Linear(256, 1))
    optimiser = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1 + rank)  # each rank its own data
    for step in range(steps):
        inputs = torch.randn(64, 256, generator=generator)
        loss = torch.nn.functional.mse_loss(model(inputs), inputs @ truth)
        optimiser.zero_grad()
        loss.backward()  # DDP all_reduces the gradients through dpa here
        optimiser.step()
        if rank == 0 and step % 50 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}", flush=True)
    weights = model.module.weight.detach().clone()
    reference = weights.clone()
    dist.broadcast(reference, 0)
    assert torch.allclose(weights, reference), "replicas differ"
    if rank == 0:
        print(f"{world} ranks trained with backend {dist.get_backend()}; final loss "
              f"{loss.item():.4f}; replicas agree", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
