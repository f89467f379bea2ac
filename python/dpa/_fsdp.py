# SPDX-License-Identifier: Apache-2.0
"""An FSDP communication hook that reduce-scatters gradients through dpa with fastest-K.

FSDP's own reduce-scatter divides the summed gradient by the world size; with fastest-K a block
holds fewer ranks' gradients, so that would scale it down. This hook asks the switch for AVG
instead: each block is divided by the number of ranks whose gradients it holds, so the average
stays an average of real gradients, as register_ddp_hook does for DDP."""

import contextlib

import torch.distributed as dist

from ._fastest_k import fastest_k


class FsdpHookState:
    """What ``reduce_scatter_hook`` needs: the process group (FSDP passes its own) and the
    fastest-K choice for the gradient reduce-scatters (``k=None``: the process default)."""

    def __init__(self, process_group=None, k=None, preemptive=False):
        self.process_group = process_group
        self.k = k
        self.preemptive = preemptive


def reduce_scatter_hook(state, grad, output=None):
    """FSDP comm hook: the gradient's AVG through dpa into ``output`` (this rank's shard), or in
    place when FSDP does not shard (``output`` None)."""
    scope = fastest_k(state.k, state.preemptive) if state.k is not None else contextlib.nullcontext()
    with scope:
        if output is None:
            dist.all_reduce(grad, op=dist.ReduceOp.AVG, group=state.process_group)
        else:
            dist.reduce_scatter_tensor(output, grad, op=dist.ReduceOp.AVG, group=state.process_group)


def register_fsdp_hook(fsdp_model, k=None, preemptive=False):
    """Registers ``reduce_scatter_hook`` on a FullyShardedDataParallel model (torch 2.x) of a dpa
    group; call it on the root FSDP module before the first backward."""
    state = FsdpHookState(fsdp_model.process_group, k, preemptive)
    fsdp_model.register_comm_hook(state, reduce_scatter_hook)
    return state
