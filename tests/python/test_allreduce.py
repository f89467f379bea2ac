# SPDX-License-Identifier: Apache-2.0
"""all_reduce through dpa against the exact sum and Gloo's result: every dtype, SUM and AVG,
sizes 0 / 1 / 1000 / 2049 (not a payload multiple) / ~1M, every execution mode, worlds 2 and 4,
non-contiguous tensors, tensor lists and overlapping asynchronous operations."""

import numpy as np
import pytest
import torch
import torch.distributed as dist

from harness import PAYLOAD, block_payload, dpa_backend, float_bound, init_dpa, run_ranks

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32]
ALL_SIZES = [0, 1, 1000, 2049, (1 << 20) + 3]
# fp16/bf16 results are the float32 result rounded once more: half an ulp, relative.
NARROW_ROUNDING = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
NARROW_SMALLEST = {torch.float16: 2.0**-24, torch.bfloat16: 2.0**-133}

# Thresholds low enough that the pipeline and hybrid modes chunk some of the sizes above.
MODES = {
    "worksteal": {"DPA_TORCH_MODE": "worksteal"},
    "pipeline": {"DPA_TORCH_MODE": "pipeline", "DPA_TORCH_PIPELINE_THRESH": "65536",
                 "DPA_TORCH_PIPELINE_CHUNKS": "3"},
    "hybrid": {"DPA_TORCH_MODE": "hybrid", "DPA_TORCH_PIPELINE_THRESH": "8192"},
    "simple": {"DPA_TORCH_MODE": "simple"},
}


def make_input(rank, shape, dtype, seed):
    """Rank `rank`'s input of one case; every rank can rebuild every other rank's."""
    generator = torch.Generator().manual_seed(seed * 1000 + rank)
    count = int(np.prod(shape))
    if dtype == torch.int32:
        return torch.randint(-(1 << 20), 1 << 20, shape, generator=generator, dtype=torch.int32)
    values = torch.randn(count, generator=generator)
    # Blocks of different magnitudes get different negotiated exponents.
    values.mul_(torch.exp2(((torch.arange(count) // PAYLOAD) % 9 - 4).float()))
    return values.reshape(shape).to(dtype)


def check(result, inputs, op, world, what):
    """Checks one rank's result against the exact reduction of every rank's input; for floats
    returns the exact values and the allowed error."""
    if result.dtype == torch.int32:
        total = torch.stack([i.long() for i in inputs]).sum(0)
        expected = torch.div(total, world, rounding_mode="trunc") if op == "AVG" else total
        assert torch.equal(result.long(), expected), f"{what}: int32 result differs from the exact one"
        return None, None
    arrays = [i.double().flatten().numpy() for i in inputs]
    exact, bound = float_bound(arrays, block_payload(len(arrays[0])),
                               contributors=world if op == "AVG" else None)
    got = result.double().flatten().numpy()
    if result.dtype in NARROW_ROUNDING:
        bound = bound + NARROW_ROUNDING[result.dtype] * (np.abs(exact) + bound) + NARROW_SMALLEST[result.dtype]
    error = np.abs(got - exact)
    worst = int(np.argmax(error - bound)) if len(error) else 0
    assert (error <= bound).all(), (
        f"{what}: element {worst} is {got[worst]!r}, exact {exact[worst]!r}, "
        f"error {error[worst]:.3e} > bound {bound[worst]:.3e}"
    )
    return exact, bound


def gloo_reference(gloo, tensor, op, world):
    """Gloo's result for the same input (fp16/bf16 reduced as float32)."""
    wide = tensor.float() if tensor.dtype in NARROW_ROUNDING else tensor.clone()
    dist.all_reduce(wide, group=gloo)
    if op == "AVG":
        wide = torch.div(wide, world, rounding_mode="trunc") if wide.dtype == torch.int32 else wide / world
    return wide


def allreduce_cases_worker(rank, world, init_file, sizes):
    import dpa

    init_dpa(rank, world, init_file)
    gloo = dist.new_group(backend="gloo")
    ops = {"SUM": dist.ReduceOp.SUM, "AVG": dist.ReduceOp.AVG}
    seed = 0
    checked = 0
    for dtype in DTYPES:
        for size in sizes:
            seed += 1
            inputs = [make_input(r, (size,), dtype, seed) for r in range(world)]
            for op_name, op in ops.items():
                what = f"{dtype} {op_name} size {size}"
                tensor = inputs[rank].clone()
                dist.all_reduce(tensor, op=op)
                exact, bound = check(tensor, inputs, op_name, world, what)
                reference = gloo_reference(gloo, inputs[rank], op_name, world)
                if dtype == torch.int32:
                    assert torch.equal(tensor, reference), f"{what}: differs from Gloo"
                else:
                    # Within the bound of the exact value, so within the bound plus Gloo's own
                    # error of Gloo's result.
                    reference = reference.double().numpy()
                    assert (np.abs(tensor.double().numpy() - reference)
                            <= bound + np.abs(reference - exact)).all(), f"{what}: not within the bound of Gloo"
                stats = dpa.last_stats()
                if size > 0:
                    assert stats["blocks_missed"] == 0 and stats["blocks_partial"] == 0, (what, stats)
                    assert stats["min_contributors"] == world, (what, stats)
                checked += 1
    return checked


def layouts_worker(rank, world, init_file):
    """Non-contiguous tensors, tensor lists and several operations in flight at once."""
    import dpa

    init_dpa(rank, world, init_file)
    seed = 500
    for dtype in DTYPES:
        seed += 1
        inputs = [make_input(r, (64, 80), dtype, seed) for r in range(world)]
        base = inputs[rank].clone()
        view = base.t()[::2]  # transposed and strided: neither contiguous nor dense
        assert not view.is_contiguous()
        dist.all_reduce(view)
        check(view, [i.t()[::2] for i in inputs], "SUM", world, f"non-contiguous {dtype}")
        untouched = base.t()[1::2]
        assert torch.equal(untouched, inputs[rank].t()[1::2]), "elements outside the view changed"

    # Contiguous CPU tensors are reduced in their own memory, with no view made: a 2-D one, and
    # a leaf that requires grad (a parameter's .data is one), whose autograd state stays as it was.
    for dtype in (torch.float32, torch.int32):
        seed += 1
        inputs = [make_input(r, (40, 50), dtype, seed) for r in range(world)]
        matrix = inputs[rank].clone()
        dist.all_reduce(matrix)
        assert matrix.shape == (40, 50)
        check(matrix, inputs, "SUM", world, f"2-D contiguous {dtype}")
    seed += 1
    inputs = [make_input(r, (3, 700), torch.float32, seed) for r in range(world)]
    leaf = inputs[rank].clone().requires_grad_(True)
    dist.all_reduce(leaf)
    assert leaf.requires_grad and leaf.is_leaf and leaf.grad_fn is None
    check(leaf.detach(), inputs, "SUM", world, "leaf requiring grad")

    # A list: each tensor its own dpa operation, in order.
    seed += 1
    lists = [[make_input(r, (3000,), torch.float32, seed), make_input(r, (5,), torch.int32, seed),
              make_input(r, (2049,), torch.bfloat16, seed)] for r in range(world)]
    mine = [t.clone() for t in lists[rank]]
    options = dist.AllreduceOptions()
    options.reduceOp = dist.ReduceOp.SUM
    dist.distributed_c10d._get_default_group().allreduce(mine, options).wait()
    for index, tensor in enumerate(mine):
        check(tensor, [lists[r][index] for r in range(world)], "SUM", world, f"list item {index}")

    # Asynchronous operations overlapping each other, waited for in reverse.
    seed += 1
    inputs = [[make_input(r, (4099 * (j + 1),), torch.float32, seed + j) for j in range(6)]
              for r in range(world)]
    tensors = [t.clone() for t in inputs[rank]]
    works = [dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True) for t in tensors]
    for work in reversed(works):
        work.wait()
        assert work.is_completed() and work.is_success()
    for j, tensor in enumerate(tensors):
        check(tensor, [inputs[r][j] for r in range(world)], "AVG", world, f"async {j}")
    future_value = works[0].get_future().wait()
    assert future_value[0] is tensors[0] or torch.equal(future_value[0], tensors[0])

    # K outside 1..world fails the operation with a clear error instead of hanging.
    with pytest.raises(RuntimeError, match="outside"):
        with dpa.fastest_k(world + 1):
            dist.all_reduce(torch.ones(10))
    # The ranks stay in step after the rejected operation.
    tensor = torch.arange(100, dtype=torch.int32)
    dist.all_reduce(tensor)
    assert torch.equal(tensor, torch.arange(100, dtype=torch.int32) * world)
    return True


@pytest.mark.parametrize("mode", list(MODES))
def test_allreduce_world2(mode):
    checked = run_ranks(allreduce_cases_worker, 2, env=MODES[mode], args=(ALL_SIZES,))
    assert checked == [len(DTYPES) * 2 * len(ALL_SIZES)] * 2


@pytest.mark.parametrize("mode", list(MODES))
def test_allreduce_world4(mode):
    # Four ranks share two cores here: the large case is smaller (still chunked in pipeline).
    sizes = [0, 1, 2049, (1 << 18) + 3]
    run_ranks(allreduce_cases_worker, 4, env=MODES[mode], args=(sizes,), timeout=240)


@pytest.mark.parametrize("mode", list(MODES))
def test_layouts_world2(mode):
    assert run_ranks(layouts_worker, 2, env=MODES[mode]) == [True, True]


def thread_names_worker(rank, world, init_file):
    import os

    init_dpa(rank, world, init_file)
    # 1 MiB: above DPA_TORCH_INLINE_BYTES, so a pool thread runs it
    tensor = torch.ones(1 << 18, dtype=torch.int32)
    dist.all_reduce(tensor)
    assert torch.equal(tensor, torch.full_like(tensor, world))
    names = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm") as comm:
            names.add(comm.read().strip())
    return sorted(names)


def test_threads_are_named_for_top_and_perf():
    """Engine, pool and (rank 0's embedded) switch threads carry names a profiler can group by."""
    names = run_ranks(thread_names_worker, 2, timeout=90)
    for rank, rank_names in enumerate(names):
        assert "dpa-engine-0" in rank_names and "dpa-torch-0" in rank_names, (rank, rank_names)
    assert "dpa-switch-0" in names[0], names[0]


SWITCH_COUNTER_NAMES = {
    "rx_packets", "tx_packets", "tx_dropped", "aggregated", "completed_full", "completed_partial",
    "retransmitted_results", "duplicates", "late_contributions", "old_replies", "syn_replies", "joins",
    "errors_sent", "dropped_malformed", "dropped_unknown_session", "dropped_unregistered",
    "dropped_not_joined", "dropped_bad_token", "dropped_bad_tag", "joins_refused", "joins_contended",
    "joins_rate_limited", "leaves", "busy_ns"}


def switch_counters_worker(rank, world, init_file, operations):
    from dpa import _C

    init_dpa(rank, world, init_file)
    tensor = torch.ones(3000, dtype=torch.int32)  # 3 blocks of the small session's payload
    for _ in range(operations):
        dist.all_reduce(tensor)
    dist.barrier()
    return _C.embedded_switch_counters(), dpa_backend().switch_counters


def test_embedded_switch_counters_carry_the_switchs_names_and_values():
    """Rank 0's embedded switch's counters, as dpa.bench reads them: every name the switch prints
    (dpa-switch --stats), each with its value (torch 2.11 once read every value as 0, and the
    numbers as extra names), and the rounds the ranks ran."""
    world, operations = 2, 5
    (totals, own), (other_totals, other_own) = run_ranks(switch_counters_worker, world, args=(operations,),
                                                          timeout=90)
    assert other_totals is None and other_own is None  # rank 1 runs no switch
    assert own == totals, (own, totals)  # one live group: its switch is the whole total
    assert set(totals) == SWITCH_COUNTER_NAMES, sorted(totals)
    assert totals["joins"] >= world, totals
    # Each operation is 3 full rounds, every rank contributing to each.
    assert totals["completed_full"] >= 3 * operations, totals
    assert totals["aggregated"] >= world * totals["completed_full"], totals
    assert totals["rx_packets"] >= totals["aggregated"] and totals["busy_ns"] > 0, totals
