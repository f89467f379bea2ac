# SPDX-License-Identifier: Apache-2.0
"""Writes the straggler-unaware variant of a switch config: unaware_config.py IN.json OUT.json."""
import json
import sys

config = json.load(open(sys.argv[1]))
config["switch"]["program"]["straggler_aware"] = False
json.dump(config, open(sys.argv[2], "w"))
