# SPDX-License-Identifier: Apache-2.0
"""python -m dpa.train: the training benchmark, DDP, FSDP and FSDP2 under a straggler, dpa
against Gloo and NCCL. The tool is dpa/tools/train.py."""

import sys

from .tools.train import main

if __name__ == "__main__":
    sys.exit(main())
