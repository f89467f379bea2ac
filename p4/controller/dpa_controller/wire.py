# SPDX-License-Identifier: Apache-2.0
"""The dpa wire format as data: the one Python definition of docs/protocol.md §2-§6 (the 48-byte
header, flags, error codes, JOIN payloads), plus the Ethernet/IPv4/UDP framing of packets punted to
and sent from the CPU port.

The controller uses it installed inside bfshell; the conformance suite (tests/conformance) imports
this file from the source tree. src/protocol/wire.hpp is the C++ twin. Switching to another protocol
version means editing HEADER, Flag, Error and the JOIN layouts below.
"""
from __future__ import annotations

import enum
import struct
from collections import namedtuple
from dataclasses import asdict, dataclass, make_dataclass, replace

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
MAX_RANKS = 64  # the bitmap's width


class Flag(enum.IntFlag):
    RESULT = 0x0001
    RETRANSMIT = 0x0002
    SYN = 0x0004
    OLD = 0x0008
    ERROR = 0x0010
    COUNT_TO_K = 0x0020
    JOIN = 0x0040
    COMPLETE = 0x0080
    FLOAT = 0x0100
    LEAVE = 0x0200
    AUTH = 0x0400
    KEEPALIVE = 0x0800
    TO_OWNER = 0x1000
    FROM_OWNER = 0x2000


class Error(enum.IntEnum):
    """§4's codes; case files spell them in lower case."""
    NONE = 0
    UNKNOWN_SESSION = 1
    NOT_REGISTERED = 2
    RANK_OUT_OF_RANGE = 3
    WORLD_SIZE_MISMATCH = 4
    PAYLOAD_MISMATCH = 5
    THREADS_MISMATCH = 6
    WINDOW_MISMATCH = 7
    POOL_TOO_SMALL = 8
    SLOT_OUT_OF_RANGE = 9
    SEQ_AHEAD = 10
    OP_MISMATCH = 11
    NOT_JOINED = 12
    K_INVALID = 13
    BAD_LENGTH = 14
    DTYPE_MISMATCH = 15
    LENGTH_MISMATCH = 16
    SESSION_BUSY = 17
    SESSION_TAKEN_OVER = 18
    RANK_CONTENDED = 19
    AUTH_MISMATCH = 20
    RANK_GONE = 21
    MODE_MISMATCH = 22


# JOIN payloads: fixed 32-bit words, then 16-bit ports padded to a whole word (docs/protocol.md §6).
JOIN_REQUEST_WORDS = ("nonce", "world_size", "threads", "window", "payload")
JOIN_REPLY_WORDS = ("payload", "world_size", "k_default", "straggler_timeout_ticks", "pool_base",
                    "pool_size", "generation", "token", "switch_ports")
JOIN_REQUEST_PORT_COUNT = "threads"  # the word that says how many ports follow
JOIN_REPLY_PORT_COUNT = "switch_ports"
MAX_THREADS = 64

# The straggler timer counts ticks of 2^16 ns (§8.4).
TICK_NS = 1 << 16

# ---------------------------------------------------------------------------------------------------

KNOWN_FLAGS = int(sum(Flag))
# Flags only a switch sets: a datagram carrying one is a reply, never a request.
REPLY_ONLY = int(Flag.RESULT | Flag.RETRANSMIT | Flag.OLD | Flag.ERROR | Flag.COMPLETE)
_ERROR_NAMES = {code.name.lower(): code for code in Error}

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


def timeout_ticks(microseconds: int) -> int:
    """The smallest tick count not shorter than `microseconds`."""
    return -(-microseconds * 1000 // TICK_NS)


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
    """The header fields of a datagram, unvalidated (Header.decode applies §2's decoder)."""
    if len(datagram) < HEADER_SIZE:
        raise ValueError(f"datagram of {len(datagram)} bytes is shorter than the {HEADER_SIZE}-byte header")
    return {name: raw - _BIAS[name] for name, raw in zip(_ORDER, _STRUCT.unpack_from(datagram))}


def _encode(self) -> bytes:
    return encode_header(asdict(self))


def _decode(data: bytes):
    """The header of a request, or None when §2's decoder rejects it."""
    if len(data) < HEADER_SIZE:
        return None
    h = Header(**decode_header(data))
    owned = Flag.TO_OWNER | Flag.FROM_OWNER
    body = len(data) - HEADER_SIZE
    # An owned round's header-only forms keep the block's count (§13).
    header_only_owned = body == 0 and h.flags & owned
    if (h.version != VERSION or h.flags & ~KNOWN_FLAGS or h.flags & owned == owned or h.reserved != 0 or
            (h.error != 0) != bool(h.flags & Flag.ERROR) or h.rank >= MAX_RANKS or
            body % 4 or (4 * h.count > body and not header_only_owned)):
        return None
    return h


# The header as an object with one attribute per HEADER row, each defaulting to its request default.
Header = make_dataclass("Header", [(name, int, default) for name, _, _, default, _ in HEADER],
                        namespace={"encode": _encode, "decode": staticmethod(_decode)})


def error_reply(request, code: int, expected: int):
    """§4: the request echoed with ERROR, its JOIN/SYN/FLOAT bits and its mode (§13.1), the code
    and `expected`."""
    kind = Flag.JOIN | Flag.SYN | Flag.FLOAT | Flag.TO_OWNER | Flag.FROM_OWNER
    return replace(request, flags=int(Flag.ERROR | (request.flags & kind)),
                   error=int(code), offset=expected, count=0, contributors=0, bitmap=0)


def flags_value(spec) -> int:
    """An int, or a list of flag names ("JOIN", "RESULT", ...)."""
    if isinstance(spec, int):
        return spec
    value = 0
    for name in spec:
        if name not in Flag.__members__:
            raise ValueError(f"unknown flag {name!r}; flags are {sorted(Flag.__members__)}")
        value |= Flag[name]
    return int(value)


def flags_names(value: int) -> str:
    names = [flag.name for flag in Flag if value & flag]
    rest = value & ~KNOWN_FLAGS
    if rest:
        names.append(hex(rest))
    return "|".join(names) or "0"


def error_value(spec) -> int:
    """An int, or an error name as case files spell it ("unknown_session", ...)."""
    if isinstance(spec, int):
        return spec
    if spec not in _ERROR_NAMES:
        raise ValueError(f"unknown error code {spec!r}; codes are {sorted(_ERROR_NAMES)}")
    return int(_ERROR_NAMES[spec])


@dataclass(frozen=True)
class JoinLayout:
    words: tuple[str, ...]
    port_count: str  # the word that says how many ports follow

    def word_count(self, ports: int) -> int:
        """The payload's length in 32-bit words (the header's count) with `ports` ports."""
        return len(self.words) + (ports + 1) // 2

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

JoinRequest = namedtuple("JoinRequest", JOIN_REQUEST_WORDS + ("ports",))


def decode_join_request(payload: bytes):
    """§6.1 as a JoinRequest; None when malformed (threads outside 1..64, or the ports do not fit)."""
    try:
        fields, ports = JOIN_REQUEST.decode(payload)
    except ValueError:
        return None
    if not 1 <= fields["threads"] <= MAX_THREADS:
        return None
    return JoinRequest(**fields, ports=ports)


# ---- framing of CPU-port packets ----

@dataclass
class Frame:
    """A UDP datagram with the addresses the controller needs to answer it."""
    src_mac: bytes
    dst_mac: bytes
    src_ip: int
    dst_ip: int
    src_port: int
    dst_port: int
    payload: bytes


def internet_checksum(data: bytes) -> int:
    """RFC 1071's ones'-complement sum (IPv4 header, UDP with its pseudo-header); 0 over a
    header that carries a correct one."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def parse_frame(frame):
    """Ethernet/IPv4 (no options, unfragmented)/UDP, else None."""
    if len(frame) < 42 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[14:34]
    if ip[0] != 0x45 or ip[9] != 17 or struct.unpack("!H", ip[6:8])[0] & 0x3FFF:
        return None
    src_ip, dst_ip = struct.unpack("!II", ip[12:20])
    src_port, dst_port, length = struct.unpack("!HHH", frame[34:40])
    return Frame(frame[6:12], frame[0:6], src_ip, dst_ip, src_port, dst_port,
                 frame[42:34 + length])


def build_frame(src_mac, dst_mac, src_ip, dst_ip, src_port, dst_port, payload):
    """A UDP datagram with a correct IPv4 checksum and UDP checksum 0 (§1)."""
    udp = struct.pack("!HHHH", src_port, dst_port, 8 + len(payload), 0) + payload
    ip = bytearray(struct.pack("!BBHHHBBHII", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0,
                               src_ip, dst_ip))
    ip[10:12] = struct.pack("!H", internet_checksum(bytes(ip)))
    return dst_mac + src_mac + b"\x08\x00" + bytes(ip) + udp
