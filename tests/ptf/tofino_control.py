# SPDX-License-Identifier: Apache-2.0
"""SwitchControl for a Tofino running p4/ (tests/conformance/README.md, "Running against
hardware"): a case's sessions go through the controller's Python API (p4/controller), its
counters are read through bfrt, and JOINs are served from the CPU port while the case runs.

It runs where bfshell's `bfrt` object is (run_bfshell.sh -b, or PTF started from bfshell's
Python): the test params give `bfrt` (the object), `switch_config` (configs/<switch>.json, whose
`switch` section is kept), `p4_defines` (the dpa_config.p4 the program was built from) and the
port map's hosts with a `front_panel` name ("N/L") each. The straggler clock cannot be set (the
timer reads the ASIC's global timestamp): dpa_conformance.target skips the cases that set it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from dpa_conformance.dataplane import Setup, SwitchControl  # noqa: E402
from dpa_controller import config as controller_config  # noqa: E402  (on sys.path via dpa_conformance)
from dpa_controller import counters as program_counters  # noqa: E402
from dpa_controller.controller import Controller  # noqa: E402



class Control(SwitchControl):
    def __init__(self, params: dict, cpu_port=None):
        for key in ("bfrt", "switch_config", "p4_defines", "port_map"):
            if key not in params:
                raise ValueError(f"tofino_control: test param {key!r} is required")
        self.bfrt = params["bfrt"]
        self.switch = json.loads(Path(params["switch_config"]).read_text())["switch"]
        self.defines = Path(params["p4_defines"]).read_text()
        self.port_map = json.loads(Path(params["port_map"]).read_text())
        self.cpu_port = cpu_port
        self.controller = None
        self._stop = threading.Event()
        self._server = None

    def _config(self, setup: Setup, host_addresses: dict[str, str]) -> dict:
        hosts, ports = {}, {}
        for name in setup.hosts:
            spec = self.port_map["hosts"].get(name)
            if spec is None or "front_panel" not in spec:
                raise ValueError(f"port map: host {name!r} needs an entry with a \"front_panel\" port")
            hosts[name] = {"mac": spec["mac"], "ip": host_addresses[name]}
            ports[spec["front_panel"]] = {"speed": spec.get("speed", "100G"), "fec": spec.get("fec", "none"),
                                          "host": name}
        sessions = [{"id": s.id, "world_size": s.world_size, "k": s.k, "pool_base": s.pool_base,
                     "pool_size": s.pool_size, "straggler_timeout_us": s.straggler_timeout_us,
                     "idle_timeout_ms": 1000, "mgid": self._mgid(i),
                     "workers": [worker.split(":", 1)[0] for worker in s.workers]}
                    for i, s in enumerate(setup.sessions)]
        return {"switch": self.switch, "hosts": hosts, "ports": ports, "sessions": sessions}

    def _mgid(self, index: int) -> int:
        """The multicast group of the case's session `index`: the first ones that are not flooding's."""
        return index + 1 + (index + 1 >= self.switch["flood_mgid"])

    def start(self, setup: Setup, host_addresses: dict[str, str], endpoint_ports: dict[str, int]) -> None:
        config = controller_config.load(json.dumps(self._config(setup, host_addresses)), self.defines)
        send = self.cpu_port.send if self.cpu_port is not None else (lambda frame: None)
        self.controller = Controller(self.bfrt, config, send, time.monotonic_ns)
        self.controller.reset()
        self.controller.setup()
        if self.cpu_port is not None:
            self._stop.clear()
            self._server = threading.Thread(target=self._serve, daemon=True)
            self._server.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            frame = self.cpu_port.receive(0.05)
            if frame is not None:
                self.controller.handle_frame(frame)

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.join()
            self._server = None
        if self.controller is not None:
            self.controller.reset()
            self.controller = None

    def switch_port(self, index: int) -> int | None:
        return self.switch.get("udp_port", 4242) if index == 0 else None

    def settle(self, datagrams_sent: int, timeout_s: float) -> None:
        """The program has no processed-packet count to wait for: the driver's grace window stands in."""

    def set_clock(self, ticks: int) -> None:
        raise RuntimeError("tofino_control: the straggler clock cannot be set on a Tofino (the timer "
                           "reads the global timestamp); such cases are software-only (dpa_conformance.target)")

    def counters(self) -> dict[str, int] | None:
        if self.controller is None:
            return None
        values = program_counters.replies(self.controller.program)
        values.update(self.controller.counts)
        return values
