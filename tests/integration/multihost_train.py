# SPDX-License-Identifier: Apache-2.0
"""One rank of a multi-host torchrun job (multihost_torchrun.py starts torchrun in every emulated
host). Usage: multihost_train.py CASE, where CASE is

  embedded     the default embedded switch: checks that it listens on rank 0's veth address
               with UDP and packets that fit the 1500-byte MTU, then the collectives below
  external     DPA_SWITCH names a dpa-switch: the collectives below
  unreachable  init_process_group must fail on every rank, naming the ranks that cannot reach
               the switch; the rank prints the error and exits 0 (so torchrun does not kill the
               other ranks of its host before they report theirs)

The collectives: int32 sums that must be exact, float32 sums and averages within dpa's bound
(protocol.md §10.4), with MH_STRAGGLER=1 a straggler under preemptive fastest-K, and with
MH_LOSS=netem|injector all_reduce on a lossy path (tc netem set by the driver, or a second dpa
group with the library's fault injector) that stays exact. Every rank prints "rank R ok" at the end.
"""

import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import dpa
from harness import float_bound

STRAGGLER_DELAY_S = 1.0  # far beyond a scheduling hiccup of the fast ranks on a busy machine


def dpa_backend(group=None):
    group = group or dist.distributed_c10d._get_default_group()
    return group._get_backend(torch.device("cpu")) if hasattr(group, "_get_backend") else group


def rank_values(rank, count):
    """Rank r's float32 input, reproducible on every rank (each checks the whole sum)."""
    return np.random.default_rng(1000 + rank).normal(0.0, 4.0, count).astype(np.float32)


def check_int32(rank, world, group=None):
    for count in (1, 1000, 3 * dpa_backend(group).payload_for(100_000) + 7, 100_000):
        tensor = torch.arange(count, dtype=torch.int32) * (rank + 1) + rank
        dist.all_reduce(tensor, group=group)
        expected = torch.arange(count, dtype=torch.int32) * sum(range(1, world + 1)) + sum(range(world))
        assert torch.equal(tensor, expected), f"rank {rank}: int32 sum of {count} elements differs"


def check_float32(rank, world):
    for count in (3000, 70_000):
        inputs = [rank_values(r, count).astype(np.float64) for r in range(world)]
        payload = dpa_backend().payload_for(count)
        tensor = torch.from_numpy(rank_values(rank, count))
        dist.all_reduce(tensor)
        exact, bound = float_bound(inputs, payload)
        error = np.abs(tensor.numpy().astype(np.float64) - exact)
        assert (error <= bound).all(), f"rank {rank}: float32 sum of {count} exceeds the bound by {(error - bound).max()}"
        tensor = torch.from_numpy(rank_values(rank, count))
        dist.all_reduce(tensor, op=dist.ReduceOp.AVG)
        exact, bound = float_bound(inputs, payload, contributors=world)
        error = np.abs(tensor.numpy().astype(np.float64) - exact)
        assert (error <= bound).all(), f"rank {rank}: float32 average of {count} exceeds the bound"


def check_straggler(rank, world):
    """The last rank (on the last host) is late; the others complete every block with the first
    world - 1 contributions and hold exactly their sum."""
    late = rank == world - 1
    k = world - 1
    dist.barrier()
    if late:
        time.sleep(STRAGGLER_DELAY_S)  # the straggler being late is the scenario, not a wait
    tensor = torch.full((5000,), rank + 1, dtype=torch.int32)
    with dpa.fastest_k(k, preemptive=True):
        dist.all_reduce(tensor)
    stats = dpa.last_stats()
    if late:
        assert stats["blocks"] > 0 and stats["contributed"] == 0, f"straggler rank {rank}: {stats}"
    else:
        assert stats["min_contributors"] == k and stats["blocks_partial"] == stats["blocks"], f"rank {rank}: {stats}"
        assert torch.equal(tensor, torch.full((5000,), sum(range(1, k + 1)), dtype=torch.int32)), f"rank {rank}"
    dist.barrier()


def check_loss(rank, world, loss):
    group = None
    if loss == "injector":
        # A second dpa group reads the variables anew: its ranks drop 2 % of their packets.
        os.environ["DPA_FAULT_DROP"] = "0.02"
        os.environ["DPA_FAULT_SEED"] = str(rank + 1)
        group = dist.new_group(backend="dpa")
        del os.environ["DPA_FAULT_DROP"]
    retransmissions = dpa.total_retransmissions()
    for _ in range(3):
        check_int32(rank, world, group)
    print(f"rank {rank} loss ({loss}): {dpa.total_retransmissions() - retransmissions} retransmissions", flush=True)


def expect_embedded_over_udp(rank):
    backend = dpa_backend()
    sizing = dict(field.split("=") for field in backend.sizing.split())
    host = backend.switch_address.rsplit(":", 1)[0]
    assert host == os.environ["MH_SWITCH_HOST"], f"rank {rank}: switch at {backend.switch_address}"
    assert sizing["shm_fabric"] == "0", f"rank {rank}: shared memory across hosts: {backend.sizing}"
    assert sizing["payload"] == os.environ["MH_PAYLOAD"], f"rank {rank}: {backend.sizing}"
    assert backend.embeds_switch == (rank == 0)


def main():
    case = sys.argv[1]
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if case == "unreachable":
        started = time.monotonic()
        try:
            dist.init_process_group("dpa")
        except RuntimeError as error:
            print(f"rank {rank} failed after {time.monotonic() - started:.1f} s: {error}", flush=True)
            return
        sys.exit(f"rank {rank}: init_process_group succeeded with an unreachable switch")
    dist.init_process_group("dpa")
    backend = dpa_backend()
    print(f"rank {rank} on {os.uname().nodename}: switch {backend.switch_address}, sizing {backend.sizing}", flush=True)
    if case == "embedded":
        expect_embedded_over_udp(rank)
    check_int32(rank, world)
    check_float32(rank, world)
    if os.environ.get("MH_STRAGGLER") == "1":
        check_straggler(rank, world)
    if os.environ.get("MH_LOSS"):
        check_loss(rank, world, os.environ["MH_LOSS"])
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} ok", flush=True)


if __name__ == "__main__":
    main()
