# SPDX-License-Identifier: Apache-2.0
"""The packet-level conformance suite (tests/conformance/README.md).

Its wire format is the Tofino controller's p4/controller/dpa_controller/wire.py, the one Python
definition of docs/protocol.md §2-§6: the suite puts this source tree's p4/controller first on
sys.path and re-exports that module as `dpa_conformance.wire`.
"""

import sys
from pathlib import Path

_CONTROLLER_DIR = str(Path(__file__).resolve().parents[3] / "p4" / "controller")
if _CONTROLLER_DIR not in sys.path:
    sys.path.insert(0, _CONTROLLER_DIR)

from dpa_controller import wire  # noqa: E402
