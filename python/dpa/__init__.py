# SPDX-License-Identifier: Apache-2.0
"""dpa: in-network allreduce for torch.distributed.

``import dpa`` registers the ``"dpa"`` backend (with torch >= 2.5 an installed dpa is registered at
``import torch`` already, through the ``torch.backends`` entry point: docs/install.md)::

    import dpa, torch.distributed as dist
    dist.init_process_group("dpa")          # torchrun / env:// or any init_method
    dist.all_reduce(tensor)                 # SUM or AVG of float32/float16/bfloat16/int32: dpa
    dist.reduce_scatter_tensor(shard, tensor)  # the same types and ops: dpa
    dist.all_gather_into_tensor(out, shard)    # any type in whole 32-bit words: dpa (and broadcast)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)  # everything else: Gloo

Fastest-K: ``with dpa.fastest_k(k): ...`` for the operations issued inside,
``dpa.set_default_fastest_k(k)`` for the process, or ``DPA_K`` / ``DPA_PREEMPTIVE``.
``dpa.last_stats()`` reports what happened to the last completed operation, and
``dpa.register_ddp_hook(model, k)`` and ``dpa.register_fsdp_hook(model, k)`` average DDP's and
FSDP's gradients by each block's true contributors, and
``dpa.resynchronise(model)`` makes replicas that drifted under fastest-K identical again.
``dpa.udp_drops()`` counts the datagrams the kernel dropped on this process's dpa sockets.
``dpa.pending()`` says which all_reduce waits for which ranks, and for how long.
"""

import atexit
from pathlib import Path

import torch.distributed as dist

from . import _extension
from ._ddp import DdpHookState, allreduce_hook, register_ddp_hook
from ._fsdp import FsdpHookState, reduce_scatter_hook, register_fsdp_hook
from ._resync import Resynchroniser, resynchronise
from ._fastest_k import fastest_k, last_stats, set_default_fastest_k, total_retransmissions
from ._pending import pending
from ._socket_drops import udp_drops


def _version():
    """The version the build recorded; in a checkout that was never built, its VERSION file."""
    try:
        from ._build_info import VERSION
    except ImportError:
        return (Path(__file__).resolve().parents[2] / "VERSION").read_text().strip()
    return VERSION


__version__ = _version()

__all__ = [
    "__version__",
    "DdpHookState",
    "allreduce_hook",
    "fastest_k",
    "last_stats",
    "pending",
    "register_ddp_hook",
    "FsdpHookState",
    "reduce_scatter_hook",
    "register_fsdp_hook",
    "Resynchroniser",
    "resynchronise",
    "set_default_fastest_k",
    "total_retransmissions",
    "udp_drops",
]


def __getattr__(name):
    # dpa._C and `from dpa import _C` load the extension at their first use, with its checks.
    if name == "_C":
        return _extension.load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _create_backend(store, rank, world_size, timeout):
    extension = _extension.load()  # before the Gloo rendezvous: a broken build fails at once
    # The Gloo group carries every collective dpa does not; its own key prefix keeps its
    # rendezvous apart from dpa's keys in the same store.
    gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, world_size, timeout)
    return extension.ProcessGroupDpa(store, rank, world_size, timeout, gloo)


def _register_backend():
    if hasattr(dist.Backend, "DPA"):
        return
    try:
        # torch 2.x: one backend object serves both device types.
        dist.Backend.register_backend("dpa", _create_backend, devices=["cpu", "cuda"])
    except TypeError:
        # torch 1.13 has no devices= and dispatches every device to the returned group.
        dist.Backend.register_backend("dpa", _create_backend)


_register_backend()
# Registered at import, not when the extension loads: atexit runs its handlers last in, first out,
# so this one runs after those the job registers later (its groups' clean-up among them).
atexit.register(_extension.close_all)
