# SPDX-License-Identifier: Apache-2.0
"""The conformance suite's Dataplane over a PTF dataplane: the same case files, driven through
Ethernet frames on the switch's front-panel ports (a Tofino, or its model).

The PTF side is duck-typed: `ptf_dataplane` needs only `send(device, port, frame)` and
`poll(device=, port=, timeout=)` returning an object with `.port` and `.packet` on success and
no `.packet` on timeout, which is what ptf.dataplane.DataPlane does. Sessions, counters and the
clock go through a SwitchControl (dpa_conformance.dataplane) that drives the target's control
plane. The port map (JSON) says where each case host sits:

    {"device": 0,
     "switch": {"mac": "02:00:00:00:00:fe", "ip": "10.50.0.254", "udp_ports": [4242]},
     "hosts": {"h0": {"port": 1, "mac": "02:00:00:00:00:01", "ip": "10.50.0.1"}, ...},
     "endpoint_base_port": 40000,
     "endpoints": {"r0.t0": 40000}}

Endpoint UDP ports are `endpoints[name]` where given, else endpoint_base_port + the endpoint's
index in name order. `udp_ports` may be left out when the SwitchControl knows the ports.
"""

from __future__ import annotations

import json
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from dpa_conformance import wire  # noqa: E402
from dpa_conformance.dataplane import Dataplane, Received, Setup, SwitchControl  # noqa: E402

ETHERTYPE_IPV4 = 0x0800
IP_PROTOCOL_UDP = 17
_ETHERNET = struct.Struct("!6s6sH")
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")


class PortMapError(ValueError):
    """The port map does not describe the case's hosts."""


@dataclass(frozen=True)
class Station:
    port: int
    mac: bytes
    ip: bytes


def _mac(text: str, where: str) -> bytes:
    try:
        value = bytes.fromhex(text.replace(":", ""))
    except ValueError:
        value = b""
    if len(value) != 6:
        raise PortMapError(f"{where}: {text!r} is not a MAC address")
    return value


def _ip(text: str, where: str) -> bytes:
    parts = text.split(".")
    if len(parts) != 4 or not all(p.isdigit() and int(p) < 256 for p in parts):
        raise PortMapError(f"{where}: {text!r} is not an IPv4 address")
    return bytes(int(p) for p in parts)


def build_frame(src: Station, dst: Station, src_port: int, dst_port: int, datagram: bytes) -> bytes:
    """Ethernet | IPv4 (IHL 5, DF, no options) | UDP with checksum | datagram."""
    udp_length = _UDP.size + len(datagram)
    pseudo = src.ip + dst.ip + struct.pack("!BBH", 0, IP_PROTOCOL_UDP, udp_length)
    udp = _UDP.pack(src_port, dst_port, udp_length, 0) + datagram
    udp_checksum = wire.internet_checksum(pseudo + udp) or 0xFFFF
    ip_header = _IPV4.pack(0x45, 0, _IPV4.size + udp_length, 0, 0x4000, 64, IP_PROTOCOL_UDP, 0, src.ip, dst.ip)
    ip_header = ip_header[:10] + struct.pack("!H", wire.internet_checksum(ip_header)) + ip_header[12:]
    return (_ETHERNET.pack(dst.mac, src.mac, ETHERTYPE_IPV4) + ip_header
            + _UDP.pack(src_port, dst_port, udp_length, udp_checksum) + datagram)


@dataclass(frozen=True)
class ParsedFrame:
    dst_mac: bytes
    src_ip: bytes
    dst_ip: bytes
    src_port: int
    dst_port: int
    datagram: bytes


def parse_frame(frame: bytes) -> ParsedFrame:
    """Checks the framing rules of docs/protocol.md §1 (IPv4, IHL 5, no fragments, a valid IPv4
    checksum, UDP checksum zero or valid) and returns the UDP payload; ValueError otherwise."""
    if len(frame) < _ETHERNET.size + _IPV4.size + _UDP.size:
        raise ValueError(f"{len(frame)}-byte frame is too short for Ethernet/IPv4/UDP")
    dst_mac, _, ethertype = _ETHERNET.unpack_from(frame)
    if ethertype != ETHERTYPE_IPV4:
        raise ValueError(f"ethertype {ethertype:#06x} is not IPv4")
    ip = frame[_ETHERNET.size:_ETHERNET.size + _IPV4.size]
    version_ihl, _, total_length, _, fragment, _, protocol, _, src_ip, dst_ip = _IPV4.unpack(ip)
    if version_ihl != 0x45:
        raise ValueError(f"IPv4 version/IHL byte {version_ihl:#04x}, expected 0x45")
    if fragment & 0x3FFF:
        raise ValueError(f"IPv4 fragment field {fragment:#06x}: fragments are not allowed")
    if protocol != IP_PROTOCOL_UDP:
        raise ValueError(f"IP protocol {protocol} is not UDP")
    if wire.internet_checksum(ip) != 0:
        raise ValueError("IPv4 header checksum is wrong")
    udp_start = _ETHERNET.size + _IPV4.size
    if len(frame) < _ETHERNET.size + total_length:
        raise ValueError(f"frame holds fewer bytes than the IPv4 total length {total_length}")
    src_port, dst_port, udp_length, udp_checksum = _UDP.unpack_from(frame, udp_start)
    if udp_length != total_length - _IPV4.size:
        raise ValueError(f"UDP length {udp_length} disagrees with the IPv4 total length {total_length}")
    datagram = frame[udp_start + _UDP.size:udp_start + udp_length]
    if udp_checksum:
        pseudo = src_ip + dst_ip + struct.pack("!BBH", 0, IP_PROTOCOL_UDP, udp_length)
        if wire.internet_checksum(pseudo + frame[udp_start:udp_start + udp_length]) != 0:
            raise ValueError("UDP checksum is wrong")
    return ParsedFrame(dst_mac, src_ip, dst_ip, src_port, dst_port, datagram)


class PtfDataplane(Dataplane):
    def __init__(self, ptf_dataplane, control: SwitchControl, port_map: dict):
        self.ptf = ptf_dataplane
        self.control = control
        self.port_map = port_map
        self.device = port_map.get("device", 0)
        switch = port_map.get("switch")
        if not isinstance(switch, dict):
            raise PortMapError("port map: \"switch\" must be an object with mac and ip")
        self.switch = Station(port=-1, mac=_mac(switch.get("mac", ""), "switch.mac"),
                              ip=_ip(switch.get("ip", ""), "switch.ip"))
        self.udp_ports = list(switch.get("udp_ports", []))
        self.stations: dict[str, Station] = {}
        self.ports: dict[str, int] = {}
        self.endpoint_hosts: dict[str, str] = {}
        self.learned_ports: dict[int, int] = {}  # from JOIN replies, when the port map gives none

    @classmethod
    def from_file(cls, ptf_dataplane, control: SwitchControl, path: str | Path) -> "PtfDataplane":
        return cls(ptf_dataplane, control, json.loads(Path(path).read_text()))

    def open(self, setup: Setup) -> None:
        hosts = self.port_map.get("hosts", {})
        for host in setup.hosts:
            if host not in hosts:
                raise PortMapError(f"port map: host {host!r} of the case is not in \"hosts\"")
            entry = hosts[host]
            self.stations[host] = Station(port=int(entry["port"]), mac=_mac(entry["mac"], f"hosts.{host}.mac"),
                                          ip=_ip(entry["ip"], f"hosts.{host}.ip"))
        explicit = self.port_map.get("endpoints", {})
        base = self.port_map.get("endpoint_base_port", 40000)
        for index, name in enumerate(sorted(setup.endpoints)):
            self.ports[name] = int(explicit.get(name, base + index))
        self.endpoint_hosts = dict(setup.endpoints)
        addresses = {host: ".".join(map(str, station.ip)) for host, station in self.stations.items()}
        self.control.start(setup, addresses, dict(self.ports))

    def close(self) -> None:
        self.control.stop()

    def endpoint_port(self, endpoint: str) -> int:
        return self.ports[endpoint]

    def host_address(self, host: str) -> str:
        return ".".join(map(str, self.stations[host].ip))

    def switch_port(self, index: int) -> int | None:
        if index < len(self.udp_ports):
            return self.udp_ports[index]
        return self.control.switch_port(index) or self.learned_ports.get(index)

    def learn_switch_ports(self, ports: list[int]) -> None:
        self.learned_ports.update(enumerate(ports))

    def send(self, endpoint: str, switch_index: int, datagram: bytes) -> None:
        port = self.switch_port(switch_index)
        if port is None:
            raise PortMapError(f"switch.{switch_index}: no UDP port in the port map or from the control side")
        station = self.stations[self.endpoint_hosts[endpoint]]
        self.ptf.send(self.device, station.port, build_frame(station, self.switch, self.ports[endpoint], port, datagram))

    def poll(self, timeout_s: float) -> Received | None:
        result = self.ptf.poll(device_number=self.device, timeout=max(timeout_s, 0.0))
        frame = getattr(result, "packet", None)
        if frame is None:
            return None
        frame = bytes(frame)
        try:
            parsed = parse_frame(frame)
        except ValueError as error:
            return Received(endpoint=f"<port {result.port}: {error}>", source_port=-1, datagram=frame)
        for name, host in self.endpoint_hosts.items():
            station = self.stations[host]
            if (station.port == result.port and station.ip == parsed.dst_ip and station.mac == parsed.dst_mac
                    and self.ports[name] == parsed.dst_port):
                return Received(endpoint=name, source_port=parsed.src_port, datagram=parsed.datagram)
        return Received(endpoint=f"<port {result.port}: to {'.'.join(map(str, parsed.dst_ip))}:{parsed.dst_port}>",
                        source_port=parsed.src_port, datagram=parsed.datagram)

    def settle(self, datagrams_sent: int, timeout_s: float) -> None:
        self.control.settle(datagrams_sent, timeout_s)

    def set_clock(self, ticks: int) -> None:
        self.control.set_clock(ticks)

    def counters(self) -> dict[str, int] | None:
        return self.control.counters()
