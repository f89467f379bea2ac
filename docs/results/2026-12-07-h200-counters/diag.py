# Diagnostic: can each rank read the embedded switch's counters on this torch?
import os, sys, torch, torch.distributed as dist
import dpa
from dpa import _C
dist.init_process_group("dpa")
r = dist.get_rank()
print(r, "torch", torch.__version__, "dpa", dpa.__file__, "_C", _C.__file__, flush=True)
t = torch.ones(1024)
print(r, "before", _C.embedded_switch_counters(), flush=True)
for _ in range(5): dist.all_reduce(t)
t = torch.ones(1 << 20)
for _ in range(5): dist.all_reduce(t)
dist.barrier()
c = _C.embedded_switch_counters()
print(r, "after", None if c is None else {k: v for k, v in c.items() if k in ("completed_full", "aggregated", "rx_packets")}, flush=True)
g = dist.distributed_c10d._get_default_group()
for d in ("cpu", "cuda"):
    try:
        b = g._get_backend(torch.device(d))
        print(r, d, type(b).__module__, type(b).__name__, "embeds", getattr(b, "embeds_switch", "?"), "counters", getattr(b, "switch_counters", "?"), flush=True)
        print(r, d, "sizing", getattr(b, "sizing", "?"), flush=True)
    except Exception as e:
        print(r, d, "error", repr(e), flush=True)
dist.destroy_process_group()
