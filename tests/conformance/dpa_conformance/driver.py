# SPDX-License-Identifier: Apache-2.0
"""Runs a loaded case against any Dataplane: builds the datagrams of each step, sends them, waits
for exactly the expected replies, and compares headers, payloads and counter deltas."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import encoding, wire
from .case import GOLDEN_DIR, Case, CaseError
from .dataplane import Dataplane, Received, SessionSetup

ANY = "*"  # an expected field value that matches anything


class CaseFailure(AssertionError):
    """The switch did not do what the case expects."""


@dataclass
class Timing:
    reply_timeout_s: float = 2.0   # how long to wait for the expected replies of one step
    grace_s: float = 0.05          # after them, how long nothing else may arrive
    settle_timeout_s: float = 5.0  # how long the switch may take to process a step's packets


@dataclass
class _Expected:
    endpoint: str
    switch_index: int
    header: dict[str, int]
    wildcards: set[str]
    payload: bytes | None = None           # exact payload, or None with join_reply set
    join_reply: dict | None = None         # expected JOIN reply fields and ports (None: not a JOIN reply)
    datagram: bytes | None = None          # whole datagram, when the case gives bytes
    capture: dict[str, str] = field(default_factory=dict)
    received: Received | None = None


def _describe_header(fields: dict[str, int]) -> str:
    parts = []
    for name in wire.FIELD_NAMES:
        value = fields[name]
        parts.append(f"{name}={wire.flags_names(value) if name == 'flags' else value}")
    return " ".join(parts)


class Driver:
    def __init__(self, case: Case, dataplane: Dataplane, timing: Timing | None = None):
        self.case = case
        self.dp = dataplane
        self.timing = timing or Timing()
        self.variables: dict[str, int] = {}
        self.generations: dict[int, int] = {}
        self.sent = 0
        self.counters: dict[str, int] | None = None

    # ---- running --------------------------------------------------------------------------------
    def run(self) -> None:
        self.dp.open(self.case.setup)
        try:
            self.dp.settle(0, self.timing.settle_timeout_s)
            self.counters = self.dp.counters()
            for index, step in enumerate(self.case.steps):
                where = f"{self.case.name}: steps[{index}]" + (f" ({step['note']})" if "note" in step else "")
                try:
                    self._run_step(step)
                except (CaseFailure, CaseError) as error:
                    raise type(error)(f"{where}: {error}") from None
        finally:
            self.dp.close()

    def _run_step(self, step: dict) -> None:
        if "clock" in step:
            ticks = step["clock"]
            if not isinstance(ticks, int) or not 0 <= ticks < 1 << 32:
                raise CaseError(f"clock {ticks!r} is not a 32-bit tick count")
            self.dp.set_clock(ticks)
        elif "join_all" in step:
            for sub_step in self._join_all_steps(step["join_all"]):
                self._run_send(sub_step)
        else:
            self._run_send(step)

    def _run_send(self, step: dict) -> None:
        sends = step["send"] if isinstance(step["send"], list) else [step["send"]]
        requests = []
        for spec in sends:
            endpoint, index, datagram = self._build_send(spec)
            self.dp.send(endpoint, index, datagram)
            self.sent += 1
            requests.append((index, datagram))
        expected = [item for spec in step.get("expect", []) for item in self._build_expected(spec, requests)]
        self._collect(expected)
        self._check_counters(step.get("counters", {}), len(sends), len(expected))

    def _collect(self, expected: list[_Expected]) -> None:
        deadline = time.monotonic() + self.timing.reply_timeout_s
        unexpected: list[Received] = []
        while any(item.received is None for item in expected):
            remaining = deadline - time.monotonic()
            packet = self.dp.poll(remaining) if remaining > 0 else None
            if packet is None:
                break
            if not self._match_one(packet, expected):
                unexpected.append(packet)
        # Everything the switch sends for this step has left it once it has processed the step's
        # packets; the grace window then catches a reply still in flight.
        self.dp.settle(self.sent, self.timing.settle_timeout_s)
        while (packet := self.dp.poll(self.timing.grace_s)) is not None:
            if not self._match_one(packet, expected):
                unexpected.append(packet)
        missing = [item for item in expected if item.received is None]
        if missing or unexpected:
            raise CaseFailure(self._explain(missing, unexpected))
        for item in expected:
            self._capture(item)

    # ---- building datagrams -----------------------------------------------------------------------
    def _session(self, session_id: int) -> SessionSetup:
        for session in self.case.setup.sessions:
            if session.id == session_id:
                return session
        return self.case.default_session

    def _resolve(self, value, name: str):
        if isinstance(value, str) and "+" in value:
            # A sum of terms, e.g. "8589934592 + ip:h1" (a value in the high word, an address below).
            return sum(self._resolve(int(term) if term.strip().isdigit() else term.strip(), name)
                       for term in value.split("+"))
        if isinstance(value, str):
            if value.startswith("ip:"):
                host = value[3:]
                if host not in self.case.setup.hosts:
                    raise CaseError(f"{name}: {value}: {host!r} is not in hosts")
                return int.from_bytes(bytes(int(part) for part in self.dp.host_address(host).split(".")), "big")
            if value.startswith("$"):
                if value[1:] not in self.variables:
                    raise CaseError(f"{name}: variable {value} is not set (set by join_all or capture)")
                return self.variables[value[1:]]
            if value.startswith("switch."):
                port = self.dp.switch_port(int(value.split(".", 1)[1]))
                if port is None:
                    raise CaseError(f"{name}: {value}'s port is not known before a JOIN reply")
                return port
            if value in self.case.setup.endpoints:
                return self.dp.endpoint_port(value)
            if name == "error":
                return wire.error_value(value)
            raise CaseError(f"{name}: cannot resolve {value!r}")
        if name == "flags" and isinstance(value, list):
            return wire.flags_value(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise CaseError(f"{name}: {value!r} is not an integer")
        return value

    def _header(self, spec: dict, base: dict[str, int] | None, wildcards: set[str] | None = None) -> dict[str, int]:
        fields = dict(base) if base is not None else {**wire.defaults(), "session": self.case.default_session.id}
        if base is None and "token" in wire.FIELD_NAMES and "token" in self.variables:
            fields["token"] = self.variables["token"]  # every request and reply of a generation carries it
        for name, value in spec.items():
            if name not in wire.FIELD_NAMES:
                raise CaseError(f"unknown header field {name!r}; fields are {list(wire.FIELD_NAMES)}")
            if value == ANY and wildcards is not None:
                wildcards.add(name)
                continue
            fields[name] = self._resolve(value, name)
        return fields

    def _raw_datagram(self, spec: dict) -> bytes | None:
        """The datagram given as bytes, with the header fields of `header` written over it (a
        golden vector's token is one job's; a run carries its own)."""
        if "hex" in spec:
            raw = encoding.parse_hex(spec["hex"])
        elif "golden" in spec:
            path = GOLDEN_DIR / spec["golden"]
            try:
                raw = encoding.parse_hex(path.read_text())
            except OSError as error:
                raise CaseError(f"golden vector {spec['golden']}: {error}") from None
        else:
            return None
        if spec.get("header"):
            if len(raw) < wire.HEADER_SIZE:
                raise CaseError("header fields cannot be written over a datagram shorter than a header")
            raw = wire.encode_header(self._header(spec["header"], wire.decode_header(raw))) + raw[wire.HEADER_SIZE:]
        return raw

    def _build_send(self, spec: dict) -> tuple[str, int, bytes]:
        allowed = {"from", "to_switch", "header", "values", "payload_hex", "join", "hex", "golden"}
        unknown = set(spec) - allowed
        if unknown:
            raise CaseError(f"send: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
        if "from" not in spec:
            raise CaseError("send: needs \"from\" (the sending endpoint)")
        endpoint = spec["from"]
        index = spec.get("to_switch", 0)
        raw = self._raw_datagram(spec)
        if raw is not None:
            return endpoint, index, raw
        header_spec = dict(spec.get("header", {}))
        header = self._header(header_spec, None)
        payload = b""
        if "join" in spec:
            join = dict(spec["join"])
            ports = [self._resolve(port, "join.ports") for port in join.pop("ports", [])]
            join.setdefault(wire.JOIN_REQUEST_PORT_COUNT, len(ports))
            payload = wire.JOIN_REQUEST.encode({k: self._resolve(v, f"join.{k}") for k, v in join.items()}, ports)
            header["flags"] |= wire.Flag.JOIN
            if "count" not in header_spec:
                header["count"] = len(payload) // 4
        elif "payload_hex" in spec:
            payload = encoding.parse_hex(spec["payload_hex"])
        elif "values" in spec:
            values = [self._resolve(v, "values") for v in spec["values"]]
            width = self._session(header["session"]).payload
            if len(values) > width:
                raise CaseError(f"send: {len(values)} values exceed the session's payload {width}")
            if "count" not in header_spec:
                header["count"] = len(values)
            # count 0 is the header-only exponent-priming request (docs/protocol.md §2).
            payload = b"" if not values and header["count"] == 0 else encoding.encode_values(values + [0] * (width - len(values)))
        return endpoint, index, wire.encode_header(header) + payload

    def _build_expected(self, spec: dict, requests: list[tuple[int, bytes]]) -> list[_Expected]:
        allowed = {"to", "from_switch", "base", "header", "values", "join_reply", "hex", "golden", "capture"}
        unknown = set(spec) - allowed
        if unknown:
            raise CaseError(f"expect: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
        if "to" not in spec:
            raise CaseError("expect: needs \"to\" (an endpoint or a list of endpoints)")
        destinations = spec["to"] if isinstance(spec["to"], list) else [spec["to"]]
        base_index = spec.get("base")
        if base_index == "request":
            base_index = 0
        if base_index is not None and not (isinstance(base_index, int) and 0 <= base_index < len(requests)):
            raise CaseError(f"expect: base {spec['base']!r} names no request of this step")
        base = wire.decode_header(requests[base_index][1]) if base_index is not None else None
        switch_index = spec.get("from_switch", requests[0][0] if requests else 0)
        raw = self._raw_datagram(spec)
        wildcards: set[str] = set()
        header = self._header(spec.get("header", {}), base, wildcards) if raw is None else wire.decode_header(raw)
        payload = None
        join_reply = None
        if raw is not None:
            payload = raw[wire.HEADER_SIZE:]
        elif "join_reply" in spec:
            join_reply = spec["join_reply"]
        elif "values" in spec:
            # Zero-padded to the session's P, as sent values are: a case keeps its meaning on a
            # target with a larger P (target.py).
            values = [self._resolve(v, "values") for v in spec["values"]]
            width = self._session(header.get("session", self.case.default_session.id)).payload
            payload = encoding.encode_values(values + [0] * max(0, width - len(values)))
        else:
            payload = b""
        return [_Expected(endpoint=to, switch_index=switch_index, header=header, wildcards=wildcards,
                          payload=payload, join_reply=join_reply, datagram=raw,
                          capture=dict(spec.get("capture", {})))
                for to in destinations]

    # ---- matching -----------------------------------------------------------------------------------
    def _differences(self, item: _Expected, packet: Received) -> list[str]:
        if packet.endpoint != item.endpoint:
            return [f"arrived at {packet.endpoint}, expected at {item.endpoint}"]
        problems = []
        switch_port = self.dp.switch_port(item.switch_index)
        if switch_port is not None and packet.source_port != switch_port:
            problems.append(f"sent from switch port {packet.source_port}, expected switch.{item.switch_index} "
                            f"({switch_port})")
        if item.datagram is not None:
            if packet.datagram != item.datagram:
                problems.append(f"bytes differ:\n    got      {packet.datagram.hex()}\n    expected {item.datagram.hex()}")
            return problems
        if len(packet.datagram) < wire.HEADER_SIZE:
            return problems + [f"{len(packet.datagram)}-byte datagram is shorter than a header"]
        got = wire.decode_header(packet.datagram)
        for name in wire.FIELD_NAMES:
            if name in item.wildcards or got[name] == item.header[name]:
                continue
            if name == "flags":
                problems.append(f"flags {wire.flags_names(got[name])}, expected {wire.flags_names(item.header[name])}")
            else:
                problems.append(f"{name} {got[name]}, expected {item.header[name]}")
        payload = packet.datagram[wire.HEADER_SIZE:]
        if item.join_reply is not None:
            problems += self._join_reply_differences(item.join_reply, payload)
            problems += self._join_token_difference(got, payload)
        elif payload != item.payload:
            problems.append(self._payload_difference(payload, item.payload))
        return problems

    def _join_reply_differences(self, expected: dict, payload: bytes) -> list[str]:
        try:
            fields, ports = wire.JOIN_REPLY.decode(payload)
        except ValueError as error:
            return [f"JOIN reply: {error}"]
        problems = []
        for name, value in expected.items():
            if name == "ports":
                for i, port in enumerate(value):
                    if port == ANY:
                        continue
                    want = self.dp.switch_port(int(port.split(".", 1)[1])) if isinstance(port, str) else port
                    if i >= len(ports):
                        problems.append(f"JOIN reply has {len(ports)} ports, expected at least {i + 1}")
                    elif want is not None and ports[i] != want:
                        problems.append(f"JOIN reply port[{i}] {ports[i]}, expected {port} ({want})")
                if len(ports) != len(value):
                    problems.append(f"JOIN reply lists {len(ports)} ports, expected {len(value)}")
            elif name not in fields:
                raise CaseError(f"join_reply: unknown field {name!r}; fields are {list(wire.JOIN_REPLY.words)}")
            elif value != ANY and fields[name] != self._resolve(value, f"join_reply.{name}"):
                problems.append(f"JOIN reply {name} {fields[name]}, expected {value}")
        return problems

    @staticmethod
    def _join_token_difference(header: dict[str, int], payload: bytes) -> list[str]:
        """A JOIN reply states the generation's token twice: in the header and in the payload."""
        if "token" not in header or "token" not in wire.JOIN_REPLY.words:
            return []
        try:
            token = wire.JOIN_REPLY.decode(payload)[0]["token"]
        except ValueError:
            return []  # reported by the payload comparison
        return [] if token == header["token"] else [f"JOIN reply token {token} differs from the header's {header['token']}"]

    @staticmethod
    def _payload_difference(got: bytes, expected: bytes) -> str:
        if len(got) != len(expected):
            return f"payload of {len(got)} bytes, expected {len(expected)}"
        try:
            got_values, expected_values = encoding.decode_values(got), encoding.decode_values(expected)
        except ValueError:
            return f"payload {got.hex()}, expected {expected.hex()}"
        first = next(i for i, (a, b) in enumerate(zip(got_values, expected_values)) if a != b)
        return f"payload values {got_values}, expected {expected_values} (first difference at [{first}])"

    def _match_one(self, packet: Received, expected: list[_Expected]) -> bool:
        for item in expected:
            if item.received is None and not self._differences(item, packet):
                item.received = packet
                if item.join_reply is not None:
                    self.dp.learn_switch_ports(wire.JOIN_REPLY.decode(packet.datagram[wire.HEADER_SIZE:])[1])
                return True
        return False

    def _capture(self, item: _Expected) -> None:
        got = wire.decode_header(item.received.datagram)
        for variable, field_name in item.capture.items():
            if field_name not in got:
                raise CaseError(f"capture: {field_name!r} is not a header field")
            self.variables[variable] = got[field_name]

    def _explain(self, missing: list[_Expected], unexpected: list[Received]) -> str:
        lines = []
        for item in missing:
            lines.append(f"no reply at {item.endpoint} matched the expected "
                         + ("bytes" if item.datagram is not None else _describe_header(item.header)))
        for packet in unexpected:
            lines.append(f"unexpected datagram at {packet.endpoint} ({len(packet.datagram)} bytes)")
            if len(packet.datagram) >= wire.HEADER_SIZE:
                lines.append("    " + _describe_header(wire.decode_header(packet.datagram)))
            for item in missing:
                if item.endpoint == packet.endpoint:
                    lines += ["    vs expected: " + problem for problem in self._differences(item, packet)]
        return "\n".join(lines)

    # ---- counters -------------------------------------------------------------------------------------
    def _check_counters(self, deltas: dict[str, int], sent: int, replies: int) -> None:
        after = self.dp.counters()
        if after is None or self.counters is None:
            self.counters = after
            return
        # Counters of time (busy_ns: how long the switch worked) are no events a case can predict.
        expected = {name: 0 for name in after if not name.endswith("_ns")}
        # Datagrams in and out, where the target counts them (a Tofino's program does not: its
        # port counters also see the links' own frames).
        expected.update({name: count for name, count in (("rx_packets", sent), ("tx_packets", replies))
                         if name in after})
        for name, delta in deltas.items():
            if name not in after:
                raise CaseError(f"counters: the switch has no counter {name!r}; it has {sorted(after)}")
            expected[name] = delta
        problems = [f"{name} +{after[name] - self.counters.get(name, 0)}, expected +{want}"
                    for name, want in expected.items() if after[name] - self.counters.get(name, 0) != want]
        self.counters = after
        if problems:
            raise CaseFailure("counter deltas differ: " + "; ".join(problems))

    # ---- join_all ---------------------------------------------------------------------------------------
    def _join_all_steps(self, spec: dict) -> list[dict]:
        allowed = {"session", "threads", "window", "payload", "generation"}
        unknown = set(spec) - allowed
        if unknown:
            raise CaseError(f"join_all: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
        session = self._session(spec.get("session", self.case.default_session.id))
        threads, window = spec.get("threads", 1), spec.get("window", 1)
        generation = spec.get("generation", self.generations.get(session.id, 0) + 1)
        world = session.world_size
        switch_threads = self.case.setup.switch_threads
        if "token" in self.variables:
            self.variables["previous_token"] = self.variables["token"]
        sends = []
        for rank in range(world):
            header = {"session": session.id, "rank": rank}
            if "token" in wire.FIELD_NAMES:
                # A rejoin proves it is this rank's with the token and the rank's secret (§6.4).
                header["token"] = self.variables.get("token", 0)
                header["offset"] = self.variables.get(f"secret{rank}", 0)
            sends.append({"from": f"r{rank}.t0", "header": header,
                          "join": {"nonce": (generation << 8) | (rank + 1), "world_size": world, "threads": threads,
                                   "window": window, "payload": spec.get("payload", 0),
                                   "ports": [f"r{rank}.t{t}" for t in range(threads)]}})
        ack_header = {"flags": ["JOIN", "RESULT"], "seq": generation,
                      "count": wire.JOIN_REPLY.word_count(switch_threads), "bitmap": (1 << world) - 1}
        capture = {}
        if "token" in wire.FIELD_NAMES:
            ack_header["token"] = ANY
            ack_header["offset"] = ANY  # the rank's own secret: each rank's ack differs
            capture["token"] = "token"
        reply = {"payload": session.payload, "world_size": world, "k_default": session.k or world,
                 "straggler_timeout_ticks": wire.timeout_ticks(session.straggler_timeout_us),
                 "pool_base": session.pool_base, "pool_size": session.pool_size, "generation": generation,
                 "token": ANY, "switch_ports": switch_threads,
                 "ports": [f"switch.{i}" if i == 0 else ANY for i in range(switch_threads)]}
        # Every rank sends its JOIN twice, as a live rank retries: the repeat confirms it, and the
        # last rank's confirmation forms the generation, so the ack echoes that JOIN but for its
        # rank, the receiving rank's (§6.2). Each rank's ack carries its secret in `offset`,
        # captured as secret<rank>.
        steps = [{"send": sends + sends, "counters": {"joins": 2 * world},
                  "expect": [{"to": f"r{r}.t0", "base": 2 * world - 1, "header": {**ack_header, "rank": r},
                              "join_reply": reply, "capture": {**capture, f"secret{r}": "offset"}}
                             for r in range(world)]}]
        self.generations[session.id] = generation
        self.variables["generation"] = generation
        return steps


def run_case(case: Case, dataplane: Dataplane, timing: Timing | None = None) -> None:
    Driver(case, dataplane, timing).run()

