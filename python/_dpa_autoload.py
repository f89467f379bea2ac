# SPDX-License-Identifier: Apache-2.0
"""Registers torch.distributed backend "dpa" at ``import torch``, so that
``init_process_group("dpa")`` needs no ``import dpa``: torch >= 2.5 calls every entry point of the
group ``torch.backends`` at the end of its import (unless TORCH_DEVICE_BACKEND_AUTOLOAD=0), and
pip installs this one with dpa (python/pyproject.toml).

A module of its own, outside the package: importing dpa (its extension) inside ``import torch``
would turn any problem of the dpa build into a failure of every ``import torch``. The backend
registered here imports dpa when the first dpa group is made, where such a problem belongs."""


def register():
    import torch.distributed as dist

    if not dist.is_available() or hasattr(dist.Backend, "DPA"):
        return
    try:
        dist.Backend.register_backend("dpa", _create_backend, devices=["cpu", "cuda"])
    except TypeError:  # torch < 2.0 has no devices= (and never calls this itself)
        dist.Backend.register_backend("dpa", _create_backend)


def _create_backend(store, rank, world_size, timeout):
    import dpa

    return dpa._create_backend(store, rank, world_size, timeout)
