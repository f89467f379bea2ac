# SPDX-License-Identifier: Apache-2.0
"""The per-source JOIN rate limit of docs/protocol.md §6.3 step 5, as src/switch/join_rate_limiter.cpp
runs it: a token bucket (GCRA) per source (address, port) in a fixed table of 256, 20 JOINs per
second sustained with bursts of 16. A source not in the table takes the entry heard from least
recently and starts with a full bucket, so no number of sources can grow the controller."""
from dataclasses import dataclass

SOURCES = 256
INTERVAL_NS = 50_000_000  # sustained: 20 JOINs per second
BURST = 16                # JOINs at once from a quiet source


@dataclass
class _Source:
    key: tuple
    ready_ns: int  # the bucket is full again at this time
    last_ns: int
    heard: int = 0


class JoinRateLimiter:
    def __init__(self):
        self._sources = {}  # (address, port) -> _Source

    def admit(self, address, port, now_ns):
        """Whether a JOIN from (address, port) at `now_ns` is within its source's rate; counts it
        either way."""
        key = (address, port)
        source = self._sources.get(key)
        if source is None:
            if len(self._sources) >= SOURCES:
                oldest = min(self._sources.values(), key=lambda s: s.last_ns)
                del self._sources[oldest.key]
            source = self._sources[key] = _Source(key, now_ns, now_ns)
        source.last_ns = now_ns
        source.heard += 1
        ready = max(source.ready_ns, now_ns)
        if ready - now_ns >= BURST * INTERVAL_NS:
            return False
        source.ready_ns = ready + INTERVAL_NS
        return True

    def heard(self, address, port):
        """JOINs heard from (address, port) since it took its entry; 0 if it has none."""
        source = self._sources.get((address, port))
        return source.heard if source is not None else 0
