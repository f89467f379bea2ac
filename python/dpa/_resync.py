# SPDX-License-Identifier: Apache-2.0
"""Bringing replicas that drifted apart under fastest-K back together.

A rank whose gradients a fastest-K all-reduce left out (a straggler) keeps its own values for
those blocks, so its replica drifts from the others'. ``resynchronise`` copies one rank's replica
to every rank, a collective. ``Resynchroniser`` does the same without making anyone wait: only a
rank that missed blocks asks for a copy, from a rank that missed none, whose thread sends it, so
the fast ranks wait for the straggler only once it is ``max_lag`` checkpoints behind."""

import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from . import _extension

# Checkpoint copies the source keeps on the replica's device; older ones wait in host memory, so a
# straggler many checkpoints behind costs host memory, not GPU memory.
DEVICE_COPIES = 2

# How many checkpoints the slowest rank may be behind before the others wait for it: bounds the
# copies the sources hold (one per checkpoint not yet passed by every rank) and the straggler's lag.
DEFAULT_MAX_LAG = 4

# Resynchronisation moves every parameter in few large transfers: one per tensor costs a Gloo
# round trip each (hundreds for a ResNet-50 with its momentum, about a second on a GPU host).
RESYNC_BUCKET_BYTES = 256 * 1024 * 1024


def _buckets(tensors):
    """``tensors`` grouped by device and dtype, in order, into lists of at most
    RESYNC_BUCKET_BYTES each (a larger tensor is a bucket of its own)."""
    by_kind = {}
    for tensor in tensors:
        by_kind.setdefault((tensor.device, tensor.dtype), []).append(tensor)
    for same_kind in by_kind.values():
        bucket, bucket_bytes = [], 0
        for tensor in same_kind:
            size = tensor.numel() * tensor.element_size()
            if bucket and bucket_bytes + size > RESYNC_BUCKET_BYTES:
                yield bucket
                bucket, bucket_bytes = [], 0
            bucket.append(tensor)
            bucket_bytes += size
        yield bucket


def _flatten(bucket):
    """One new flat tensor of ``bucket``'s values, on their device."""
    return torch.cat([t.detach().reshape(-1) for t in bucket])


def _unflatten_into(bucket, flat):
    offset = 0
    for tensor in bucket:
        tensor.copy_(flat[offset:offset + tensor.numel()].view_as(tensor))
        offset += tensor.numel()


def _replica_tensors(module, optimizer):
    """Everything that makes up a replica: parameters, buffers and the optimizer's per-parameter
    state tensors (SGD's momentum, Adam's moments), which hold the gradients a slow rank kept for
    the blocks it missed, so without them the replicas drift apart again at once."""
    tensors = [p.data for p in module.parameters()] + list(module.buffers())
    if optimizer is not None:
        for param_group in optimizer.param_groups:
            for parameter in param_group["params"]:
                state = optimizer.state.get(parameter, {})
                tensors += [state[key] for key in sorted(state) if torch.is_tensor(state[key])]
    return [t for t in tensors if t.numel() > 0]


def resynchronise(module, src=0, group=None, optimizer=None):
    """Copies every parameter and buffer of ``module`` from rank ``src`` to all ranks (a
    broadcast, which dpa delegates to Gloo), so replicas that drifted apart under fastest-K are
    identical again. With ``optimizer``, its per-parameter state tensors are copied too. A
    collective: every rank of the group calls it at the same point, so the fast ranks wait for the
    slowest one here (``Resynchroniser`` does not). The tensors travel in a few flat buckets of at
    most 256 MiB, not one broadcast each."""
    with torch.no_grad():
        for bucket in _buckets(_replica_tensors(module, optimizer)):
            flat = _flatten(bucket)
            dist.broadcast(flat, src, group=group)
            _unflatten_into(bucket, flat)


def _default_group_timeout():
    """The default store's timeout (init_process_group gives it the group's), else torch's default."""
    store_timeout = getattr(dist.distributed_c10d._get_default_store(), "timeout", None)
    return store_timeout if isinstance(store_timeout, timedelta) else dist.distributed_c10d.default_pg_timeout


def _blocks_missed():
    return _extension.load().total_stats()["blocks_missed"]


class Resynchroniser:
    """Resynchronises the replicas of a fastest-K job without making the fast ranks wait.

    Call ``step()`` on every rank after each ``optimizer.step()`` and ``close()`` after the last.
    Every ``every`` steps is a checkpoint. There each rank checks whether it missed blocks (dpa's
    ``blocks_missed``, this process's all-reduces) since its last checkpoint, and the checkpoint
    gets one source, through the store: the first rank to arrive that missed nothing, or rank
    ``src`` when it arrives before any such rank. The source keeps a copy of its replica
    (parameters, buffers, optimizer state; the newest two on the replica's device, older ones in
    host memory). A rank that missed blocks, or whose source did (``src`` as the fallback), asks
    the source for its copy of that same checkpoint and adopts it: from there on it receives the
    same results as the source, so the replicas stay equal. A rank that missed nothing, like a
    source that did, only says it passed. So when the straggler is one rank, only it copies,
    whichever rank that is; and ranks that missed nothing all hold the same parameters and
    optimizer state, so which of them is the source does not matter (buffers, such as BatchNorm's
    running statistics, are each rank's own unless DDP broadcasts them, as it does by default).

    Each rank's thread answers the requests for the checkpoints it is the source of, from one host
    copy per checkpoint, over Gloo, whatever its own training loop is doing (the ranks that ask may
    be the ones its next all-reduce needs), and drops a copy once every rank has passed that
    checkpoint. The ranks that missed nothing never wait; a rank that missed blocks waits for its
    copy (and, arriving first, for the first rank that missed nothing or for ``src``, so ``src``
    should be a rank that is not expected to straggle). The sources hold one copy per checkpoint
    the slowest rank has not reached (with a persistent straggler, its lag in steps / ``every``,
    up to the bound below).
    ``close()`` returns once every rank has closed, since any rank may still be asked for a copy.

    Staleness is bounded: a rank at its i-th checkpoint first waits until every rank has passed
    checkpoint i - ``max_lag`` (default 4), so the slowest rank is never more than ``max_lag``
    checkpoints behind and the sources never hold more than ``max_lag`` + 1 copies each. Until the
    straggler is that far behind, nobody waits. A wait longer than ``lag_timeout`` (default: the
    default store's timeout) fails that rank with an error naming the ranks it waited for.

    Needs the default process group (any backend) and its store; every rank constructs it at the
    same point (it creates two Gloo groups: requests and transfers). Counts: ``requests`` (this
    rank asked), ``served`` (copies this rank sent), ``sources`` (checkpoints this rank was the
    source of), ``wait_seconds`` (this rank's time waiting for a copy), ``lag_waits`` and
    ``lag_wait_seconds`` (checkpoints at which, and the time for which, this rank waited for a rank
    ``max_lag`` checkpoints behind)."""

    _instances = 0
    _PASSED, _REQUEST, _DONE = 0, 1, 2

    def __init__(self, module, optimizer=None, src=0, every=25, max_lag=DEFAULT_MAX_LAG, lag_timeout=None):
        if every < 1:
            raise ValueError(f"dpa.Resynchroniser: every={every}: check every 1 or more steps")
        if max_lag < 1:
            raise ValueError(f"dpa.Resynchroniser: max_lag={max_lag}: let the slowest rank be 1 or more checkpoints behind")
        world = dist.get_world_size()
        if not 0 <= src < world:
            raise ValueError(f"dpa.Resynchroniser: src={src} is not a rank of a world of {world}")
        Resynchroniser._instances += 1
        self.module, self.optimizer, self.src, self.every, self.max_lag = module, optimizer, src, every, max_lag
        self.rank, self.world = dist.get_rank(), world
        self.requests_group = dist.new_group(backend="gloo")
        self.transfers = dist.new_group(backend="gloo")
        self._check_same_settings()
        store = dist.distributed_c10d._get_default_store()
        self.store = dist.PrefixStore(f"dpa-resync/{Resynchroniser._instances}/", store)
        self.lag_timeout = lag_timeout if lag_timeout is not None else _default_group_timeout()
        self.steps = 0
        self.missed_at_check = _blocks_missed()
        self.requests = self.served = self.sources = 0
        self.wait_seconds = 0.0
        self.lag_waits, self.lag_wait_seconds = 0, 0.0
        # As a source: copies by checkpoint (device, host), ranks past each, checkpoints every rank
        # has passed (their store keys to delete), answers in flight; the thread that answers.
        self._copies, self._host_copies, self._passed, self._forgotten = {}, {}, {}, []
        self._sending = []
        self._lock = threading.Condition()
        self._server_error = None
        self._server = None
        if world > 1:
            self._server = threading.Thread(target=self._serve, name="dpa-resync", daemon=True)
            self._server.start()
        self._closed = False

    def _check_same_settings(self):
        """Ranks that disagree on the fallback source or the period would wait for checkpoints the
        others never reach: every rank fails here instead, naming the ranks' values."""
        mine = torch.tensor([self.src, self.every, self.max_lag], dtype=torch.int64)
        everyone = [torch.zeros(3, dtype=torch.int64) for _ in range(self.world)]
        dist.all_gather(everyone, mine, group=self.requests_group)
        values = [tuple(int(v) for v in settings.tolist()) for settings in everyone]
        if len(set(values)) > 1:
            listed = ", ".join(f"rank {rank}: src={src} every={every} max_lag={max_lag}"
                               for rank, (src, every, max_lag) in enumerate(values))
            raise ValueError(f"dpa.Resynchroniser: the ranks disagree on src, every or max_lag ({listed}); "
                             "give every rank the same")

    def step(self):
        """After each optimizer step. Returns True when this rank adopted another rank's replica."""
        if self._closed:
            raise RuntimeError("dpa.Resynchroniser: step() after close()")
        self.steps += 1
        if self.steps % self.every or self.world == 1:
            return False
        checkpoint = self.steps // self.every
        self._wait_for_laggards(checkpoint)
        self._forget()
        missed = self._missed_since_checkpoint()
        source, source_missed = self._source_of_checkpoint(missed)
        adopted = False
        if source == self.rank:
            self._keep_copy()
        elif not missed and not source_missed:
            self._message(self._PASSED, source)
        else:
            self._receive(source)
            adopted = True
        self._mark_passed(checkpoint)
        return adopted

    def _mark_passed(self, checkpoint):
        """Counts this rank past ``checkpoint``; the last rank there says so for the waiters."""
        self.store.add(f"passed/{checkpoint}/{self.rank}", 1)  # who, for a wait's error message
        if self.store.add(f"passed/{checkpoint}", 1) == self.world:
            self.store.set(f"all-passed/{checkpoint}", "1")

    def _wait_for_laggards(self, checkpoint):
        """Waits until every rank has passed checkpoint ``checkpoint - max_lag``."""
        behind = checkpoint - self.max_lag
        if behind < 1:
            return
        if self.store.add(f"passed/{behind}", 0) < self.world:
            self.lag_waits += 1
            started = time.perf_counter()
            try:
                self.store.wait([f"all-passed/{behind}"], self.lag_timeout)
            except Exception as error:
                missing = [rank for rank in range(self.world) if self.store.add(f"passed/{behind}/{rank}", 0) == 0]
                raise RuntimeError(
                    f"dpa.Resynchroniser: rank {self.rank} waited {self.lag_timeout.total_seconds():g} s at step "
                    f"{self.steps} for rank(s) {', '.join(map(str, missing))} to pass step {behind * self.every} "
                    f"(max_lag={self.max_lag} checkpoints of {self.every} steps): {error}") from error
            self.lag_wait_seconds += time.perf_counter() - started
        # Every rank is past checkpoint `behind`, so its next wait is for a checkpoint after
        # behind - max_lag: nobody reads that one's keys again.
        old = behind - self.max_lag
        if old >= 1:
            for key in (f"passed/{old}/{self.rank}", f"passed/{old}", f"all-passed/{old}"):
                self.store.delete_key(key)

    def close(self):
        """After the last step, on every rank: tells every other rank, then waits until each has
        closed (this rank's thread answers their last requests) and for this rank's transfers."""
        if self._closed:
            return
        self._closed = True
        if self._server is None:
            return
        for rank in range(self.world):
            if rank != self.rank:
                self._message(self._DONE, rank)
        self._server.join()
        with self._lock:  # every checkpoint is passed by now, so no copy is left
            sending, self._sending = self._sending, []
        for works, _ in sending:
            for work in works:
                work.wait()
        self._forget()
        if self._server_error is not None:
            raise RuntimeError(f"dpa.Resynchroniser: rank {self.rank} could not answer: {self._server_error}")

    def _device(self):
        return next((p.device for p in self.module.parameters()), torch.device("cpu"))

    def _missed_since_checkpoint(self):
        if self._device().type == "cuda":
            torch.cuda.synchronize()  # the step's all-reduces have finished, their counts too
        missed = _blocks_missed()
        changed, self.missed_at_check = missed != self.missed_at_check, missed
        return changed

    def _source_of_checkpoint(self, missed):
        """The source of this checkpoint and whether it missed blocks. A rank that missed nothing,
        or ``src``, offers itself; the first offer stands (the store's compare-and-set). Any other
        rank waits for that offer."""
        key = f"source/{self.steps}"
        if not missed or self.rank == self.src:
            value = self.store.compare_set(key, "", f"{self.rank}:{int(missed)}")
        else:
            value = self.store.get(key)
        source, source_missed = value.decode().split(":")
        return int(source), source_missed == "1"

    def _keep_copy(self):
        """This rank is the checkpoint's source: it keeps a copy of its replica for the ranks that
        will ask."""
        self.sources += 1
        with torch.no_grad():
            copy = [_flatten(bucket) for bucket in _buckets(_replica_tensors(self.module, self.optimizer))]
        if self._device().type == "cuda":
            torch.cuda.synchronize()  # the server thread reads the copy on another stream
        with self._lock:
            self._copies[self.steps] = copy
            self._passed.setdefault(self.steps, 0)
            for step in sorted(self._copies)[:-DEVICE_COPIES]:
                self._host_copy(step)
            self._lock.notify_all()

    def _forget(self):
        """Deletes the store keys of the checkpoints this rank was the source of that every rank
        has passed."""
        with self._lock:
            forgotten, self._forgotten = self._forgotten, []
        for step in forgotten:
            self.store.delete_key(f"source/{step}")

    def _message(self, kind, to):
        dist.send(torch.tensor([kind, self.steps, self.rank], dtype=torch.int64), to, group=self.requests_group)

    def _receive(self, source):
        started = time.perf_counter()
        self.requests += 1
        self._message(self._REQUEST, source)
        with torch.no_grad():
            for bucket in _buckets(_replica_tensors(self.module, self.optimizer)):
                flat = torch.empty(sum(t.numel() for t in bucket), dtype=bucket[0].dtype)
                dist.recv(flat, source, group=self.transfers)
                _unflatten_into(bucket, flat)
        self.wait_seconds += time.perf_counter() - started

    def _serve(self):
        """This rank's thread: the other ranks' messages about the checkpoints it is the source of,
        until each has closed."""
        message = torch.zeros(3, dtype=torch.int64)
        closed = 0
        try:
            while closed < self.world - 1:
                dist.recv(message, group=self.requests_group)  # from any rank
                kind, step, rank = message.tolist()
                if kind == self._DONE:
                    closed += 1
                    continue
                with self._lock:
                    if kind == self._REQUEST:
                        # A rank can ask before this rank has made the copy its offer promised.
                        self._lock.wait_for(lambda: step in self._copies)
                        self._send_copy(step, rank)
                    self._pass(step)
        except Exception as error:  # reported by close(); the ranks waiting time out in Gloo
            self._server_error = error

    def _pass(self, step):
        """One more rank is past checkpoint ``step`` (it has the copy, or has read that it needs
        none): the copy goes when all are. A send in flight keeps its buffers alive through
        self._sending."""
        self._passed[step] = self._passed.get(step, 0) + 1
        if self._passed[step] == self.world - 1:
            self._copies.pop(step, None)
            self._host_copies.pop(step, None)
            del self._passed[step]
            self._forgotten.append(step)

    def _send_copy(self, step, rank):
        """Sends checkpoint ``step`` to ``rank`` in the background. One host copy per checkpoint
        serves every rank that asks for it; sends run side by side (measured on a GPU host:
        one host copy and one send after another cost the source 0.25-0.3 s per checkpoint when
        three ranks asked for 200 MB)."""
        buffers = self._host_copy(step)
        self._sending.append(([dist.isend(flat, rank, group=self.transfers) for flat in buffers], buffers))
        self.served += 1
        self._sending = [(works, buffers) for works, buffers in self._sending
                         if not all(work.is_completed() for work in works)]

    def _host_copy(self, step):
        if step not in self._host_copies:
            self._host_copies[step] = [flat.to("cpu") for flat in self._copies[step]]
            self._copies[step] = None  # the device copy goes; the checkpoint stays known
        return self._host_copies[step]
