# Diagnostic: the host's memory bandwidth as P processes each copying a 256 MiB float32 tensor
# (OMP 1 thread each, like torchrun's ranks); GB/s counts bytes read plus bytes written.
import sys, time, torch, torch.multiprocessing as mp
def worker(i, seconds, q, barrier):
    torch.set_num_threads(1)
    a = torch.rand(64 << 20); b = torch.empty_like(a)
    b.copy_(a); barrier.wait(); n = 0; t = time.perf_counter(); end = t + seconds
    while time.perf_counter() < end:
        b.copy_(a); n += 1
    q.put(n * 2 * a.numel() * 4 / (time.perf_counter() - t))
if __name__ == "__main__":
    for p in [int(x) for x in sys.argv[1:]]:
        ctx = mp.get_context("spawn"); q = ctx.SimpleQueue(); barrier = ctx.Barrier(p)
        ps = [ctx.Process(target=worker, args=(i, 2.0, q, barrier)) for i in range(p)]
        [x.start() for x in ps]; [x.join() for x in ps]
        rates = [q.get() for _ in range(p)]
        print(f"membw procs {p}: total {sum(rates)/1e9:.1f} GB/s, per proc {sum(rates)/p/1e9:.1f}", flush=True)
