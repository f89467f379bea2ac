# SPDX-License-Identifier: Apache-2.0
"""What a switch under test can take, and each case adapted to it (tests/conformance/README.md,
"Targets").

The case files are written for the software switch: small P, up to 64 ranks, S switch ports, a
straggler clock the runner sets. A Tofino fixes P at compile time (80 on netberg, 256 on
edgecore), takes at most 32 ranks and one switch port, and its clock is the ASIC's global
timestamp. `adapt` turns a case into the same case for such a target, or says why it cannot run
there:

- P: the sessions take the target's P; `values` are zero-padded to it on both sides (driver.py).
  JOIN replies report the target's P. A case whose bytes depend on P (a `payload_hex`, whole
  datagrams as `hex` or `golden`, a JOIN asking for a P of its own) runs only where P is its own.
- N and S: a case needing more ranks or switch ports than the target has is skipped, named.
- The clock: a case with a `clock` step is software-only where the clock cannot be set.
- Liveness: a case that sets a session's `liveness_timeout_ms` is software-only where the program
  has no liveness (docs/protocol.md §12).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .case import Case
from .dataplane import SessionSetup


@dataclass(frozen=True)
class Target:
    name: str
    payload: int | None        # the P the switch fixes, or None: every session's own
    max_world_size: int
    max_switch_threads: int
    settable_clock: bool
    liveness: bool  # KEEPALIVE and rank_gone (docs/protocol.md §6.7)


SOFTWARE = Target("dpa-switch", payload=None, max_world_size=64, max_switch_threads=64, settable_clock=True,
                  liveness=True)


def tofino(payload: int) -> Target:
    """A Tofino running p4/ compiled for `payload` values (docs/switch.md)."""
    return Target("tofino", payload=payload, max_world_size=32, max_switch_threads=1, settable_clock=False,
                  liveness=False)


@dataclass(frozen=True)
class Skip:
    case: str
    reason: str


def _rewrite(value, old: int, new: int):
    """`value` (steps) for P = `new`: a JOIN reply that reports P = `old` reports `new`. Returns
    (value, key): key names the first field whose bytes are fixed for one P, else None. A JOIN
    that asks for P = 0 adopts the switch's, so it is not fixed."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in ("payload_hex", "hex", "golden"):
                return value, key
            if key == "join" and item.get("payload", 0) != 0:
                return value, "join"
            if key == "join_reply" and "payload" in item:
                if item["payload"] != old:
                    return value, "join_reply"
                item = {**item, "payload": new}
            out[key], found = _rewrite(item, old, new)
            if found:
                return value, found
        return out, None
    if isinstance(value, list):
        out = []
        for item in value:
            rewritten, found = _rewrite(item, old, new)
            if found:
                return value, found
            out.append(rewritten)
        return out, None
    return value, None


def adapt(case: Case, target: Target) -> Case | Skip:
    if case.uses_clock and not target.settable_clock:
        return Skip(case.name, f"software-only: it sets the straggler clock, which {target.name} "
                               "cannot (its timer reads the ASIC's global timestamp)")
    default_liveness = SessionSetup.liveness_timeout_ms
    if not target.liveness and any(s.liveness_timeout_ms != default_liveness for s in case.setup.sessions):
        return Skip(case.name, f"software-only: it tests liveness (KEEPALIVE, rank_gone), which {target.name}'s "
                               "program does not have yet (docs/protocol.md §12)")
    widest = max(session.world_size for session in case.setup.sessions)
    if widest > target.max_world_size:
        return Skip(case.name, f"needs N = {widest}; {target.name} takes at most {target.max_world_size} ranks")
    if case.setup.switch_threads > target.max_switch_threads:
        return Skip(case.name, f"needs S = {case.setup.switch_threads} switch ports; {target.name} has "
                               f"{target.max_switch_threads}")
    if target.payload is None or all(s.payload == target.payload for s in case.setup.sessions):
        return case
    own = sorted({s.payload for s in case.setup.sessions})
    steps, key = _rewrite(list(case.steps), own[0], target.payload) if len(own) == 1 else (None, "sessions")
    if key is not None:
        return Skip(case.name, f"its `{key}` bytes are written for P = {own[0] if len(own) == 1 else own}; "
                               f"{target.name} has P = {target.payload}")
    sessions = tuple(dataclasses.replace(s, payload=target.payload) for s in case.setup.sessions)
    return dataclasses.replace(case, setup=dataclasses.replace(case.setup, sessions=sessions),
                               steps=tuple(steps))


def adapt_all(cases: list[Case], target: Target) -> tuple[list[Case], list[Skip]]:
    runnable, skipped = [], []
    for case in cases:
        adapted = adapt(case, target)
        (skipped if isinstance(adapted, Skip) else runnable).append(adapted)
    return runnable, skipped
