"""all_reduce goodput of dpa and Gloo through torch.distributed, in the same run.

    python -m dpa.bench [--worlds 2,4] [--sizes 4KiB,...,64MiB] [--modes worksteal,pipeline,hybrid,simple]
                        [--device cpu|cuda] [--dtype float32] [--json FILE]

For every world size it starts that many rank processes per dpa execution mode (DPA_TORCH_MODE
is read when the group is created). The ranks time back-to-back synchronous all_reduce calls (SUM)
of each size on the dpa group and, in the first process set of each world, on a Gloo group built
from the same store. Time per operation is the slowest rank's; goodput is elements x 32 bit / time,
as SwitchML reports it. With no DPA_SWITCH or DPA_CONFIG, rank 0 starts the embedded switch.
"""

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

from ._launch import run_ranks

MODES = ("worksteal", "pipeline", "hybrid", "simple")
DTYPES = ("float32", "float16", "bfloat16", "int32")
DEFAULT_SIZES = "4KiB,16KiB,64KiB,256KiB,1MiB,4MiB,16MiB,64MiB"
UNITS = {"": 1, "B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30}


def parse_size(text):
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]iB|B)?\s*", text, flags=re.IGNORECASE)
    if not match:
        raise ValueError(f"--sizes: '{text}' is not a size such as 4096, 4KiB, 16MiB or 1GiB")
    return int(match.group(1)) * UNITS[(match.group(2) or "").upper()]


def format_size(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


def iterations_for(size, settings):
    """Enough operations that each size moves about --bytes-per-size, within 3..max."""
    return max(3, min(settings["max_iterations"], settings["bytes_per_size"] // max(size, 1)))


def timed_allreduce(tensor, group, iterations, warmup, synchronize, gloo):
    """Seconds per operation of `iterations` back-to-back all_reduce calls, the slowest rank's."""
    import torch
    import torch.distributed as dist

    for _ in range(warmup):
        dist.all_reduce(tensor, group=group)
    synchronize()
    dist.barrier(group=gloo)
    started = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor, group=group)
    synchronize()
    elapsed = torch.tensor([(time.perf_counter() - started) / iterations], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=gloo)
    return elapsed.item()


def bench_worker(rank, world, init_file, mode, with_gloo, settings):
    import torch
    import torch.distributed as dist

    import dpa

    device = torch.device(settings["device"])
    if device.type == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    dist.init_process_group("dpa", init_method="file://" + init_file, rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    dtype = getattr(torch, settings["dtype"])
    groups = [("dpa", None)] + ([("gloo", gloo)] if with_gloo else [])

    group = dist.distributed_c10d._get_default_group()
    backend = group._get_backend(device) if hasattr(group, "_get_backend") else group
    rows = []
    for size in settings["sizes"]:
        elements = size // torch.tensor([], dtype=dtype).element_size()
        tensor = torch.ones(elements, dtype=dtype, device=device)
        iterations = iterations_for(size, settings)
        for name, group in groups:
            drops_before, retransmissions_before = dpa.udp_drops(), dpa.total_retransmissions()
            seconds = timed_allreduce(tensor, group, iterations, settings["warmup"], synchronize, gloo)
            losses = torch.tensor([dpa.udp_drops() - drops_before,
                                   dpa.total_retransmissions() - retransmissions_before])
            dist.all_reduce(losses, group=gloo)
            rows.append({
                "world": world, "backend": name, "mode": mode if name == "dpa" else None,
                "device": device.type, "dtype": settings["dtype"], "bytes": size,
                "elements": elements, "iterations": iterations, "seconds_per_op": seconds,
                "goodput_gbps": elements * 32 / seconds / 1e9,
                "udp_drops": int(losses[0]) if name == "dpa" else None,
                "retransmissions": int(losses[1]) if name == "dpa" else None,
                "sizing": backend.sizing if name == "dpa" else None,
            })
    return rows


def parse_arguments(argv):
    parser = argparse.ArgumentParser(prog="python -m dpa.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--worlds", default="2,4", help="comma-separated world sizes (default 2,4)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"bytes per tensor (default {DEFAULT_SIZES})")
    parser.add_argument("--modes", default=",".join(MODES), help="dpa execution modes (default all four)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="tensor device (default cpu)")
    parser.add_argument("--dtype", default="float32", choices=DTYPES, help="default float32")
    parser.add_argument("--no-gloo", action="store_true", help="measure dpa only")
    parser.add_argument("--warmup", type=int, default=2, help="untimed operations per size (default 2)")
    parser.add_argument("--bytes-per-size", type=parse_size, default=parse_size("256MiB"),
                        help="data moved per size and backend, sets the iterations (default 256MiB)")
    parser.add_argument("--max-iterations", type=int, default=200, help="default 200")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per process set")
    parser.add_argument("--json", help="also write the results to this file")
    arguments = parser.parse_args(argv)
    try:
        worlds = [int(w) for w in arguments.worlds.split(",") if w.strip()]
        sizes = [parse_size(s) for s in arguments.sizes.split(",") if s.strip()]
    except ValueError as error:
        parser.error(str(error))
    if not worlds or any(w < 1 for w in worlds):
        parser.error(f"--worlds: world sizes must be positive integers, got '{arguments.worlds}'")
    if not sizes:
        parser.error("--sizes: no sizes given")
    modes = [m.strip() for m in arguments.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        parser.error(f"--modes: unknown mode(s) {unknown}; choose from {','.join(MODES)}")
    if arguments.warmup < 0 or arguments.max_iterations < 3:
        parser.error("--warmup must be >= 0 and --max-iterations >= 3")
    settings = {
        "sizes": sizes, "device": arguments.device, "dtype": arguments.dtype,
        "warmup": arguments.warmup, "bytes_per_size": arguments.bytes_per_size,
        "max_iterations": arguments.max_iterations,
    }
    return worlds, modes, settings, arguments


def print_table(rows, world, modes, with_gloo):
    columns = [("dpa", mode) for mode in modes] + ([("gloo", None)] if with_gloo else [])
    by_key = {(r["backend"], r["mode"], r["bytes"]): r for r in rows if r["world"] == world}
    names = [f"dpa {mode}" if backend == "dpa" else "gloo" for backend, mode in columns]
    print(f"\nworld {world}: time per all_reduce (us) / goodput (Gbit/s)")
    print(f"{'size':>8} " + " ".join(f"{name:>20}" for name in names))
    for size in sorted({r["bytes"] for r in rows if r["world"] == world}):
        cells = []
        for backend, mode in columns:
            row = by_key.get((backend, mode, size))
            cells.append(f"{row['seconds_per_op'] * 1e6:10.1f} / {row['goodput_gbps']:6.2f}" if row else "-")
        print(f"{format_size(size):>8} " + " ".join(f"{cell:>20}" for cell in cells))
    dpa_rows = [r for r in rows if r["world"] == world and r["backend"] == "dpa"]
    if dpa_rows:
        print(f"sizing: {dpa_rows[0]['sizing'] or 'configured switch'}")
        print(f"all ranks, sizes and modes: {sum(r['retransmissions'] for r in dpa_rows)} "
              f"retransmissions, {sum(r['udp_drops'] for r in dpa_rows)} datagrams dropped by "
              "the kernel on the dpa sockets")


def main(argv=None):
    worlds, modes, settings, arguments = parse_arguments(argv)
    if settings["device"] == "cuda":
        import torch

        if not torch.cuda.is_available():
            sys.exit("dpa.bench: --device cuda, but torch sees no CUDA device")
    rows = []
    for world in worlds:
        for index, mode in enumerate(modes):
            with_gloo = index == 0 and not arguments.no_gloo
            env = {"DPA_TORCH_MODE": mode, "DPA_LOG": os.environ.get("DPA_LOG", "warn")}
            started = time.monotonic()
            per_rank = run_ranks(bench_worker, world, env=env, args=(mode, with_gloo, settings),
                                 timeout=arguments.timeout)
            rows.extend(per_rank[0])
            print(f"world {world}, mode {mode}{' and gloo' if with_gloo else ''}: "
                  f"{time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
        print_table(rows, world, modes, not arguments.no_gloo)
    if arguments.json:
        Path(arguments.json).write_text(json.dumps({"settings": settings, "results": rows}, indent=2))
        print(f"\nwrote {arguments.json}")
    return rows


if __name__ == "__main__":
    main()
