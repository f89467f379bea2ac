# SPDX-License-Identifier: Apache-2.0
"""p4/egress_rewrite.p4's `destinations`: where each rank's multicast copy goes, per worker
thread (the thread that owns the slot, docs/protocol.md §8.2 "Multicast")."""


def _rows(session, generation, macs):
    for rank, member in sorted(generation.members.items()):
        for thread, port in enumerate(member.ports):
            yield rank, thread, member.address, port, macs[rank]


def retire(program, session, old):
    table = program.egress("rewrite", "destinations")
    for rank, thread, _, _, _ in _rows(session, old, {r: b"" for r in old.members}):
        table.delete(session_index=session.index, egress_rid=rank, thread=thread)


def publish(program, session, generation, macs):
    table = program.egress("rewrite", "destinations")
    for rank, thread, address, port, mac in _rows(session, generation, macs):
        table.add_with_set_destination(session_index=session.index, egress_rid=rank, thread=thread,
                                       mac=int.from_bytes(mac, "big"), ip=address, port=port)
