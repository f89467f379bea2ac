# SPDX-License-Identifier: Apache-2.0
"""p4/net.p4: L2 forwarding to the configured hosts, flooding everything else."""


def setup(program, config, worker_ports):
    table = program.ingress("net", "forwarding")
    table.set_default_with_flood(mgid=config.flood_mgid)
    for name, port in sorted(config.ports.items()):
        if port.host:
            table.add_with_forward(dst_addr=int.from_bytes(config.hosts[port.host].mac, "big"),
                                   port=worker_ports[name])
