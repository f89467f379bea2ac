#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Gloo all_reduce baseline on this machine, measured the way dpa-bench measures dpa.

Starts N local ranks (torch.distributed, backend "gloo", CPU tensors, TCP store on 127.0.0.1).
Per size and operation every rank fills its tensor with its own integer-valued float32 inputs
outside the timed region, waits at a barrier, times one SUM all_reduce and checks every element
of its result against the exact sum. Reported per size: the median and p99 over the operations of
the slowest rank's time (each operation's maximum over the ranks), the goodput elements x 32 bit /
that median, and the wrong elements of all ranks.

    /usr/bin/python3 scripts/gloo-baseline.py -n 4 --sizes 4KiB,64MiB

Exit status: 0 every result right, 1 a wrong result or a rank that failed, 2 a usage error.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}
# Inputs are integers in [-INPUT_RANGE - 30, INPUT_RANGE + 30]: float32 sums of up to 2^13 ranks stay exact.
INPUT_RANGE = 1 << 10


def version():
    for candidate in (Path(__file__).resolve().parent.parent / "VERSION",
                      Path(__file__).resolve().parent.parent / "share" / "dpa" / "VERSION"):
        if candidate.is_file():
            return candidate.read_text().strip()
    return "unknown"


def parse_size(text):
    number = text.rstrip("KMGiBkmgib")
    unit = text[len(number):].lower()
    try:
        value = int(float(number) * SIZE_UNITS[unit])
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"'{text}' is not a size such as 4KiB, 1MiB or 4096") from None
    if value < 4:
        raise argparse.ArgumentTypeError(f"'{text}' is smaller than one float32 element (4 bytes)")
    return value


def size_list(text):
    return [parse_size(item) for item in text.split(",") if item]


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def non_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def base_input(count, operation):
    """What every rank's input of one operation shares: integers in [-INPUT_RANGE, INPUT_RANGE)."""
    import torch

    index = torch.arange(count, dtype=torch.int64)
    return (((index * 7919 + operation * 1299709) % (2 * INPUT_RANGE)) - INPUT_RANGE).to(torch.float32)


def rank_offset(rank):
    """Each rank's own part, distinct for up to 61 ranks, so a rank summed twice or left out shows."""
    return (rank * 131) % 61 - 30


def expected_sum(base, ranks):
    return base.double() * ranks + sum(rank_offset(rank) for rank in range(ranks))


def percentile(sorted_values, fraction):
    return sorted_values[min(len(sorted_values) - 1, int(fraction * (len(sorted_values) - 1) + 0.5))]


def rank_main(rank, args, port, queue):
    import torch
    import torch.distributed as dist

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ranks)
    for size in args.sizes:
        count = max(1, size // 4)
        tensor = torch.empty(count, dtype=torch.float32)
        times = torch.zeros(args.iterations, dtype=torch.float64)
        wrong = torch.zeros(1, dtype=torch.int64)
        for operation in range(args.warmup + args.iterations):
            base = base_input(count, operation)
            torch.add(base, rank_offset(rank), out=tensor)
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(tensor)
            elapsed = time.perf_counter() - start
            if args.inject_wrong and rank == args.ranks - 1 and operation == args.warmup:
                tensor[count // 2] += 1  # the self-check: one wrong element per size
            wrong += int((tensor.double() != expected_sum(base, args.ranks)).sum())
            if operation >= args.warmup:
                times[operation - args.warmup] = elapsed
        dist.all_reduce(times, op=dist.ReduceOp.MAX)  # each operation's slowest rank
        dist.all_reduce(wrong)
        if rank == 0:
            slowest = sorted(times.tolist())
            p50 = statistics.median(slowest)
            queue.put({"backend": "gloo", "ranks": args.ranks, "bytes": count * 4, "elements": count,
                       "iterations": args.iterations, "warmup": args.warmup,
                       "p50_us": p50 * 1e6, "p99_us": percentile(slowest, 0.99) * 1e6,
                       "goodput_gbps": count * 32 / p50 / 1e9, "wrong": int(wrong.item())})
    dist.destroy_process_group()


def parse_arguments(argv):
    parser = argparse.ArgumentParser(prog="gloo-baseline.py", description=__doc__.splitlines()[0],
                                     epilog="Exit status: 0 every result right, 1 a wrong result or a rank that "
                                            "failed, 2 a usage error.")
    parser.add_argument("-n", "--ranks", type=positive, default=2, help="local ranks (default: 2)")
    parser.add_argument("--sizes", type=size_list, default=size_list("4KiB,64KiB,1MiB,16MiB,64MiB"),
                        help="comma list of tensor sizes in bytes, KiB, MiB or GiB (default: 4KiB,64KiB,1MiB,16MiB,64MiB)")
    parser.add_argument("--iterations", type=positive, default=20, help="timed operations per size (default: 20)")
    parser.add_argument("--warmup", type=non_negative, default=3, help="untimed operations per size first (default: 3)")
    parser.add_argument("--json", metavar="FILE", help="also write the results to FILE as JSON")
    parser.add_argument("--inject-wrong", action="store_true",
                        help="the verification's self-check: the last rank changes one element of its first timed "
                             "result per size, so the run must report one wrong element per size and exit 1")
    parser.add_argument("--version", action="version", version=f"gloo-baseline.py {version()}")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_arguments(argv)
    import torch
    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    try:
        mp.spawn(rank_main, args=(args, port, queue), nprocs=args.ranks, join=True)
    except Exception as error:  # a rank raised or died: its traceback is above
        print(f"gloo-baseline.py: a rank failed: {error}", file=sys.stderr)
        return 1
    results = []
    while not queue.empty():
        results.append(queue.get())
    print(f"gloo baseline: {args.ranks} ranks, float32 SUM, torch {torch.__version__}, "
          f"{args.iterations} iterations after {args.warmup}, the slowest rank's times")
    print(f"{'bytes':>10} {'p50 us':>10} {'p99 us':>10} {'Gbit/s':>8} {'#wrong':>7}")
    for row in results:
        print(f"{row['bytes']:>10} {row['p50_us']:>10.1f} {row['p99_us']:>10.1f} {row['goodput_gbps']:>8.2f} "
              f"{row['wrong']:>7}")
    if args.json:
        with open(args.json, "w") as output:
            json.dump(results, output, indent=2)
    wrong = sum(row["wrong"] for row in results)
    if wrong:
        print(f"gloo-baseline.py: {wrong} wrong elements", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
