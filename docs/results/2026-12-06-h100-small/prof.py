# Profiling loop, not a benchmark: 4 KiB CPU all_reduce back to back in rounds of 64 tensors
# refilled with fresh random values outside the timed region. Reports, per rank, the wall time
# per operation and the part spent inside the backend (TensorAllreduce's own clock).
import os, sys, time, torch, torch.distributed as dist
import dpa  # noqa: F401
from dpa import _C
dist.init_process_group("dpa")
rank = dist.get_rank()
gloo = dist.new_group(backend="gloo")
seconds_total = float(sys.argv[1])
elements = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
pool = [torch.empty(elements) for _ in range(64)]
def round_():
    for t in pool:
        t.normal_()
    dist.barrier()
    s = time.perf_counter()
    for t in pool:
        dist.all_reduce(t)
    return time.perf_counter() - s
for _ in range(30):
    round_()
before = _C.total_stats()
wall = 0.0
ops = 0
end = time.perf_counter() + seconds_total
while True:
    wall += round_()
    ops += 64
    stop = torch.tensor([1.0 if time.perf_counter() > end else 0.0])
    dist.all_reduce(stop, op=dist.ReduceOp.MAX, group=gloo)  # every rank stops on the same round
    if stop.item() > 0:
        break
after = _C.total_stats()
inside = (after["seconds"] - before["seconds"]) / (after["operations"] - before["operations"])
print(f"rank {rank} wall {wall / ops * 1e6:.1f} us/op inside {inside * 1e6:.1f} us/op over {ops}", flush=True)
dist.destroy_process_group()
