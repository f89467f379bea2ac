"""The dpa wire format as data: the one place the conformance suite knows the header layout.

docs/protocol.md (sections 2 to 6) is the source; src/protocol/wire.hpp is the C++ twin. Switching the
suite to another protocol version means editing HEADER, FLAGS, ERRORS and the JOIN layouts below.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# ---- the header: one row per field (name, byte offset, struct code, request default, bias) -------
# Struct codes: B/H/I/Q unsigned 8/16/32/64-bit; all multi-byte fields big-endian. A field with a
# bias holds `value + bias` on the wire: exponents are signed (-128 = every value zero, 127 =
# non-finite) and travel biased by 128, so an all-zero register reads as "no exponent".
VERSION = 2
EXP_ZERO = -128  # the exponent of "every value is zero"; the default of both exponent fields
EXP_BIAS = 128
HEADER = (
    ("version", 0, "B", VERSION, 0),
    ("error", 1, "B", 0, 0),
    ("flags", 2, "H", 0, 0),
    ("session", 4, "I", 0, 0),
    ("token", 8, "I", 0, 0),
    ("op_id", 12, "I", 0, 0),
    ("slot", 16, "I", 0, 0),
    ("seq", 20, "I", 0, 0),
    ("offset", 24, "I", 0, 0),
    ("op_length", 28, "I", 0, 0),
    ("count", 32, "H", 0, 0),
    ("rank", 34, "B", 0, 0),
    ("k", 35, "B", 0, 0),
    ("contributors", 36, "B", 0, 0),
    ("exp_used", 37, "B", EXP_ZERO, EXP_BIAS),
    ("exp_next", 38, "B", EXP_ZERO, EXP_BIAS),
    ("reserved", 39, "B", 0, 0),
    ("bitmap", 40, "Q", 0, 0),
)
HEADER_SIZE = 48

# The straggler timer counts ticks of 2^16 ns; a timeout in microseconds becomes the smallest
# tick count not shorter than it.
TICK_NS = 1 << 16


def timeout_ticks(microseconds: int) -> int:
    return -(-microseconds * 1000 // TICK_NS)

FLAGS = {
    "RESULT": 0x0001,
    "RETRANSMIT": 0x0002,
    "SYN": 0x0004,
    "OLD": 0x0008,
    "ERROR": 0x0010,
    "COUNT_TO_K": 0x0020,
    "JOIN": 0x0040,
    "COMPLETE": 0x0080,
    "FLOAT": 0x0100,
    "LEAVE": 0x0200,
}

ERRORS = {
    "none": 0,
    "unknown_session": 1,
    "not_registered": 2,
    "rank_out_of_range": 3,
    "world_size_mismatch": 4,
    "payload_mismatch": 5,
    "threads_mismatch": 6,
    "window_mismatch": 7,
    "pool_too_small": 8,
    "slot_out_of_range": 9,
    "seq_ahead": 10,
    "op_mismatch": 11,
    "not_joined": 12,
    "k_invalid": 13,
    "bad_length": 14,
    "dtype_mismatch": 15,
    "length_mismatch": 16,
    "session_busy": 17,
    "session_taken_over": 18,
}

# JOIN payloads: fixed 32-bit words, then 16-bit ports padded to a whole word (docs/protocol.md §6).
JOIN_REQUEST_WORDS = ("nonce", "world_size", "threads", "window", "payload")
JOIN_REPLY_WORDS = ("payload", "world_size", "k_default", "straggler_timeout_ticks", "pool_base",
                    "pool_size", "generation", "token", "switch_ports")
JOIN_REQUEST_PORT_COUNT = "threads"  # the word that says how many ports follow
JOIN_REPLY_PORT_COUNT = "switch_ports"

# ---------------------------------------------------------------------------------------------------

FIELD_NAMES = tuple(row[0] for row in HEADER)
_ROWS = sorted(HEADER, key=lambda row: row[1])
_STRUCT = struct.Struct(">" + "".join(row[2] for row in _ROWS))
assert _STRUCT.size == HEADER_SIZE, "HEADER rows must cover the header exactly"
assert all(a[1] + struct.calcsize(a[2]) == b[1] for a, b in zip(_ROWS, _ROWS[1:])), "HEADER rows overlap or gap"
_ORDER = tuple(row[0] for row in _ROWS)
_BIAS = {row[0]: row[4] for row in HEADER}

def _value_range(code: str, bias: int) -> tuple[int, int]:
    return -bias, (1 << (struct.calcsize(code) * 8)) - 1 - bias


_RANGES = {name: _value_range(code, bias) for name, _, code, _, bias in HEADER}


def defaults() -> dict[str, int]:
    """Every header field at its request default."""
    return {row[0]: row[3] for row in HEADER}


def encode_header(fields: dict[str, int]) -> bytes:
    unknown = set(fields) - set(FIELD_NAMES)
    if unknown:
        raise ValueError(f"unknown header field(s) {sorted(unknown)}; fields are {list(FIELD_NAMES)}")
    values = defaults()
    values.update(fields)
    for name, value in values.items():
        low, high = _RANGES[name]
        if not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"header field {name} = {value!r} is outside [{low}, {high}]")
    return _STRUCT.pack(*(values[name] + _BIAS[name] for name in _ORDER))


def decode_header(datagram: bytes) -> dict[str, int]:
    """The header fields of a datagram (no validation: the suite compares them field by field)."""
    if len(datagram) < HEADER_SIZE:
        raise ValueError(f"datagram of {len(datagram)} bytes is shorter than the {HEADER_SIZE}-byte header")
    return {name: raw - _BIAS[name] for name, raw in zip(_ORDER, _STRUCT.unpack_from(datagram))}


def flags_value(spec) -> int:
    """An int, or a list of flag names ("JOIN", "RESULT", ...)."""
    if isinstance(spec, int):
        return spec
    value = 0
    for name in spec:
        if name not in FLAGS:
            raise ValueError(f"unknown flag {name!r}; flags are {sorted(FLAGS)}")
        value |= FLAGS[name]
    return value


def flags_names(value: int) -> str:
    names = [name for name, bit in FLAGS.items() if value & bit]
    rest = value & ~sum(FLAGS.values())
    if rest:
        names.append(hex(rest))
    return "|".join(names) or "0"


def error_value(spec) -> int:
    if isinstance(spec, int):
        return spec
    if spec not in ERRORS:
        raise ValueError(f"unknown error code {spec!r}; codes are {sorted(ERRORS)}")
    return ERRORS[spec]


def encode_values(values: list[int]) -> bytes:
    """Payload values as big-endian int32; values may be given signed or as uint32 bit patterns."""
    out = bytearray()
    for value in values:
        if not -(1 << 31) <= value < (1 << 32):
            raise ValueError(f"payload value {value} does not fit 32 bits")
        out += struct.pack(">I", value & 0xFFFFFFFF)
    return bytes(out)


def decode_values(payload: bytes) -> list[int]:
    if len(payload) % 4:
        raise ValueError(f"payload of {len(payload)} bytes is not whole 32-bit words")
    return list(struct.unpack(f">{len(payload) // 4}i", payload))


@dataclass(frozen=True)
class JoinLayout:
    words: tuple[str, ...]
    port_count: str

    def encode(self, fields: dict[str, int], ports: list[int]) -> bytes:
        unknown = set(fields) - set(self.words)
        if unknown:
            raise ValueError(f"unknown JOIN payload field(s) {sorted(unknown)}; fields are {list(self.words)}")
        out = b"".join(struct.pack(">I", fields.get(name, 0)) for name in self.words)
        port_bytes = b"".join(struct.pack(">H", port) for port in ports)
        if len(port_bytes) % 4:
            port_bytes += b"\0\0"
        return out + port_bytes

    def decode(self, payload: bytes) -> tuple[dict[str, int], list[int]]:
        fixed = 4 * len(self.words)
        if len(payload) < fixed:
            raise ValueError(f"JOIN payload of {len(payload)} bytes is shorter than {fixed}")
        fields = dict(zip(self.words, struct.unpack_from(f">{len(self.words)}I", payload)))
        count = fields[self.port_count]
        if len(payload) < fixed + 2 * count:
            raise ValueError(f"JOIN payload of {len(payload)} bytes cannot hold {count} ports")
        ports = list(struct.unpack_from(f">{count}H", payload, fixed))
        return fields, ports


JOIN_REQUEST = JoinLayout(JOIN_REQUEST_WORDS, JOIN_REQUEST_PORT_COUNT)
JOIN_REPLY = JoinLayout(JOIN_REPLY_WORDS, JOIN_REPLY_PORT_COUNT)


def parse_hex(text: str) -> bytes:
    """Hex bytes; whitespace ignored; lines whose first non-blank character is '#' are comments
    (the format of tests/golden/*.hex)."""
    digits = "".join("".join(line.split()) for line in text.splitlines()
                     if not line.lstrip().startswith("#"))
    try:
        return bytes.fromhex(digits)
    except ValueError as error:
        raise ValueError(f"bad hex bytes: {error}") from None
