# SPDX-License-Identifier: Apache-2.0
"""dpa-switch as a real process (SwitchProcess), and the loopback Dataplane: endpoints as UDP
sockets on 127.0.0.0/8.

Host i of the case is the address 127.0.0.(i + 2), so "another host" is a real other source
address; the switch listens on 127.0.0.1. Counters and the manual clock go through the switch's
JSON control channel (its Unix socket in the run's private directory, one request per line).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .dataplane import Dataplane, Received, Setup, SwitchControl

SWITCH_HOST = "127.0.0.1"
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h
_LISTENING = re.compile(r"dpa-switch listening on [0-9.]+:(\d+)")
_CONTROL = re.compile(r"dpa-switch control channel on unix:(\S+)")


def _die_with_parent() -> None:
    """In the switch's child process: SIGKILL when the runner dies, however it dies (a ctest
    timeout kills the runner without letting it clean up)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class DataplaneError(RuntimeError):
    """The switch process or a socket could not be set up."""


def host_address(index: int) -> str:
    return f"127.0.0.{index + 2}"


class SwitchProcess(SwitchControl):
    """dpa-switch started with a temporary config, its UDP ports from its banner, and its JSON
    control channel for counters and the manual clock."""

    def __init__(self, switch_binary: str | os.PathLike, keep_logs: bool = False):
        self.binary = str(switch_binary)
        self.keep_logs = keep_logs
        self.process: subprocess.Popen | None = None
        self.workdir: Path | None = None
        self.log_path: Path | None = None
        self.ports: dict[int, int] = {}
        self.control: socket.socket | None = None
        self.control_buffer = b""

    def start(self, setup: Setup, host_addresses: dict[str, str], endpoint_ports: dict[str, int]) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="dpa-conformance-"))

        def worker(spec: str) -> str:
            host, _, endpoint = spec.partition(":")
            return host_addresses[host] + (f":{endpoint_ports[endpoint]}" if endpoint else "")

        config = {
            "switch": {"threads": setup.switch_threads, "udp": {"bind_host": SWITCH_HOST, "bind_port": 0}},
            "sessions": [
                {"id": s.id, "world_size": s.world_size, "k": s.k, "payload": s.payload, "pool_base": s.pool_base,
                 "pool_size": s.pool_size, "straggler_timeout_us": s.straggler_timeout_us,
                 "liveness_timeout_ms": s.liveness_timeout_ms,
                 "workers": [worker(w) for w in s.workers]}
                for s in setup.sessions
            ],
        }
        config_path = self.workdir / "switch.json"
        config_path.write_text(json.dumps(config, indent=2))
        # The straggler timer reads the clock the case sets (0 until a clock step), so no round
        # times out by the machine's own pace.
        command = [self.binary, "--config", str(config_path), "--control", str(self.workdir / "control.sock"),
                   "--manual-clock"]
        self.log_path = self.workdir / "switch.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log,
                                            preexec_fn=_die_with_parent)
        self._read_banner()

    def _read_banner(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        text = b""
        control_path = None
        while control_path is None or 0 not in self.ports:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DataplaneError(f"dpa-switch did not report its ports within {START_TIMEOUT_S} s; "
                                     f"stdout {text!r}; {self.log_tail()}")
            ready, _, _ = select.select([self.process.stdout], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self.process.stdout.fileno(), 4096)
            if not chunk:
                self.process.wait(STOP_TIMEOUT_S)
                raise DataplaneError(f"dpa-switch exited with status {self.process.returncode} at start; "
                                     f"stdout {text.decode(errors='replace')!r}; {self.log_tail()}")
            text += chunk
            decoded = text.decode(errors="replace")
            if (match := _CONTROL.search(decoded)) is not None:
                control_path = match.group(1)
            if (match := _LISTENING.search(decoded)) is not None:
                self.ports[0] = int(match.group(1))
        self.control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.control.settimeout(START_TIMEOUT_S)
        self.control.connect(control_path)

    def log_tail(self, lines: int = 20) -> str:
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except (AttributeError, OSError):
            return "no switch log"
        return "switch log:\n  " + "\n  ".join(tail) if tail else "switch log empty"

    def stop(self) -> None:
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(STOP_TIMEOUT_S)
            self.process.stdout.close()
            self.process = None
        if self.workdir is not None and not self.keep_logs:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def switch_port(self, index: int) -> int | None:
        return self.ports.get(index)

    def settle(self, datagrams_sent: int, timeout_s: float) -> None:
        # The switch publishes its counters after sending a batch's replies, so once rx_packets
        # covers every datagram sent, every reply is in the endpoints' receive queues.
        deadline = time.monotonic() + timeout_s
        while (received := self.counters()["rx_packets"]) < datagrams_sent:
            if time.monotonic() > deadline:
                raise DataplaneError(f"dpa-switch processed {received} of {datagrams_sent} datagrams "
                                     f"within {timeout_s} s; {self.log_tail()}")
            self._check_alive()

    def _check_alive(self) -> None:
        if self.process.poll() is not None:
            raise DataplaneError(f"dpa-switch exited with status {self.process.returncode}; {self.log_tail()}")

    # ---- control channel ------------------------------------------------------------------------------------
    def _request(self, message: dict) -> dict:
        self._check_alive()
        self.control.sendall(json.dumps(message).encode() + b"\n")
        while b"\n" not in self.control_buffer:
            chunk = self.control.recv(65536)
            if not chunk:
                raise DataplaneError(f"control channel closed after {message}; {self.log_tail()}")
            self.control_buffer += chunk
        line, self.control_buffer = self.control_buffer.split(b"\n", 1)
        reply = json.loads(line)
        if not reply.get("ok"):
            raise DataplaneError(f"control request {message} failed: {reply.get('error')}")
        return reply

    def set_clock(self, ticks: int) -> None:
        self._request({"op": "set_clock", "ticks": ticks})

    def counters(self) -> dict[str, int]:
        return self._request({"op": "counters"})["counters"]


class LoopbackDataplane(Dataplane):
    def __init__(self, switch_binary: str | os.PathLike, keep_logs: bool = False):
        self.switch = SwitchProcess(switch_binary, keep_logs)
        self.sockets: dict[str, socket.socket] = {}
        self.by_fd: dict[int, str] = {}
        self.learned_ports: dict[int, int] = {}
        self.addresses: dict[str, str] = {}

    def open(self, setup: Setup) -> None:
        addresses = self.addresses = {host: host_address(i) for i, host in enumerate(setup.hosts)}
        for name, host in sorted(setup.endpoints.items()):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setblocking(False)
            try:
                sock.bind((addresses[host], 0))
            except OSError as error:
                sock.close()
                raise DataplaneError(f"endpoint {name}: cannot bind {addresses[host]}: {error}") from None
            self.sockets[name] = sock
            self.by_fd[sock.fileno()] = name
        self.switch.start(setup, addresses, {name: self.endpoint_port(name) for name in self.sockets})

    def close(self) -> None:
        for sock in self.sockets.values():
            sock.close()
        self.sockets.clear()
        self.by_fd.clear()
        self.switch.stop()

    def endpoint_port(self, endpoint: str) -> int:
        return self.sockets[endpoint].getsockname()[1]

    def switch_port(self, index: int) -> int | None:
        return self.switch.switch_port(index) or self.learned_ports.get(index)

    def host_address(self, host: str) -> str:
        return self.addresses[host]

    def learn_switch_ports(self, ports: list[int]) -> None:
        self.learned_ports.update(enumerate(ports))

    def send(self, endpoint: str, switch_index: int, datagram: bytes) -> None:
        port = self.switch_port(switch_index)
        if port is None:
            raise DataplaneError(f"switch.{switch_index}'s port is unknown until a JOIN reply lists it")
        self.sockets[endpoint].sendto(datagram, (SWITCH_HOST, port))

    def poll(self, timeout_s: float) -> Received | None:
        ready, _, _ = select.select(list(self.sockets.values()), [], [], max(timeout_s, 0))
        for sock in ready:
            try:
                datagram, (_, port) = sock.recvfrom(1 << 17)
            except BlockingIOError:
                continue
            return Received(endpoint=self.by_fd[sock.fileno()], source_port=port, datagram=datagram)
        return None

    def settle(self, datagrams_sent: int, timeout_s: float) -> None:
        self.switch.settle(datagrams_sent, timeout_s)

    def set_clock(self, ticks: int) -> None:
        self.switch.set_clock(ticks)

    def counters(self) -> dict[str, int]:
        return self.switch.counters()
