"""Clears a session's slot registers (p4/slot_state.p4, exponent.p4, result_bitmap.p4) to the
fresh state of docs/protocol.md §8.5 before a generation is acked, and the chunks' round and
ranks (chunk_state.p4, in every pipe: the program's registers are per pipe, and bfrt writes
all pipes): a chunk left with a previous generation's round could take a new round's
contributions for its own and withhold every result. The accumulators (reduce.p4) are not
cleared: a round's first contribution to reach a chunk overwrites them (its round differs from
the cleared 0), and no output pass reads a chunk that does not hold the result's round
(docs/switch.md).
"""

# (control, register, fields written as zero)
REGISTERS = (
    ("slot_state", "seq", ("f1",)),
    ("slot_state", "op_id", ("f1",)),
    ("slot_state", "offset", ("f1",)),
    ("slot_state", "op_length", ("f1",)),
    ("slot_state", "meta", ("f1",)),
    ("slot_state", "round", ("f1",)),
    ("slot_state", "first_arrival", ("f1",)),
    ("slot_state", "poison_info", ("f1",)),
    ("slot_state", "poison_value", ("poisoned", "value")),
    ("slot_state", "poison_expected", ("poisoned", "value")),
    ("slot_state", "arrivals", ("f1",)),
    ("slot_state", "count", ("f1",)),
    ("exponent", "exp_used", ("f1",)),
    ("exponent", "exp_max", ("f1",)),
    ("result_bitmap", "contributors", ("f1",)),
    ("chunk_state", "rounds", ("f1",)),
    ("chunk_state", "ranks", ("f1",)),
)


def registers(program_defines):
    """The registers the program has (the straggler-unaware build has no timer)."""
    return [r for r in REGISTERS
            if r[1] != "first_arrival" or program_defines["DPA_STRAGGLER_AWARE"]]


def clear_pool(program, session, config):
    with program.batch():
        for control, name, fields in registers(config.program):
            register = program.ingress(control, name)
            for index in range(session.pool_base, session.pool_base + session.pool_size):
                register.mod(REGISTER_INDEX=index, **{field: 0 for field in fields})
