# SPDX-License-Identifier: Apache-2.0
"""Counters of the program, under the software switch's names (include/dpa/switch.hpp
SwitchCounters) where one exists: the egress reply counter (p4/counters.p4, per EV_* index), the
admission verdicts and the state pass's outcomes (direct counters), and the per-session activity
the JOIN procedure samples.
"""

# p4/types.p4 EV_* -> name
EVENTS = {
    1: "aggregated", 2: "completed_full", 3: "retransmitted_results", 4: "duplicates",
    5: "late_contributions", 6: "old_replies", 7: "syn_replies", 8: "errors_sent",
    9: "dropped_malformed", 10: "dropped_unknown_session", 11: "dropped_unregistered",
    12: "dropped_not_joined", 13: "dropped_bad_token", 14: "control_packets",
    15: "simulated_drops", 16: "completed_partial",
}


# Verdicts that drop in the ingress (admission.p4 `verdict`'s drop(event) entries and its default
# drop(EV_MALFORMED)): they never reach the egress counter, so they are read from the table's
# direct counter, one count per entry, summed by the entry's event.
DROP_EVENTS = (9, 10, 11, 12, 13)
MALFORMED = 9


def _packets(entry):
    return entry.data[b"$COUNTER_SPEC_PKTS"]


def replies(program):
    """Replies that left the switch, by event (a multicast counts one per rank)."""
    counter = program.egress("counters", "replies")
    return {name: _packets(counter.get(COUNTER_INDEX=index, from_hw=True, print_ents=False))
            for index, name in sorted(EVENTS.items())}


def _entries(result):
    """bfrt_python's get() answers one entry as itself and several as a list."""
    if result is None:
        return []
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _action(entry):
    name = getattr(entry, "action", b"")
    return (name.decode() if isinstance(name, bytes) else str(name)).rsplit(".", 1)[-1]


def drops(program):
    """Packets the admission verdict dropped, by event name (dropped_*)."""
    table = program.ingress("admission", "verdict")
    values = {EVENTS[event]: 0 for event in DROP_EVENTS}
    for entry in _entries(table.get(regex=True, from_hw=True, print_ents=False)):
        if _action(entry) == "drop":
            values[EVENTS[entry.data[b"event"]]] += _packets(entry)
    values[EVENTS[MALFORMED]] += _packets(table.get_default(from_hw=True, print_ents=False))
    return values


def activity(program, session_index):
    counter = program.ingress("admission", "activity")
    return _packets(counter.get(COUNTER_INDEX=session_index, from_hw=True, print_ents=False))


def reset(program):
    program.egress("counters", "replies").clear()
    program.ingress("admission", "activity").clear()


def render(values, controller_counts):
    lines = ["%s %d" % (name, value) for name, value in sorted(values.items())]
    lines += ["%s %d" % (name, value) for name, value in sorted(controller_counts.items())]
    return "\n".join(lines)
