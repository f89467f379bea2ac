# SPDX-License-Identifier: Apache-2.0
"""Fastest-K gradient reduce-scatters for FSDP (FullyShardedDataParallel) and FSDP2
(``fully_shard``) through dpa.

FSDP divides the summed gradient by the world size; with fastest-K a block holds fewer ranks'
gradients, so that would scale it down. These hooks ask the switch for AVG instead: each block is
divided by the number of ranks whose gradients it holds, so the average stays an average of real
gradients, as register_ddp_hook does for DDP. FSDP runs its reduce-scatters on autograd's threads,
where a ``dpa.fastest_k`` scope of the training loop does not reach: the hook carries K there."""

import contextlib

import torch
import torch.distributed as dist

from ._fastest_k import fastest_k


class FsdpHookState:
    """What the hooks need: the process group (FSDP passes its own) and the fastest-K choice for
    the gradient reduce-scatters (``k=None``: the process default)."""

    def __init__(self, process_group=None, k=None, preemptive=False):
        self.process_group = process_group
        self.k = k
        self.preemptive = preemptive

    def scope(self):
        return fastest_k(self.k, self.preemptive) if self.k is not None else contextlib.nullcontext()


def reduce_scatter_hook(state, grad, output=None):
    """FSDP comm hook: the gradient's AVG through dpa into ``output`` (this rank's shard), or in
    place when FSDP does not shard (``output`` None)."""
    with state.scope():
        if output is None:
            dist.all_reduce(grad, op=dist.ReduceOp.AVG, group=state.process_group)
        else:
            dist.reduce_scatter_tensor(output, grad, op=dist.ReduceOp.AVG, group=state.process_group)


def fsdp2_reduce_scatter(state):
    """FSDP2's reduce-scatter (``FSDPModule.set_custom_reduce_scatter``): the AVG through dpa
    whatever reduction FSDP2 asks for, which register_fsdp_hook makes a plain sum (gradient
    divide factor 1). Built on first use: torch.distributed.fsdp is not imported with dpa (torch
    1.13's fails to import under Python 3.11)."""
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter

    class DpaReduceScatter(ReduceScatter):
        def allocate(self, size, *, dtype, device):
            return torch.empty(size, dtype=dtype, device=device)

        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            del op  # a sum, or a sum pre-multiplied by 1: the divide factor is 1
            with state.scope():
                return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=dist.ReduceOp.AVG,
                                                  group=group, async_op=async_op)

    return DpaReduceScatter()


def _fsdp2_modules(model):
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6
        try:
            from torch.distributed._composable.fsdp import FSDPModule
        except ImportError:
            return []
    return [module for module in model.modules() if isinstance(module, FSDPModule)]


def register_fsdp_hook(fsdp_model, k=None, preemptive=False):
    """Makes the gradient reduce-scatters of an FSDP model of a dpa group average through dpa
    with fastest-K: a FullyShardedDataParallel model (torch 2.x) gets a comm hook, a model
    sharded with ``fully_shard`` (FSDP2) a custom reduce-scatter on each of its FSDP modules.
    Call it before the first backward."""
    fsdp2 = _fsdp2_modules(fsdp_model)
    if not fsdp2:
        state = FsdpHookState(fsdp_model.process_group, k, preemptive)
        fsdp_model.register_comm_hook(state, reduce_scatter_hook)
        return state
    if not hasattr(fsdp2[0], "set_custom_reduce_scatter"):
        raise RuntimeError(f"dpa.register_fsdp_hook: FSDP2 in torch {torch.__version__} has no "
                           "set_custom_reduce_scatter; fastest-K with fully_shard needs a newer torch")
    state = FsdpHookState(None, k, preemptive)
    comm = fsdp2_reduce_scatter(state)
    for module in fsdp2:
        # FSDP2 then neither divides before nor after the reduce-scatter: the AVG does.
        module.set_gradient_divide_factor(1.0)
        module.set_custom_reduce_scatter(comm)
    return state
