# SPDX-License-Identifier: Apache-2.0
"""A barrier in shared memory for ranks that share a host, so that they leave it within a
microsecond or two of each other.

dpa.bench times each operation of its latency view from a barrier. A Gloo barrier releases the
ranks tens to hundreds of microseconds apart, and the rank released first waits for the others
inside its timed operation, whichever backend it measures. After the Gloo barrier (which absorbs
any long wait, blocking), the ranks meet once more here: each writes its generation to a cache line
of its own and spins until every line holds it."""

import mmap
import os
import secrets
import time

SHM_DIRECTORY = "/dev/shm"
LINE_BYTES = 64
LINE_WORDS = LINE_BYTES // 8  # each rank's line, in the 8-byte words the view is read in
# Spinning longer than this yields the core at each check: on a host with fewer cores than ranks
# the ranks still being released need it.
SPIN_BEFORE_YIELD_S = 50e-6
# The Gloo barrier before has already gathered every rank, so only a rank that died between the
# two can keep the others here this long.
ARRIVAL_TIMEOUT_S = 60.0


def boot_id():
    """The running kernel's identity: processes that share it share CLOCK_MONOTONIC."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as source:
            return source.read().strip()
    except OSError:
        return None


def host_identity():
    """Equal for two processes exactly when they share a kernel, a network namespace and the
    shared-memory directory, as dpa's own placement tells hosts apart (emulated hosts differ in
    the last two)."""
    boot = boot_id()
    if boot is None:
        return None
    try:
        net = os.stat("/proc/self/ns/net")
        shm = os.stat(SHM_DIRECTORY)
    except OSError:
        return None
    return f"boot={boot} net={net.st_dev}:{net.st_ino} shm={shm.st_dev}:{shm.st_ino}"


class SharedMemoryBarrier:
    """Ranks 0..world-1 of one host; every rank constructs it at the same point of the run."""

    def __init__(self, mapping, rank, world):
        self._mapping, self._view = mapping, memoryview(mapping).cast("q")
        self._rank, self._world = rank, world
        self._generation = 0

    @classmethod
    def for_one_host(cls, rank, world, gather_objects):
        """The barrier when all `world` ranks share a host and each could map it, else None. Every
        rank returns the same kind of answer; `gather_objects` gathers one value per rank."""
        identities = gather_objects(host_identity())
        if world < 2 or identities[0] is None or len(set(identities)) != 1:
            return None
        name = f"dpa-bench-barrier-{os.getpid()}-{secrets.token_hex(8)}" if rank == 0 else None
        path = os.path.join(SHM_DIRECTORY, gather_objects(name)[0])
        mapping, failure = None, None
        if rank == 0:
            try:
                mapping = _create(path, world * LINE_BYTES)
            except OSError as error:
                failure = str(error)
        if gather_objects(failure)[0] is not None:
            return None
        if rank != 0:
            try:
                mapping = _open(path, world * LINE_BYTES)
            except OSError as error:
                failure = str(error)
        failed = any(text is not None for text in gather_objects(failure))
        if rank == 0:
            os.unlink(path)  # every rank has mapped it or failed to: nothing is left behind
        if failed:
            if mapping is not None:
                mapping.close()
            return None
        return cls(mapping, rank, world)

    def wait(self):
        self._generation += 1
        generation = self._generation
        view = self._view
        view[self._rank * LINE_WORDS] = generation
        lines = range(0, self._world * LINE_WORDS, LINE_WORDS)
        started = time.perf_counter()
        while True:
            if all(view[line] >= generation for line in lines):
                return
            waited = time.perf_counter() - started
            if waited > SPIN_BEFORE_YIELD_S:
                if waited > ARRIVAL_TIMEOUT_S:
                    missing = [line // LINE_WORDS for line in lines if view[line] < generation]
                    raise RuntimeError(f"dpa.bench: ranks {missing} did not reach the shared-memory barrier "
                                       f"{generation} within {ARRIVAL_TIMEOUT_S:.0f} s (rank {self._rank})")
                os.sched_yield()

    def close(self):
        if self._mapping is not None:
            self._view.release()
            self._mapping.close()
            self._mapping = None


def _create(path, size):
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        # Allocated now: on a full tmpfs a write to a page of a merely truncated file is a SIGBUS.
        os.posix_fallocate(descriptor, 0, size)
        return mmap.mmap(descriptor, size)
    except OSError:
        os.unlink(path)
        raise
    finally:
        os.close(descriptor)


def _open(path, size):
    descriptor = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(descriptor, size)
    finally:
        os.close(descriptor)
