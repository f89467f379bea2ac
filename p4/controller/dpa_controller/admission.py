# SPDX-License-Identifier: Apache-2.0
"""Admission tables of p4/admission.p4: the session entries (written at start) and each
generation's token, member endpoints, identities and slot range (written at JOIN, §6.3/§8.1).
Ternary and range tables take a match priority in bfrt; their entries never overlap, so one
priority serves all.

An identity also names the dev port the rank's packets must enter on: the worker port the config
puts the rank's host behind (`rank_ports`, the port its multicast copies leave by), so a sender on
another port that forges a member's address is dropped (docs/switch.md, "Identity and the ingress
port").
"""

PRIORITY = 1


def _table(program, name):
    return program.ingress("admission", name)


def setup_session(program, session, generation=0):
    sessions = _table(program, "sessions")
    sessions.add_with_set_session(session=session.id, **session_data(session, generation))
    _table(program, "k_limits").add_with_k_valid(session=session.id, k_start=0, k_end=session.world_size,
                                                   MATCH_PRIORITY=PRIORITY)
    _table(program, "owner_limits").add_with_owner_valid(session=session.id, owner_start=0,
                                                         owner_end=session.world_size - 1,
                                                         MATCH_PRIORITY=PRIORITY)
    hosts = _table(program, "hosts")
    if not session.workers:
        hosts.add_with_registered_host(session=session.id, src_addr=0, src_addr_mask=0,
                                       MATCH_PRIORITY=PRIORITY)
    for ip in sorted({worker.ip for worker in session.workers}):
        hosts.add_with_registered_host(session=session.id, src_addr=ip, src_addr_mask=0xFFFFFFFF,
                                       MATCH_PRIORITY=PRIORITY)


def session_data(session, generation, gone=0):
    """The `sessions` entry's action data; `gone` the generation's gone ranks (liveness.py)."""
    return dict(index=session.index, world=session.world_size, k_default=session.k,
                timeout_plus_one=session.timeout_ticks + 1, pool_base=session.pool_base,
                mgid=session.mgid, generation=generation, gone=gone)


def _member_keys(session, generation, rank_ports):
    span = 2 * generation.window
    for rank, member in sorted(generation.members.items()):
        for thread, port in enumerate(member.ports):
            first = session.pool_base + thread * span
            yield rank, thread, member.address, port, first, first + span - 1, rank_ports[rank]


def retire(program, session, old, rank_ports):
    """The old generation stops reaching slots: its token becomes the previous one (ERROR
    session_taken_over), its endpoints, identities and slot range go. `rank_ports` are the dev
    ports its identities were bound to."""
    tokens = _table(program, "tokens")
    if old.previous_token:
        tokens.delete(session=session.id, token=old.previous_token)
    tokens.delete(session=session.id, token=old.token)
    tokens.add_with_token_previous(session=session.id, token=old.token)
    for rank, thread, address, port, first, last, dev_port in _member_keys(session, old, rank_ports):
        _table(program, "endpoints").delete(session=session.id, src_addr=address, src_port=port)
        _table(program, "identities").delete(session=session.id, src_addr=address, src_port=port,
                                             rank=rank, slot_start=first, slot_end=last,
                                             ingress_port=dev_port, MATCH_PRIORITY=PRIORITY)
    _table(program, "pools").delete(session=session.id, slot_start=session.pool_base,
                                    slot_end=session.pool_base + old.threads * 2 * old.window - 1,
                                    MATCH_PRIORITY=PRIORITY)


def publish(program, session, generation, rank_ports):
    """The new generation's token, member endpoints, identities (rank r bound to dev port
    rank_ports[r]) and slot range."""
    _table(program, "sessions").mod_with_set_session(session=session.id,
                                                     **session_data(session, generation.generation))
    _table(program, "tokens").add_with_token_current(session=session.id, token=generation.token)
    for rank, thread, address, port, first, last, dev_port in _member_keys(session, generation,
                                                                           rank_ports):
        _table(program, "endpoints").add_with_endpoint_member(session=session.id, src_addr=address,
                                                              src_port=port)
        _table(program, "identities").add_with_identity(session=session.id, src_addr=address,
                                                        src_port=port, rank=rank, slot_start=first,
                                                        slot_end=last, ingress_port=dev_port,
                                                        MATCH_PRIORITY=PRIORITY, thread=thread)
    _table(program, "pools").add_with_in_pool(
        session=session.id, slot_start=session.pool_base,
        slot_end=session.pool_base + generation.threads * 2 * generation.window - 1,
        MATCH_PRIORITY=PRIORITY)
