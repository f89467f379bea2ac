# SPDX-License-Identifier: Apache-2.0
"""p4/delivery.p4's settings, and the switch's own addresses (p4/dpa.p4 switch_address)."""


def setup(program, config, routes):
    """The first input pass of each worker port's packets enters pipes[0] through the pass port
    `routes` gives it (ports.setup: the shared one, or the worker port's own loopback port)."""
    first_pipe = config.pipes[0]
    pass_plan = program.ingress("delivery", "pass_plan")
    for worker_port, pass_ports in sorted(routes.items()):
        pass_plan.add_with_set_pass_plan(worker_port=worker_port, input_port=pass_ports[first_pipe])
    program.ingress("switch_address").set_default_with_set_switch_address(
        mac=_mac_int(config.mac), ip=config.ip)


def _mac_int(mac):
    return int.from_bytes(mac, "big")
