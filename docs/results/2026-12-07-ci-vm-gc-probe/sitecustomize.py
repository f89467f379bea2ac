"""Diagnostic (not part of dpa): counts Python's garbage collections in every rank of a run and
how many of them began inside a torch.distributed.all_reduce call. Put this folder first on
PYTHONPATH; each process writes /tmp/gcprobe/out-<pid>.txt at exit."""
import atexit
import gc
import os
import time

_state = {"in_op": False, "started_in_op": False, "started": 0, "ops": 0}
_events = []


def _on_collection(phase, info):
    now = time.monotonic_ns()
    if phase == "start":
        _state["started"], _state["started_in_op"] = now, _state["in_op"]
    else:
        _events.append((info["generation"], (now - _state["started"]) / 1e3, _state["started_in_op"]))


gc.callbacks.append(_on_collection)

import torch.distributed as dist  # noqa: E402

_all_reduce = dist.all_reduce


def all_reduce(*args, **kwargs):
    _state["in_op"] = True
    _state["ops"] += 1
    try:
        return _all_reduce(*args, **kwargs)
    finally:
        _state["in_op"] = False


dist.all_reduce = all_reduce


def _write():
    if not _events:
        return
    os.makedirs("/tmp/gcprobe", exist_ok=True)
    with open(f"/tmp/gcprobe/out-{os.getpid()}.txt", "w") as out:
        for generation in (0, 1, 2):
            inside = sorted(us for g, us, in_op in _events if g == generation and in_op)
            outside = [us for g, us, in_op in _events if g == generation and not in_op]
            out.write(f"ops={_state['ops']} gen{generation} inside_all_reduce={len(inside)} "
                      f"(max {inside[-1] if inside else 0:.0f} us) outside={len(outside)}\n")


atexit.register(_write)
