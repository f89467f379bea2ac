# Diagnostic: the floor of a host-staged CUDA all_reduce on a shared GPU: per operation, after a
# Gloo barrier, copy 4 KiB to pinned memory on a side stream, wait, copy it back, wait. No reduce.
import sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(0)
elements, ops = int(sys.argv[1]), int(sys.argv[2])
t = torch.randn(elements, device="cuda"); host = torch.empty(elements, pin_memory=True)
side = torch.cuda.Stream(priority=-1)
times = []
for i in range(ops + 50):
    dist.barrier()
    s = time.perf_counter()
    ev = torch.cuda.Event(); ev.record()
    with torch.cuda.stream(side):
        side.wait_event(ev)
        host.copy_(t, non_blocking=True)
    side.synchronize()
    with torch.cuda.stream(side):
        t.copy_(host, non_blocking=True)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if i >= 50: times.append(time.perf_counter() - s)
T = torch.tensor(times, dtype=torch.float64)
allt = [torch.empty_like(T) for _ in range(world)]; dist.all_gather(allt, T)
if rank == 0:
    m = torch.stack(allt).max(0).values.sort().values
    print(f"copy floor {elements*4} B, {world} ranks: slowest rank p50 {m[len(m)//2]*1e6:.1f} us p99 {m[int(.99*len(m))]*1e6:.1f} us")
dist.destroy_process_group()
