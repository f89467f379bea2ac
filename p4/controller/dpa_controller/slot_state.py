# SPDX-License-Identifier: Apache-2.0
"""Clears the slot registers a new generation can reach (p4/slot_state.p4, exponent.p4,
result_bitmap.p4) to the fresh state of docs/protocol.md §8.5 before the generation is acked, and
the chunks' round and ranks (chunk_state.p4, in every pipe: the program's registers are per pipe,
and bfrt writes all pipes): a chunk left with a previous generation's round could take a new
round's contributions for its own and withhold every result. The accumulators (reduce.p4) are not
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


def clear_generation(program, session, generation, config, shared):
    """§8.5's fresh state for the slots the new generation can reach, [pool_base, pool_base +
    T*2W): its `pools` entry admits no other slot, and a later generation clears the range it
    opens. bfrt_python writes a register one index per call (`mod`) or resets all of it
    (`clear`, one call: the driver resets the array in bulk). When no other session holds a
    generation (`shared` False), nothing outside this generation's range is in use, so each
    register is cleared whole: 17 calls (16 without the timer). Otherwise only the range is
    written, one `mod` per register and slot in one batch: 17 × T × 2W calls."""
    if not shared:
        for control, name, _ in registers(config.program):
            program.ingress(control, name).clear()
        return
    first = session.pool_base
    last = first + generation.threads * 2 * generation.window
    with program.batch():
        for control, name, fields in registers(config.program):
            register = program.ingress(control, name)
            for index in range(first, last):
                register.mod(REGISTER_INDEX=index, **{field: 0 for field in fields})
