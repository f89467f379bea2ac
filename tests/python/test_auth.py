# SPDX-License-Identifier: Apache-2.0
"""Authentication on the embedded switch (DPA_AUTH, docs/pytorch.md, protocol.md §6.6): by default
rank 0 makes the session key and hands each rank its own key through the store, and admission is
authenticated; with DPA_AUTH=data every packet is. Sums stay exact and no reply is rejected. A
rank that asks differently, a key file meant for a configured switch, DPA_AUTH=off with a key
file, DPA_AUTH=data without a key, or an unknown value fail every rank with the variable named."""

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
    (2, {"DPA_AUTH": "data"}),  # one host: shared memory
    (4, {"DPA_AUTH": "data"}),
    (2, {"DPA_AUTH": "data", "DPA_SWITCH_BIND": "127.0.0.1"}),  # UDP, sized as across hosts (payload_for_mtu)
    (2, {}),  # the default: admission authenticated, data untagged
    (2, {"DPA_SWITCH_BIND": "127.0.0.1"}),
], ids=["data-shm-2", "data-shm-4", "data-udp-2", "join-shm-2", "join-udp-2"])
def test_authenticated_job_sums_exactly(world, env):
    results = run_ranks(authenticated_worker, world, env=env, timeout=180)
    for rank, (authenticated, embeds_switch, rejected) in enumerate(results):
        assert authenticated, f"rank {rank} holds no key"
        assert embeds_switch == (rank == 0)
        assert rejected == 0, f"rank {rank} rejected {rejected} replies"


def plain_worker(rank, world, init_file):
    init_dpa(rank, world, init_file)
    return dpa_backend().authenticated


def test_admission_is_authenticated_by_default_and_off_is_keyless():
    assert run_ranks(plain_worker, 2, timeout=120) == [True, True]
    assert run_ranks(plain_worker, 2, env={"DPA_AUTH": "off"}, timeout=120) == [False, False]


def init_error_worker(rank, world, init_file, extra_env_of_rank):
    os.environ.update(extra_env_of_rank.get(rank, {}))
    with pytest.raises(RuntimeError) as error:
        init_dpa(rank, world, init_file)
    return str(error.value)


def write_key_file(directory):
    path = directory / "rank.key"
    path.write_text("ab" * 32 + "\n")
    return str(path)


def test_auth_differing_between_ranks_fails_every_rank():
    messages = run_ranks(init_error_worker, 2, env={"DPA_JOIN_TIMEOUT_MS": "3000"},
                         args=({1: {"DPA_AUTH": "data"}},), timeout=120)
    expected = (r"DPA_AUTH=join \(the default\) on rank 0, but DPA_AUTH=data on rank 1 \(host [^)]+\): "
                r"set DPA_AUTH alike on every rank")
    for rank, message in enumerate(messages):
        assert re.search(expected, message), f"rank {rank}: {message}"


def test_key_file_with_the_embedded_switch_fails_every_rank(tmp_path):
    messages = run_ranks(init_error_worker, 2, env={"DPA_AUTH_KEY_FILE": write_key_file(tmp_path)},
                         args=({},), timeout=120)
    for rank, message in enumerate(messages):
        assert re.search(r"ranks 0, 1 \(host [^)]+\) set DPA_AUTH_KEY_FILE.*unset DPA_AUTH_KEY_FILE", message), \
            f"rank {rank}: {message}"


@pytest.mark.parametrize("env, expected", [
    ({"DPA_SWITCH": f"127.0.0.1:{free_port()}", "DPA_AUTH": "data"},
     r"auth_data \(DPA_AUTH=data\) authenticates data with this rank's key, and it has none"),
    ({"DPA_AUTH_KEY_FILE": None, "DPA_AUTH": "off"}, r"DPA_AUTH=off asks for a keyless job, but DPA_AUTH_KEY_FILE"),
    ({"DPA_AUTH": "maybe"}, r'DPA_AUTH="maybe": expected off, join \(the default\) or data'),
], ids=["data-without-key", "off-with-key-file", "unknown-value"])
def test_auth_conflicts_are_named(env, expected, tmp_path):
    env = {name: value or write_key_file(tmp_path) for name, value in env.items()}
    message = run_ranks(init_error_worker, 1, env=env, args=({},), timeout=60)[0]
    assert re.search(expected, message), message
