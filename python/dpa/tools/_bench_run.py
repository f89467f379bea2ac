# SPDX-License-Identifier: Apache-2.0
"""One rank of python -m dpa.bench: its process groups, the two views of every size and backend,
and the verification of every result (docs/benchmark-tools.md).

Every operation reduces a tensor of fresh inputs filled before the timed region. The back-to-back
view fills a pool of tensors (at most --pool-bytes per rank) and times one all_reduce per tensor
without a pause; more operations than the pool holds take several rounds, each filled, timed and
verified on its own, and the view's time is the sum of the rounds'. The latency view times one
all_reduce after a barrier, on the same kind of pool. Where every rank reads one clock (one kernel:
the same boot id), it also splits that time into the barrier's exit skew and the operation from the
last rank's start, since the slowest rank of an operation is the one the barrier released first."""

import os
import platform
import socket
import sys
import time

from . import _bench_data as data
from ._host_barrier import SharedMemoryBarrier, boot_id
from ._tool_rank import ToolRank, UsageError

VIEW_WARMUP, VIEW_BACK_TO_BACK, VIEW_LATENCY = 0, 1, 2
# Untimed, verified operations of the smallest size on each backend before the first size: without
# them the first size measured the start (2-core VM, dpa, 2 ranks, 4 KiB back to back: 196 us
# first, 114 us when measured again after 64 KiB). At most RUN_WARMUP_BYTES of them: 100 of
# 64 MiB, verified, took minutes on a GPU host's CPU (--sizes 64MiB alone).
RUN_WARMUP_OPERATIONS = 100
RUN_WARMUP_BYTES = 64 << 20


def percentile(sorted_values, percent):
    """Nearest rank: the smallest value with at least `percent` % of the values at or below it."""
    if not sorted_values:
        return 0.0
    return sorted_values[max(1, -(-percent * len(sorted_values) // 100)) - 1]


def format_size(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


def iterations_for(size, settings):
    """--iterations, else about 256 MiB of tensor per view, within 20..500 operations."""
    if settings["iterations"]:
        return settings["iterations"]
    return max(20, min(500, (256 << 20) // max(size, 1)))


def spread(values):
    """p50 and p99 of `values` (µs), as a row reports them."""
    ordered = sorted(values)
    return {"p50_us": percentile(ordered, 50), "p99_us": percentile(ordered, 99)}


def host_info():
    import torch

    cpu_model = None
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu_model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), None)
    except OSError:
        pass
    gpus = []
    if torch.cuda.is_available():
        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "cpu_model": cpu_model, "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "gpus": gpus}


class Rank(ToolRank):
    """This rank's groups and settings, and the collectives the benchmark itself needs (on Gloo)."""

    def __init__(self, rank, world, local_rank, local_world, settings):
        super().__init__(rank, world, local_rank, local_world, settings)
        self.dtype = getattr(self.torch, settings["dtype"])
        self.methods = {}  # backend: the call that carries the measured collective
        self.calls = {}
        self.backends = self._agree_on_backends()
        self.groups = {"dpa": None, "gloo": self.gloo}
        if "nccl" in self.backends:
            self.groups["nccl"] = self.dist.new_group(backend="nccl")
        if "gloo" in self.backends:
            self._probe_gloo()
        boots = self.gather_objects(boot_id())
        self.one_clock = boots[0] is not None and len(set(boots)) == 1
        self.host_barrier = None
        if settings["barrier"] == "auto":
            self.host_barrier = SharedMemoryBarrier.for_one_host(rank, world, self.gather_objects)
        self.barrier_kind = "gloo, then shared memory" if self.host_barrier else "gloo"

    def barrier(self):
        """Gloo's barrier gathers the ranks however late one is; the shared-memory one, where they
        share a host, then releases them together (Gloo's leaves tens to hundreds of µs between
        the first and the last rank, time the first one released spends in its timed operation)."""
        super().barrier()
        if self.host_barrier:
            self.host_barrier.wait()

    def close(self):
        if self.host_barrier:
            self.host_barrier.close()

    def _probe_gloo(self):
        """Gloo's all_reduce lacks some dtypes in some torch versions (bfloat16 in 1.13), and says
        so on every rank before it communicates: measured without it when not asked for by name."""
        try:
            self.dist.all_reduce(self.torch.zeros(1, dtype=self.dtype, device=self.device), group=self.gloo)
            failure = None
        except RuntimeError as error:
            failure = str(error).strip().splitlines()[0]
        failed = self.torch.tensor([0 if failure is None else 1], dtype=self.torch.int64)
        self.dist.all_reduce(failed, group=self.gloo)
        if int(failed) == 0:
            return
        reason = f"Gloo cannot all_reduce {self.settings['dtype']} {self.device.type} tensors with torch " \
                 f"{self.torch.__version__} ({failure or 'failed on another rank'})"
        if self.settings["backends"] is not None:
            raise UsageError(f"--backends gloo: {reason}")
        self.backends.remove("gloo")
        self.skipped["gloo"] = reason

    def _agree_on_backends(self):
        """The backends to measure, the same on every rank."""
        ranks_without = self.ranks_without_own_gpu()
        requested = self.settings["backends"]
        if requested is None:
            return ["dpa", "gloo"] + (["nccl"] if ranks_without == 0 else [])
        if "nccl" in requested and ranks_without:
            raise UsageError(f"--backends nccl: {self.nccl_reason(ranks_without)}")
        return requested

    def collective_call(self, backend):
        """How `backend` runs the measured collective: call(input, output, group). Where the
        installed Gloo lacks the flat form (torch 1.13 has neither reduce_scatter_tensor nor
        all_gather_into_tensor), the nearest thing a Gloo user has: an all_reduce of which the rank
        keeps its shard, an all_gather into views of the output. self.methods says which ran."""
        if backend not in self.calls:
            self.calls[backend] = self._collective_call(backend)
        return self.calls[backend]

    def _collective_call(self, backend):
        dist, collective = self.dist, self.settings["collective"]
        if collective == "all_reduce":
            return lambda tensor, result, group: dist.all_reduce(tensor, group=group)
        if collective == "broadcast":
            return lambda tensor, result, group: dist.broadcast(tensor, src=0, group=group)
        if collective == "reduce_scatter":
            native = lambda tensor, result, group: dist.reduce_scatter_tensor(result, tensor, group=group)  # noqa: E731

            def fallback(tensor, result, group):
                dist.all_reduce(tensor, group=group)
                result.copy_(tensor[self.rank * result.numel():(self.rank + 1) * result.numel()])
            names = ("reduce_scatter_tensor", "all_reduce, keeping the shard")
        else:
            native = lambda tensor, result, group: dist.all_gather_into_tensor(result, tensor, group=group)  # noqa: E731

            def fallback(tensor, result, group):
                dist.all_gather(list(result.chunk(self.world)), tensor, group=group)
            names = ("all_gather_into_tensor", "all_gather into views")
        if backend != "gloo":
            self.methods[backend] = names[0]
            return native
        probe_in = self.torch.zeros(self.world, dtype=self.dtype, device=self.device)
        probe_out = self.torch.zeros(1 if collective == "reduce_scatter" else self.world * self.world,
                                     dtype=self.dtype, device=self.device)
        try:
            native(probe_in, probe_out, self.gloo)
            works = 1
        except (RuntimeError, AttributeError):
            works = 0
        flags = self.torch.tensor([works], dtype=self.torch.int64)
        self.dist.all_reduce(flags, op=self.dist.ReduceOp.MIN, group=self.gloo)
        self.methods[backend] = names[0] if int(flags) else names[1]
        return native if int(flags) else fallback

    def reduce(self, values, op):
        tensor = self.torch.tensor(values, dtype=self.torch.float64)
        self.dist.all_reduce(tensor, op=op, group=self.gloo)
        return tensor.tolist()


class Measurement:
    """One size on one backend: its operations' ids, inputs, timings and wrong elements."""

    def __init__(self, node, backend_index, backend, size_index, size):
        self.node, self.backend = node, backend
        self.group = node.groups[backend]
        self.collective = node.settings["collective"]
        element = node.torch.tensor([], dtype=node.dtype).element_size()
        self.elements = size // element
        if self.collective in ("reduce_scatter", "all_gather"):
            self.elements -= self.elements % node.world  # world size shards
        if self.elements == 0:
            raise UsageError(f"--sizes {size}: fewer {node.settings['dtype']} elements than the {node.world} ranks' "
                             f"shards of a {self.collective}")
        self.size = self.elements * element
        self.shard = self.elements // node.world
        self.call = node.collective_call(backend)
        self.outputs = []
        self.key = (node.settings["seed"], backend_index, size_index)
        self.wrong = 0
        self.checked = 0
        # On the CPU the pool's tensors and verify()'s regenerated input and reference are
        # allocated once and refilled: each fresh 64 MiB tensor was a fresh mapping of zeroed pages
        # (2 ranks, 64 MiB, 10 iterations, dpa and Gloo, 2-core VM: 37.5 s per run before,
        # 20.3-21.7 after).
        self.pool = []
        self.scratch_input = None
        self.scratch_reference = None
        self.corrupt_next = node.settings["inject_wrong"] and node.rank == node.world - 1

    def input_elements(self):
        return self.shard if self.collective == "all_gather" else self.elements

    def output_elements(self):
        return self.shard if self.collective == "reduce_scatter" else self.elements

    def inputs(self, view, first, count):
        """The inputs of operations first .. first + count - 1 of `view`, as (their ranks' seeds,
        this rank's input tensor, the tensor that receives its result: the input itself for
        all_reduce and broadcast)."""
        node = self.node
        batch = []
        for index, operation in enumerate(range(first, first + count)):
            seeds = [data.derive_seed(*self.key, view, operation, rank) for rank in range(node.world)]
            out = self.pool[index] if index < len(self.pool) else None
            tensor = data.rank_input(seeds[node.rank], self.input_elements(), node.dtype, node.device, out=out)
            if node.device.type == "cpu" and out is None:
                self.pool.append(tensor)
            result = tensor
            if self.collective in ("reduce_scatter", "all_gather"):
                result = self.outputs[index] if index < len(self.outputs) else None
                if result is None:
                    result = node.torch.empty(self.output_elements(), dtype=node.dtype, device=node.device)
                    if node.device.type == "cpu":
                        self.outputs.append(result)
            batch.append((seeds, tensor, result))
        return batch

    def verify(self, batch, timed):
        """Each result against the exact sum of every rank's input. On a GPU this rank generates
        every rank's input itself (data.hashed_input: a few kernels each, far cheaper than moving
        the float64 reference through the host). On the CPU, where generation is serial, it
        regenerates its own input and the ranks add their widened inputs in one float64 (int64)
        all_reduce over Gloo, exact in any order (data.reference_parts), so the cost does not grow
        with the ranks."""
        node = self.node
        dtype_name = node.settings["dtype"]
        for seeds, _, result in batch:
            if timed and self.corrupt_next:
                data.corrupt(result, node.world)
                self.corrupt_next = False
            if self.collective in ("all_gather", "broadcast"):
                self.wrong += self.count_moved_wrong(result, seeds)
                self.checked += self.output_elements()
                continue
            if self.collective == "reduce_scatter":
                self.wrong += self.count_shard_wrong(result, seeds)
                self.checked += self.shard
                continue
            if node.device.type != "cpu":
                self.wrong += data.count_wrong(result, seeds, dtype_name, self.backend)
                self.checked += self.elements
                continue
            own = data.rank_input(seeds[node.rank], self.elements, node.dtype, node.device, out=self.scratch_input)
            reference = data.reference_parts(own, dtype_name, self.backend, out=self.scratch_reference)
            self.scratch_input, self.scratch_reference = own, reference
            node.dist.all_reduce(reference, group=node.gloo)
            self.wrong += data.count_wrong_against(result.cpu(), reference, node.world, dtype_name, self.backend)
            self.checked += self.elements

    def count_moved_wrong(self, result, seeds):
        """all_gather and broadcast move values: every element must be its source's, bit for bit
        (the sources' inputs regenerated here)."""
        node = self.node
        if self.collective == "broadcast":
            expected = data.rank_input(seeds[0], self.elements, node.dtype, node.device)
        else:
            expected = node.torch.cat([data.rank_input(seed, self.shard, node.dtype, node.device) for seed in seeds])
        return int((result != expected).sum())

    def count_shard_wrong(self, result, seeds):
        """A reduce-scatter's shard against the exact sum of every rank's input over the shard, as
        all_reduce's result (verify)."""
        node = self.node
        dtype_name = node.settings["dtype"]
        shard = slice(node.rank * self.shard, (node.rank + 1) * self.shard)
        if node.device.type != "cpu":
            reference = sum(data.reference_parts(data.rank_input(seed, self.elements, node.dtype, node.device)[shard],
                                                 dtype_name, self.backend) for seed in seeds)
            return data.count_wrong_against(result, reference, node.world, dtype_name, self.backend)
        own = data.rank_input(seeds[node.rank], self.elements, node.dtype, node.device, out=self.scratch_input)
        reference = data.reference_parts(own, dtype_name, self.backend, out=self.scratch_reference)
        self.scratch_input, self.scratch_reference = own, reference
        node.dist.all_reduce(reference, group=node.gloo)
        return data.count_wrong_against(result, reference[:, shard], node.world, dtype_name, self.backend)

    def rounds(self, count):
        per_round = max(1, self.node.settings["pool_bytes"] // max(self.size, 1))
        for first in range(0, count, per_round):
            yield first, min(per_round, count - first)

    def back_to_back(self, view, count):
        """Seconds of `count` operations, each round timed from a barrier to its last result."""
        node = self.node
        seconds = 0.0
        for first, size in self.rounds(count):
            batch = self.inputs(view, first, size)
            node.barrier()
            started = time.perf_counter()
            for _, tensor, result in batch:
                self.call(tensor, result, self.group)
            node.synchronize()
            seconds += time.perf_counter() - started
            self.verify(batch, timed=view != VIEW_WARMUP)
        return seconds

    def latency(self, count):
        """Start and end (µs on CLOCK_MONOTONIC) of each of `count` operations, each started after a
        barrier."""
        node = self.node
        starts, ends = [], []
        for first, size in self.rounds(count):
            batch = self.inputs(VIEW_LATENCY, first, size)
            for _, tensor, result in batch:
                node.barrier()
                starts.append(time.monotonic_ns() / 1e3)
                self.call(tensor, result, self.group)
                node.synchronize()
                ends.append(time.monotonic_ns() / 1e3)
            self.verify(batch, timed=True)
        return starts, ends


# dpa's counters a size's row reports, as deltas summed over the ranks: the workers' (retransmitted
# packets, timer expiries, SYN probes), the kernel's drops on dpa's sockets, and the embedded switch's
# (on the rank that runs it). A timer expiry sends a header-only probe: the switch answers it with
# "counted, still waiting" or a copy of the result (probe_answers). A probe answered while nothing
# was lost means the timer fired before the other ranks had sent (arrival skew, not loss);
# duplicates are resent values the switch had already counted; copies are stored results sent
# again for resent values.
DPA_COUNTERS = ("retransmissions", "timeouts", "syn_probes", "udp_drops", "switch_rounds",
                "switch_probe_answers", "switch_duplicates", "switch_copies", "switch_late")
SWITCH_COUNTERS = {"switch_probe_answers": ("syn_replies",), "switch_duplicates": ("duplicates",),
                   "switch_copies": ("retransmitted_results",), "switch_late": ("late_contributions",),
                   "switch_rounds": ("completed_full", "completed_partial")}


# nccl-tests' bus bandwidth: the bytes each rank moves over its link, per the algorithm's.
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
              "all_gather": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}


def dpa_counters(node):
    """This rank's counters in DPA_COUNTERS order, then 1 if it read an embedded switch's."""
    import dpa
    from dpa import _C

    totals = _C.total_stats()
    # Every live group's embedded switch in this process, whichever object torch hands out for
    # the default group and device (None on ranks without one).
    switch = _C.embedded_switch_counters()
    values = {"retransmissions": totals["retransmissions"], "timeouts": totals["timeouts"],
              "syn_probes": totals["syn_probes"], "udp_drops": dpa.udp_drops()}
    values.update({key: sum((switch or {}).get(name, 0) for name in names) for key, names in SWITCH_COUNTERS.items()})
    return [values[key] for key in DPA_COUNTERS] + [0 if switch is None else 1]


def measure(node, backend_index, backend, size_index, size):
    """One result row (docs/benchmark-tools.md "JSON schema")."""
    import torch.distributed as dist

    settings = node.settings
    iterations = iterations_for(size, settings)
    measurement = Measurement(node, backend_index, backend, size_index, size)
    counters_before = dpa_counters(node) if backend == "dpa" else None
    if settings["warmup"]:
        measurement.back_to_back(VIEW_WARMUP, settings["warmup"])
    own_seconds = measurement.back_to_back(VIEW_BACK_TO_BACK, iterations)
    starts, ends = measurement.latency(iterations)
    # nccl-tests: the back-to-back time is the ranks' mean; an operation's latency is its slowest rank's.
    mean_seconds = node.reduce([own_seconds], dist.ReduceOp.SUM)[0] / node.world / iterations
    latencies = sorted(node.reduce([(end - start) / 1e6 for start, end in zip(starts, ends)], dist.ReduceOp.MAX))
    skew = after_last_start = None
    if node.one_clock and node.world > 1:
        first_start = node.reduce(starts, dist.ReduceOp.MIN)
        last_start = node.reduce(starts, dist.ReduceOp.MAX)
        last_end = node.reduce(ends, dist.ReduceOp.MAX)
        skew = spread(last - first for first, last in zip(first_start, last_start))
        after_last_start = spread(end - last for last, end in zip(last_start, last_end))
    wrong, checked = (int(v) for v in node.reduce([measurement.wrong, measurement.checked], dist.ReduceOp.SUM))
    size = measurement.size
    algbw = size / mean_seconds / 1e9 if mean_seconds > 0 else 0.0
    row = {
        "backend": backend, "collective": measurement.collective, "method": node.methods.get(backend),
        "bytes": size, "elements": measurement.elements, "dtype": settings["dtype"],
        "device": node.device.type, "ranks": node.world, "iterations": iterations, "warmup": settings["warmup"],
        "time_us": mean_seconds * 1e6, "algbw": algbw, "busbw": algbw * BUS_FACTOR[measurement.collective](node.world),
        "p50_us": percentile(latencies, 50) * 1e6, "p99_us": percentile(latencies, 99) * 1e6,
        "barrier_skew_us": skew, "after_last_start_us": after_last_start,
        "wrong": wrong, "checked": checked, "dpa": None,
    }
    if backend == "dpa":
        counters_after = dpa_counters(node)
        deltas = node.reduce([now - before for now, before in zip(counters_after[:-1], counters_before)] +
                             counters_after[-1:], dist.ReduceOp.SUM)
        sizing = default_backend(node).sizing
        counters = {key: int(value) for key, value in zip(DPA_COUNTERS, deltas)}
        if sizing and deltas[-1] == 0:
            # The job embeds a switch but no rank could read its counters: unknown, not zero.
            counters.update({key: None for key in SWITCH_COUNTERS})
        row["dpa"] = {"mode": os.environ.get("DPA_TORCH_MODE", "worksteal"),
                      "payload": default_backend(node).payload_for(measurement.elements),
                      **counters, "sizing": sizing}
    return row


def default_backend(node):
    """The default group's dpa backend object (torch 2.x wraps it; torch 1.13 returns it)."""
    group = node.dist.distributed_c10d._get_default_group()
    return group._get_backend(node.device) if hasattr(group, "_get_backend") else group


def progress(node, text):
    if node.rank == 0:
        print(f"dpa.bench: {text}", file=sys.stderr, flush=True)


def run(node):
    """Every size on every backend; returns the report (docs/benchmark-tools.md "JSON schema")."""
    settings = node.settings
    hosts = node.gather_objects(socket.gethostname())
    for backend, reason in node.skipped.items():
        progress(node, f"not measuring {backend}: {reason}")
    progress(node, f"{node.world} ranks on {len(set(hosts))} host(s), {node.device.type}, {settings['dtype']}, {settings['collective']}, "
                   f"backends {','.join(node.backends)}")
    smallest = min(settings["sizes"])
    warmup_operations = max(1, min(RUN_WARMUP_OPERATIONS, RUN_WARMUP_BYTES // smallest))
    for backend_index, backend in enumerate(node.backends):
        Measurement(node, backend_index, backend, len(settings["sizes"]), smallest).back_to_back(
            VIEW_WARMUP, warmup_operations)
    rows = []
    for size_index, size in enumerate(settings["sizes"]):
        for backend_index, backend in enumerate(node.backends):
            started = time.monotonic()
            row = measure(node, backend_index, backend, size_index, size)
            rows.append(row)
            progress(node, f"{format_size(size)} {backend}: {row['iterations']} operations per view, "
                           f"{row['wrong']} wrong, {time.monotonic() - started:.1f} s")
    config = {key: settings[key] for key in ("collective", "sizes", "dtype", "device", "warmup", "seed", "pool_bytes",
                                             "inject_wrong")}
    config["barrier"] = node.barrier_kind
    config.update({"ranks": node.world, "hosts": sorted(set(hosts)), "ranks_per_host": node.local_world,
                   "launcher": settings["launcher"], "backends": node.backends, "skipped": node.skipped,
                   "iterations": settings["iterations"] or "auto",
                   "environment": {name: value for name, value in sorted(os.environ.items())
                                   if name.startswith("DPA_")}})
    return {"schema": "dpa-bench", "schema_version": 1, "tool": {"name": "dpa.bench", "version": dpa_version()},
            "host": host_info(), "config": config, "results": rows, "wrong": sum(row["wrong"] for row in rows)}


def dpa_version():
    import dpa

    return getattr(dpa, "__version__", None)
