# SPDX-License-Identifier: Apache-2.0
"""The wire table (p4/controller/dpa_controller/wire.py, the one Python definition of the format,
which the controller and this suite share) against the annotated golden vectors: every
"# [first..last] field = value" line must name a field of the table at that offset and width, and
the table must decode that value from the file's bytes."""

import re
import struct
import unittest
from pathlib import Path

from dpa_conformance import encoding, wire
from dpa_conformance.case import GOLDEN_DIR

CONTROLLER_WIRE = GOLDEN_DIR.parents[1] / "p4" / "controller" / "dpa_controller" / "wire.py"

ANNOTATION = re.compile(r"^#\s*\[(\d+)(?:\.\.(\d+))?\]\s*(\w+)\s*=\s*(-?(?:0x[0-9a-fA-F]+|\d+))")


class GoldenVectors(unittest.TestCase):
    def test_the_suite_uses_the_controllers_wire_module(self):
        self.assertEqual(Path(wire.__file__).resolve(), CONTROLLER_WIRE.resolve())

    def test_every_annotated_header_field_matches_the_table(self):
        offsets = {name: (offset, struct.calcsize(code)) for name, offset, code, *_ in wire.HEADER}
        files = sorted(GOLDEN_DIR.glob("*.hex"))
        self.assertTrue(files, f"no golden vectors in {GOLDEN_DIR}")
        for path in files:
            text = path.read_text()
            header = wire.decode_header(encoding.parse_hex(text))
            checked = set()
            for line in text.splitlines():
                match = ANNOTATION.match(line)
                if match is None or int(match.group(1)) >= wire.HEADER_SIZE:
                    continue
                first, last, name, value = match.groups()
                with self.subTest(file=path.name, field=name):
                    self.assertIn(name, offsets, f"{path.name}: {name} is not in wire.HEADER")
                    width = int(last or first) - int(first) + 1
                    self.assertEqual(offsets[name], (int(first), width))
                    self.assertEqual(header[name], int(value, 0))
                    checked.add(name)
            with self.subTest(file=path.name):
                self.assertEqual(checked, set(wire.FIELD_NAMES), f"{path.name} annotates only {sorted(checked)}")

    def test_encode_reproduces_the_golden_headers(self):
        for path in sorted(GOLDEN_DIR.glob("*.hex")):
            data = encoding.parse_hex(path.read_text())
            with self.subTest(file=path.name):
                self.assertEqual(wire.encode_header(wire.decode_header(data)), data[:wire.HEADER_SIZE])
                self.assertEqual(wire.Header(**wire.decode_header(data)).encode(), data[:wire.HEADER_SIZE])

    def test_join_payloads_decode(self):
        request = encoding.parse_hex((GOLDEN_DIR / "join_request.hex").read_text())
        fields, ports = wire.JOIN_REQUEST.decode(request[wire.HEADER_SIZE:])
        self.assertEqual(len(ports), fields["threads"])
        self.assertEqual(wire.JOIN_REQUEST.encode(fields, ports), request[wire.HEADER_SIZE:])
        header = wire.Header.decode(request)
        self.assertIsNotNone(header, "the controller's decoder rejects join_request.hex")
        self.assertEqual(wire.decode_join_request(request[wire.HEADER_SIZE:]), wire.JoinRequest(**fields, ports=ports))
        self.assertEqual(header.count, wire.JOIN_REQUEST.word_count(len(ports)))
        reply = encoding.parse_hex((GOLDEN_DIR / "join_reply.hex").read_text())
        fields, ports = wire.JOIN_REPLY.decode(reply[wire.HEADER_SIZE:])
        self.assertEqual(len(ports), fields["switch_ports"])
        self.assertEqual(wire.JOIN_REPLY.encode(fields, ports), reply[wire.HEADER_SIZE:])
        self.assertEqual(wire.decode_header(reply)["count"], wire.JOIN_REPLY.word_count(len(ports)))


if __name__ == "__main__":
    unittest.main()
