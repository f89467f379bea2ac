# SPDX-License-Identifier: Apache-2.0
"""SwitchControl for a Tofino running p4/ (tests/conformance/README.md, "Running against
hardware"): a case's sessions go through the controller's Python API (p4/controller), its
counters are read through bfrt, and JOINs are served from the CPU port while the case runs.

It runs where bfshell's `bfrt` object is (run_bfshell.sh -b, or PTF started from bfshell's
Python). PTF's test params are strings, so `bfrt` names where the object is as "module:attribute"
(default "__main__:bfrt", bfshell's namespace); a test may pass the object itself. The other
params: `switch_config` (configs/<switch>.json, whose `switch` section is kept), `p4_defines`
(the dpa_config.p4 the program was built from), the port map's hosts with a `front_panel` name
("N/L") each, and `cpu_interface` (default: the switch config's switch.cpu_interface), the kernel
interface of the CPU port on which the punted JOINs and LEAVEs arrive and their replies leave.
The ports are brought up by the first case and stay up through the suite (a port added again
renegotiates its link for longer than a case waits for a reply). The straggler clock cannot be
set (the timer reads the ASIC's global timestamp): dpa_conformance.target skips the cases that
set it.
"""

from __future__ import annotations

import importlib
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
from dpa_controller.cpu_port import CpuPort  # noqa: E402

DEFAULT_BFRT = "__main__:bfrt"


def resolve_bfrt(value):
    """The bfrt object: `value` itself, or the attribute a "module:attribute" string names."""
    if not isinstance(value, str):
        return value
    module_name, _, attribute = value.partition(":")
    if not attribute:
        raise ValueError(f"tofino_control: test param bfrt={value!r} is not 'module:attribute'")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"tofino_control: test param bfrt={value!r}: {error} (run PTF from bfshell's "
                         "Python, where `bfrt` is defined)") from None



class Control(SwitchControl):
    def __init__(self, params: dict, cpu_port=None):
        """`cpu_port` (send/receive/close, as dpa_controller.cpu_port.CpuPort) stands in for the
        CPU interface; without it the interface of the params or the switch config is opened."""
        for key in ("switch_config", "p4_defines", "port_map"):
            if key not in params:
                raise ValueError(f"tofino_control: test param {key!r} is required")
        self.bfrt = resolve_bfrt(params.get("bfrt", DEFAULT_BFRT))
        self.switch = json.loads(Path(params["switch_config"]).read_text())["switch"]
        self.defines = Path(params["p4_defines"]).read_text()
        self.port_map = json.loads(Path(params["port_map"]).read_text())
        self.cpu_port = cpu_port
        self._owns_cpu_port = False
        self._cpu_interface = params.get("cpu_interface", self.switch.get("cpu_interface"))
        self._ports_up = None  # dev ports up since the first case (None: none brought up yet)
        self.controller = None
        self._stop = threading.Event()
        self._server = None
        self._server_error = None

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
                     "liveness_timeout_ms": s.liveness_timeout_ms, "idle_timeout_ms": 1000, "mgid": self._mgid(i),
                     "workers": [worker.split(":", 1)[0] for worker in s.workers]}
                    for i, s in enumerate(setup.sessions)]
        return {"switch": self.switch, "hosts": hosts, "ports": ports, "sessions": sessions}

    def _mgid(self, index: int) -> int:
        """The multicast group of the case's session `index`: the first ones that are not flooding's."""
        return index + 1 + (index + 1 >= self.switch["flood_mgid"])

    def start(self, setup: Setup, host_addresses: dict[str, str], endpoint_ports: dict[str, int]) -> None:
        config = controller_config.load(json.dumps(self._config(setup, host_addresses)), self.defines)
        if self.cpu_port is None:
            if not self._cpu_interface:
                raise ValueError("tofino_control: no CPU port: set test param cpu_interface or the switch "
                                 "config's switch.cpu_interface (punted JOINs would go unanswered)")
            self.cpu_port = CpuPort(self._cpu_interface)
            self._owns_cpu_port = True
        first = self._ports_up is None
        if first:
            self._ports_up = set()
        self.controller = Controller(self.bfrt, config, self.cpu_port.send, time.monotonic_ns,
                                     ports_up=self._ports_up)
        self.controller.reset(keep_ports=not first)
        self.controller.setup()
        self._stop.clear()
        self._server_error = None
        self._server = threading.Thread(target=self._serve, daemon=True)
        self._server.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            frame = self.cpu_port.receive(0.05)
            try:
                if frame is not None:
                    self.controller.handle_frame(frame)
                self.controller.poll()  # the gone ranks (§6.7), as bfshell_entry's loop
            except Exception as error:  # noqa: BLE001  (reported by counters(), which every step reads)
                self._server_error = error
                return

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.join()
            self._server = None
        if self.controller is not None:
            self.controller.reset(keep_ports=True)
            self.controller = None

    def close(self) -> None:
        """After the last case: the CPU interface this Control opened is closed."""
        self.stop()
        if self._owns_cpu_port:
            self.cpu_port.close()
            self.cpu_port = None
            self._owns_cpu_port = False

    def switch_port(self, index: int) -> int | None:
        return self.switch.get("udp_port", 4242) if index == 0 else None

    def settle(self, datagrams_sent: int, timeout_s: float) -> None:
        """The program has no processed-packet count to wait for: the driver's grace window stands in."""

    def set_clock(self, ticks: int) -> None:
        raise RuntimeError("tofino_control: the straggler clock cannot be set on a Tofino (the timer "
                           "reads the global timestamp); such cases are software-only (dpa_conformance.target)")

    def counters(self) -> dict[str, int] | None:
        if self._server_error is not None:
            raise RuntimeError(f"tofino_control: the controller stopped serving the CPU port: "
                               f"{type(self._server_error).__name__}: {self._server_error}")
        if self.controller is None:
            return None
        # The program's replies and drops, and the controller's outcomes of what it was punted,
        # summed by name: an ERROR the controller sends or a LEAVE it drops counts as the
        # software switch counts it.
        values = program_counters.replies(self.controller.program)
        for source in (program_counters.drops(self.controller.program), self.controller.counts):
            for name, value in source.items():
                values[name] = values.get(name, 0) + value
        return values
