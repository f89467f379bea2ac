# SPDX-License-Identifier: Apache-2.0
"""Loading a conformance case file (tests/conformance/README.md describes the format)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .dataplane import SessionSetup, Setup

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "golden"

_TOP_KEYS = {"description", "switch", "hosts", "endpoints", "sessions", "steps"}
_SWITCH_KEYS = {"threads"}
_SESSION_KEYS = {"id", "world_size", "k", "payload", "pool_base", "pool_size",
                 "straggler_timeout_us", "liveness_timeout_ms", "workers"}
STEP_KINDS = ("join_all", "send", "clock")
_STEP_KEYS = {"note", "expect", "counters", *STEP_KINDS}
RANK_ENDPOINT = re.compile(r"^r(\d+)\.t(\d+)$")


class CaseError(ValueError):
    """The case file itself is wrong (as opposed to the switch failing it)."""


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    description: str
    setup: Setup
    steps: tuple[dict, ...]

    @property
    def default_session(self) -> SessionSetup:
        return self.setup.sessions[0]

    @property
    def uses_clock(self) -> bool:
        """Whether the case sets the straggler clock (a target must let it)."""
        return any("clock" in step for step in self.steps)


def _require(ok: bool, where: str, message: str) -> None:
    if not ok:
        raise CaseError(f"{where}: {message}")


def _check_keys(obj, allowed: set[str], where: str) -> None:
    _require(isinstance(obj, dict), where, "expected a JSON object")
    unknown = set(obj) - allowed
    _require(not unknown, where, f"unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")


def _endpoint_names(value) -> list[str]:
    """Every endpoint name a step mentions (as sender, destination or JOIN port)."""
    names = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("from", "to") and isinstance(item, str):
                names.append(item)
            elif key == "to" and isinstance(item, list):
                names.extend(item)
            elif key == "ports" and isinstance(item, list):
                names.extend(port for port in item if isinstance(port, str) and RANK_ENDPOINT.match(port))
            else:
                names.extend(_endpoint_names(item))
    elif isinstance(value, list):
        for item in value:
            names.extend(_endpoint_names(item))
    return names


def _rank_host(session: SessionSetup, rank: int, hosts: list[str]) -> str:
    workers = [worker.split(":", 1)[0] for worker in session.workers]
    if len(workers) == 1:
        return workers[0]
    if rank < len(workers):
        return workers[rank]
    return hosts[0]


def load(path: str | Path) -> Case:
    path = Path(path)
    where = str(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CaseError(f"{where}: cannot read the case: {error}") from None
    _check_keys(data, _TOP_KEYS, where)
    _require("sessions" in data and "steps" in data, where, "a case needs \"sessions\" and \"steps\"")

    switch = data.get("switch", {})
    _check_keys(switch, _SWITCH_KEYS, f"{where}: switch")
    threads = switch.get("threads", 1)
    _require(isinstance(threads, int) and 1 <= threads <= 64, f"{where}: switch.threads", "must be 1..64")

    sessions = []
    _require(isinstance(data["sessions"], list) and data["sessions"], f"{where}: sessions",
             "must be a non-empty list")
    for i, raw in enumerate(data["sessions"]):
        _check_keys(raw, _SESSION_KEYS, f"{where}: sessions[{i}]")
        _require("id" in raw and "world_size" in raw, f"{where}: sessions[{i}]", "needs \"id\" and \"world_size\"")
        sessions.append(SessionSetup(**{**raw, "workers": tuple(raw.get("workers", ()))}))

    hosts = data.get("hosts", ["h0"])
    _require(isinstance(hosts, list) and all(isinstance(h, str) for h in hosts) and hosts,
             f"{where}: hosts", "must be a non-empty list of names")
    for session in sessions:
        for worker in session.workers:
            host, _, endpoint = worker.partition(":")
            _require(host in hosts, f"{where}: session {session.id} workers", f"host {host!r} is not in hosts")

    endpoints = dict(data.get("endpoints", {}))
    for name, host in endpoints.items():
        _require(host in hosts, f"{where}: endpoints.{name}", f"host {host!r} is not in hosts")

    steps = data["steps"]
    _require(isinstance(steps, list), f"{where}: steps", "must be a list")
    for i, step in enumerate(steps):
        step_where = f"{where}: steps[{i}]"
        _check_keys(step, _STEP_KEYS, step_where)
        kinds = [kind for kind in STEP_KINDS if kind in step]
        _require(len(kinds) == 1, step_where, f"needs exactly one of {list(STEP_KINDS)}")

    # Rank endpoints ("r1.t0") need no declaration: they live on the rank's registered host.
    mentioned = _endpoint_names(steps) + [w.split(":", 1)[1] for s in sessions for w in s.workers if ":" in w]
    for step in steps:
        if "join_all" in step:
            spec = step["join_all"]
            session = next((s for s in sessions if s.id == spec.get("session", sessions[0].id)), sessions[0])
            mentioned += [f"r{r}.t{t}" for r in range(session.world_size) for t in range(spec.get("threads", 1))]
    for name in mentioned:
        if name in endpoints or name.startswith("switch."):
            continue
        match = RANK_ENDPOINT.match(name)
        _require(match is not None, where, f"endpoint {name!r} is neither declared in \"endpoints\" nor rN.tM")
        endpoints[name] = _rank_host(sessions[0], int(match.group(1)), hosts)

    setup = Setup(hosts=tuple(hosts), endpoints=endpoints, sessions=tuple(sessions), switch_threads=threads)
    return Case(name=path.stem, path=path, description=data.get("description", ""), setup=setup,
                steps=tuple(steps))


def load_all(paths: list[str | Path]) -> list[Case]:
    """Case files, and every *.json in the directories among `paths`, in name order."""
    files: list[Path] = []
    for entry in map(Path, paths):
        files.extend(sorted(entry.glob("*.json")) if entry.is_dir() else [entry])
    return [load(file) for file in files]
