# SPDX-License-Identifier: Apache-2.0
"""The driver against a scripted dataplane: a case passes only when the replies and counter
deltas are exactly the expected ones."""

import json
import tempfile
import unittest
from pathlib import Path

from dpa_conformance import case as case_module
from dpa_conformance import wire
from dpa_conformance.dataplane import Dataplane, Received
from dpa_conformance.driver import CaseFailure, Timing, run_case

FAST = Timing(reply_timeout_s=0.2, grace_s=0.01, settle_timeout_s=0.2)


class ScriptedDataplane(Dataplane):
    """Answers every datagram with `respond(endpoint, datagram)`: a list of (endpoint, datagram)."""

    def __init__(self, respond, counters_after=None):
        self.respond = respond
        self.counters_after = counters_after or (lambda rx, tx: {"rx_packets": rx, "tx_packets": tx})
        self.queue: list[Received] = []
        self.rx = self.tx = 0

    def open(self, setup):
        self.endpoints = setup.endpoints

    def close(self):
        pass

    def endpoint_port(self, endpoint):
        return 1000 + sorted(self.endpoints).index(endpoint)

    def switch_port(self, index):
        return 4242 + index

    def host_address(self, host):
        return "10.0.0.1"

    def send(self, endpoint, switch_index, datagram):
        self.rx += 1
        for to, reply in self.respond(endpoint, datagram):
            self.tx += 1
            self.queue.append(Received(to, 4242 + switch_index, reply))

    def poll(self, timeout_s):
        return self.queue.pop(0) if self.queue else None

    def settle(self, datagrams_sent, timeout_s):
        pass

    def set_clock(self, ticks):
        pass

    def counters(self):
        return self.counters_after(self.rx, self.tx)


CASE = {
    "sessions": [{"id": 7, "world_size": 1, "payload": 2}],
    "steps": [{"send": {"from": "r0.t0", "header": {"op_id": 1, "seq": 1}, "values": [5]},
               "expect": [{"to": "r0.t0", "header": {"flags": ["RESULT"], "op_id": 1, "seq": 1, "count": 1,
                                                     "k": 1, "contributors": 1, "bitmap": 1},
                           "values": [5, 0]}]}],
}


def result_for(endpoint, datagram, **changes):
    header = wire.decode_header(datagram)
    header.update(flags=wire.Flag.RESULT, k=1, contributors=1, bitmap=1)
    header.update(changes)
    return [(endpoint, wire.encode_header(header) + datagram[wire.HEADER_SIZE:])]


class DriverTest(unittest.TestCase):
    def run_case(self, dataplane, case=CASE):
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "case.json"
            path.write_text(json.dumps(case))
            run_case(case_module.load(path), dataplane, FAST)

    def test_exact_reply_passes(self):
        self.run_case(ScriptedDataplane(result_for))

    def test_missing_reply_fails(self):
        with self.assertRaisesRegex(CaseFailure, "no reply at r0.t0"):
            self.run_case(ScriptedDataplane(lambda endpoint, datagram: []))

    def test_extra_reply_fails(self):
        respond = lambda endpoint, datagram: result_for(endpoint, datagram) * 2  # noqa: E731
        with self.assertRaisesRegex(CaseFailure, "unexpected datagram at r0.t0"):
            self.run_case(ScriptedDataplane(respond))

    def test_wrong_field_is_named(self):
        respond = lambda endpoint, datagram: result_for(endpoint, datagram, contributors=2)  # noqa: E731
        with self.assertRaisesRegex(CaseFailure, "contributors 2, expected 1"):
            self.run_case(ScriptedDataplane(respond))

    def test_wrong_payload_is_named(self):
        respond = lambda endpoint, datagram: [(endpoint, result_for(endpoint, datagram)[0][1][:-4] + b"\0\0\0\1")]  # noqa: E731
        with self.assertRaisesRegex(CaseFailure, r"payload values \[5, 1\], expected \[5, 0\]"):
            self.run_case(ScriptedDataplane(respond))

    def test_counter_delta_differs(self):
        counters = lambda rx, tx: {"rx_packets": rx, "tx_packets": tx, "duplicates": rx}  # noqa: E731
        with self.assertRaisesRegex(CaseFailure, r"duplicates \+1, expected \+0"):
            self.run_case(ScriptedDataplane(result_for, counters))

    def test_unknown_key_is_a_case_error(self):
        case = json.loads(json.dumps(CASE))
        case["steps"][0]["expect"][0]["header"]["colour"] = 1
        with self.assertRaisesRegex(case_module.CaseError, "unknown header field 'colour'"):
            self.run_case(ScriptedDataplane(result_for), case)


if __name__ == "__main__":
    unittest.main()
