# SPDX-License-Identifier: Apache-2.0
"""Launching through torchrun: rank, world size and the store come from the launcher (env://)."""

import os
import subprocess
import sys
import textwrap

from harness import BASE_ENV, free_port

SCRIPT = textwrap.dedent(
    """
    import os
    import torch
    import torch.distributed as dist
    import dpa

    dist.init_process_group("dpa")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == int(os.environ["WORLD_SIZE"]) and dist.get_backend() == "dpa"
    tensor = torch.arange(5000, dtype=torch.int32) * (rank + 1)
    dist.all_reduce(tensor)
    assert torch.equal(tensor, torch.arange(5000, dtype=torch.int32) * sum(range(1, world + 1)))
    averaged = torch.full((3000,), 0.25 * (rank + 1))
    dist.all_reduce(averaged, op=dist.ReduceOp.AVG)
    assert (averaged - 0.25 * (world + 1) / 2).abs().max() < 1e-6, averaged
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} ok", flush=True)
    """
)


def stream_flags():
    """torch 1.13's torchrun cannot parse its own default --redirects 0 on Python >= 3.11 (an
    IntFlag's zero member is no longer iterated); naming stdout works there."""
    from torch.distributed.elastic.multiprocessing.api import Std

    return [] if Std.from_str("0") is not None else ["--redirects", "1", "--tee", "1"]


def test_torchrun_two_processes(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, **BASE_ENV)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *stream_flags(),
               str(script)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "rank 0 ok" in output and "rank 1 ok" in output, output
