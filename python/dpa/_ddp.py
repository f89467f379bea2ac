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


# Resynchronisation moves every parameter in few large broadcasts: one per tensor costs a Gloo
# round trip each (hundreds for a ResNet-50 with its momentum, about a second on a GPU host).
RESYNC_BUCKET_BYTES = 256 * 1024 * 1024


def _buckets(tensors):
    """``tensors`` grouped by device and dtype, in order, into lists of at most
    RESYNC_BUCKET_BYTES each (a larger tensor is a bucket of its own)."""
    by_kind = {}
    for tensor in tensors:
        by_kind.setdefault((tensor.device, tensor.dtype), []).append(tensor)
    for same_kind in by_kind.values():
        bucket, bucket_bytes = [], 0
        for tensor in same_kind:
            size = tensor.numel() * tensor.element_size()
            if bucket and bucket_bytes + size > RESYNC_BUCKET_BYTES:
                yield bucket
                bucket, bucket_bytes = [], 0
            bucket.append(tensor)
            bucket_bytes += size
        yield bucket


def _coalesced_broadcast(tensors, src, group):
    """Broadcasts ``tensors`` from ``src``, one flat tensor per bucket."""
    import torch

    for bucket in _buckets(tensors):
        flat = torch.cat([t.reshape(-1) for t in bucket])
        dist.broadcast(flat, src, group=group)
        offset = 0
        for tensor in bucket:
            tensor.copy_(flat[offset:offset + tensor.numel()].view_as(tensor))
            offset += tensor.numel()


def resynchronise(module, src=0, group=None, optimizer=None):
    """Copies every parameter and buffer of ``module`` from rank ``src`` to all ranks (a
    broadcast, which dpa delegates to Gloo), so replicas that drifted apart under fastest-K are
    identical again. With ``optimizer``, its per-parameter state tensors (SGD's momentum, Adam's
    moments) are copied too: they hold the gradients a slow rank kept for the blocks it missed,
    so without them the replicas drift apart again at once. A collective: every rank of the group
    calls it at the same point, so the fast ranks wait for the slowest one here. The tensors travel
    in a few flat buckets of at most 256 MiB, not one broadcast each."""
    import torch

    tensors = [p.data for p in module.parameters()] + list(module.buffers())
    if optimizer is not None:
        for param_group in optimizer.param_groups:
            for parameter in param_group["params"]:
                state = optimizer.state.get(parameter, {})
                tensors += [state[key] for key in sorted(state) if torch.is_tensor(state[key])]
    with torch.no_grad():
        _coalesced_broadcast([t for t in tensors if t.numel() > 0], src, group)
