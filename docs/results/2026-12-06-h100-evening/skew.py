# Diagnostic, not a benchmark: where the tail of "per operation after a barrier" comes from.
# Each rank records its start (after the barrier) and end of every all_reduce on the host's
# monotonic clock (shared by the processes of one host); rank 0 splits the slowest rank's time
# into the barrier's exit skew and the time from the last rank's start.
import os, sys, time, torch, torch.distributed as dist
import dpa  # noqa: F401
dist.init_process_group("dpa")
rank, world = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
ops, elements, barrier_kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
backends = sys.argv[4].split(",")
tag = os.environ.get("TAG", "")
def barrier():
    if barrier_kind == "gloo":
        dist.barrier(group=gloo)
    else:
        dist.all_reduce(torch.zeros(1))
def pct(t, q):
    v = t.double().sort().values
    return v[min(len(v) - 1, int(q / 100 * len(v)))].item() / 1000
for backend in backends:
    group = None if backend == "dpa" else gloo
    pool = [torch.empty(elements) for _ in range(64)]
    starts, ends = [], []
    for i in range(ops + 200):
        if i % 64 == 0:
            for p in pool:
                p.normal_()
        t = pool[i % 64]
        barrier()
        s = time.perf_counter_ns()
        dist.all_reduce(t, group=group)
        e = time.perf_counter_ns()
        if i >= 200:
            starts.append(s); ends.append(e)
    S = torch.tensor(starts, dtype=torch.int64); E = torch.tensor(ends, dtype=torch.int64)
    all_s = [torch.empty_like(S) for _ in range(world)]; all_e = [torch.empty_like(E) for _ in range(world)]
    dist.all_gather(all_s, S, group=gloo); dist.all_gather(all_e, E, group=gloo)
    if rank == 0:
        S = torch.stack(all_s); E = torch.stack(all_e)
        own = E - S
        slowest = own.max(0).values
        skew = S.max(0).values - S.min(0).values
        from_last = E.max(0).values - S.max(0).values
        first = S.argmin(0)
        row = lambda name, t: f"{name} p50 {pct(t,50):8.1f} p90 {pct(t,90):8.1f} p99 {pct(t,99):8.1f}"
        print(f"[{tag} barrier={barrier_kind} {backend} {elements*4}B]")
        print("  " + row("slowest  ", slowest) + f"   p99/p50 {pct(slowest,99)/pct(slowest,50):.2f}")
        print("  " + row("skew     ", skew))
        print("  " + row("from_last", from_last))
        print("  " + row("last rank own", own.gather(0, S.argmax(0, keepdim=True))[0]))
        print("  " + row("first rank own", own.gather(0, first.unsqueeze(0))[0]))
        sys.stdout.flush()
dist.destroy_process_group()
