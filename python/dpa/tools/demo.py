# SPDX-License-Identifier: Apache-2.0
"""The straggler training demo: DDP on scikit-learn's handwritten digits with one slow rank.

    python -m dpa.demo [-n 4] [--epochs 30] [--out dpa-demo]

Trains the same model from the same seed four times, each with a fresh set of rank processes:
Gloo, dpa with K = N, dpa with reactive fastest-K and dpa with preemptive fastest-K (K = N - 1 by
default). One rank sleeps before its forward pass at randomly chosen steps (the same steps in every
run). Prints time per step, time to the target test accuracy and final accuracy for each run, and
writes demo.json and demo.png (test accuracy against training wall time) to --out.

What happens to the slow rank with fastest-K: its gradients are left out of the blocks that
complete without it, and the blocks it arrives too late for keep its own gradient (dpa.last_stats()
reports them as missed). With reactive fastest-K the others wait the switch's straggler timeout
before leaving it out, so it catches up; with preemptive fastest-K it stays behind and trains on
its own gradients, which the demo reports as the largest parameter difference to rank 0;
--resync-every E copies rank 0's parameters to every rank after every E epochs (dpa.resynchronise),
at the price of waiting there for the slow rank.
"""

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from .. import __version__
from ._launch import run_ranks

RUNS = {
    # name: (backend, fastest-K, preemptive); K = None waits for every rank.
    "gloo": ("gloo", None, False),
    "dpa": ("dpa", None, False),
    "reactive": ("dpa", "k", False),
    "preemptive": ("dpa", "k", True),
}
LABELS = {
    "gloo": "Gloo",
    "dpa": "dpa, K = N",
    "reactive": "dpa, reactive fastest-K",
    "preemptive": "dpa, preemptive fastest-K",
}


def load_digits_split(seed):
    """The 1797 8x8 digit images scaled to [0, 1], split 80/20 with stratification."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    images, labels = load_digits(return_X_y=True)
    return train_test_split(
        images.astype("float32") / 16.0, labels, test_size=0.2, random_state=seed, stratify=labels
    )


def make_model(seed, hidden):
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10)
    )


def delay_schedule(settings, steps):
    """Seconds the slow rank sleeps before each step: 0, or delay_ms x U(0.5, 2) with the given
    probability (the injection FluxReduce's training experiments use), fixed by the seed."""
    chooser = random.Random(settings["seed"])
    delays = []
    for _ in range(steps):
        delayed = chooser.random() < settings["delay_probability"]
        scale = chooser.uniform(0.5, 2.0)
        delays.append(settings["delay_ms"] * scale / 1000.0 if delayed else 0.0)
    return delays


def train_worker(rank, world, init_file, run, settings):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import dpa

    backend, k_choice, preemptive = RUNS[run]
    device = torch.device(settings["device"])
    if device.type == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(backend, init_method="file://" + init_file, rank=rank, world_size=world)

    train_x, _, train_y, _ = load_digits_split(settings["seed"])
    train_x = torch.from_numpy(train_x).to(device)
    train_y = torch.from_numpy(train_y).to(device)
    batch = settings["batch"]
    steps_per_epoch = len(train_x) // (batch * world)
    total_steps = steps_per_epoch * settings["epochs"]
    delays = delay_schedule(settings, total_steps)

    model = make_model(settings["seed"], settings["hidden"]).to(device)
    ddp = DistributedDataParallel(model)
    if backend == "dpa":
        k = settings["k"] if k_choice == "k" else None
        dpa.register_ddp_hook(ddp, k=k, preemptive=preemptive)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=settings["lr"], momentum=0.9)
    loss_function = torch.nn.CrossEntropyLoss()

    # Rank 0's clock runs only while it trains: snapshots taken at epoch ends are evaluated after
    # the run, so that evaluating never makes rank 0 the straggler.
    step_seconds, snapshots = [], []
    totals = {"ops": 0, "ops_partial": 0, "blocks": 0, "blocks_partial": 0, "blocks_missed": 0,
              "contributors": 0, "retransmissions": 0}
    shuffler = torch.Generator().manual_seed(settings["seed"])
    clock = 0.0
    global_step = 0
    dist.barrier()
    for epoch in range(settings["epochs"]):
        order = torch.randperm(len(train_x), generator=shuffler).to(device)
        mine = order[rank : steps_per_epoch * batch * world : world]
        for step in range(steps_per_epoch):
            started = time.perf_counter()
            if rank == settings["straggler"] and delays[global_step] > 0:
                time.sleep(delays[global_step])
            index = mine[step * batch : (step + 1) * batch]
            optimizer.zero_grad(set_to_none=True)
            loss_function(ddp(train_x[index]), train_y[index]).backward()
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - started
            step_seconds.append(seconds)
            clock += seconds
            global_step += 1
            if backend == "dpa":
                stats = dpa.last_stats()
                totals["ops"] += 1
                totals["ops_partial"] += stats["blocks_partial"] > 0
                totals["blocks"] += stats["blocks"]
                totals["blocks_partial"] += stats["blocks_partial"]
                totals["blocks_missed"] += stats["blocks_missed"]
                totals["contributors"] += stats["min_contributors"]
                totals["retransmissions"] += stats["retransmissions"]
        if settings["resync_every"] and (epoch + 1) % settings["resync_every"] == 0:
            started = time.perf_counter()
            dpa.resynchronise(model, src=0)
            clock += time.perf_counter() - started
        if rank == 0:
            snapshots.append((epoch + 1, clock, [p.detach().cpu().clone() for p in model.parameters()]))
    finished_at = clock
    # The slow rank may still be behind; everyone meets here before the replicas are compared.
    dist.barrier()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    reference = flat.clone()
    dist.broadcast(reference, 0)
    drift = (flat - reference).abs().max().item()
    return {
        "rank": rank,
        "step_seconds": step_seconds,
        "train_seconds": finished_at,
        "snapshots": [(epoch, seconds, [p.numpy() for p in params]) for epoch, seconds, params in snapshots],
        "dpa": totals if backend == "dpa" else None,
        "drift_from_rank0": drift,
    }


def evaluate(snapshot_params, settings):
    """Test accuracy of rank 0's parameters at each snapshot."""
    import torch

    _, test_x, _, test_y = load_digits_split(settings["seed"])
    model = make_model(settings["seed"], settings["hidden"])
    test_x, test_y = torch.from_numpy(test_x), torch.from_numpy(test_y)
    with torch.no_grad():
        for parameter, value in zip(model.parameters(), snapshot_params):
            parameter.copy_(torch.from_numpy(value))
        return (model(test_x).argmax(dim=1) == test_y).float().mean().item()


def summarise(run, results, settings):
    rank0 = results[0]
    curve = [
        {"epoch": epoch, "seconds": seconds, "accuracy": evaluate(params, settings)}
        for epoch, seconds, params in rank0["snapshots"]
    ]
    reached = next((point for point in curve if point["accuracy"] >= settings["target_accuracy"]), None)
    steps = len(rank0["step_seconds"])
    summary = {
        "run": run,
        "label": LABELS[run],
        "steps": steps,
        "ms_per_step": 1000.0 * rank0["train_seconds"] / steps,
        "ms_per_step_median": 1000.0 * sorted(rank0["step_seconds"])[steps // 2],
        "train_seconds": rank0["train_seconds"],
        "seconds_to_target": reached["seconds"] if reached else None,
        "epochs_to_target": reached["epoch"] if reached else None,
        "final_accuracy": curve[-1]["accuracy"],
        "curve": curve,
        "straggler_drift": results[settings["straggler"]]["drift_from_rank0"],
    }
    if rank0["dpa"] is not None:
        ops = rank0["dpa"]["ops"]
        summary["rank0_ops_completed_without_all"] = rank0["dpa"]["ops_partial"]
        summary["rank0_blocks"] = rank0["dpa"]["blocks"]
        summary["rank0_blocks_partial"] = rank0["dpa"]["blocks_partial"]
        summary["rank0_mean_min_contributors"] = rank0["dpa"]["contributors"] / max(ops, 1)
        summary["straggler_blocks_missed"] = results[settings["straggler"]]["dpa"]["blocks_missed"]
    return summary


def plot(summaries, settings, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, bars) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [2, 1]})
    for summary in summaries:
        points = summary["curve"]
        curves.plot([p["seconds"] for p in points], [p["accuracy"] for p in points], marker=".",
                    label=summary["label"])
    curves.axhline(settings["target_accuracy"], color="grey", linestyle="--", linewidth=0.8,
                   label=f"target {settings['target_accuracy']:.2f}")
    curves.set_xlabel("training wall time of rank 0 (s)")
    curves.set_ylabel("test accuracy")
    lowest = min(p["accuracy"] for s in summaries for p in s["curve"])
    curves.set_ylim(max(0.0, lowest - 0.05), 1.0)
    curves.grid(alpha=0.3)
    curves.legend(loc="lower right")
    curves.set_title(
        f"DDP on digits, {settings['world']} ranks, rank {settings['straggler']} sleeps "
        f"{settings['delay_ms']:g} ms x U(0.5, 2) at {100 * settings['delay_probability']:g} % of steps",
        fontsize=9,
    )
    bars.bar([s["run"] for s in summaries], [s["ms_per_step"] for s in summaries],
             color=[f"C{i}" for i in range(len(summaries))])
    bars.set_ylabel("time per step (ms)")
    bars.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def parse_arguments(argv):
    parser = argparse.ArgumentParser(prog="python -m dpa.demo", description=__doc__.split("\n\n")[0])
    # Flag names shared with python -m dpa.bench and dpa-bench; the older names still work.
    parser.add_argument("-n", "--ranks", "--world", dest="ranks", type=int, default=4, help="ranks (default 4)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--runs", default="gloo,dpa,reactive,preemptive",
                        help="comma-separated subset of gloo,dpa,reactive,preemptive")
    parser.add_argument("--k", type=int, help="fastest-K for the reactive and preemptive runs (default ranks - 1)")
    parser.add_argument("--straggler-rank", "--straggler", dest="straggler", type=int,
                        help="the slow rank (default the last)")
    parser.add_argument("--straggler-delay-ms", "--delay-ms", dest="delay_ms", type=float, default=50.0,
                        help="the slow rank sleeps this x U(0.5, 2) ms (default 50)")
    parser.add_argument("--delay-probability", type=float, default=0.15,
                        help="share of steps at which the slow rank sleeps (default 0.15)")
    parser.add_argument("--straggler-timeout-ms", type=float, default=2.0,
                        help="how long the embedded switch waits for the last ranks before a reactive "
                             "fastest-K block completes without them (DPA_STRAGGLER_TIMEOUT_US; default 2)")
    parser.add_argument("--resync-every", type=int, default=0,
                        help="copy rank 0's parameters to all ranks every this many epochs (default 0: never)")
    parser.add_argument("--epochs", type=int, default=30, help="epochs (default 30)")
    parser.add_argument("--batch", type=int, default=16, help="samples per rank and step (default 16)")
    parser.add_argument("--hidden", type=int, default=128, help="hidden layer width (default 128)")
    parser.add_argument("--lr", type=float, default=0.02, help="SGD learning rate, momentum 0.9 (default 0.02)")
    parser.add_argument("--target-accuracy", type=float, default=0.95, help="default 0.95")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="default cpu")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per run (default 600)")
    parser.add_argument("--out", default="dpa-demo", help="directory for demo.json and demo.png")
    arguments = parser.parse_args(argv)
    runs = [run.strip() for run in arguments.runs.split(",") if run.strip()]
    unknown = [run for run in runs if run not in RUNS]
    if unknown or not runs:
        parser.error(f"--runs: unknown run(s) {unknown}; choose from {','.join(RUNS)}")
    if arguments.ranks < 2:
        parser.error("--ranks must be at least 2")
    k = arguments.ranks - 1 if arguments.k is None else arguments.k
    if not 1 <= k <= arguments.ranks:
        parser.error(f"--k must be in 1..{arguments.ranks}, got {k}")
    straggler = arguments.ranks - 1 if arguments.straggler is None else arguments.straggler
    if not 0 <= straggler < arguments.ranks:
        parser.error(f"--straggler-rank must be a rank in 0..{arguments.ranks - 1}, got {straggler}")
    if not 0.0 <= arguments.delay_probability <= 1.0:
        parser.error("--delay-probability must be in [0, 1]")
    if arguments.resync_every < 0:
        parser.error("--resync-every must be >= 0")
    if arguments.straggler_timeout_ms <= 0:
        parser.error("--straggler-timeout-ms must be positive")
    settings = {
        "world": arguments.ranks, "k": k, "straggler": straggler, "delay_ms": arguments.delay_ms,
        "delay_probability": arguments.delay_probability, "epochs": arguments.epochs,
        "batch": arguments.batch, "hidden": arguments.hidden, "lr": arguments.lr,
        "target_accuracy": arguments.target_accuracy, "device": arguments.device,
        "resync_every": arguments.resync_every, "seed": arguments.seed,
        "straggler_timeout_ms": arguments.straggler_timeout_ms,
    }
    return runs, settings, arguments


def rank_environment(settings):
    """The embedded switch's straggler timeout for the reactive run; a configured switch
    (DPA_SWITCH, DPA_CONFIG) keeps its own."""
    return {
        "DPA_LOG": os.environ.get("DPA_LOG", "warn"),
        "DPA_STRAGGLER_TIMEOUT_US": str(max(1, round(1000 * settings["straggler_timeout_ms"]))),
    }


def main(argv=None):
    runs, settings, arguments = parse_arguments(argv)
    if settings["device"] == "cuda":
        import torch

        if not torch.cuda.is_available():
            # A usage error, as dpa.train says it: exit status 2.
            print("python -m dpa.demo: error: --device cuda, but torch sees no CUDA device", file=sys.stderr)
            sys.exit(2)
    out = Path(arguments.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"dpa demo: {settings['world']} ranks, rank {settings['straggler']} sleeps "
          f"{settings['delay_ms']:g} ms x U(0.5, 2) before {100 * settings['delay_probability']:g} % of "
          f"steps; fastest-K runs use K = {settings['k']}, reactive after "
          f"{settings['straggler_timeout_ms']:g} ms", flush=True)
    summaries = []
    for run in runs:
        started = time.monotonic()
        results = run_ranks(train_worker, settings["world"], env=rank_environment(settings),
                            args=(run, settings), timeout=arguments.timeout)
        summary = summarise(run, results, settings)
        summaries.append(summary)
        print(f"  {LABELS[run]:<27} done in {time.monotonic() - started:5.1f} s", flush=True)

    print()
    header = (f"{'run':<27} {'ms/step':>8} {'median':>7} {'train s':>8} "
              f"{'to ' + format(settings['target_accuracy'], '.2f') + ' (s)':>11} {'final acc':>9} "
              f"{'partial ops':>11} {'drift':>9}")
    print(header)
    for s in summaries:
        to_target = f"{s['seconds_to_target']:.2f}" if s["seconds_to_target"] is not None else "never"
        partial = f"{s['rank0_ops_completed_without_all']}/{s['steps']}" if "rank0_blocks" in s else "-"
        print(f"{s['label']:<27} {s['ms_per_step']:8.2f} {s['ms_per_step_median']:7.2f} "
              f"{s['train_seconds']:8.2f} {to_target:>11} {s['final_accuracy']:9.4f} {partial:>11} "
              f"{s['straggler_drift']:9.2e}")
    print("\nms/step: rank 0's mean (median) training time per step; partial ops: rank 0's all-reduces that\n"
          "completed without every rank; drift: largest parameter difference between the slow rank and\n"
          "rank 0 at the end.")

    report = {"settings": settings, "runs": summaries}
    (out / "demo.json").write_text(json.dumps(report, indent=2))
    plot(summaries, settings, out / "demo.png")
    print(f"\nwrote {out / 'demo.json'} and {out / 'demo.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
