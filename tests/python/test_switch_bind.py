# SPDX-License-Identifier: Apache-2.0
"""DPA_SWITCH_BIND on one host (docs/multi-host.md §2): the embedded switch listens where it says,
on UDP with the sizing of a job across hosts, and a bind or transport that cannot work fails
every rank with the reason."""

import re

import pytest
import torch
import torch.distributed as dist

from harness import dpa_backend, free_port, init_dpa, run_ranks


def bound_worker(rank, world, init_file):
    init_dpa(rank, world, init_file)
    backend = dpa_backend()
    tensor = torch.arange(50_000, dtype=torch.int32) * (rank + 1)
    dist.all_reduce(tensor)
    assert torch.equal(tensor, torch.arange(50_000, dtype=torch.int32) * sum(range(1, world + 1)))
    return backend.switch_address, dict(field.split("=") for field in backend.sizing.split())


def test_switch_listens_on_the_bind_address():
    port = free_port()
    results = run_ranks(bound_worker, 2, env={"DPA_SWITCH_BIND": f"127.0.0.1:{port}"}, timeout=120)
    for address, sizing in results:
        assert address == f"127.0.0.1:{port}"
        assert sizing["shm_fabric"] == "0"  # UDP: the switch serves one transport
        assert sizing["payload"] == "16000"  # loopback's MTU limits nothing below the maximum


def failing_worker(rank, world, init_file, shm_rank):
    import os

    if rank == shm_rank:
        os.environ["DPA_TRANSPORT"] = "shm"
    with pytest.raises(RuntimeError) as error:
        init_dpa(rank, world, init_file)
    return str(error.value)


@pytest.mark.parametrize("bind, shm_rank, expected", [
    # 192.0.2.1 (TEST-NET-1) is no address of this host.
    ("192.0.2.1", None, r"cannot bind UDP 192\.0\.2\.1"),
    ("127.0.0.1", 1, r"the shm transport .* of rank 1 \(host [^)]+\) cannot reach the embedded switch.*"
                     r"DPA_SWITCH_BIND is set"),
])
def test_every_rank_learns_why_the_switch_cannot_serve(bind, shm_rank, expected):
    messages = run_ranks(failing_worker, 2, env={"DPA_SWITCH_BIND": bind}, args=(shm_rank,), timeout=120)
    for rank, message in enumerate(messages):
        assert re.search(expected, message), f"rank {rank}: {message}"
