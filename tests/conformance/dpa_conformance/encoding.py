# SPDX-License-Identifier: Apache-2.0
"""The suite's text and payload encodings: hex bytes as case files and tests/golden/*.hex write
them, and payload values as big-endian int32 (docs/protocol.md §3)."""

from __future__ import annotations

import struct


def parse_hex(text: str) -> bytes:
    """Hex bytes; whitespace ignored; lines whose first non-blank character is '#' are comments
    (the format of tests/golden/*.hex)."""
    digits = "".join("".join(line.split()) for line in text.splitlines()
                     if not line.lstrip().startswith("#"))
    try:
        return bytes.fromhex(digits)
    except ValueError as error:
        raise ValueError(f"bad hex bytes: {error}") from None


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
