# SPDX-License-Identifier: Apache-2.0
"""The controller: sets the program up from the config, then answers the JOIN and LEAVE packets
the program punts to the CPU port (docs/protocol.md §6), and the requests of a non-canonical size
it punts there (§8.1 in the same order as the pipeline: they end in an error or a drop).

Publishing a generation (§12 "Generations"): the old generation stops reaching slots, the slot
registers the new one can reach are cleared, the new identities (each bound to its rank's worker
port), token, destinations and multicast group are written, and only then are the ranks acked.
"""
import logging
from dataclasses import dataclass

from . import (admission, counters, delivery, drop_simulator, egress_rewrite, join, liveness, net,
               next_pass, ports, pre, slot_state, wire)
from .join_rate_limiter import JoinRateLimiter
from .bfrt_program import BfrtProgram
from .config import ConfigError

log = logging.getLogger("dpa_controller")


@dataclass
class _Published:
    """A generation the switch holds, and the dev port each rank's identities are bound to."""
    generation: join.Generation
    rank_ports: dict

# Tables the controller writes (p4/*.p4), cleared by reset().
RESET_TABLES = (
    ("admission", "sessions"), ("admission", "tokens"), ("admission", "endpoints"),
    ("admission", "identities"), ("admission", "pools"), ("admission", "hosts"),
    ("admission", "k_limits"), ("admission", "owner_limits"), ("delivery", "pass_plan"), ("delivery", "silences"), ("next_pass", "next_pass"),
    ("net", "forwarding"),
)


class Controller:
    def __init__(self, bfrt, config, send_frame, clock_ns, token_source=None, ports_up=None):
        """`send_frame(bytes)` transmits on the CPU port; `clock_ns()` is a monotonic clock;
        `ports_up` the dev ports already up (a set the caller may share between controllers, so
        that a port stays up from one to the next)."""
        self.program = BfrtProgram(bfrt)
        self.config = config
        self.send_frame = send_frame
        self.clock_ns = clock_ns
        self._token_source = token_source
        self.joins = {sid: join.SessionJoin(s, token_source) for sid, s in config.sessions.items()}
        self.worker_ports = {}
        # Under the software switch's names (SwitchCounters) where the outcome is one of its;
        # controller_dropped: frames on the CPU port that are no request of a configured session.
        self.counts = {"joins": 0, "joins_refused": 0, "joins_contended": 0, "joins_rate_limited": 0,
                       "leaves": 0, "errors_sent": 0, "dropped_unregistered": 0, "dropped_malformed": 0,
                       "controller_dropped": 0}
        self.join_limiter = JoinRateLimiter()
        self._activity = {}  # session id -> last sampled activity counter
        self._published = {}  # session id -> _Published
        self._liveness = {}  # session id -> liveness.SessionLiveness of its published generation
        self.ports_up = ports_up if ports_up is not None else set()

    # ---- start ----

    def setup(self):
        self.worker_ports, routes = ports.setup(self.program, self.config, self.ports_up)
        log.info("value passes of %d worker ports through %s", len(routes),
                 "their own loopback ports" if self.config.loopback_per_worker else "the shared pass ports")
        pre.setup(self.program, self.config, self.worker_ports)
        net.setup(self.program, self.config, self.worker_ports)
        delivery.setup(self.program, self.config, routes)
        next_pass.setup(self.program, self.config, routes)
        for session in self.config.sessions.values():
            admission.setup_session(self.program, session)
            drop_simulator.setup(self.program, self.config, session)

    def reset(self, keep_ports=False):
        """Everything the controller writes, back to the program's initial state; with
        `keep_ports` the ports stay up (a test suite between cases: a port cleared and added again
        renegotiates its link, for longer than a case waits for a reply)."""
        for path in RESET_TABLES:
            self.program.ingress(*path).clear()
        self.program.egress("rewrite", "destinations").clear()
        self.program.parser("pass_ports").clear()
        if self.config.program["DPA_DROP_SIMULATOR"]:
            self.program.ingress("drop_simulator", "drop_rates").clear()
        for control, name, _ in slot_state.registers(self.config.program):
            self.program.ingress(control, name).clear()
        counters.reset(self.program)
        for table in ("mgid", "node", "prune"):
            getattr(self.program.bfrt.pre, table).clear()
        if not keep_ports:
            self.program.bfrt.port.port.clear()
            self.ports_up.clear()
        self._published.clear()
        self._liveness.clear()
        self.joins = {sid: join.SessionJoin(s, self._token_source)
                      for sid, s in self.config.sessions.items()}

    # ---- CPU port ----

    def handle_frame(self, frame_bytes):
        frame = wire.parse_frame(frame_bytes)
        if frame is None or frame.dst_port != self.config.udp_port:
            self.counts["controller_dropped"] += 1
            return
        header = wire.Header.decode(frame.payload)
        if header is None or header.flags & wire.REPLY_ONLY:
            self.counts["controller_dropped"] += 1
            return
        session = self.config.sessions.get(header.session)
        is_join = bool(header.flags & wire.Flag.JOIN)
        if session is None:
            self.counts["controller_dropped"] += 1
            if is_join:
                self._error(frame, header, wire.Error.UNKNOWN_SESSION, 0)
            return
        if is_join:
            self._join(session, frame, header)
        elif header.flags & wire.Flag.LEAVE:
            if len(frame.payload) == wire.HEADER_SIZE and \
                    self.joins[session.id].leave(header, frame.src_ip, frame.src_port):
                self.counts["leaves"] += 1
                if session.id in self._liveness:
                    self._liveness[session.id].leave(header.rank)
            else:
                self.counts["dropped_unregistered"] += 1
        elif header.flags & wire.Flag.KEEPALIVE:
            self._keepalive(session, frame, header)
        else:
            self._missized(session, frame, header)

    def _keepalive(self, session, frame, header):
        """§6.7 and §8.1 row 4½: a member's KEEPALIVE records that its rank was heard; no reply."""
        tracker = self._liveness.get(session.id)
        outcome = "dropped_unregistered" if tracker is None else tracker.keepalive(
            header, frame.src_ip, frame.src_port, len(frame.payload) - wire.HEADER_SIZE, self.clock_ns())
        if outcome is not None:
            self.counts[outcome] += 1

    def poll(self):
        """Periodic work between frames (at least once a second): the generations' gone ranks
        (§6.7) where they changed."""
        now = self.clock_ns()
        for tracker in self._liveness.values():
            generation = tracker.generation.generation
            tracker.publish(self.program, now, lambda gone, s=tracker.session, g=generation:
                              admission.session_data(s, g, gone))

    def _missized(self, session, frame, header):
        """§8.1 for a request whose size is not the canonical one (a probe with values, data of
        another length): the pipeline cannot compare the size with `count`, so it sends them here.
        Header.decode already applied §2's checks (a word-aligned payload that holds `count`)."""
        generation = self.joins[session.id].current
        members = generation.members if generation is not None else {}
        identity = next(((rank, thread) for rank, m in members.items()
                         for thread, port in enumerate(m.ports)
                         if m.address == frame.src_ip and port == frame.src_port), None)
        if identity is None:
            if self.joins[session.id].registered_host(frame.src_ip):
                self._error(frame, header, wire.Error.NOT_JOINED, 0)
            else:
                self.counts["controller_dropped"] += 1
            return
        if header.token != generation.token:
            if generation.previous_token and header.token == generation.previous_token:
                self._error(frame, header, wire.Error.SESSION_TAKEN_OVER, generation.generation)
            else:
                self.counts["controller_dropped"] += 1
            return
        span = 2 * generation.window
        relative = header.slot - session.pool_base
        if not 0 <= relative < min(session.pool_size, generation.threads * span):
            self._error(frame, header, wire.Error.SLOT_OUT_OF_RANGE, session.pool_base)
            return
        if identity != (header.rank, relative // span) or header.flags & wire.Flag.SYN:
            self.counts["controller_dropped"] += 1  # another member's slot, or a probe with values
            return
        self._error(frame, header, wire.Error.BAD_LENGTH, session.payload)

    def _join(self, session, frame, header):
        procedure = self.joins[session.id]
        now = self.clock_ns()
        # Before anything that answers: a storm's JOINs beyond its source's rate get no reply.
        if not self.join_limiter.admit(frame.src_ip, frame.src_port, now):
            self.counts["joins_rate_limited"] += 1
            return
        if header.rank >= session.world_size:
            self.counts["dropped_unregistered"] += 1
            self._error(frame, header, wire.Error.RANK_OUT_OF_RANGE, session.world_size)
            return
        if not procedure.registered(header.rank, frame.src_ip, frame.src_port, check_port=True):
            self.counts["dropped_unregistered"] += 1
            self._error(frame, header, wire.Error.NOT_REGISTERED, 0)
            return
        request = wire.decode_join_request(frame.payload[wire.HEADER_SIZE:wire.HEADER_SIZE + 4 * header.count])
        if request is None:
            self.counts["dropped_malformed"] += 1
            return
        self.counts["joins"] += 1
        self._sample_activity(session, procedure, now)
        outcome = procedure.join(header, request, frame.src_ip, frame.src_port, frame.src_mac, now)
        if outcome.kind == join.WAITING:
            return
        if outcome.kind == join.REJECT_SENDER:
            if outcome.error == wire.Error.SESSION_BUSY:
                self.counts["joins_refused"] += 1
            if outcome.error == wire.Error.RANK_CONTENDED:
                # The refused rank learns who holds its rank and how many JOINs that source sent.
                self.counts["joins_contended"] += 1
                address, port = outcome.holder
                heard = min(self.join_limiter.heard(address, port), 0xFFFF)
                error = wire.error_reply(header, outcome.error, outcome.expected)
                error.bitmap = heard << 48 | address << 16 | port
                self.counts["errors_sent"] += 1
                self._send(frame.src_mac, frame.src_ip, frame.src_port, error.encode())
                return
            self._error(frame, header, outcome.error, outcome.expected)
            return
        if outcome.kind == join.REJECT_ALL:
            error = wire.error_reply(header, outcome.error, outcome.expected)
            error.rank = outcome.culprit_rank
            error.bitmap = outcome.culprit_value << 32 | outcome.culprit_address
            for address, port, mac in outcome.notify:
                self._send(mac, address, port, error.encode())
                self.counts["errors_sent"] += 1
            log.warning("session %d: join rejected (error %d): rank %d uses %d, the others %d",
                        session.id, outcome.error, outcome.culprit_rank, outcome.culprit_value,
                        outcome.expected)
            return
        generation = outcome.generation
        if outcome.kind == join.ACK_ALL:
            self._publish(session, generation)
        # Each rank's ack carries its own secret (§6.4): N unicasts.
        if outcome.kind == join.ACK_SENDER:
            self._send(frame.src_mac, frame.src_ip, frame.src_port, self._ack(session, header, generation, header.rank))
            return
        for rank, member in sorted(generation.members.items()):
            self._send(member.mac, member.address, member.ports[0], self._ack(session, header, generation, rank))
        log.info("session %d: generation %d joined by %d ranks (%d threads, window %d)", session.id,
                 generation.generation, session.world_size, generation.threads, generation.window)

    def _publish(self, session, generation):
        old = self._published.get(session.id)
        rank_ports, macs = self._rank_ports(session, generation)
        if old is not None:
            admission.retire(self.program, session, old.generation, old.rank_ports)
            egress_rewrite.retire(self.program, session, old.generation)
        shared = any(other != session.id for other in self._published)
        slot_state.clear_generation(self.program, session, generation, self.config, shared)
        admission.publish(self.program, session, generation, rank_ports)
        if session.id in self._liveness:
            self._liveness[session.id].retire(self.program)
        # A JOIN that forms a generation hears every rank (§6.7).
        self._liveness[session.id] = liveness.SessionLiveness(session, generation, self.clock_ns())
        egress_rewrite.publish(self.program, session, generation, macs)
        pre.publish_session(self.program, session, rank_ports, had_group=old is not None)
        self._published[session.id] = _Published(generation, rank_ports)

    def _rank_ports(self, session, generation):
        """Each rank's worker port and MAC, from the host with the rank's address: its multicast
        copies leave by that port, and its identities accept packets from it only."""
        rank_ports, macs = {}, {}
        for rank, member in generation.members.items():
            host = next((h for h in self.config.hosts.values() if h.ip == member.address), None)
            port = next((name for name, p in sorted(self.config.ports.items())
                         if host is not None and p.host == host.name), None)
            if port is None:
                raise ConfigError("hosts/ports: rank %d of session %d joined from %s, which is "
                                  "behind no configured port" % (rank, session.id,
                                                                 _dotted(member.address)))
            rank_ports[rank] = self.worker_ports[port]
            macs[rank] = host.mac
        return rank_ports, macs

    def _sample_activity(self, session, procedure, now):
        value = counters.activity(self.program, session.index)
        if self._activity.get(session.id) not in (None, value):
            procedure.record_activity(now)
        self._activity[session.id] = value

    def _ack(self, session, header, generation, rank):
        """The JOIN ack to `rank`, with its secret in `offset`."""
        switch_ports = [self.config.udp_port]
        reply = wire.JOIN_REPLY.encode(dict(
            payload=session.payload, world_size=session.world_size, k_default=session.k,
            straggler_timeout_ticks=session.timeout_ticks, pool_base=session.pool_base,
            pool_size=session.pool_size, generation=generation.generation, token=generation.token,
            switch_ports=len(switch_ports)), switch_ports)
        ack = wire.Header(**{**header.__dict__, "flags": int(wire.Flag.JOIN | wire.Flag.RESULT),
                             "token": generation.token, "offset": generation.secrets[rank], "rank": rank,
                             "count": wire.JOIN_REPLY.word_count(len(switch_ports)),
                             "bitmap": generation.ranks_bitmap(), "seq": generation.generation})
        return ack.encode() + reply

    def _error(self, frame, header, code, expected):
        self.counts["errors_sent"] += 1
        self._send(frame.src_mac, frame.src_ip, frame.src_port,
                   wire.error_reply(header, code, expected).encode())

    def _send(self, mac, address, port, payload):
        self.send_frame(wire.build_frame(self.config.mac, mac, self.config.ip, address,
                                         self.config.udp_port, port, payload))


def _dotted(address):
    return ".".join(str(address >> shift & 0xFF) for shift in (24, 16, 8, 0))
