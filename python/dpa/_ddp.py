# SPDX-License-Identifier: Apache-2.0
"""A DDP communication hook that averages gradients through dpa.

Each block of the flattened bucket is divided by the number of ranks whose gradients it holds,
so with fastest-K the average stays an average of real gradients instead of being scaled down by
the world size."""

import contextlib

import torch.distributed as dist

from ._fastest_k import fastest_k


class DdpHookState:
    """What ``allreduce_hook`` needs: the process group (None: the default group) and the
    fastest-K choice for the gradient all-reduces (``k=None``: the process default)."""

    def __init__(self, process_group=None, k=None, preemptive=False):
        self.process_group = process_group
        self.k = k
        self.preemptive = preemptive


def allreduce_hook(state, bucket):
    """DDP comm hook: all-reduce the bucket with AVG through dpa and return the future.

    ``state`` is a ``DdpHookState``, a process group, or None (the default group)."""
    if isinstance(state, DdpHookState):
        group, k, preemptive = state.process_group, state.k, state.preemptive
    else:
        group, k, preemptive = state, None, False
    # Hooks run on autograd's threads, so the choice is set on the thread that issues the op.
    scope = fastest_k(k, preemptive) if k is not None else contextlib.nullcontext()
    with scope:
        work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.AVG, group=group, async_op=True)
    return work.get_future().then(lambda future: future.value()[0])


def register_ddp_hook(ddp_model, k=None, preemptive=False):
    """Registers ``allreduce_hook`` on a DistributedDataParallel model of a dpa group."""
    state = DdpHookState(ddp_model.process_group, k, preemptive)
    ddp_model.register_comm_hook(state, allreduce_hook)
    return state
