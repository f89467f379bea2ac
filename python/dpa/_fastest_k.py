# SPDX-License-Identifier: Apache-2.0
"""Fastest-K choices and per-operation statistics (kept in dpa._C, read at issue time)."""

import contextlib

from . import _extension


def _check_k(k):
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 0):
        raise ValueError(f"fastest-K must be None or an integer >= 0 (0: the session's), got {k!r}")


@contextlib.contextmanager
def fastest_k(k, preemptive=False):
    """All-reduce operations issued on this thread inside the block complete with the first
    ``k`` ranks of each block (reactively after the straggler timeout, or at once when
    ``preemptive``). ``k`` outside 1..world_size fails the operation."""
    _check_k(k)
    extension = _extension.load()
    previous = extension.thread_fastest_k()
    extension.set_thread_fastest_k(k, bool(preemptive))
    try:
        yield
    finally:
        extension.set_thread_fastest_k(*previous)


def set_default_fastest_k(k, preemptive=False):
    """Fastest-K for every dpa all_reduce of this process outside a ``fastest_k`` block;
    ``k=None`` goes back to DPA_K / DPA_PREEMPTIVE (or the session's default)."""
    _check_k(k)
    _extension.load().set_default_fastest_k(k, None if k is None else bool(preemptive))


def last_stats():
    """The last completed dpa all_reduce of this process as a dict (None before the first):
    blocks, blocks_full, blocks_partial, blocks_missed, blocks_non_finite, contributed,
    retransmissions, timeouts, syn_probes, min_contributors, missed (list of [begin, end)
    element ranges that hold this rank's own input), seconds."""
    return _extension.load().last_stats()


def total_retransmissions():
    """Retransmissions summed over every dpa all_reduce this process completed (none are
    expected without injected loss; docs/configuration.md §8)."""
    return _extension.load().total_retransmissions()
