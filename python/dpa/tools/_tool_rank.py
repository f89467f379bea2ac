# SPDX-License-Identifier: Apache-2.0
"""What one rank of python -m dpa.bench and python -m dpa.train share: its device, the Gloo group
the tools' own collectives use (so they never go through the backend being measured), the check
whether every rank has a GPU of its own (NCCL's condition), and how a tool reports a failure."""

import sys


class UsageError(Exception):
    """A setting every rank finds wrong in the same way (exit status 2)."""


class ToolRank:
    """This rank's device and Gloo group, and the collectives a tool itself needs."""

    def __init__(self, rank, world, local_rank, local_world, settings):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.rank, self.world = rank, world
        self.local_rank, self.local_world = local_rank, local_world
        self.settings = settings
        self.device = torch.device(settings["device"])
        if self.device.type == "cuda":
            self.device = torch.device("cuda", local_rank % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        self.gloo = dist.new_group(backend="gloo")
        self.skipped = {}

    def ranks_without_own_gpu(self):
        """How many ranks lack a GPU of their own; each rank can only say it for its own host, so
        every rank takes part, and all learn the same count."""
        own_gpu = self.device.type == "cuda" and self.torch.cuda.device_count() >= self.local_world
        count = self.torch.tensor([0 if own_gpu else 1], dtype=self.torch.int64)
        self.dist.all_reduce(count, group=self.gloo)
        return int(count)

    def nccl_reason(self, ranks_without):
        return (f"{ranks_without} of {self.world} ranks have no GPU of their own (--device "
                f"{self.settings['device']}, this host: {self.local_world} local ranks, "
                f"{self.torch.cuda.device_count()} GPUs); NCCL needs one GPU per rank")

    def synchronize(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def barrier(self):
        self.synchronize()
        self.dist.barrier(group=self.gloo)

    def gather_objects(self, value):
        gathered = [None] * self.world
        self.dist.all_gather_object(gathered, value, group=self.gloo)
        return gathered


def exit_status(tool, error):
    """Prints why the run failed and returns the exit status: 2 for a usage error, raised here or in
    a local rank (whose message is the last line of the error the launcher raises), else 1."""
    text = str(error)
    if isinstance(error, UsageError):
        print(f"{tool}: {text}", file=sys.stderr)
        return 2
    if "UsageError: " in text:
        print(f"{tool}: {text.strip().splitlines()[-1].split('UsageError: ', 1)[1]}", file=sys.stderr)
        return 2
    print(f"{tool}: {text}", file=sys.stderr)
    return 1
