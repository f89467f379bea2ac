"""The JOIN procedure of docs/protocol.md §6.3-§6.5, as the software switch runs it
(src/switch/session.cpp): the same rules, the same outcomes, the same order of checks. Pure: the
caller passes the clock and programs the switch with the outcome.
"""
import random
from dataclasses import dataclass, field

from . import wire

PENDING_TTL_NS = 1_000_000_000  # a pending JOIN not repeated for 1 s expires

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


@dataclass
class _Pending:
    nonce: int
    threads: int
    window: int
    address: int
    ports: list
    mac: bytes
    last_seen_ns: int
    confirmed: bool = False


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
        member_rejoin = (current is not None and header.token == current.token and
                         rank in current.members and current.members[rank].address == address)
        if current is not None and not member_rejoin and self.held(now_ns):
            return Outcome(REJECT_SENDER, wire.Error.SESSION_BUSY, current.generation)

        self._pending = {r: p for r, p in self._pending.items()
                         if now_ns - p.last_seen_ns <= PENDING_TTL_NS}
        pending = self._pending.get(rank)
        if pending is None or pending.nonce != request.nonce:
            # A new request, or the rank restarted: its latest JOIN replaces what it sent before.
            pending = _Pending(request.nonce, request.threads, request.window, address,
                               list(request.ports), mac, now_ns)
            self._pending[rank] = pending
        else:
            pending.confirmed = True
        pending.last_seen_ns = now_ns
        return self._complete(now_ns)

    def leave(self, header, address, port):
        """§6.5: True when the LEAVE came from the member's thread 0 with the current token."""
        current = self.current
        if (current is None or header.token != current.token or header.rank not in current.members):
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
        first = self._pending[0]
        self.current = Generation(self._next_generation, token, previous_token, first.threads,
                                  first.window, members, now_ns)
        self._next_generation += 1
        self._pending = {}
        return Outcome(ACK_ALL, generation=self.current)

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
