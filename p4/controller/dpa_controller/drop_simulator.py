# SPDX-License-Identifier: Apache-2.0
"""p4/drop_simulator.p4: a session's requests are dropped when a 16-bit draw falls below
drop_rate * 65536."""


def setup(program, config, session):
    if not config.program["DPA_DROP_SIMULATOR"] or session.drop_rate == 0:
        return
    threshold = int(session.drop_rate * 65536)
    program.ingress("drop_simulator", "drop_rates").add_with_simulate_drop(
        session=session.id, random_start=0, random_end=threshold - 1, MATCH_PRIORITY=1)
