"""The suite's header table (dpa_conformance.wire) against the annotated golden vectors: every
"# [first..last] field = value" line must name a field of the table at that offset and width, and
the table must decode that value from the file's bytes."""

import re
import unittest

from dpa_conformance import wire
from dpa_conformance.case import GOLDEN_DIR

ANNOTATION = re.compile(r"^#\s*\[(\d+)(?:\.\.(\d+))?\]\s*(\w+)\s*=\s*(-?(?:0x[0-9a-fA-F]+|\d+))")


class GoldenVectors(unittest.TestCase):
    def test_every_annotated_header_field_matches_the_table(self):
        offsets = {name: (offset, wire.struct.calcsize(code)) for name, offset, code, *_ in wire.HEADER}
        files = sorted(GOLDEN_DIR.glob("*.hex"))
        self.assertTrue(files, f"no golden vectors in {GOLDEN_DIR}")
        for path in files:
            text = path.read_text()
            header = wire.decode_header(wire.parse_hex(text))
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
            data = wire.parse_hex(path.read_text())
            with self.subTest(file=path.name):
                self.assertEqual(wire.encode_header(wire.decode_header(data)), data[:wire.HEADER_SIZE])

    def test_join_payloads_decode(self):
        request = wire.parse_hex((GOLDEN_DIR / "join_request.hex").read_text())
        fields, ports = wire.JOIN_REQUEST.decode(request[wire.HEADER_SIZE:])
        self.assertEqual(len(ports), fields["threads"])
        self.assertEqual(wire.JOIN_REQUEST.encode(fields, ports), request[wire.HEADER_SIZE:])
        reply = wire.parse_hex((GOLDEN_DIR / "join_reply.hex").read_text())
        fields, ports = wire.JOIN_REPLY.decode(reply[wire.HEADER_SIZE:])
        self.assertEqual(len(ports), fields["switch_ports"])
        self.assertEqual(wire.JOIN_REPLY.encode(fields, ports), reply[wire.HEADER_SIZE:])


if __name__ == "__main__":
    unittest.main()
