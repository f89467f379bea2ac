#!/usr/bin/env python3
"""Gloo all_reduce baseline on this machine, measured the way dpa-bench measures dpa.

Starts N local ranks (torch.distributed, backend "gloo", CPU tensors, TCP store on
127.0.0.1) and reports, per size, the median and p99 time of an fp32 SUM all_reduce and
the goodput elements x 32 bit / median time, as dpa-bench does.

    /usr/bin/python3 scripts/gloo-baseline.py --ranks 4 --sizes 4KiB,64MiB
"""
import argparse
import json
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_size(text):
    units = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}
    number = text.rstrip("KMGiBkmgib")
    return int(float(number) * units[text[len(number):].lower()])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, args, port, queue):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ranks)
    for size in args.sizes.split(","):
        count = max(1, parse_size(size) // 4)
        tensor = torch.ones(count, dtype=torch.float32)
        times = []
        for i in range(args.warmup + args.iterations):
            tensor.fill_(1.0)
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(tensor)
            elapsed = time.perf_counter() - start
            if i >= args.warmup:
                times.append(elapsed)
        if rank == 0:
            times.sort()
            p50 = statistics.median(times)
            queue.put({"backend": "gloo", "ranks": args.ranks, "bytes": count * 4,
                       "p50_us": p50 * 1e6, "p99_us": times[min(len(times) - 1, int(0.99 * (len(times) - 1) + 0.5))] * 1e6,
                       "goodput_gbps": count * 32 / p50 / 1e9})
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--sizes", default="4KiB,64KiB,1MiB,16MiB,64MiB")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(rank_main, args=(args, free_port(), queue), nprocs=args.ranks, join=True)
    results = []
    while not queue.empty():
        results.append(queue.get())
    print(f"gloo baseline: {args.ranks} ranks, float32, torch {torch.__version__}, {args.iterations} iterations")
    print(f"{'bytes':>10} {'p50 us':>10} {'p99 us':>10} {'Gbit/s':>8}")
    for r in results:
        print(f"{r['bytes']:>10} {r['p50_us']:>10.1f} {r['p99_us']:>10.1f} {r['goodput_gbps']:>8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
