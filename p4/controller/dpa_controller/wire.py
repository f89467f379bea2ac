"""The part of docs/protocol.md the controller speaks: the 48-byte header (§2), JOIN payloads
(§6.1, §6.2), and the Ethernet/IPv4/UDP framing of packets punted to and sent from the CPU port.
"""
import struct
from dataclasses import dataclass, field, replace

VERSION = 2
HEADER_BYTES = 48

RESULT = 0x0001
SYN = 0x0004
ERROR = 0x0010
JOIN = 0x0040
FLOAT = 0x0100
LEAVE = 0x0200
KNOWN_FLAGS = 0x03FF
REPLY_ONLY = 0x0001 | 0x0002 | 0x0008 | 0x0010 | 0x0080

# Error codes (§4) the controller sends.
UNKNOWN_SESSION = 1
NOT_REGISTERED = 2
RANK_OUT_OF_RANGE = 3
WORLD_SIZE_MISMATCH = 4
PAYLOAD_MISMATCH = 5
THREADS_MISMATCH = 6
WINDOW_MISMATCH = 7
POOL_TOO_SMALL = 8
SLOT_OUT_OF_RANGE = 9
NOT_JOINED = 12
BAD_LENGTH = 14
SESSION_BUSY = 17
SESSION_TAKEN_OVER = 18

MAX_THREADS = 64

_HEADER = struct.Struct("!BBHIIIIIIIHBBBBBBQ")


@dataclass
class Header:
    version: int = VERSION
    error: int = 0
    flags: int = 0
    session: int = 0
    token: int = 0
    op_id: int = 0
    slot: int = 0
    seq: int = 0
    offset: int = 0
    op_length: int = 0
    count: int = 0
    rank: int = 0
    k: int = 0
    contributors: int = 0
    exp_used: int = 0
    exp_next: int = 0
    reserved: int = 0
    bitmap: int = 0

    def encode(self):
        return _HEADER.pack(self.version, self.error, self.flags, self.session, self.token,
                            self.op_id, self.slot, self.seq, self.offset, self.op_length,
                            self.count, self.rank, self.k, self.contributors, self.exp_used,
                            self.exp_next, self.reserved, self.bitmap)

    @staticmethod
    def decode(data):
        """The header of a request, or None when §2's decoder rejects it."""
        if len(data) < HEADER_BYTES:
            return None
        h = Header(*_HEADER.unpack_from(data))
        if (h.version != VERSION or h.flags & ~KNOWN_FLAGS or h.reserved != 0 or
                (h.error != 0) != bool(h.flags & ERROR) or h.rank >= 64 or
                (len(data) - HEADER_BYTES) % 4 or 4 * h.count > len(data) - HEADER_BYTES):
            return None
        return h


@dataclass
class JoinRequest:
    nonce: int
    world_size: int
    threads: int
    window: int
    payload: int
    ports: list = field(default_factory=list)

    def encode(self):
        ports = list(self.ports) + ([0] if len(self.ports) % 2 else [])
        return struct.pack("!5I", self.nonce, self.world_size, self.threads, self.window,
                           self.payload) + struct.pack("!%dH" % len(ports), *ports)

    def words(self):
        return 5 + (self.threads + 1) // 2

    @staticmethod
    def decode(payload):
        """§6.1; None when malformed (threads outside 1..64, or the ports do not fit)."""
        if len(payload) < 20:
            return None
        nonce, world, threads, window, values = struct.unpack_from("!5I", payload)
        if not 1 <= threads <= MAX_THREADS or len(payload) < 20 + 2 * threads:
            return None
        ports = list(struct.unpack_from("!%dH" % threads, payload, 20))
        return JoinRequest(nonce, world, threads, window, values, ports)


@dataclass
class JoinReply:
    payload: int
    world_size: int
    k_default: int
    straggler_timeout_ticks: int
    pool_base: int
    pool_size: int
    generation: int
    token: int
    switch_ports: list

    def words(self):
        return 9 + (len(self.switch_ports) + 1) // 2

    def encode(self):
        ports = list(self.switch_ports) + ([0] if len(self.switch_ports) % 2 else [])
        return struct.pack("!9I", self.payload, self.world_size, self.k_default,
                           self.straggler_timeout_ticks, self.pool_base, self.pool_size,
                           self.generation, self.token, len(self.switch_ports)) + \
            struct.pack("!%dH" % len(ports), *ports)


def error_reply(request, code, expected):
    """§4: the request echoed with ERROR, its JOIN/SYN/FLOAT bits, the code and `expected`."""
    return replace(request, flags=ERROR | (request.flags & (JOIN | SYN | FLOAT)), error=code,
                   offset=expected, count=0, contributors=0, bitmap=0)


def timeout_ticks(us):
    """§8.4: the smallest tick count (65.536 us) not shorter than `us`."""
    return (us * 1000 + (1 << 16) - 1) >> 16


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


def _ipv4_checksum(header):
    total = sum(struct.unpack("!10H", header))
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
    ip[10:12] = struct.pack("!H", _ipv4_checksum(bytes(ip)))
    return dst_mac + src_mac + b"\x08\x00" + bytes(ip) + udp
