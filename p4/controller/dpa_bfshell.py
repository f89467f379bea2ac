# SPDX-License-Identifier: Apache-2.0
# Loaded by `run_bfshell.sh -b`: puts the controller package on the path and hands it bfrt.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dpa_controller import bfshell_entry  # noqa: E402

bfshell_entry.main(bfrt)  # noqa: F821 (bfshell's global)
