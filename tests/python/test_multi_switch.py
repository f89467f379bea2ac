# SPDX-License-Identifier: Apache-2.0
"""The PyTorch backend over two external switch servers: DPA_SWITCH lists two dpa-switch processes on
127.0.0.1 holding the same session, DPA_THREADS=2, so thread 0 of every rank talks to the first and
thread 1 to the second (design.md §2.3). int32 results exact; both servers' counters, printed when
they stop, show completed rounds; the backend's switch_address names both."""

import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from harness import dpa_backend, init_dpa, run_ranks

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DPA_BUILD_DIR", ROOT / "build"))
SWITCH_BIN = BUILD / "src" / "tools" / "dpa-switch"
WORLD = 2
COUNT = 100_003  # not a multiple of the payload
ITERATIONS = 3
STEP_TIMEOUT_S = 30  # each bounded wait below


def multi_switch_worker(rank, world, init_file, switches):
    init_dpa(rank, world, init_file)
    try:
        assert dpa_backend().switch_address == switches
        for iteration in range(ITERATIONS):
            inputs = [torch.arange(COUNT, dtype=torch.int32) * (r + 1) + iteration for r in range(world)]
            tensor = inputs[rank].clone()
            dist.all_reduce(tensor)
            assert torch.equal(tensor, sum(inputs)), f"iteration {iteration}: int32 sum differs from the exact one"
        return ITERATIONS
    finally:
        dist.destroy_process_group()


def start_switch(work, name):
    """A dpa-switch on a free UDP port of 127.0.0.1 with the job's session; returns it, its log and port."""
    port_file, log = work / f"{name}.port", work / f"{name}.log"
    with open(log, "w") as out:
        switch = subprocess.Popen(
            [str(SWITCH_BIN), "--host", "127.0.0.1", "--port", "0", "--port-file", str(port_file),
             "--world-size", str(WORLD), "--payload", "256", "--pool-size", "1024"],
            stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not (port_file.exists() and port_file.read_text().strip()):
        if switch.poll() is not None or time.monotonic() > deadline:
            switch.kill()
            raise RuntimeError(f"{name} did not start:\n{log.read_text()}")
        time.sleep(0.05)
    return switch, log, int(port_file.read_text())


@pytest.mark.skipif(not SWITCH_BIN.exists(), reason=f"no dpa-switch at {SWITCH_BIN} (set DPA_BUILD_DIR)")
def test_one_job_over_two_switch_servers():
    work = Path(tempfile.mkdtemp(prefix="dpa-multi-switch-"))
    switches = []
    try:
        for name in ("switch-a", "switch-b"):
            switches.append(start_switch(work, name))
        addresses = ",".join(f"127.0.0.1:{port}" for _, _, port in switches)
        env = {"DPA_SWITCH": addresses, "DPA_THREADS": "2", "DPA_WINDOW": "16"}
        assert run_ranks(multi_switch_worker, WORLD, env=env, args=(addresses,), timeout=120) == [ITERATIONS] * WORLD
        for switch, log, port in switches:
            switch.send_signal(signal.SIGTERM)
            assert switch.wait(timeout=STEP_TIMEOUT_S) == 0, log.read_text()
            completed = re.search(r"completed_full\D*(\d+)", log.read_text())
            assert completed and int(completed.group(1)) > 0, \
                f"the switch on port {port} served nothing:\n{log.read_text()}"
    finally:
        for switch, _, _ in switches:
            if switch.poll() is None:
                switch.kill()
                switch.wait(timeout=STEP_TIMEOUT_S)
        for leftover in work.iterdir():
            leftover.unlink()
        work.rmdir()
