# SPDX-License-Identifier: Apache-2.0
"""all_reduce of dpa, Gloo and (on CUDA, one GPU per rank) NCCL in the same run, every result
verified: python -m dpa.bench.

    python -m dpa.bench [-n RANKS] [--sizes 4KiB,64KiB,1MiB,16MiB,64MiB] [--device cpu|cuda]
                        [--dtype float32|float16|bfloat16|int32] [--iterations N] [--warmup N]
                        [--backends dpa,gloo,nccl] [--barrier auto|gloo] [--json PATH] [--inject-wrong]
    torchrun --nproc_per_node R [--nnodes H ...] -m dpa.bench [same options, no -n]

Every operation reduces (SUM) fresh pseudo-random inputs filled outside the timed region and is
checked against the exact sum of all ranks' inputs (#wrong: elements out of the bound). Two views
per size and backend: back-to-back operations (time, algbw, busbw as nccl-tests defines them) and
single operations after a barrier (p50, p99). docs/benchmark-tools.md describes every option, the
JSON schema and the bounds. Exit status: 0 every result right, 1 a wrong result or a failure, 2 a
usage error.
"""

import argparse
import json
import os
import re
import sys
from pathlib import Path

from .. import __version__
from . import _bench_data, _bench_run
from ._launch import run_ranks
from ._tool_rank import UsageError, exit_status

BACKENDS = ("dpa", "gloo", "nccl")
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
DEFAULT_SIZES = "4KiB,64KiB,1MiB,16MiB,64MiB"
UNITS = {"": 1, "B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30}
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4}


def parse_size(text):
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]iB|B)?\s*", text, flags=re.IGNORECASE)
    if not match:
        raise ValueError(f"--sizes: '{text}' is not a size such as 4096, 4KiB, 16MiB or 1GiB")
    return int(match.group(1)) * UNITS[(match.group(2) or "").upper()]


def torchrun_world():
    """(rank, world, local rank, local world) from torchrun's variables, or None outside torchrun."""
    if not all(name in os.environ for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return None
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return (rank, world, int(os.environ.get("LOCAL_RANK", rank)),
            int(os.environ.get("LOCAL_WORLD_SIZE", world)))


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        prog="python -m dpa.bench", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n", 1)[0] + "\n\n" + __doc__.split("\n\n", 2)[2],
        epilog="under torchrun: torchrun --nproc_per_node R [--nnodes H ...] -m dpa.bench [options, no -n]")
    parser.add_argument("-n", "--ranks", type=int,
                        help="local rank processes to start (default 2); under torchrun the world is torchrun's")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--collective", default="all_reduce", choices=COLLECTIVES,
                        help="what to measure (default all_reduce); reduce_scatter and all_gather sizes are the "
                             "whole tensor, world size shards (nccl-tests' convention), broadcast's from rank 0")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"bytes per tensor (default {DEFAULT_SIZES})")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="tensor device (default cpu)")
    parser.add_argument("--dtype", default="float32", choices=_bench_data.DTYPES, help="default float32")
    parser.add_argument("--iterations", type=int,
                        help="timed operations per size, backend and view (default: 256 MiB / size, within 20..500)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed, verified operations first (default 3)")
    parser.add_argument("--backends",
                        help="comma list of dpa, gloo, nccl (default dpa,gloo, and nccl with --device cuda when "
                             "every rank has a GPU of its own)")
    parser.add_argument("--seed", type=int, default=1, help="seed of every rank's inputs (default 1)")
    parser.add_argument("--pool-bytes", type=parse_size, default=parse_size("256MiB"),
                        help="input tensors filled ahead per rank; more operations take several rounds "
                             "(default 256MiB)")
    parser.add_argument("--barrier", default="auto", choices=["auto", "gloo"],
                        help="before each operation of the latency view: a Gloo barrier, then, where every rank "
                             "shares one host and /dev/shm, a spin barrier in shared memory (auto, the default); "
                             "gloo: the Gloo barrier alone")
    parser.add_argument("--json", help="also write the report to this file (schema: docs/benchmark-tools.md)")
    parser.add_argument("--inject-wrong", action="store_true",
                        help="self-check: corrupt one element of the last rank's result of the first timed "
                             "operation of every size and backend; the run must report it and exit 1")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds the local ranks may run, once started (default 3600; not under torchrun)")
    arguments = parser.parse_args(argv)
    try:
        sizes = [parse_size(s) for s in arguments.sizes.split(",") if s.strip()]
    except ValueError as error:
        parser.error(str(error))
    if not sizes:
        parser.error("--sizes: no sizes given")
    element = ELEMENT_BYTES[arguments.dtype]
    uneven = [s for s in sizes if s == 0 or s % element]
    if uneven:
        parser.error(f"--sizes: {', '.join(map(str, uneven))} B is not a positive multiple of the {element} B "
                     f"of one {arguments.dtype} element")
    backends = None
    if arguments.backends is not None:
        backends = [b.strip() for b in arguments.backends.split(",") if b.strip()]
        unknown = [b for b in backends if b not in BACKENDS]
        if unknown or not backends or len(set(backends)) != len(backends):
            parser.error(f"--backends: '{arguments.backends}': give each of {','.join(BACKENDS)} at most once")
        if "nccl" in backends and arguments.device != "cuda":
            parser.error("--backends nccl needs --device cuda")
    if arguments.iterations is not None and arguments.iterations < 1:
        parser.error(f"--iterations must be at least 1, got {arguments.iterations}")
    if arguments.warmup < 0:
        parser.error(f"--warmup must be at least 0, got {arguments.warmup}")
    if arguments.pool_bytes < 1:
        parser.error("--pool-bytes must be positive")
    world = torchrun_world()
    if world is not None and arguments.ranks is not None and arguments.ranks != world[1]:
        parser.error(f"--ranks {arguments.ranks}: under torchrun the world size is torchrun's (WORLD_SIZE={world[1]})")
    if world is None and (arguments.ranks if arguments.ranks is not None else 2) < 1:
        parser.error(f"--ranks must be at least 1, got {arguments.ranks}")
    if arguments.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda, but torch sees no CUDA device")
    settings = {
        "sizes": sizes, "device": arguments.device, "dtype": arguments.dtype, "iterations": arguments.iterations,
        "warmup": arguments.warmup, "backends": backends, "seed": arguments.seed, "collective": arguments.collective,
        "pool_bytes": arguments.pool_bytes, "inject_wrong": arguments.inject_wrong, "barrier": arguments.barrier,
        "launcher": "torchrun" if world is not None else "local",
    }
    return settings, arguments, world


def print_table(report):
    config = report["config"]
    collective = config.get("collective", "all_reduce")
    factor = {"all_reduce": "2(n-1)/n", "reduce_scatter": "(n-1)/n", "all_gather": "(n-1)/n", "broadcast": "1"}
    print(f"# dpa.bench: {config['ranks']} ranks on {len(config['hosts'])} host(s), {config['device']}, "
          f"{config['dtype']}, {collective}, seed {config['seed']}; every result verified; barrier: {config['barrier']}")
    print(f"# back to back: time per operation (ranks' mean), algbw = bytes / time, busbw = algbw * "
          f"{factor[collective]}; after a barrier: the slowest rank's time of each operation")
    methods = {row["backend"]: row.get("method") for row in report["results"] if row.get("method")}
    if methods:
        print("# carried by: " + ", ".join(f"{backend} {method}" for backend, method in methods.items()))
    print(f"#{'bytes':>9} {'elements':>11} {'backend':>7} {'iters':>6} {'time(us)':>10} {'algbw(GB/s)':>11} "
          f"{'busbw(GB/s)':>11} {'p50(us)':>10} {'p99(us)':>10} {'#wrong':>7}")
    for row in report["results"]:
        print(f" {row['bytes']:>9} {row['elements']:>11} {row['backend']:>7} {row['iterations']:>6} "
              f"{row['time_us']:>10.1f} {row['algbw']:>11.3f} {row['busbw']:>11.3f} {row['p50_us']:>10.1f} "
              f"{row['p99_us']:>10.1f} {row['wrong']:>7}")
    split = [row for row in report["results"] if row["barrier_skew_us"]]
    if split:
        print("# after a barrier, split (ranks on one clock): the barrier's exit skew (last rank's start - "
              "first's) and the operation from the last rank's start to its last result, p50 / p99 (us)")
        for row in split:
            skew, after = row["barrier_skew_us"], row["after_last_start_us"]
            print(f"# {row['bytes']:>9} {row['backend']:>7}  skew {skew['p50_us']:.1f} / {skew['p99_us']:.1f}  "
                  f"after the last start {after['p50_us']:.1f} / {after['p99_us']:.1f}")
    dpa_rows = [row["dpa"] for row in report["results"] if row["dpa"]]

    def total(key):
        return sum(r.get(key, 0) for r in dpa_rows)

    if dpa_rows:
        print(f"# dpa: mode {dpa_rows[0]['mode']}, sizing {dpa_rows[0]['sizing'] or 'configured switch'}; "
              f"{total('retransmissions')} retransmissions ({total('timeouts')} timer expiries, "
              f"{total('syn_probes')} SYN probes), {total('udp_drops')} datagrams dropped by the kernel on "
              f"dpa's sockets")
        if any(r["sizing"] and r["switch_rounds"] is None for r in dpa_rows):
            print("# embedded switch: its counters could not be read in rank 0's process (switch_* null)")
        elif any(r["sizing"] for r in dpa_rows):
            print(f"# embedded switch: {total('switch_probe_answers')} probes answered, "
                  f"{total('switch_duplicates')} resent values it had counted, {total('switch_copies')} "
                  f"copies of stored results, {total('switch_late')} late contributions")
    for backend, reason in config["skipped"].items():
        print(f"# not measured: {backend}: {reason}")
    print(f"# wrong elements in all: {report['wrong']}", flush=True)


def bench_rank(rank, world, init_method, local_rank, local_world, settings, json_path):
    """One rank: measures, and on rank 0 prints the table and writes the report. Returns the
    number of wrong elements of the whole run (the same on every rank)."""
    import torch.distributed as dist

    import dpa  # noqa: F401 - registers the backend

    dist.init_process_group("dpa", init_method=init_method, rank=rank, world_size=world)
    node = _bench_run.Rank(rank, world, local_rank, local_world, settings)
    try:
        report = _bench_run.run(node)
    finally:
        node.close()
    if rank == 0:
        print_table(report)
        if json_path:
            Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
            print(f"# wrote {json_path}", flush=True)
    return report["wrong"]


def local_rank_main(rank, world, init_file, settings, json_path):
    return bench_rank(rank, world, "file://" + init_file, rank, world, settings, json_path)


def main(argv=None):
    settings, arguments, world = parse_arguments(argv)
    try:
        if world is not None:
            import torch.distributed as dist

            rank, size, local_rank, local_world = world
            try:
                wrong = bench_rank(rank, size, "env://", local_rank, local_world, settings, arguments.json)
            finally:
                if dist.is_initialized():
                    dist.destroy_process_group()
        else:
            ranks = arguments.ranks if arguments.ranks is not None else 2
            env = {"DPA_LOG": os.environ.get("DPA_LOG", "warn")}
            wrong = run_ranks(local_rank_main, ranks, env=env, args=(settings, arguments.json),
                              timeout=arguments.timeout)[0]
    except (UsageError, RuntimeError) as error:
        return exit_status("dpa.bench", error)
    if wrong:
        print(f"dpa.bench: {wrong} wrong elements", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
