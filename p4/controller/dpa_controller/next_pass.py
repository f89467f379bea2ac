# SPDX-License-Identifier: Apache-2.0
"""The pass plan of p4/next_pass.p4 (docs/switch.md): input pass p (1..C) handles chunk p-1 in
pipe pipes[p-1]; output pass C+1+j reads chunk C-1-j//2, its high half first. One entry per
worker port and (pass, with_values) whose packet goes on, through the pass ports that worker
port's packets take (the shared ones, or its own loopback ports); every other packet is delivered
after its pass.
"""

READ_LO = 3
READ_HI = 4


def plan(chunks, pipes, pass_ports):
    """[(pass, with_values, action, params)] of one worker port's packets, whose pass into pipe
    p goes through pass_ports[p]."""
    entries = []
    for p in range(1, chunks):
        for with_values in (0, 1):
            entries.append((p, with_values, "continue_input", dict(port=pass_ports[pipes[p]])))
    outputs = [(chunk, half) for chunk in reversed(range(chunks)) for half in (READ_HI, READ_LO)]
    # After the last input pass (or after pass `chunks` for a probe): the first output pass.
    for j, (chunk, half) in enumerate(outputs):
        entries.append((chunks + j, 1, "continue_output",
                        dict(port=pass_ports[pipes[chunk]], reduce_op=half)))
    return entries


def setup(program, config, routes):
    """`routes`: {worker dev port: {pipe: dev port of the pass port into that pipe}} (ports.setup)."""
    table = program.ingress("next_pass", "next_pass")
    for worker_port, pass_ports in sorted(routes.items()):
        for p, with_values, action, params in plan(config.program["DPA_CHUNKS"], config.pipes, pass_ports):
            getattr(table, "add_with_" + action)(worker_port=worker_port, pass_index=p,
                                                  with_values=with_values, **params)
