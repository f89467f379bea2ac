# SPDX-License-Identifier: Apache-2.0
"""python -m dpa.demo: the straggler training demo, DDP on handwritten digits with one slow
rank. The tool is dpa/tools/demo.py."""

import sys

from .tools.demo import main

if __name__ == "__main__":
    sys.exit(main())
