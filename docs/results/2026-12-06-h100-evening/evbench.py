# The cost of a CUDA event made per operation against one reused (what EventPool saves).
import time, torch
s = torch.cuda.current_stream()
for label, fresh in (("fresh", True), ("reused", False), ("fresh", True), ("reused", False)):
    e = torch.cuda.Event()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(20000):
        if fresh:
            e = torch.cuda.Event()
        e.record(s)
        s.wait_event(e)
    torch.cuda.synchronize()
    print(f"event {label}: {(time.perf_counter() - t) / 20000 * 1e6:.2f} us per record+wait", flush=True)
