# SPDX-License-Identifier: Apache-2.0
"""Front-panel ports (speed, FEC, auto-negotiation), the pass ports that carry a packet into the
pipe of its next pass (front-panel ports in MAC loopback, or internal recirculation ports): one
per pipe shared by every worker (switch.pass_ports), or one per worker port and chunk pipe
(ports.<name>.loopback_ports); and the parser's `pass_ports` value set that tells a pass packet
from a worker's.
"""
from . import config as cfg

AUTONEG = {True: "PM_AN_FORCE_ENABLE", False: "PM_AN_FORCE_DISABLE"}


def dev_port(bfrt, name):
    """The dev port of front-panel port "N/L", as the board reports it."""
    connector, lane = (int(part) for part in name.split("/"))
    entry = bfrt.port.port_hdl_info.get(CONN_ID=connector, CHNL_ID=lane, print_ents=False)
    return entry.data[b"$DEV_PORT"]


def _add_port(bfrt, port, number, loopback, up):
    """Adds the port unless it is in `up`, the dev ports already brought up (re-adding one would
    make its link renegotiate, which takes seconds)."""
    if number in up:
        return
    up.add(number)
    fields = dict(DEV_PORT=number, SPEED=cfg.SPEEDS[port.speed], FEC=cfg.FECS[port.fec],
                  AUTO_NEGOTIATION=AUTONEG[port.autoneg], PORT_ENABLE=True)
    if loopback:
        fields["LOOPBACK_MODE"] = "BF_LPBK_MAC_NEAR"
    bfrt.port.port.add(**fields)


def _add_pass_port(program, pass_port, up):
    """Brings a pass port up (MAC loopback for a front-panel one); returns its dev port."""
    bfrt = program.bfrt
    if pass_port.front_panel is None:
        number = pass_port.dev_port
    else:
        number = dev_port(bfrt, pass_port.front_panel.name)
        if number >> 7 != pass_port.pipe:
            raise cfg.ConfigError("%s: %s is dev port %d, in pipe %d, not %d"
                                  % (pass_port.key, pass_port.front_panel.name, number, number >> 7,
                                     pass_port.pipe))
        _add_port(bfrt, pass_port.front_panel, number, loopback=True, up=up)
    program.parser("pass_ports").add(f1=number, f1_mask=0x1FF)
    return number


def setup(program, config, up):
    """Brings the ports up, but for those in `up` (dev ports already up; those added join it); returns ({front-panel name: dev port}, {worker dev port: {pipe: dev
    port of the pass port that takes the worker's packets into that pipe}})."""
    bfrt = program.bfrt
    numbers = {}
    for name, port in sorted(config.ports.items()):
        numbers[name] = dev_port(bfrt, name)
        if port.host and numbers[name] >> 7 != config.pipes[0]:
            # The slot state lives in the workers' pipe: a worker elsewhere would see other registers.
            raise cfg.ConfigError("ports.%s: dev port %d is in pipe %d, but the workers' pipe is "
                                  "switch.pipes[0] = %d" % (name, numbers[name], numbers[name] >> 7,
                                                            config.pipes[0]))
        _add_port(bfrt, port, numbers[name], loopback=False, up=up)
    shared = {}
    for pass_port in config.pass_ports:
        shared.setdefault(pass_port.pipe, _add_pass_port(program, pass_port, up))
    routes = {}
    for name, port in sorted(config.ports.items()):
        if not port.host:
            continue
        own = {}
        for pass_port in port.loopback_ports:
            own[pass_port.pipe] = _add_pass_port(program, pass_port, up)
        routes[numbers[name]] = own or shared
    return numbers, routes
