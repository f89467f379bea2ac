#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""One job over two switch servers on emulated hosts (docs/design.md §2.3).

Usage: multi_switch_netns.py DPA_SWITCH_BINARY DPA_TEST_WORKER_BINARY

Four network namespaces on a bridge (multihost_torchrun.py's hosts): host0 and host1 each run a
dpa-switch with the same session, host2 and host3 each run two ranks of dpa-test-worker with
two threads and DPA_SWITCH-style `--switch host0,host1`, so every rank's thread 0 talks to host0
and thread 1 to host1. Each rank verifies its exact int32 sums (and a fastest-K run with a
straggler completes every block); each server's counters, printed when it stops, must show
completed rounds. The namespaces, interfaces, mounts and processes go with the test's PID
namespace whatever ends it (multihost_torchrun.py explains); exit 77 where namespaces are
unavailable.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from multihost_torchrun import INSIDE, Processes, enter_namespaces, host_ip, make_hosts, on_host

WORLD = 4
RANKS_PER_HOST = 2
SWITCH_HOSTS = (0, 1)
WORKER_HOSTS = (2, 3)
START_TIMEOUT_S = 30
RUN_TIMEOUT_S = 120


def start_switch(processes, binary, host, directory):
    """A dpa-switch on `host` listening on its address; returns it and its log once it listens."""
    log = os.path.join(directory, f"switch{host}.log")
    with open(log, "w") as output:
        switch = processes.start(on_host(host, [binary, "--host", host_ip(host), "--port", "4242", "--world-size",
                                                str(WORLD), "--payload", "256", "--pool-size", "1024",
                                                "--straggler-timeout-us", "20000"]),
                                 dict(os.environ), output)
    deadline = time.monotonic() + START_TIMEOUT_S
    while "listening on" not in open(log).read():
        if switch.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"dpa-switch on host{host} did not start:\n" + open(log).read())
        time.sleep(0.05)
    return switch, log


def run_ranks(processes, binary, directory, name, args):
    """Every rank, RANKS_PER_HOST on each worker host; returns (rank, exit code, JSON lines, output)."""
    switches = ",".join(f"{host_ip(host)}:4242" for host in SWITCH_HOSTS)
    started = []
    for rank in range(WORLD):
        host = WORKER_HOSTS[rank // RANKS_PER_HOST]
        path = os.path.join(directory, f"{name}-rank{rank}.log")
        with open(path, "w") as output:
            argv = [binary, "--switch", switches, "--rank", str(rank), "--world", str(WORLD), "--threads", "2",
                    "--window", "16", "--dtype", "int32", "--join-timeout-ms", "20000", *args]
            started.append((rank, processes.start(on_host(host, argv), dict(os.environ), output), path))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    results = []
    for rank, process, path in started:
        try:
            code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = "timed out"
        text = open(path).read()
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        results.append((rank, code, lines, text))
    return results


def check_ranks(name, results, iterations, straggler=None):
    failures = []
    for rank, code, lines, text in results:
        if code != 0 or len(lines) != iterations:
            failures.append(f"{name}: rank {rank} exited {code} with {len(lines)} of {iterations} lines:\n{text}")
            continue
        for line in lines:
            if line["errors"] != 0:
                failures.append(f"{name}: rank {rank} iteration {line['iteration']}: {line['errors']} wrong elements")
            if line["switches"] != [f"{host_ip(host)}:4242" for host in SWITCH_HOSTS]:
                failures.append(f"{name}: rank {rank}: threads on {line['switches']}")
            if straggler is not None and rank != straggler and (line["partial"] == 0 or line["missed"] != 0):
                failures.append(f"{name}: rank {rank}: {line['partial']} partial, {line['missed']} missed blocks "
                                "with a straggler under fastest-K")
    return failures


def completed_rounds(log):
    for line in open(log).read().splitlines():
        if line.startswith("completed_full ") or line.startswith("completed_partial "):
            yield int(line.split()[1])


def main():
    switch_binary, worker_binary = sys.argv[1], sys.argv[2]
    make_hosts(len(SWITCH_HOSTS) + len(WORKER_HOSTS), {})
    processes = Processes()
    failures = []
    try:
        with tempfile.TemporaryDirectory(prefix="dpa-multi-switch-") as directory:
            switches = [start_switch(processes, switch_binary, host, directory) for host in SWITCH_HOSTS]
            results = run_ranks(processes, worker_binary, directory, "exact", ["--count", "100003",
                                                                                 "--iterations", "2"])
            failures += check_ranks("exact sums", results, 2)
            results = run_ranks(processes, worker_binary, directory, "fastest-k",
                                ["--count", "20000", "--iterations", "2", "--k", "3", "--straggler-rank", "3",
                                 "--straggler-delay-ms", "300", "--timeout-ms", "10000"])
            failures += check_ranks("fastest-K", results, 2, straggler=3)
            for host, (switch, log) in zip(SWITCH_HOSTS, switches):
                switch.send_signal(signal.SIGTERM)
                switch.wait(timeout=START_TIMEOUT_S)
                rounds = sum(completed_rounds(log))
                print(f"switch on host{host}: {rounds} rounds completed")
                if rounds == 0:
                    failures.append(f"the switch on host{host} completed no round:\n" + open(log).read())
    finally:
        processes.stop()
    if failures:
        sys.exit("FAILED:\n" + "\n".join(failures))
    print("multi_switch_netns: passed")


if __name__ == "__main__":
    if os.environ.get(INSIDE) != "1":
        enter_namespaces()
    main()
