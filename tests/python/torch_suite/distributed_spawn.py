# SPDX-License-Identifier: Apache-2.0
"""PyTorch's own distributed test suite (torch.testing._internal.distributed.distributed_test,
what torch's test/distributed/test_distributed_spawn.py runs for Gloo and NCCL) on one backend.

    BACKEND=dpa WORLD_SIZE=2 python3 distributed_spawn.py [unittest arguments, e.g. -k all_reduce]

Each test spawns WORLD_SIZE processes; this module is imported again in each of them, so the
`import dpa` below registers the backend there too. dpa opts in to the suite's feature-gated
tests through DistTestCases.backend_feature, as an out-of-tree backend does.
"""

import os
import sys
import unittest

import torch
import torch.distributed as dist

BACKEND = os.environ.get("BACKEND", "")
if BACKEND == "dpa":
    import dpa  # noqa: F401 - registers the backend

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if BACKEND == "dpa":
    # Features the suite gates on a backend's name. "plugin": the suite's tests for third-party
    # backends; "ddp", "subgroup": DistributedDataParallel and new_group. "gpu"/"cuda" only where
    # the ranks have GPUs of their own (the suite gives each rank a device).
    DistTestCases.backend_feature["plugin"].add("dpa")
    DistTestCases.backend_feature["ddp"].add("dpa")
    DistTestCases.backend_feature["subgroup"].add("dpa")
    if torch.cuda.is_available() and torch.cuda.device_count() >= int(os.environ.get("WORLD_SIZE", "2")):
        DistTestCases.backend_feature["gpu"].add("dpa")
        DistTestCases.backend_feature["cuda"].add("dpa")

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

torch.backends.cuda.matmul.allow_tf32 = False


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


if __name__ == "__main__":
    if not dist.is_available():
        sys.exit("torch.distributed is not available")
    unittest.main()
