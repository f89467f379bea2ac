"""p4/delivery.p4's settings, and the switch's own addresses (p4/dpa.p4 switch_address)."""


def setup(program, config, pass_ports):
    first_pipe = config.pipes[0]
    program.ingress("delivery", "pass_plan").set_default_with_set_pass_plan(
        input_port=pass_ports[first_pipe])
    program.ingress("switch_address").set_default_with_set_switch_address(
        mac=_mac_int(config.mac), ip=config.ip)


def _mac_int(mac):
    return int.from_bytes(mac, "big")
