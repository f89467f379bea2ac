# SPDX-License-Identifier: Apache-2.0
"""Authenticated mode on the embedded switch (DPA_AUTH=1, docs/pytorch.md, protocol.md §6.6):
rank 0 makes the session key and hands each rank its own key through the store; sums stay
exact and no reply is rejected. A rank that asks differently, a key file meant for a configured
switch, or DPA_AUTH=1 with a configured switch fail every rank with the variable named."""

import os
import re

import pytest
import torch
import torch.distributed as dist

import dpa
from dpa import _C
from harness import dpa_backend, free_port, init_dpa, run_ranks

# Below the small session's payload and well above the wide session's: both sessions carry tags.
SIZES = [1000, 100_003]


def authenticated_worker(rank, world, init_file):
    init_dpa(rank, world, init_file)
    backend = dpa_backend()
    for size in SIZES:
        tensor = torch.arange(size, dtype=torch.int32) * (rank + 1) - rank
        dist.all_reduce(tensor)
        expected = torch.arange(size, dtype=torch.int64) * sum(range(1, world + 1)) - sum(range(world))
        assert torch.equal(tensor.long(), expected), f"rank {rank}: {size} elements: int32 sum differs"
        assert dpa.last_stats()["replies_rejected"] == 0
    return backend.authenticated, backend.embeds_switch, _C.total_stats()["replies_rejected"]


@pytest.mark.parametrize("world, env", [
    (2, {}),  # one host: shared memory
    (4, {}),
    (2, {"DPA_SWITCH_BIND": "127.0.0.1"}),  # UDP, sized as across hosts (payload_for_mtu)
], ids=["shm-2", "shm-4", "udp-2"])
def test_authenticated_job_sums_exactly(world, env):
    results = run_ranks(authenticated_worker, world, env=dict(env, DPA_AUTH="1"), timeout=180)
    for rank, (authenticated, embeds_switch, rejected) in enumerate(results):
        assert authenticated, f"rank {rank} does not tag its packets"
        assert embeds_switch == (rank == 0)
        assert rejected == 0, f"rank {rank} rejected {rejected} replies"


def plain_worker(rank, world, init_file):
    init_dpa(rank, world, init_file)
    return dpa_backend().authenticated


def test_authentication_is_off_by_default():
    assert run_ranks(plain_worker, 2, timeout=120) == [False, False]


def init_error_worker(rank, world, init_file, extra_env_of_rank):
    os.environ.update(extra_env_of_rank.get(rank, {}))
    with pytest.raises(RuntimeError) as error:
        init_dpa(rank, world, init_file)
    return str(error.value)


def write_key_file(directory):
    path = directory / "rank.key"
    path.write_text("ab" * 32 + "\n")
    return str(path)


def test_auth_on_one_rank_fails_every_rank():
    messages = run_ranks(init_error_worker, 2, env={"DPA_JOIN_TIMEOUT_MS": "3000"},
                         args=({1: {"DPA_AUTH": "1"}},), timeout=120)
    expected = r"DPA_AUTH=1 is set on rank 1 \(host [^)]+\) but not on rank 0 \(host [^)]+\): set it on every rank"
    for rank, message in enumerate(messages):
        assert re.search(expected, message), f"rank {rank}: {message}"


def test_key_file_with_the_embedded_switch_fails_every_rank(tmp_path):
    messages = run_ranks(init_error_worker, 2, env={"DPA_AUTH_KEY_FILE": write_key_file(tmp_path)},
                         args=({},), timeout=120)
    for rank, message in enumerate(messages):
        assert re.search(r"ranks 0, 1 \(host [^)]+\) set DPA_AUTH_KEY_FILE.*set DPA_AUTH=1", message), \
            f"rank {rank}: {message}"


@pytest.mark.parametrize("env, expected", [
    ({"DPA_SWITCH": f"127.0.0.1:{free_port()}"}, r"DPA_AUTH=1 asks the embedded switch.*DPA_AUTH_KEY_FILE"),
    ({"DPA_AUTH_KEY_FILE": None}, r"DPA_AUTH=1 and DPA_AUTH_KEY_FILE are both set"),
], ids=["configured-switch", "with-key-file"])
def test_auth_conflicts_are_named(env, expected, tmp_path):
    env = {name: value or write_key_file(tmp_path) for name, value in env.items()}
    message = run_ranks(init_error_worker, 1, env=dict(env, DPA_AUTH="1"), args=({},), timeout=60)[0]
    assert re.search(expected, message), message
