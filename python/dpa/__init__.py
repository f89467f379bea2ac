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

import torch
import torch.distributed as dist

from ._build_info import BUILT_WITH_TORCH, VERSION

__version__ = VERSION

if torch.__version__ != BUILT_WITH_TORCH:
    raise ImportError(
        f"dpa._C was built against torch {BUILT_WITH_TORCH}, but this Python "
        f"imports torch {torch.__version__} from {torch.__file__}. The C++ ABI of torch "
        "changes between releases: rebuild the extension with this torch "
        "(cmake --build <build> --target torch-plugin, or pip install --no-build-isolation ./python)."
    )

try:
    from . import _C
except ImportError as error:
    raise ImportError(
        f"dpa._C could not be loaded with torch {torch.__version__} ({error}). "
        "Check that libdpa is found (the extension's rpath, or LD_LIBRARY_PATH) and that the "
        "extension was built against this torch."
    ) from error

if (_C.TORCH_VERSION_MAJOR, _C.TORCH_VERSION_MINOR) != tuple(
    int(part) for part in torch.__version__.split(".")[:2]
) or _C.CXX11_ABI != torch._C._GLIBCXX_USE_CXX11_ABI:
    raise ImportError(
        f"dpa._C was compiled against torch headers {_C.TORCH_VERSION} "
        f"(_GLIBCXX_USE_CXX11_ABI={int(_C.CXX11_ABI)}), which do not match torch "
        f"{torch.__version__} (_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}); "
        "rebuild the extension with this torch."
    )

from ._ddp import DdpHookState, allreduce_hook, register_ddp_hook  # noqa: E402
from ._fsdp import FsdpHookState, reduce_scatter_hook, register_fsdp_hook  # noqa: E402
from ._resync import Resynchroniser, resynchronise  # noqa: E402
from ._fastest_k import fastest_k, last_stats, set_default_fastest_k, total_retransmissions  # noqa: E402
from ._pending import pending  # noqa: E402
from ._socket_drops import udp_drops  # noqa: E402

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


def _create_backend(store, rank, world_size, timeout):
    # The Gloo group carries every collective dpa does not; its own key prefix keeps its
    # rendezvous apart from dpa's keys in the same store.
    gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, world_size, timeout)
    return _C.ProcessGroupDpa(store, rank, world_size, timeout, gloo)


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
# Stops the worker threads and the embedded switch before the interpreter tears down.
atexit.register(_C.close_all)
