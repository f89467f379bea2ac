# SPDX-License-Identifier: Apache-2.0
"""Liveness on Tofino (docs/protocol.md §6.7): which ranks of a generation are gone.

admission.p4 punts KEEPALIVE to the CPU port as it does LEAVE. The controller checks it as §8.1
row 4½ says (header only, from a member socket of the header's rank, with the current token),
keeps the time it last heard each rank (a JOIN that forms the generation hears every rank), and
marks a rank that sent LEAVE. Every poll it writes what changed: the ranks that left or have
been silent longer than the session's `liveness_timeout_ms` as the `gone` action data of the
session's `sessions` entry (admission.py), and each gone rank's silence in milliseconds
(0xffffffff: it left) in delivery.p4's `silences` table, which the state pass puts in the
`offset` of the rank_gone ERROR it answers a waiting probe with. The silence is the one
measured at the last poll, so it may be up to one poll interval short.
"""

LEFT = 0xFFFFFFFF  # the silence of a rank that sent LEAVE (§4, rank_gone's offset)


class SessionLiveness:
    """One session's current generation: when each rank was last heard, and what the program holds."""

    def __init__(self, session, generation, now_ns):
        self.session = session
        self.generation = generation
        self.heard_ns = {rank: now_ns for rank in generation.members}
        self.left = set()
        self.written = {}  # rank -> silence in ms, as the program holds it

    def keepalive(self, header, address, port, payload_bytes, now_ns):
        """§8.1 row 4½: the outcome's counter name, or None when the rank was heard."""
        if payload_bytes:
            return "dropped_malformed"
        member = self.generation.members.get(header.rank)
        if header.token != self.generation.token or member is None or member.address != address \
                or port not in member.ports:
            return "dropped_unregistered"
        self.heard_ns[header.rank] = now_ns
        return None

    def leave(self, rank):
        self.left.add(rank)

    def silences(self, now_ns):
        """{gone rank: ms since it was last heard, or LEFT}."""
        timeout_ns = self.session.liveness_timeout_ms * 1_000_000
        gone = {rank: LEFT for rank in self.left}
        for rank, heard in self.heard_ns.items():
            if rank not in gone and now_ns - heard > timeout_ns:
                gone[rank] = min((now_ns - heard) // 1_000_000, LEFT - 1)
        return gone

    def retire(self, program):
        """The generation is replaced: its silences go (the new one's sessions entry has no gone ranks)."""
        for rank in sorted(self.written):
            program.ingress("delivery", "silences").delete(session_index=self.session.index, gone_rank=rank)
        self.written = {}

    def publish(self, program, now_ns, session_data):
        """Writes the gone ranks and their silences where they changed; True if it wrote any."""
        gone = self.silences(now_ns)
        if gone == self.written:
            return False
        silences = program.ingress("delivery", "silences")
        index = self.session.index
        for rank in sorted(set(self.written) - set(gone)):
            silences.delete(session_index=index, gone_rank=rank)
        for rank, ms in sorted(gone.items()):
            if rank in self.written:
                if self.written[rank] != ms:
                    silences.mod_with_set_silence(session_index=index, gone_rank=rank, ms=ms)
            else:
                silences.add_with_set_silence(session_index=index, gone_rank=rank, ms=ms)
        if set(gone) != set(self.written):
            program.ingress("admission", "sessions").mod_with_set_session(
                session=self.session.id, **session_data(bitmap(gone)))
        self.written = gone
        return True


def bitmap(gone):
    return sum(1 << rank for rank in gone)
