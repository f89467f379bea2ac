# SPDX-License-Identifier: Apache-2.0
"""One rank of python -m dpa.train: its process groups, the training loop of every (model,
straggler model, run), what it measures, and the summary rank 0 builds (docs/training-benchmark.md).

Every run trains the same model from the same initial parameters with DistributedDataParallel on
the run's process group, each rank on its own synthetic batches. The straggler sleeps at the points
of the steps its schedule delays (before the forward pass; with more --straggler-points also before
the backward pass and after it, as the seed's hooks do). Rank 0 gathers every rank's measurements on a Gloo
group, so the benchmark's own collectives never go through the backend being measured."""

import os
import random
import time

from . import _models
from ._bench_run import percentile
from ._tool_rank import ToolRank, UsageError

RUNS = {
    # name: (process group, fastest-K, preemptive); fastest-K None waits for every rank.
    "gloo": ("gloo", None, False),
    "dpa": ("dpa", None, False),
    "reactive": ("dpa", "k", False),
    "preemptive": ("dpa", "k", True),
    "nccl": ("nccl", None, False),
}
LABELS = {
    "gloo": "Gloo",
    "dpa": "dpa, K = N",
    "reactive": "dpa, reactive fastest-K",
    "preemptive": "dpa, preemptive fastest-K",
    "nccl": "NCCL",
}
STRAGGLERS = {
    "none": "no straggler",
    "fixed": "sleeps D ms at a share p of the delay points",
    "random": "sleeps D x U(0.5, 2) ms at a share p of the delay points",
    "persistent": "sleeps D ms before every step",
}
WRAPS = {
    "ddp": "DistributedDataParallel",
    "fsdp": "FullyShardedDataParallel (torch 2.x)",
    "fsdp2": "fully_shard, FSDP2 (torch 2.x)",
}
# Where in a step the straggler may sleep, in order (the seed's DDPStraggleSim hooks: forward
# pre-hook, forward hook, full backward hook); --straggler-points takes the first 1..3.
DELAY_POINTS = ("before forward", "before backward", "after backward")


def delay_schedule(straggler, settings):
    """Seconds the straggler sleeps at each delay point of each timed step (steps x points); the
    same in every run of a straggler model (one generator per model, seeded by --seed). Each point
    is delayed on its own with probability p, so one point draws what the one delay of earlier
    versions drew."""
    steps, points, delay_s = settings["steps"], settings["delay_points"], settings["delay_ms"] / 1000.0
    if straggler == "none":
        return [[0.0] * points for _ in range(steps)]
    if straggler == "persistent":
        return [[delay_s] + [0.0] * (points - 1) for _ in range(steps)]
    chooser = random.Random(f"{settings['seed']}/{straggler}")
    delays = []
    for _ in range(steps):
        step = []
        for _ in range(points):
            delayed = chooser.random() < settings["delay_probability"]
            scale = chooser.uniform(0.5, 2.0) if straggler == "random" else 1.0
            step.append(delay_s * scale if delayed else 0.0)
        delays.append(step)
    return delays


class Node(ToolRank):
    """This rank's device and process groups, and the Gloo collectives the benchmark itself uses."""

    def __init__(self, rank, world, local_rank, local_world, settings):
        super().__init__(rank, world, local_rank, local_world, settings)
        self.runs = self._agree_on_runs()
        self.groups = {"dpa": None, "gloo": self.gloo}  # None: the default group, dpa's
        self.gloo_parameters = {}  # the Gloo runs' trained parameters, on the reference rank
        if "nccl" in self.runs:
            self.groups["nccl"] = self.dist.new_group(backend="nccl")

    def _agree_on_runs(self):
        """The runs, the same on every rank: NCCL's only where every rank has a GPU of its own."""
        ranks_without = self.ranks_without_own_gpu()
        requested = self.settings["runs"]
        if ranks_without == 0 or (requested is not None and "nccl" not in requested):
            return requested or ["gloo", "dpa", "reactive", "preemptive", "nccl"]
        if requested is not None and "nccl" in requested:
            raise UsageError(f"--runs nccl: {self.nccl_reason(ranks_without)}")
        self.skipped["nccl"] = self.nccl_reason(ranks_without)
        return requested or ["gloo", "dpa", "reactive", "preemptive"]

    def drift(self, module, reference_rank):
        """Every rank's largest absolute parameter difference to `reference_rank` (a list by rank)."""
        return self.drift_of(self.torch.cat([p.detach().reshape(-1) for p in module.parameters()]), reference_rank)

    def drift_of(self, parameters, reference_rank):
        """drift() of a flat parameter vector."""
        torch = self.torch
        flat = parameters.cpu()
        reference = flat.clone()
        self.dist.broadcast(reference, reference_rank, group=self.gloo)
        own = torch.tensor([(flat - reference).abs().max().item()], dtype=torch.float64)
        gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(self.world)]
        self.dist.all_gather(gathered, own, group=self.gloo)
        return [float(value) for value in gathered]


def dpa_totals():
    """The process's dpa statistics summed over every completed all_reduce (dpa._C.total_stats)."""
    from dpa import _C

    return _C.total_stats()


def delta(after, before):
    return {key: after[key] - before[key] for key in ("operations", "blocks", "blocks_partial", "blocks_missed",
                                                       "retransmissions")}


class Trainer:
    """One run of one model under one straggler model on this rank."""

    def __init__(self, node, spec, run, straggler, wrap):
        import torch

        import dpa

        self.node, self.spec, self.run, self.straggler, self.wrap = node, spec, run, straggler, wrap
        settings = node.settings
        group_name, k_choice, preemptive = RUNS[run]
        self.fastest_k = k_choice is not None
        self.uses_dpa = group_name == "dpa"
        self.batch = settings["batch"] or spec.default_batch()
        self.model, self.source = spec.build()
        self.model.to(node.device)
        self.parameters = sum(p.numel() for p in self.model.parameters())
        self.ddp = wrap_model(self.model, wrap, node, node.groups[group_name], settings)
        if self.uses_dpa and wrap == "ddp":
            # K = N named explicitly, so that DPA_K or a process default cannot turn it into fastest-K.
            dpa.register_ddp_hook(self.ddp, k=settings["k"] if self.fastest_k else node.world, preemptive=preemptive)
        if self.uses_dpa and wrap in ("fsdp", "fsdp2") and self.fastest_k:
            dpa.register_fsdp_hook(self.ddp, k=settings["k"], preemptive=preemptive)
        self.optimizer = torch.optim.SGD(self.ddp.parameters(), lr=settings["lr"], momentum=0.9)
        pauses = settings["pause"] and (settings["pause_runs"] is None or run in settings["pause_runs"])
        self.paused = settings["pause"] if pauses else None  # this run's pause, whichever rank takes it
        self.pause = self.paused if pauses and settings["pause"][0] == node.rank else None
        self.batches = spec.batches(node.rank, self.batch, node.device)
        self.delays = delay_schedule(straggler, settings)
        self.straggler_rank = settings["straggler_rank"] if straggler != "none" else None
        self.is_straggler = node.rank == self.straggler_rank
        # The rank the runs are compared on and the replicas resynchronised from: fastest-K is
        # about the ranks that do not wait, and the straggler's parameters are the drifted ones.
        self.reference_rank = next(rank for rank in range(node.world) if rank != self.straggler_rank)
        # --resync async: only a rank that missed blocks asks for a replica, of a rank that missed none
        # (the reference rank when it arrives first at a checkpoint having missed some).
        self.resynchroniser = None
        if self.fastest_k and settings["resync_every"] and settings["resync"] == "async":
            self.resynchroniser = dpa.Resynchroniser(self.model, self.optimizer, src=self.reference_rank,
                                                     every=settings["resync_every"],
                                                     max_lag=settings["resync_max_lag"])

    def step(self, index, delays=()):
        """One training step; `delays` are the straggler's sleeps at DELAY_POINTS (seconds)."""
        inputs, targets = self.batches[index % len(self.batches)]
        self.optimizer.zero_grad(set_to_none=True)
        pause(delays, 0)
        loss = self.spec.loss(self.ddp(inputs), targets)
        pause(delays, 1)
        loss.backward()
        pause(delays, 2)
        self.optimizer.step()
        return loss.detach()

    def train(self):
        """This rank's measurements of the timed steps (gathered by rank 0)."""
        import dpa

        node, settings = self.node, self.node.settings
        for index in range(settings["warmup_steps"]):
            self.step(index)
        node.barrier()
        step_seconds, resync_seconds, losses = [], 0.0, []
        checks, resyncs, largest_checked = 0, 0, 0.0
        steps_partial = 0
        totals_before = dpa_totals() if self.uses_dpa else None
        previous = totals_before
        for index in range(settings["steps"]):
            started = time.perf_counter()
            if self.pause is not None and index == self.pause[1]:
                time.sleep(self.pause[2])  # a checkpoint: the others wait in their next collective
            loss = self.step(settings["warmup_steps"] + index, self.delays[index] if self.is_straggler else ())
            node.synchronize()
            losses.append(float(loss))
            if self.uses_dpa:
                # DDP has waited for every bucket of this step, and the next step has issued none.
                current = dpa_totals()
                steps_partial += current["blocks_partial"] > previous["blocks_partial"]
                previous = current
            if self.resynchroniser is not None:
                check_started = time.perf_counter()
                checks += (index + 1) % settings["resync_every"] == 0
                resyncs += self.resynchroniser.step()
                resync_seconds += time.perf_counter() - check_started
            elif self.fastest_k and settings["resync_every"] and (index + 1) % settings["resync_every"] == 0:
                check_started = time.perf_counter()
                drift = max(node.drift(self.model, self.reference_rank))
                checks += 1
                largest_checked = max(largest_checked, drift)
                if drift > settings["resync_threshold"]:
                    dpa.resynchronise(self.model, src=self.reference_rank, optimizer=self.optimizer)
                    resyncs += 1
                node.synchronize()
                resync_seconds += time.perf_counter() - check_started
            step_seconds.append(time.perf_counter() - started)
        if self.resynchroniser is not None:
            self.resynchroniser.close()  # waits for every rank: any may be asked for a copy
            resyncs = self.resynchroniser.served  # summed over the ranks in the report
        # Everyone, the straggler too, has finished before the replicas are compared.
        node.barrier()
        parameters = full_parameters(self.ddp, self.wrap)
        drift_by_rank = node.drift_of(parameters, self.reference_rank)
        measured = {
            "rank": node.rank, "step_seconds": step_seconds, "resync_seconds": resync_seconds, "losses": losses,
            "parameter_difference_to_gloo": self.difference_to_gloo(parameters),
            "drift_checks": checks, "resyncs": resyncs,
            "largest_checked_drift": largest_checked if self.resynchroniser is None else None,
            "drift_by_rank": drift_by_rank, "dpa": None,
        }
        if self.uses_dpa:
            measured["dpa"] = dict(delta(dpa_totals(), totals_before), steps_partial=steps_partial)
        return measured

    def difference_to_gloo(self, parameters):
        """On the reference rank: the largest difference of the trained parameters to those of the Gloo
        run of the same model, straggler model and wrapper (kept by the Gloo run); None elsewhere."""
        if self.node.rank != self.reference_rank:
            return None
        key = (self.spec.name, self.straggler, self.wrap)
        if self.run == "gloo":
            self.node.gloo_parameters[key] = parameters.cpu().clone()
            return 0.0
        kept = self.node.gloo_parameters.get(key)
        return None if kept is None else float((parameters.cpu() - kept).abs().max())

    def close(self):
        del self.ddp, self.optimizer, self.batches, self.model
        if self.node.device.type == "cuda":
            self.node.torch.cuda.empty_cache()


def wrap_model(model, wrap, node, group, settings):
    """`model` distributed over `group` as --wrap says."""
    cuda = node.device.type == "cuda"
    if wrap == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(model, process_group=group, use_orig_params=True,
                                        device_id=node.device if cuda else None)
    if wrap == "fsdp2":
        from torch.distributed.device_mesh import DeviceMesh

        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:  # torch < 2.6
            from torch.distributed._composable.fsdp import fully_shard
        group = group if group is not None else node.dist.group.WORLD
        return fully_shard(model, mesh=DeviceMesh.from_group(group, node.device.type))
    from torch.nn.parallel import DistributedDataParallel

    # Each rank keeps its own BatchNorm statistics: DDP's per-step buffer broadcast would be a
    # Gloo collective that makes every rank wait for the straggler, with or without fastest-K.
    return DistributedDataParallel(model, device_ids=[node.device.index] if cuda else None, process_group=group,
                                   broadcast_buffers=False, bucket_cap_mb=settings["bucket_mb"])


def full_parameters(model, wrap):
    """Every parameter of the trained model, whole, as one flat vector (on every rank)."""
    import torch

    if wrap == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel

        with FullyShardedDataParallel.summon_full_params(model):
            return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
    if wrap == "fsdp2":
        return torch.cat([p.full_tensor().detach().reshape(-1) for p in model.parameters()])
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def pause(delays, point):
    """The injected straggler delay at DELAY_POINTS[point], if this step has one there."""
    if point < len(delays) and delays[point] > 0:
        time.sleep(delays[point])


def milliseconds(seconds):
    ordered = sorted(seconds)
    return {"mean": 1000.0 * sum(ordered) / len(ordered), "median": 1000.0 * percentile(ordered, 50),
            "p99": 1000.0 * percentile(ordered, 99), "min": 1000.0 * ordered[0], "max": 1000.0 * ordered[-1]}


def summarise(trainer, gathered):
    """One row of the report (docs/training-benchmark.md "Report")."""
    node, settings = trainer.node, trainer.node.settings
    world, steps = node.world, settings["steps"]
    straggler_rank, reference = trainer.straggler_rank, trainer.reference_rank
    mine = gathered[reference]
    train_seconds = sum(mine["step_seconds"])
    row = {
        "model": trainer.spec.name, "straggler": trainer.straggler, "wrap": trainer.wrap, "run": trainer.run,
        "label": LABELS[trainer.run], "losses": mine["losses"], "pause": trainer.paused,
        "parameter_difference_to_gloo": mine["parameter_difference_to_gloo"],
        "backend": RUNS[trainer.run][0], "k": settings["k"] if trainer.fastest_k else world,
        "preemptive": RUNS[trainer.run][2], "ranks": world, "batch_per_rank": trainer.batch, "steps": steps,
        "warmup_steps": settings["warmup_steps"], "parameters": trainer.parameters,
        "gradient_bytes": 4 * trainer.parameters, "model_source": trainer.source,
        "straggler_rank": straggler_rank, "delayed_steps": sum(1 for step in trainer.delays if sum(step) > 0),
        "delays": sum(1 for step in trainer.delays for delay in step if delay > 0),
        "injected_delay_s": sum(map(sum, trainer.delays)) if straggler_rank is not None else 0.0,
        "reference_rank": reference, "iteration_ms": milliseconds(mine["step_seconds"]),
        "iteration_ms_samples": [1000.0 * seconds for seconds in mine["step_seconds"]],
        "samples_per_s": world * trainer.batch * steps / train_seconds, "train_seconds": train_seconds,
        "slowest_rank_seconds": max(sum(rank["step_seconds"]) for rank in gathered),
        "by_rank": [{"rank": rank["rank"], "iteration_ms_mean": 1000.0 * sum(rank["step_seconds"]) / steps,
                     "train_seconds": sum(rank["step_seconds"])} for rank in gathered],
        "drift": {"final": max(mine["drift_by_rank"]), "final_by_rank": mine["drift_by_rank"],
                  "checks": mine["drift_checks"],
                  # async: the copies every rank sent; collective: the broadcasts, which all ranks count
                  "resyncs": (sum(rank["resyncs"] for rank in gathered) if mine["largest_checked_drift"] is None
                              else mine["resyncs"]),
                  "largest_checked": mine["largest_checked_drift"],
                  "check_and_resync_ms": 1000.0 * mine["resync_seconds"]},
        "dpa": None,
    }
    if mine["dpa"] is not None:
        own = mine["dpa"]
        row["dpa"] = {
            "allreduces": own["operations"], "allreduces_per_step": own["operations"] / steps,
            "blocks": own["blocks"], "blocks_partial": own["blocks_partial"],
            "partial_block_share": own["blocks_partial"] / own["blocks"] if own["blocks"] else 0.0,
            "steps_partial": own["steps_partial"], "partial_step_share": own["steps_partial"] / steps,
            "blocks_missed_by_rank": [rank["dpa"]["blocks_missed"] for rank in gathered],
            "straggler_blocks_missed": (gathered[straggler_rank]["dpa"]["blocks_missed"]
                                        if straggler_rank is not None else None),
            "retransmissions": sum(rank["dpa"]["retransmissions"] for rank in gathered),
        }
    return row


def progress(node, text):
    if node.rank == 0:
        print(f"dpa.train: {text}", flush=True)


def run(node):
    """Every model under every straggler model with every run; rank 0 returns the rows."""
    settings = node.settings
    for name, reason in node.skipped.items():
        progress(node, f"not running {name}: {reason}")
    rows = []
    for model in settings["models"]:
        spec = _models.ModelSpec(model, settings)
        for straggler in settings["stragglers"]:
            for wrap in settings["wraps"]:
                for name in node.runs:
                    started = time.monotonic()
                    trainer = Trainer(node, spec, name, straggler, wrap)
                    gathered = node.gather_objects(trainer.train())
                    if node.rank == 0:
                        row = summarise(trainer, gathered)
                        rows.append(row)
                        progress(node, f"{model}, {straggler}, {wrap}, {LABELS[name]}: "
                                       f"{row['iteration_ms']['mean']:.1f} ms per iteration, final loss "
                                       f"{row['losses'][-1]:.4f}, {time.monotonic() - started:.1f} s")
                    trainer.close()
    return rows


def environment_of_dpa():
    return {name: value for name, value in sorted(os.environ.items()) if name.startswith("DPA_")}
