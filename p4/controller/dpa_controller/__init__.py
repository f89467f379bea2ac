# SPDX-License-Identifier: Apache-2.0
"""bfrt_python controller of the dpa Tofino program (p4/dpa.p4).

One module per P4 control it programs (admission, slot_state, delivery, next_pass,
egress_rewrite, counters, net, drop_simulator), plus the JOIN procedure of docs/protocol.md §6.3
(join.py, pure), the wire format (wire.py, also the conformance suite's), the config (config.py)
and the loop that ties them together (controller.py). Everything but cpu_port.py and bfshell_entry.py is plain Python,
tested in CI against a recording fake of bfrt.
"""
