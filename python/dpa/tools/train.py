# SPDX-License-Identifier: Apache-2.0
"""The training benchmark: DDP on ResNet-18, ResNet-50 and a small GPT with synthetic data, one
rank slowed down, dpa against Gloo (and NCCL): python -m dpa.train.

    python -m dpa.train [-n RANKS] [--models resnet50,gpt] [--stragglers none,random]
                        [--runs gloo,dpa,reactive,preemptive,nccl] [--device cpu|cuda] [--steps N]
                        [--wrap ddp,fsdp,fsdp2] [--pause RANK:STEP:SECONDS [--pause-runs RUNS]]
                        [--straggler-rank R] [--straggler-delay-ms D] [--delay-probability P]
                        [--resync async|collective] [--resync-every S] [--resync-max-lag L]
                        [--resync-threshold T]
                        [--out DIR] [--json PATH]
    torchrun --nproc_per_node R [--nnodes H ...] -m dpa.train [same options, no -n]

Every (model, straggler model, wrapper, run) trains the same model from the same initial parameters for
--warmup-steps untimed and --steps timed iterations, in one set of rank processes. Runs: Gloo, dpa
with K = N, dpa with reactive and with preemptive fastest-K (K = N - 1 by default), and NCCL when
every rank has a GPU of its own. Reported per run: time per iteration (mean, median, p99) of the
reference rank (the lowest rank that is not the straggler), samples/s, the share of blocks and of
steps whose all-reduces completed with fewer than N ranks, the blocks the straggler missed, the
largest parameter difference to the reference rank, the reference rank's loss at every timed step,
and the largest parameter difference to the Gloo run of the same model, straggler model and
wrapper (the same seed, so the runs should train alike). In the fastest-K runs, every
--resync-every steps a rank that missed blocks adopts the reference rank's replica of that step
(dpa.Resynchroniser: nobody else waits), or with --resync collective all ranks measure the
difference and copy the reference rank's replica (dpa.resynchronise) when it exceeds
--resync-threshold. Writes the report as JSON and one plot per model (iteration-time distribution
and throughput per run). docs/training-benchmark.md describes every option and the report.
Exit status: 0 done, 1 a run failed, 2 a usage error.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .. import __version__
from .._resync import DEFAULT_MAX_LAG
from . import _models, _train_rank
from ._bench_run import host_info
from ._launch import run_ranks
from ._tool_rank import UsageError, exit_status
from .bench import torchrun_world

DEFAULT_MODELS = "resnet50,gpt"
DEFAULT_STRAGGLERS = "none,random"


def comma_list(parser, option, text, choices):
    items = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in items if item not in choices]
    if unknown or not items or len(set(items)) != len(items):
        parser.error(f"{option}: '{text}': give each of {','.join(choices)} at most once")
    return items


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        prog="python -m dpa.train", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n", 1)[0] + "\n\n" + __doc__.split("\n\n", 2)[2],
        epilog="under torchrun: torchrun --nproc_per_node R [--nnodes H ...] -m dpa.train [options, no -n]")
    add = parser.add_argument
    add("-n", "--ranks", type=int,
        help="local rank processes to start (default 4); under torchrun the world is torchrun's")
    add("--version", action="version", version=f"%(prog)s {__version__}")
    add("--models", default=DEFAULT_MODELS, help=f"comma list of {','.join(_models.MODELS)} (default {DEFAULT_MODELS})")
    add("--stragglers", default=DEFAULT_STRAGGLERS,
        help=f"comma list of straggler models {','.join(_train_rank.STRAGGLERS)} (default {DEFAULT_STRAGGLERS})")
    add("--runs", help="comma list of gloo,dpa,reactive,preemptive,nccl (default all, nccl only when every rank "
                       "has a GPU of its own)")
    add("--device", default="cpu", choices=["cpu", "cuda"], help="default cpu")
    add("--wrap", default="ddp",
        help="comma list of ddp,fsdp,fsdp2: how the model is distributed (FullyShardedDataParallel, fully_shard; "
             "torch 2.x; fastest-K through dpa.register_fsdp_hook) (default ddp)")
    add("--pause", metavar="RANK:STEP:SECONDS",
        help="RANK sleeps SECONDS before timed step STEP once, as a checkpoint would (e.g. 1:10:60)")
    add("--pause-runs", help="comma list of the runs that pause (default every run)")
    add("--k", type=int, help="fastest-K of the reactive and preemptive runs (default ranks - 1)")
    add("--straggler-rank", type=int, help="the slow rank (default the last)")
    add("--straggler-delay-ms", type=float, default=50.0,
        help="D: the straggler's delay in ms (default 50; random: D x U(0.5, 2))")
    add("--delay-probability", type=float, default=0.15,
        help="p: share of delay points at which the fixed and random stragglers sleep (default 0.15)")
    add("--straggler-points", type=int, default=1, choices=[1, 2, 3],
        help="delay points per step, each delayed with probability p: 1 before the forward pass, 2 also before "
             "the backward pass, 3 also after it (the seed's 'moderate' injection is 1, its 'aggressive' 3; "
             "default 1)")
    add("--straggler-timeout-ms", type=float, default=2.0,
        help="how long the embedded switch waits for the last ranks before a reactive fastest-K block completes "
             "without them (sets DPA_STRAGGLER_TIMEOUT_US; a configured switch keeps its own; default 2)")
    add("--resync", choices=["async", "collective"], default="async",
        help="fastest-K runs: async, a rank that missed blocks adopts the reference rank's replica and nobody "
             "waits (dpa.Resynchroniser); collective, every rank measures the drift and dpa.resynchronise "
             "copies the replica when it exceeds --resync-threshold (default async)")
    add("--resync-every", type=int, default=25,
        help="fastest-K runs: resynchronisation checkpoint every this many steps (0: never; default 25)")
    add("--resync-max-lag", type=int, default=DEFAULT_MAX_LAG,
        help="--resync async: the others wait for a rank this many checkpoints behind (bounds the copies held "
             f"and the lag; default {DEFAULT_MAX_LAG})")
    add("--resync-threshold", type=float, default=1e-4,
        help="--resync collective: resynchronise when a check finds a larger drift (default 1e-4)")
    add("--steps", type=int, default=50, help="timed iterations per run (default 50)")
    add("--warmup-steps", type=int, default=5, help="untimed iterations first, without delays (default 5)")
    add("--batch", type=int, help="samples per rank and step (default 32 for the ResNets, 8 sequences for gpt)")
    add("--lr", type=float, default=0.01, help="SGD learning rate, momentum 0.9 (default 0.01)")
    add("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb (default 25, DDP's)")
    add("--image-size", type=int, default=224, help="ResNet input height and width (default 224)")
    add("--classes", type=int, default=1000, help="ResNet classes (default 1000)")
    add("--sequence", type=int, default=256, help="gpt tokens per sequence (default 256)")
    add("--vocabulary", type=int, default=16384, help="gpt vocabulary (default 16384)")
    add("--gpt-width", type=int, default=512, help="gpt model width (default 512)")
    add("--gpt-layers", type=int, default=6, help="gpt decoder blocks (default 6)")
    add("--gpt-heads", type=int, default=8, help="gpt attention heads (default 8)")
    add("--seed", type=int, default=1, help="model, data and delay schedule seed (default 1)")
    add("--out", default="dpa-train", help="directory of train.json and the plots <model>.png (default dpa-train)")
    add("--json", help="write the report here instead of <out>/train.json")
    add("--timeout", type=float, default=3600.0,
        help="seconds the local ranks may run, once started (default 3600; not under torchrun)")
    arguments = parser.parse_args(argv)

    world = torchrun_world()
    if world is not None and arguments.ranks is not None and arguments.ranks != world[1]:
        parser.error(f"--ranks {arguments.ranks}: under torchrun the world size is torchrun's (WORLD_SIZE={world[1]})")
    ranks = world[1] if world is not None else (4 if arguments.ranks is None else arguments.ranks)
    if ranks < 2:
        parser.error(f"--ranks must be at least 2, got {ranks}")
    models = comma_list(parser, "--models", arguments.models, _models.MODELS)
    stragglers = comma_list(parser, "--stragglers", arguments.stragglers, tuple(_train_rank.STRAGGLERS))
    runs = None if arguments.runs is None else comma_list(parser, "--runs", arguments.runs, tuple(_train_rank.RUNS))
    if runs is not None and "nccl" in runs and arguments.device != "cuda":
        parser.error("--runs nccl needs --device cuda")
    wraps = comma_list(parser, "--wrap", arguments.wrap, tuple(_train_rank.WRAPS))
    if wraps != ["ddp"]:
        import torch

        if int(torch.__version__.split(".")[0]) < 2:
            parser.error(f"--wrap {arguments.wrap}: fsdp and fsdp2 need torch 2.x (this is {torch.__version__})")
    pause = None
    if arguments.pause is not None:
        try:
            pause_rank, pause_step, pause_seconds = arguments.pause.split(":")
            pause = (int(pause_rank), int(pause_step), float(pause_seconds))
        except ValueError:
            parser.error(f"--pause: '{arguments.pause}' is not RANK:STEP:SECONDS")
        if not (0 <= pause[0] < ranks and 0 <= pause[1] < arguments.steps and pause[2] >= 0):
            parser.error(f"--pause: rank must be in 0..{ranks - 1}, step in 0..{arguments.steps - 1} (the timed "
                         f"steps) and seconds at least 0, got {arguments.pause}")
    pause_runs = (None if arguments.pause_runs is None
                  else comma_list(parser, "--pause-runs", arguments.pause_runs, tuple(_train_rank.RUNS)))
    if pause_runs is not None and pause is None:
        parser.error("--pause-runs needs --pause")
    k = ranks - 1 if arguments.k is None else arguments.k
    if not 1 <= k <= ranks:
        parser.error(f"--k must be in 1..{ranks} (the ranks), got {k}")
    straggler_rank = ranks - 1 if arguments.straggler_rank is None else arguments.straggler_rank
    if not 0 <= straggler_rank < ranks:
        parser.error(f"--straggler-rank must be a rank in 0..{ranks - 1}, got {straggler_rank}")
    if arguments.straggler_delay_ms < 0:
        parser.error(f"--straggler-delay-ms must be at least 0, got {arguments.straggler_delay_ms:g}")
    if not 0.0 <= arguments.delay_probability <= 1.0:
        parser.error(f"--delay-probability must be in [0, 1], got {arguments.delay_probability:g}")
    if arguments.straggler_timeout_ms <= 0:
        parser.error(f"--straggler-timeout-ms must be positive, got {arguments.straggler_timeout_ms:g}")
    for option, value, least in (("--resync-every", arguments.resync_every, 0), ("--resync-max-lag", arguments.resync_max_lag, 1),
                                 ("--steps", arguments.steps, 1),
                                 ("--warmup-steps", arguments.warmup_steps, 0), ("--classes", arguments.classes, 2),
                                 ("--sequence", arguments.sequence, 1), ("--vocabulary", arguments.vocabulary, 2),
                                 ("--gpt-width", arguments.gpt_width, 1), ("--gpt-layers", arguments.gpt_layers, 1),
                                 ("--gpt-heads", arguments.gpt_heads, 1), ("--image-size", arguments.image_size, 32)):
        if value < least:
            parser.error(f"{option} must be at least {least}, got {value}")
    if arguments.resync_threshold < 0:
        parser.error(f"--resync-threshold must be at least 0, got {arguments.resync_threshold:g}")
    if arguments.lr <= 0 or arguments.bucket_mb <= 0:
        parser.error(f"--lr and --bucket-mb must be positive, got {arguments.lr:g} and {arguments.bucket_mb:g}")
    if arguments.gpt_width % arguments.gpt_heads:
        parser.error(f"--gpt-width {arguments.gpt_width} is not a multiple of --gpt-heads {arguments.gpt_heads}")
    # BatchNorm in training needs more than one value per channel, and ResNet's last stage is
    # 1x1 for small images.
    least_batch = 2 if any(model.startswith("resnet") for model in models) else 1
    if arguments.batch is not None and arguments.batch < least_batch:
        parser.error(f"--batch must be at least {least_batch}"
                     f"{' with a ResNet (BatchNorm needs two samples)' if least_batch == 2 else ''}, "
                     f"got {arguments.batch}")
    if arguments.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda, but torch sees no CUDA device")
    settings = {
        "ranks": ranks, "models": models, "stragglers": stragglers, "runs": runs, "device": arguments.device, "k": k,
        "wraps": wraps, "pause": pause, "pause_runs": pause_runs,
        "straggler_rank": straggler_rank, "delay_ms": arguments.straggler_delay_ms,
        "delay_probability": arguments.delay_probability, "delay_points": arguments.straggler_points,
        "straggler_timeout_ms": arguments.straggler_timeout_ms,
        "resync": arguments.resync, "resync_every": arguments.resync_every, "resync_max_lag": arguments.resync_max_lag,
        "resync_threshold": arguments.resync_threshold,
        "steps": arguments.steps, "warmup_steps": arguments.warmup_steps, "batch": arguments.batch,
        "lr": arguments.lr, "bucket_mb": arguments.bucket_mb, "image_size": arguments.image_size,
        "classes": arguments.classes, "sequence": arguments.sequence, "vocabulary": arguments.vocabulary,
        "gpt_width": arguments.gpt_width, "gpt_layers": arguments.gpt_layers, "gpt_heads": arguments.gpt_heads,
        "seed": arguments.seed, "launcher": "torchrun" if world is not None else "local",
    }
    return settings, arguments, world


def straggler_timeout_environment(settings):
    return {"DPA_STRAGGLER_TIMEOUT_US": str(max(1, round(1000 * settings["straggler_timeout_ms"])))}


def train_rank(rank, world, init_method, local_rank, local_world, settings):
    """One rank: every run; rank 0 returns the report, the others None."""
    import torch.distributed as dist

    import dpa  # noqa: F401 - registers the backend

    # Read when the embedded switch starts its session, at the first all_reduce.
    os.environ.update(straggler_timeout_environment(settings))
    dist.init_process_group("dpa", init_method=init_method, rank=rank, world_size=world)
    node = _train_rank.Node(rank, world, local_rank, local_world, settings)
    rows = _train_rank.run(node)
    hosts = node.gather_objects(host_info()["hostname"])
    if rank != 0:
        return None
    config = dict(settings, hosts=sorted(set(hosts)), ranks_per_host=local_world, runs=node.runs,
                  skipped=node.skipped, environment=_train_rank.environment_of_dpa())
    return {"schema": "dpa-train", "schema_version": 1, "tool": {"name": "dpa.train", "version": dpa.__version__},
            "host": host_info(), "config": config, "results": rows}


def local_rank_main(rank, world, init_file, settings):
    return train_rank(rank, world, "file://" + init_file, rank, world, settings)


def relative_to(row, rows, run):
    """How many times faster per iteration `row` is than `run` under the same model and straggler."""
    other = next((r for r in rows if r["run"] == run and r["model"] == row["model"]
                  and r["straggler"] == row["straggler"]), None)
    return None if other is None else other["iteration_ms"]["mean"] / row["iteration_ms"]["mean"]


def add_speedups(report):
    for row in report["results"]:
        row["speedup_vs_gloo"] = relative_to(row, report["results"], "gloo")
        row["speedup_vs_dpa"] = relative_to(row, report["results"], "dpa")


def print_tables(report):
    config = report["config"]
    print(f"\n# dpa.train: {config['ranks']} ranks on {len(config['hosts'])} host(s), {config['device']}, "
          f"{config['steps']} timed steps after {config['warmup_steps']}; fastest-K K = {config['k']}, reactive "
          f"after {config['straggler_timeout_ms']:g} ms; straggler rank {config['straggler_rank']}, "
          f"D = {config['delay_ms']:g} ms, p = {config['delay_probability']:g} at {config['delay_points']} point(s) per "
          f"step; resync {config['resync']} "
          f"every {config['resync_every']} steps")
    for model in config["models"]:
        rows = [row for row in report["results"] if row["model"] == model]
        first = rows[0]
        print(f"\n## {model}: {first['parameters']:,} parameters ({first['gradient_bytes'] / 2**20:.1f} MiB of "
              f"gradients), {first['batch_per_rank']} samples per rank, from {first['model_source']}")
        print(f"{'straggler':<11} {'run':<26} {'mean ms':>8} {'median':>8} {'p99':>8} {'samples/s':>10} "
              f"{'x Gloo':>6} {'x K=N':>6} {'part.blk':>8} {'part.stp':>8} {'missed':>7} {'drift':>8} {'resync':>6}")
        for row in rows:
            times, dpa_part, drift = row["iteration_ms"], row["dpa"], row["drift"]
            ratio = [f"{value:6.2f}" if value is not None else f"{'-':>6}"
                     for value in (row["speedup_vs_gloo"], row["speedup_vs_dpa"])]
            partial = (f"{100 * dpa_part['partial_block_share']:7.1f}% {100 * dpa_part['partial_step_share']:7.1f}%"
                       if dpa_part else f"{'-':>8} {'-':>8}")
            missed = dpa_part["straggler_blocks_missed"] if dpa_part else None
            print(f"{row['straggler']:<11} {row['label']:<26} {times['mean']:8.1f} {times['median']:8.1f} "
                  f"{times['p99']:8.1f} {row['samples_per_s']:10.1f} {ratio[0]} {ratio[1]} {partial} "
                  f"{missed if missed is not None else '-':>7} {drift['final']:8.1e} "
                  f"{drift['resyncs']:>2}/{drift['checks']:<3}")
    for name, reason in config["skipped"].items():
        print(f"# not run: {name}: {reason}")
    print("\nms: iterations of the reference rank, the lowest that is not the straggler; x Gloo, x K=N: its mean "
          "against theirs; part.blk, part.stp: blocks and steps with an all-reduce completed by fewer than N ranks; "
          "missed: blocks the straggler missed; drift: largest parameter difference to that rank at the end; "
          "resync: replicas copied/checkpoints", flush=True)


def horizontal_boxes(matplotlib):
    """boxplot's argument for horizontal boxes: `orientation` from matplotlib 3.10, which
    deprecates the `vert` of earlier versions (Debian 12 ships 3.6)."""
    major, minor = (int(part) for part in matplotlib.__version__.split(".")[:2])
    return {"orientation": "horizontal"} if (major, minor) >= (3, 10) else {"vert": False}


def plot(report, model, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = report["config"]
    rows = [row for row in report["results"] if row["model"] == model]
    stragglers = [s for s in config["stragglers"] if any(row["straggler"] == s for row in rows)]
    figure, axes = plt.subplots(len(stragglers), 2, figsize=(12, 3.6 * len(stragglers)), squeeze=False,
                                gridspec_kw={"width_ratios": [3, 2]})
    for (times, throughput), straggler in zip(axes, stragglers):
        runs = [row for row in rows if row["straggler"] == straggler]
        positions = list(range(len(runs)))
        times.boxplot([row["iteration_ms_samples"] for row in runs], positions=positions,
                      whis=(1, 99), showmeans=True, **horizontal_boxes(matplotlib))
        times.set_yticks(positions)
        times.set_yticklabels([row["label"] for row in runs])
        times.invert_yaxis()
        times.set_xlabel("time per iteration (ms): box 25-75 %, whiskers 1-99 %, triangle the mean")
        times.set_title(f"{model}, {straggler}: {_train_rank.STRAGGLERS[straggler]}", fontsize=9)
        times.grid(axis="x", alpha=0.3)
        throughput.barh(positions, [row["samples_per_s"] for row in runs], color=[f"C{i}" for i in positions])
        throughput.set_yticks(positions)
        throughput.set_yticklabels([])
        throughput.invert_yaxis()
        throughput.set_xlabel("samples/s (all ranks)")
        throughput.grid(axis="x", alpha=0.3)
    figure.suptitle(f"DDP {model}, {config['ranks']} ranks, {config['device']}; straggler rank "
                    f"{config['straggler_rank']}, D = {config['delay_ms']:g} ms, p = {config['delay_probability']:g} at "
                    f"{config['delay_points']} point(s)",
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_outputs(report, arguments):
    out = Path(arguments.out)
    out.mkdir(parents=True, exist_ok=True)
    json_path = Path(arguments.json) if arguments.json else out / "train.json"
    add_speedups(report)
    print_tables(report)
    for model in report["config"]["models"]:
        plot(report, model, out / f"{model}.png")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"# wrote {json_path} and {', '.join(str(out / f'{m}.png') for m in report['config']['models'])}")


def main(argv=None):
    settings, arguments, world = parse_arguments(argv)
    started = time.monotonic()
    try:
        if world is not None:
            import torch.distributed as dist

            rank, size, local_rank, local_world = world
            try:
                report = train_rank(rank, size, "env://", local_rank, local_world, settings)
            finally:
                if dist.is_initialized():
                    dist.destroy_process_group()
        else:
            env = dict(straggler_timeout_environment(settings), DPA_LOG=os.environ.get("DPA_LOG", "warn"))
            report = run_ranks(local_rank_main, settings["ranks"], env=env, args=(settings,),
                               timeout=arguments.timeout)[0]
    except (UsageError, RuntimeError) as error:
        return exit_status("dpa.train", error)
    if report is not None:
        write_outputs(report, arguments)
        print(f"# {time.monotonic() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
