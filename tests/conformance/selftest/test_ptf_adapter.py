# SPDX-License-Identifier: Apache-2.0
"""The PTF adapter (tests/ptf/ptf_dataplane.py) runs unchanged case files against dpa-switch: a
fake PTF dataplane turns its Ethernet frames into UDP datagrams on loopback and the replies back
into frames, so the adapter's framing and port mapping meet a real switch."""

import os
import select
import socket
import sys
import unittest
from dataclasses import dataclass
from pathlib import Path

from dpa_conformance import case as case_module
from dpa_conformance.driver import run_case
from dpa_conformance.loopback import SwitchProcess, host_address

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "ptf"))
import ptf_dataplane  # noqa: E402

CASES = Path(__file__).resolve().parents[1] / "cases"
SWITCH_MAC = "02:00:00:00:00:fe"


@dataclass
class PollResult:
    port: int
    packet: bytes


class LoopbackPtf:
    """ptf.dataplane.DataPlane's send/poll over UDP sockets: device port i + 1 is host i."""

    def __init__(self, setup):
        self.sockets = {}
        for name, host in sorted(setup.endpoints.items()):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind((host_address(setup.hosts.index(host)), 0))
            self.sockets[name] = sock
        self.hosts = list(setup.hosts)
        self.endpoint_hosts = dict(setup.endpoints)
        self.sent_on: list[int] = []

    def port_map(self):
        return {
            "device": 0,
            "switch": {"mac": SWITCH_MAC, "ip": "127.0.0.1"},
            "hosts": {host: {"port": i + 1, "mac": f"02:00:00:00:00:{i + 1:02x}", "ip": host_address(i)}
                      for i, host in enumerate(self.hosts)},
            "endpoints": {name: sock.getsockname()[1] for name, sock in self.sockets.items()},
        }

    def close(self):
        for sock in self.sockets.values():
            sock.close()

    def send(self, device, port, frame):
        parsed = ptf_dataplane.parse_frame(bytes(frame))
        source = (".".join(map(str, parsed.src_ip)), parsed.src_port)
        name = next(n for n, s in self.sockets.items() if s.getsockname() == source)
        if port != self.hosts.index(self.endpoint_hosts[name]) + 1:
            raise AssertionError(f"frame from {name} sent on device port {port}")
        self.sent_on.append(port)
        self.sockets[name].sendto(parsed.datagram, (".".join(map(str, parsed.dst_ip)), parsed.dst_port))

    def poll(self, device_number=None, port_number=None, timeout=None):
        ready, _, _ = select.select(list(self.sockets.values()), [], [], timeout)
        if not ready:
            return object()  # ptf's PollFailure carries no packet
        sock = ready[0]
        datagram, (address, port) = sock.recvfrom(1 << 17)
        name = next(n for n, s in self.sockets.items() if s is sock)
        index = self.hosts.index(self.endpoint_hosts[name])
        host = ptf_dataplane.Station(index + 1, bytes.fromhex(f"0200000000{index + 1:02x}"),
                                     socket.inet_aton(host_address(index)))
        switch = ptf_dataplane.Station(-1, bytes.fromhex(SWITCH_MAC.replace(":", "")), socket.inet_aton(address))
        return PollResult(index + 1, ptf_dataplane.build_frame(switch, host, port, sock.getsockname()[1], datagram))


@unittest.skipUnless(os.environ.get("DPA_SWITCH"), "DPA_SWITCH (the dpa-switch binary) is not set")
class PtfAdapterTest(unittest.TestCase):
    def run_file(self, name):
        case = case_module.load(CASES / name)
        ptf = LoopbackPtf(case.setup)
        try:
            dataplane = ptf_dataplane.PtfDataplane(ptf, SwitchProcess(os.environ["DPA_SWITCH"]), ptf.port_map())
            run_case(case, dataplane)
        finally:
            ptf.close()
        self.assertTrue(ptf.sent_on)

    def test_every_case(self):
        names = [path.name for path in sorted(CASES.glob("*.json"))]
        self.assertGreater(len(names), 10)
        for name in names:
            with self.subTest(case=name):
                self.run_file(name)


class FramingTest(unittest.TestCase):
    def test_frame_round_trip_and_rejections(self):
        a = ptf_dataplane.Station(1, b"\x02\0\0\0\0\x01", bytes([10, 0, 0, 1]))
        b = ptf_dataplane.Station(2, b"\x02\0\0\0\0\x02", bytes([10, 0, 0, 2]))
        frame = ptf_dataplane.build_frame(a, b, 1234, 4242, b"dpa!")
        parsed = ptf_dataplane.parse_frame(frame)
        self.assertEqual((parsed.src_port, parsed.dst_port, parsed.datagram), (1234, 4242, b"dpa!"))
        corrupt = bytearray(frame)
        corrupt[-1] ^= 1
        with self.assertRaisesRegex(ValueError, "UDP checksum"):
            ptf_dataplane.parse_frame(bytes(corrupt))
        zero_checksum = bytearray(corrupt)
        zero_checksum[40:42] = b"\0\0"
        self.assertEqual(ptf_dataplane.parse_frame(bytes(zero_checksum)).datagram, b"dpa ")
        fragment = bytearray(frame)
        fragment[20] |= 0x20  # more fragments
        with self.assertRaisesRegex(ValueError, "fragment"):
            ptf_dataplane.parse_frame(bytes(fragment))
        options = bytearray(frame)
        options[14] = 0x46
        with self.assertRaisesRegex(ValueError, "IHL"):
            ptf_dataplane.parse_frame(bytes(options))


if __name__ == "__main__":
    unittest.main()
