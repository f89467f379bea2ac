# Profiling loop, not a benchmark: a CPU all_reduce of argv[2] MiB (AVG, so the values stay those of
# the first random fill) back to back for argv[1] seconds; prints ms per operation.
import sys, time, torch, torch.distributed as dist
import dpa  # noqa: F401
dist.init_process_group("dpa")
rank = dist.get_rank()
gloo = dist.new_group(backend="gloo")
t = torch.randn(int(float(sys.argv[2]) * (1 << 18)))
for _ in range(3):
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
ops, start, end = 0, time.perf_counter(), time.perf_counter() + float(sys.argv[1])
while True:
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    ops += 1
    stop = torch.tensor([1.0 if time.perf_counter() > end else 0.0])
    dist.all_reduce(stop, op=dist.ReduceOp.MAX, group=gloo)
    if stop.item() > 0:
        break
print(f"rank {rank}: {(time.perf_counter() - start) / ops * 1e3:.2f} ms/op over {ops}", flush=True)
dist.destroy_process_group()
