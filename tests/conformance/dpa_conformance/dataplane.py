# SPDX-License-Identifier: Apache-2.0
"""What the case driver needs from a switch under test: the one interface that both the loopback
runner (dpa-switch over UDP) and the PTF adapter (a Tofino or its model) implement.

Endpoints are the case's symbolic sockets ("r0.t0", "forger"); each lives on a symbolic host
("h0"). The implementation gives them real addresses, sends datagrams from them to the switch's
UDP port `switch_index`, and reports what arrives at them. Everything below the UDP payload
(Ethernet, IPv4, UDP) is the implementation's business.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True)
class SessionSetup:
    """One switch session, as the case declares it; `workers` are host names, or "host:endpoint"
    where the registration names a port too."""

    id: int
    world_size: int
    k: int = 0
    payload: int = 4
    pool_base: int = 0
    pool_size: int = 8
    straggler_timeout_us: int = 1000
    liveness_timeout_ms: int = 5000
    workers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Setup:
    hosts: tuple[str, ...]
    endpoints: dict[str, str]  # endpoint name -> host name
    sessions: tuple[SessionSetup, ...]
    switch_threads: int = 1


@dataclass(frozen=True)
class Received:
    endpoint: str      # the endpoint the datagram arrived at
    source_port: int   # the switch's UDP port that sent it
    datagram: bytes    # UDP payload: dpa header and payload


class Dataplane(ABC):
    @abstractmethod
    def open(self, setup: Setup) -> None:
        """Configures the switch with the sessions and creates every endpoint."""

    @abstractmethod
    def close(self) -> None:
        """Releases the switch and the endpoints; safe to call after a failed open()."""

    @abstractmethod
    def endpoint_port(self, endpoint: str) -> int:
        """The UDP port of an endpoint (JOIN requests list their threads' ports)."""

    @abstractmethod
    def switch_port(self, index: int) -> int | None:
        """The UDP port of switch thread `index`, or None while the target has not said it."""

    @abstractmethod
    def host_address(self, host: str) -> str:
        """The IPv4 address (dotted) the implementation gives a case host."""

    def learn_switch_ports(self, ports: list[int]) -> None:
        """Called with the ports of a JOIN reply; targets that choose ports themselves use it."""

    @abstractmethod
    def send(self, endpoint: str, switch_index: int, datagram: bytes) -> None:
        """Sends one datagram from `endpoint` to switch thread `switch_index`."""

    @abstractmethod
    def poll(self, timeout_s: float) -> Received | None:
        """The next datagram that reached any endpoint, or None after `timeout_s`."""

    @abstractmethod
    def settle(self, datagrams_sent: int, timeout_s: float) -> None:
        """Returns once the switch has processed the first `datagrams_sent` datagrams and sent
        their replies (a target that cannot tell returns at once; the driver's grace window then
        stands in)."""

    @abstractmethod
    def set_clock(self, ticks: int) -> None:
        """Sets the straggler timer's clock (32-bit ticks of 2^16 ns)."""

    @abstractmethod
    def counters(self) -> dict[str, int] | None:
        """The switch's counters by name, or None when the target keeps none."""


class SwitchControl(ABC):
    """The control side of a switch under test: what a case needs besides packets. dpa-switch's
    implementation is loopback.SwitchProcess; a Tofino's would drive its control plane."""

    @abstractmethod
    def start(self, setup: Setup, host_addresses: dict[str, str], endpoint_ports: dict[str, int]) -> None:
        """Configures the sessions; workers are registered at `host_addresses`."""

    @abstractmethod
    def stop(self) -> None:
        """Releases the switch; safe after a failed start()."""

    @abstractmethod
    def switch_port(self, index: int) -> int | None:
        """The UDP port of switch thread `index`, if the control side knows it."""

    @abstractmethod
    def settle(self, datagrams_sent: int, timeout_s: float) -> None:
        """See Dataplane.settle."""

    @abstractmethod
    def set_clock(self, ticks: int) -> None:
        """See Dataplane.set_clock."""

    @abstractmethod
    def counters(self) -> dict[str, int] | None:
        """See Dataplane.counters."""
