"""The dpa wire format as data: the one place the conformance suite knows the header layout.

docs/protocol.md (sections 2 to 6) is the source; src/protocol/wire.hpp is the C++ twin. Switching the
suite to another protocol version means editing HEADER, FLAGS, ERRORS and the JOIN layouts below.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# ---- the header: one row per field (name, byte offset, struct code, request default) -------------
# Struct codes: B/H/I/Q unsigned 8/16/32/64-bit, b signed 8-bit; all multi-byte fields big-endian.
VERSION = 1
EXP_ZERO = -128  # the exponent code of "every value is zero"; the default of both exponent fields
HEADER = (
    ("version", 0, "B", VERSION),
    ("error", 1, "B", 0),
    ("flags", 2, "H", 0),
    ("session", 4, "I", 0),
    ("op_id", 8, "I", 0),
    ("slot", 12, "I", 0),
    ("seq", 16, "I", 0),
    ("offset", 20, "I", 0),
    ("count", 24, "H", 0),
    ("rank", 26, "B", 0),
    ("k", 27, "B", 0),
    ("contributors", 28, "B", 0),
    ("exp_used", 29, "b", EXP_ZERO),
    ("exp_next", 30, "b", EXP_ZERO),
    ("reserved", 31, "B", 0),
    ("bitmap", 32, "Q", 0),
)
HEADER_SIZE = 40

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
}

# JOIN payloads: fixed 32-bit words, then 16-bit ports padded to a whole word (docs/protocol.md §6).
JOIN_REQUEST_WORDS = ("nonce", "world_size", "threads", "window", "payload")
JOIN_REPLY_WORDS = ("payload", "world_size", "k_default", "straggler_timeout_us", "pool_base",
                    "pool_size", "generation", "switch_ports")
JOIN_REQUEST_PORT_COUNT = "threads"  # the word that says how many ports follow
JOIN_REPLY_PORT_COUNT = "switch_ports"

# ---------------------------------------------------------------------------------------------------

FIELD_NAMES = tuple(row[0] for row in HEADER)
_STRUCT = struct.Struct(">" + "".join(
    code for _, _, code, _ in sorted(HEADER, key=lambda row: row[1])))
assert _STRUCT.size == HEADER_SIZE, "HEADER rows must cover the header exactly"
_ORDER = tuple(name for name, _, _, _ in sorted(HEADER, key=lambda row: row[1]))

def _code_range(code: str) -> tuple[int, int]:
    bits = struct.calcsize(code) * 8
    if code.islower():
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


_RANGES = {name: _code_range(code) for name, _, code, _ in HEADER}


def defaults() -> dict[str, int]:
    """Every header field at its request default."""
    return {name: default for name, _, _, default in HEADER}


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
    return _STRUCT.pack(*(values[name] for name in _ORDER))


def decode_header(datagram: bytes) -> dict[str, int]:
    """The header fields of a datagram (no validation: the suite compares them field by field)."""
    if len(datagram) < HEADER_SIZE:
        raise ValueError(f"datagram of {len(datagram)} bytes is shorter than the {HEADER_SIZE}-byte header")
    return dict(zip(_ORDER, _STRUCT.unpack_from(datagram)))


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
