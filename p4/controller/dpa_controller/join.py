# SPDX-License-Identifier: Apache-2.0
"""The JOIN procedure of docs/protocol.md §6.3-§6.5, as the software switch runs it
(src/switch/session.cpp): the same rules, the same outcomes, the same order of checks. Pure: the
caller passes the clock and programs the switch with the outcome.
"""
import random
from dataclasses import dataclass, field

from . import wire

PENDING_TTL_NS = 1_000_000_000  # a pending JOIN not repeated for 1 s expires
# How long an unconfirmed claim on a rank keeps other sources out: several of a live rank's
# retries (at most 100 ms apart), so a rank confirms its claim before anyone may displace it, and
# a source that never confirms (a stray, or a storm with a fresh nonce each time) gives way.
UNCONFIRMED_CLAIM_NS = 500_000_000

WAITING = "waiting"
ACK_SENDER = "ack_sender"        # a retransmitted JOIN of the current generation
ACK_ALL = "ack_all"              # a new generation: program it, then ack every rank
REJECT_SENDER = "reject_sender"  # error to the sender only
REJECT_ALL = "reject_all"        # ranks disagree: error to every rank of the attempt


@dataclass
class Member:
    nonce: int
    address: int       # IPv4 of the rank's host
    ports: list        # UDP port of each worker thread
    mac: bytes = b""   # where the JOIN came from (acks go back there)


@dataclass
class Generation:
    generation: int
    token: int
    previous_token: int
    threads: int
    window: int
    members: dict                # rank -> Member
    last_active_ns: int
    secrets: dict = field(default_factory=dict)  # rank -> its secret (§6.4), sent in its ack's offset
    left: bool = False

    def ranks_bitmap(self):
        return sum(1 << r for r in self.members)


@dataclass
class Outcome:
    kind: str
    error: int = 0
    expected: int = 0
    generation: Generation = None
    culprit_rank: int = 0
    culprit_address: int = 0
    culprit_value: int = 0
    notify: list = field(default_factory=list)  # (address, port, mac) of every rank of the attempt
    holder: tuple = None  # rank_contended: the (address, port) whose pending entry holds the rank


@dataclass
class _Pending:
    nonce: int
    threads: int
    window: int
    address: int
    port: int           # the UDP port the JOIN came from: (address, port) is the entry's source
    ports: list
    mac: bytes
    last_seen_ns: int
    claimed_ns: int     # when its source first claimed the rank (kept across a new nonce)
    confirmed: bool = False

    @property
    def source(self):
        return (self.address, self.port)


class SessionJoin:
    """One session's generations and pending JOINs."""

    def __init__(self, session, token_source=None):
        self.session = session  # config.Session
        self.current = None
        self._pending = {}
        self._next_generation = 1
        self._random = token_source or random.SystemRandom()

    def registered(self, rank, address, port, check_port):
        """§6.3 step 2: the sender is the session's worker for `rank` (any host if none)."""
        workers = self.session.workers
        if not workers:
            return True
        worker = workers[0] if len(workers) == 1 else workers[rank]
        return worker.ip == address and (not check_port or worker.port in (0, port))

    def registered_host(self, address):
        return not self.session.workers or any(w.ip == address for w in self.session.workers)

    def held(self, now_ns):
        """§6.3 step 4: the generation holds the session against other jobs."""
        current = self.current
        if current is None or current.left:
            return False
        idle_ns = self.session.idle_timeout_ms * 1_000_000
        return now_ns < current.last_active_ns or now_ns - current.last_active_ns < idle_ns

    def record_activity(self, now_ns):
        if self.current is not None:
            self.current.last_active_ns = now_ns

    def join(self, header, request, address, port, mac, now_ns):
        s = self.session
        rank = header.rank
        if request.world_size != s.world_size:
            return Outcome(REJECT_SENDER, wire.Error.WORLD_SIZE_MISMATCH, s.world_size)
        if request.payload not in (0, s.payload):
            return Outcome(REJECT_SENDER, wire.Error.PAYLOAD_MISMATCH, s.payload)
        if request.window == 0 or request.threads * 2 * request.window > s.pool_size:
            return Outcome(REJECT_SENDER, wire.Error.POOL_TOO_SMALL, s.pool_size)

        current = self.current
        if current is not None and rank in current.members:
            member = current.members[rank]
            if member.nonce == request.nonce and member.address == address and member.ports[0] == port:
                return Outcome(ACK_SENDER, generation=current)  # the ack was lost
        # While a job uses the session, only its own members may start a new generation: they
        # prove it with the current token and the rank's secret (in `offset`, §6.4) from their own
        # host. The token alone, which every packet carries, is not enough.
        member_rejoin = (current is not None and header.token == current.token and
                         rank in current.members and header.offset == current.secrets.get(rank) and
                         current.members[rank].address == address)
        if current is not None and not member_rejoin and self.held(now_ns):
            # A rank of the generation this one replaced learns why it cannot come back.
            if current.previous_token and header.token == current.previous_token:
                return Outcome(REJECT_SENDER, wire.Error.SESSION_TAKEN_OVER, current.generation)
            return Outcome(REJECT_SENDER, wire.Error.SESSION_BUSY, current.generation)

        self._pending = {r: p for r, p in self._pending.items()
                         if now_ns - p.last_seen_ns <= PENDING_TTL_NS}
        source = (address, port)
        pending = self._pending.get(rank)
        # First come holds the rank while it is alive: a confirmed entry, or a young unconfirmed
        # one, is not displaced by another source, so a storm cannot starve a rank that is joining.
        if (pending is not None and pending.source != source and
                (pending.confirmed or now_ns - pending.claimed_ns < UNCONFIRMED_CLAIM_NS)):
            return Outcome(REJECT_SENDER, wire.Error.RANK_CONTENDED, rank, holder=pending.source)
        # A source is one rank's thread 0: its pending entry for another rank is dropped.
        self._pending = {r: p for r, p in self._pending.items() if r == rank or p.source != source}
        if pending is None or pending.nonce != request.nonce or pending.source != source:
            # A new request, or the rank restarted: its latest JOIN replaces what it sent before,
            # but a restart on the same socket keeps the time of the claim.
            claimed_ns = pending.claimed_ns if pending is not None and pending.source == source else now_ns
            pending = _Pending(request.nonce, request.threads, request.window, address, port,
                               list(request.ports), mac, now_ns, claimed_ns)
            self._pending[rank] = pending
        else:
            pending.confirmed = True
        pending.last_seen_ns = now_ns
        return self._complete(now_ns)

    def leave(self, header, address, port):
        """§6.5: True when the LEAVE came from the member's thread 0 with the current token and
        the rank's secret."""
        current = self.current
        if (current is None or header.token != current.token or header.rank not in current.members
                or header.offset != current.secrets.get(header.rank)):
            return False
        member = current.members[header.rank]
        if member.address != address or member.ports[0] != port:
            return False
        current.left = True
        return True

    def _complete(self, now_ns):
        world = self.session.world_size
        if any(r not in self._pending or not self._pending[r].confirmed for r in range(world)):
            return Outcome(WAITING)
        for attribute, code in (("threads", wire.Error.THREADS_MISMATCH), ("window", wire.Error.WINDOW_MISMATCH)):
            if any(getattr(self._pending[r], attribute) != getattr(self._pending[0], attribute)
                   for r in range(1, world)):
                return self._reject_disagreement(attribute, code)

        previous_token = self.current.token if self.current is not None else 0
        token = 0
        while token in (0, previous_token):
            token = self._random.getrandbits(32)
        members = {r: Member(p.nonce, p.address, p.ports[:p.threads], p.mac)
                   for r, p in sorted(self._pending.items())}
        secrets = {r: self._fresh_secret() for r in members}
        first = self._pending[0]
        self.current = Generation(self._next_generation, token, previous_token, first.threads,
                                  first.window, members, now_ns, secrets)
        self._next_generation += 1
        self._pending = {}
        return Outcome(ACK_ALL, generation=self.current)

    def _fresh_secret(self):
        secret = 0
        while secret == 0:
            secret = self._random.getrandbits(32)
        return secret

    def _reject_disagreement(self, attribute, code):
        # The value most ranks use is the reference (the lowest rank's on a tie); the first rank
        # that differs is named.
        ranks = sorted(self._pending)
        votes = {}
        for r in ranks:
            value = getattr(self._pending[r], attribute)
            votes[value] = votes.get(value, 0) + 1
        reference, best = 0, 0
        for r in ranks:
            value = getattr(self._pending[r], attribute)
            if votes[value] > best:
                reference, best = value, votes[value]
        outcome = Outcome(REJECT_ALL, code, reference)
        named = False
        for r in ranks:
            p = self._pending[r]
            outcome.notify.append((p.address, p.ports[0], p.mac))
            if not named and getattr(p, attribute) != reference:
                named = True
                outcome.culprit_rank = r
                outcome.culprit_address = p.address
                outcome.culprit_value = getattr(p, attribute)
        self._pending = {}
        return outcome
