# SPDX-License-Identifier: Apache-2.0
"""The runtime part of configs/<switch>.json (the compile-time part is dpa-p4gen's, and reaches
the controller as the defines it generated). Every error names the key.
"""
import ipaddress
import json
import re
from dataclasses import dataclass, field

from . import wire


class ConfigError(ValueError):
    """A config the controller cannot run; the message starts with the key."""


SPEEDS = {"10G": "BF_SPEED_10G", "25G": "BF_SPEED_25G", "40G": "BF_SPEED_40G",
          "50G": "BF_SPEED_50G", "100G": "BF_SPEED_100G", "200G": "BF_SPEED_200G",
          "400G": "BF_SPEED_400G"}
FECS = {"none": "BF_FEC_TYP_NONE", "fc": "BF_FEC_TYP_FIRECODE", "rs": "BF_FEC_TYP_REED_SOLOMON"}
MAX_WORLD = 32  # docs/protocol.md §12: the program's bitmap is 32 bits
MAX_WORKER_PORTS = 64  # p4/types.p4 DPA_WORKER_PORTS: the pass tables' entries per pass


@dataclass
class Host:
    name: str
    mac: bytes
    ip: int


@dataclass
class Worker:
    ip: int
    port: int = 0


@dataclass
class PassPort:
    pipe: int
    dev_port: int = -1      # an internal recirculation port, or
    front_panel: "FrontPanelPort" = None  # a front-panel port put in MAC loopback
    key: str = ""           # where the config gives it, for errors


@dataclass
class FrontPanelPort:
    name: str          # "N/L"
    speed: str
    fec: str
    autoneg: bool
    host: str = ""     # the host behind it ("" for a pass port)
    # A worker port's own pass ports, one per chunk pipe (ports.<name>.loopback_ports), in the
    # order of switch.pipes; empty where the pipes' shared switch.pass_ports carry its passes.
    loopback_ports: list = field(default_factory=list)


@dataclass
class Session:
    id: int
    index: int
    world_size: int
    k: int                  # resolved: N when configured as 0
    payload: int
    pool_base: int
    pool_size: int
    straggler_timeout_us: int
    idle_timeout_ms: int
    mgid: int
    workers: list           # Worker per rank, one for all, or none
    worker_hosts: list      # host names, in rank order
    drop_rate: float = 0.0
    liveness_timeout_ms: int = 5000  # §6.7: a rank silent this long (or that left) is gone

    @property
    def timeout_ticks(self):
        return wire.timeout_ticks(self.straggler_timeout_us)


@dataclass
class Program:
    """The defines dpa-p4gen generated (dpa_config.p4)."""
    defines: dict

    def __getitem__(self, name):
        if name not in self.defines:
            raise ConfigError("dpa_config.p4: %s is not defined (regenerate it with dpa-p4gen)" % name)
        return self.defines[name]


@dataclass
class SwitchConfig:
    name: str
    program: Program
    mac: bytes
    ip: int
    udp_port: int
    cpu_port: int
    cpu_interface: str
    flood_mgid: int
    pipes: list
    pass_ports: list
    hosts: dict
    ports: dict
    sessions: dict = field(default_factory=dict)  # id -> Session

    @property
    def loopback_per_worker(self):
        """Every worker port has its own loopback port per chunk pipe (docs/switch.md)."""
        return any(port.loopback_ports for port in self.ports.values())


def parse_defines(text):
    return Program({m.group(1): int(m.group(2)) for m in
                    re.finditer(r"^#define (DPA_\w+) (-?\d+)$", text, re.MULTILINE)})


def _require(obj, key, path, kind):
    if not isinstance(obj, dict) or key not in obj:
        raise ConfigError("%s: missing" % path)
    value = obj[key]
    if kind is int and (not isinstance(value, int) or isinstance(value, bool)):
        raise ConfigError("%s: must be an integer" % path)
    if kind is not int and not isinstance(value, kind):
        raise ConfigError("%s: must be %s" % (path, {str: "a string", bool: "true or false",
                                                     dict: "an object", list: "a list"}.get(kind, "a number")))
    return value


def _optional(obj, key, path, kind, default):
    return _require(obj, key, path, kind) if key in obj else default


def _range(value, path, low, high):
    if not low <= value <= high:
        raise ConfigError("%s: %d is outside %d..%d" % (path, value, low, high))
    return value


def _mac(text, path):
    if not isinstance(text, str) or not re.fullmatch(r"([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}", text):
        raise ConfigError("%s: %r is not a MAC address (aa:bb:cc:dd:ee:ff)" % (path, text))
    return bytes(int(part, 16) for part in text.split(":"))


def _ipv4(text, path):
    try:
        return int(ipaddress.IPv4Address(text))
    except (ipaddress.AddressValueError, ValueError, TypeError):
        raise ConfigError("%s: %r is not an IPv4 address" % (path, text)) from None


def _front_panel(name, spec, path):
    if not re.fullmatch(r"\d+/\d+", name):
        raise ConfigError("%s: %r is not a front-panel port (N/L)" % (path, name))
    speed = _require(spec, "speed", path + ".speed", str)
    if speed not in SPEEDS:
        raise ConfigError("%s.speed: %r is not one of %s" % (path, speed, ", ".join(SPEEDS)))
    fec = _optional(spec, "fec", path + ".fec", str, "none")
    if fec not in FECS:
        raise ConfigError("%s.fec: %r is not one of %s" % (path, fec, ", ".join(FECS)))
    autoneg = _optional(spec, "autoneg", path + ".autoneg", bool, False)
    return FrontPanelPort(name, speed, fec, autoneg, spec.get("host", ""))


def _loopback_ports(specs, ports, pipes, program):
    """Parses ports.<name>.loopback_ports into ports[name].loopback_ports. Each worker port gets
    one front-panel port in MAC loopback per chunk pipe, used by no other port, or none does.
    Returns the keys that gave some."""
    chunk_pipes = pipes[:program["DPA_CHUNKS"]]
    given, taken = [], {}
    for name in sorted(specs):
        path = "ports.%s.loopback_ports" % name
        if "loopback_ports" not in specs[name]:
            continue
        if not ports[name].host:
            raise ConfigError("%s: only a worker port (one with a host) has loopback ports" % path)
        listed = _require(specs[name], "loopback_ports", path, list)
        by_pipe = {}
        for i, spec in enumerate(listed):
            item = "%s[%d]" % (path, i)
            pipe = _require(spec, "pipe", item + ".pipe", int)
            if pipe not in chunk_pipes:
                raise ConfigError("%s.pipe: %d holds no chunk of the values (the chunk pipes are "
                                  "switch.pipes[0..%d] = %s)" % (item, pipe, len(chunk_pipes) - 1, chunk_pipes))
            if pipe in by_pipe:
                raise ConfigError("%s.pipe: pipe %d has a loopback port already (%s)"
                                  % (item, pipe, by_pipe[pipe].front_panel.name))
            if "dev_port" in spec:
                raise ConfigError("%s.dev_port: a loopback port is a front-panel port (\"port\"): a "
                                  "pipe's internal recirculation port would be shared by every worker" % item)
            port_name = _require(spec, "port", item + ".port", str)
            if port_name in ports:
                raise ConfigError("%s.port: %s is in ports (a worker's port, not a loopback)" % (item, port_name))
            if port_name in taken:
                raise ConfigError("%s.port: %s is also %s: a loopback port carries one worker's passes"
                                  % (item, port_name, taken[port_name]))
            taken[port_name] = item
            by_pipe[pipe] = PassPort(pipe, front_panel=_front_panel(port_name, spec, item), key=item)
        missing = [pipe for pipe in chunk_pipes if pipe not in by_pipe]
        if missing:
            raise ConfigError("%s: no loopback port in pipe %s (one per chunk pipe: %s)"
                              % (path, missing[0], chunk_pipes))
        ports[name].loopback_ports = [by_pipe[pipe] for pipe in chunk_pipes]
        given.append(path)
    if given:
        for name in sorted(ports):
            if ports[name].host and not ports[name].loopback_ports:
                raise ConfigError("ports.%s.loopback_ports: missing, but %s has them (give every worker "
                                  "port its own loopback ports, or none)" % (name, given[0]))
        if len(taken) > program["DPA_PASS_PORTS"]:
            raise ConfigError("switch.program.pass_ports: the program's pass-port value set holds %d "
                              "ports, but ports.*.loopback_ports name %d" % (program["DPA_PASS_PORTS"], len(taken)))
    return given


def load(config_text, defines_text):
    """Parses and validates the config against the program it was compiled into."""
    try:
        config = json.loads(config_text)
    except json.JSONDecodeError as error:
        raise ConfigError("(config): not valid JSON: %s" % error) from None
    if not isinstance(config, dict):
        raise ConfigError("(config): must be a JSON object")
    program = parse_defines(defines_text)
    sw = _require(config, "switch", "switch", dict)
    tofino = _require(sw, "tofino", "switch.tofino", int)
    if tofino != program["DPA_TARGET"]:
        raise ConfigError("switch.tofino: %d, but the program was built for Tofino%d"
                          % (tofino, program["DPA_TARGET"]))
    pipes = _require(sw, "pipes", "switch.pipes", list)
    if len(pipes) != program["DPA_PIPES"]:
        raise ConfigError("switch.pipes: %d pipes, but the program was built for %d"
                          % (len(pipes), program["DPA_PIPES"]))

    hosts = {}
    for name, spec in _require(config, "hosts", "hosts", dict).items():
        path = "hosts." + name
        hosts[name] = Host(name, _mac(_require(spec, "mac", path + ".mac", str), path + ".mac"),
                           _ipv4(_require(spec, "ip", path + ".ip", str), path + ".ip"))

    ports = {}
    for name, spec in _require(config, "ports", "ports", dict).items():
        path = "ports." + name
        port = _front_panel(name, spec, path)
        if port.host and port.host not in hosts:
            raise ConfigError("%s.host: %r is not in hosts" % (path, port.host))
        ports[name] = port

    worker_ports = [name for name, port in ports.items() if port.host]
    if len(worker_ports) > MAX_WORKER_PORTS:
        raise ConfigError("ports: %d worker ports (with a host), but the program's pass tables route %d"
                          % (len(worker_ports), MAX_WORKER_PORTS))
    loopbacks = _loopback_ports(config["ports"], ports, pipes, program)
    pass_ports = []
    if loopbacks and sw.get("pass_ports"):
        raise ConfigError("switch.pass_ports: unused when the worker ports have their own "
                          "loopback_ports (%s): remove it" % loopbacks[0])
    for i, spec in enumerate(sw.get("pass_ports", []) if loopbacks else
                             _require(sw, "pass_ports", "switch.pass_ports", list)):
        path = "switch.pass_ports[%d]" % i
        pipe = _require(spec, "pipe", path + ".pipe", int)
        if pipe not in pipes:
            raise ConfigError("%s.pipe: %d is not in switch.pipes" % (path, pipe))
        if "dev_port" in spec:
            dev_port = _range(_require(spec, "dev_port", path + ".dev_port", int), path + ".dev_port", 0, 511)
            if dev_port >> 7 != pipe:
                raise ConfigError("%s.dev_port: %d is in pipe %d, not %d" % (path, dev_port, dev_port >> 7, pipe))
            pass_ports.append(PassPort(pipe, dev_port=dev_port, key=path))
        else:
            name = _require(spec, "port", path + ".port", str)
            if name in ports:
                raise ConfigError("%s.port: %s is also a worker port" % (path, name))
            pass_ports.append(PassPort(pipe, front_panel=_front_panel(name, spec, path), key=path))
    for chunk in range(program["DPA_CHUNKS"] if not loopbacks else 0):
        if not any(p.pipe == pipes[chunk] for p in pass_ports):
            raise ConfigError("switch.pass_ports: no port enters pipe %d (chunk %d of the values)"
                              % (pipes[chunk], chunk))

    result = SwitchConfig(
        name=_optional(sw, "name", "switch.name", str, "switch"),
        program=program,
        mac=_mac(_require(sw, "mac", "switch.mac", str), "switch.mac"),
        ip=_ipv4(_require(sw, "ip", "switch.ip", str), "switch.ip"),
        udp_port=_optional(sw, "udp_port", "switch.udp_port", int, 4242),
        cpu_port=_require(sw, "cpu_port", "switch.cpu_port", int),
        cpu_interface=_require(sw, "cpu_interface", "switch.cpu_interface", str),
        flood_mgid=_range(_require(sw, "flood_mgid", "switch.flood_mgid", int), "switch.flood_mgid", 1, 0xFFFF),
        pipes=pipes, pass_ports=pass_ports, hosts=hosts, ports=ports)
    if result.udp_port != program["DPA_UDP_PORT"] or result.cpu_port != program["DPA_CPU_PORT"]:
        raise ConfigError("switch.udp_port/switch.cpu_port: the program was built with %d/%d"
                          % (program["DPA_UDP_PORT"], program["DPA_CPU_PORT"]))

    slots = program["DPA_SLOTS"]
    used = []
    for i, spec in enumerate(_require(config, "sessions", "sessions", list)):
        path = "sessions[%d]" % i
        sid = _require(spec, "id", path + ".id", int)
        if "auth_key_file" in spec:
            raise ConfigError("%s.auth_key_file: the Tofino program cannot check packet tags (authenticated mode, "
                              "docs/protocol.md section 6.6); it relies on ingress-port identity: run an "
                              "authenticated session on dpa-switch" % path)
        if sid in result.sessions:
            raise ConfigError("%s.id: session %d is listed twice" % (path, sid))
        world = _range(_require(spec, "world_size", path + ".world_size", int), path + ".world_size", 1, MAX_WORLD)
        k = _range(_optional(spec, "k", path + ".k", int, 0), path + ".k", 0, world)
        base = _range(_require(spec, "pool_base", path + ".pool_base", int), path + ".pool_base", 0, slots - 1)
        size = _range(_require(spec, "pool_size", path + ".pool_size", int), path + ".pool_size", 2, slots - base)
        for other_base, other_size, other_path in used:
            if base < other_base + other_size and other_base < base + size:
                raise ConfigError("%s.pool_base: slots [%d, %d) overlap %s" % (path, base, base + size, other_path))
        used.append((base, size, path))
        timeout = _range(_optional(spec, "straggler_timeout_us", path + ".straggler_timeout_us", int, 10000),
                         path + ".straggler_timeout_us", 1, 3_600_000_000)
        idle = _range(_optional(spec, "idle_timeout_ms", path + ".idle_timeout_ms", int, 10000),
                      path + ".idle_timeout_ms", 1, 86_400_000)
        liveness = _range(_optional(spec, "liveness_timeout_ms", path + ".liveness_timeout_ms", int, 5000),
                          path + ".liveness_timeout_ms", 1, 86_400_000)
        mgid = _range(_require(spec, "mgid", path + ".mgid", int), path + ".mgid", 1, program["DPA_SENDER_MGID_BASE"] - 1)
        if mgid == result.flood_mgid:
            raise ConfigError("%s.mgid: %d is switch.flood_mgid" % (path, mgid))
        names = _optional(spec, "workers", path + ".workers", list, [])
        if len(names) not in (0, 1, world):
            raise ConfigError("%s.workers: %d hosts for world size %d (list none, one, or one per rank)"
                              % (path, len(names), world))
        for name in names:
            if name not in hosts:
                raise ConfigError("%s.workers: %r is not in hosts" % (path, name))
            if not any(p.host == name for p in ports.values()):
                raise ConfigError("%s.workers: host %r is behind no port in ports" % (path, name))
        drop_rate = float(_optional(spec, "drop_rate", path + ".drop_rate", (int, float), 0.0))
        if not 0.0 <= drop_rate < 1.0:
            raise ConfigError("%s.drop_rate: %s is outside [0, 1)" % (path, drop_rate))
        if drop_rate and not program["DPA_DROP_SIMULATOR"]:
            raise ConfigError("%s.drop_rate: the program was built without the drop simulator" % path)
        if len(result.sessions) >= program["DPA_SESSIONS"]:
            raise ConfigError("%s: more sessions than the program's %d" % (path, program["DPA_SESSIONS"]))
        result.sessions[sid] = Session(
            id=sid, index=len(result.sessions), world_size=world, k=k or world,
            payload=program["DPA_PAYLOAD"], pool_base=base, pool_size=size,
            straggler_timeout_us=timeout, idle_timeout_ms=idle, mgid=mgid,
            workers=[Worker(hosts[n].ip) for n in names], worker_hosts=list(names),
            drop_rate=drop_rate, liveness_timeout_ms=liveness)
    return result
