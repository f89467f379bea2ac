# SPDX-License-Identifier: Apache-2.0
"""python -m dpa.bench: all_reduce, reduce_scatter, all_gather and broadcast of dpa, Gloo and
NCCL in one run, every result verified. The tool is dpa/tools/bench.py."""

import sys

from .tools.bench import main

if __name__ == "__main__":
    sys.exit(main())
