#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""torchrun across emulated hosts with backend="dpa" (docs/multi-host.md).

Usage: multihost_torchrun.py CASE DPA_SWITCH_BINARY

Each host is a network namespace joined to the others by a veth pair (2 hosts) or a bridge
(4 hosts), with its own mount namespace holding a private /dev/shm and its own hostname; in each,
`python3 -m torch.distributed.run --nnodes N --node_rank i --master_addr host0` runs
multihost_train.py (host0 resolves to 127.0.1.1 on host 0 itself, as Debian's /etc/hosts has it,
and to its veth address elsewhere). Cases:

  embedded2    2 hosts x 2 ranks, default embedded switch: UDP at host 0's address, payload for
               MTU 1500; exact int32, bounded float32, a straggler under fastest-K, and loss
               (tc netem on the veth where the kernel has it, else the library's fault injector)
  embedded4    4 hosts x 1 rank on a bridge, one host with MTU 1280: the payload follows the
               smallest path; exact int32, bounded float32, a straggler
  external2    2 hosts x 2 ranks against a dpa-switch on host 0 (DPA_SWITCH on every rank)
  unreachable2 2 hosts x 2 ranks, the switch bound (DPA_SWITCH_BIND) to an address host 1 has no
               route to: every rank fails within the join timeout naming ranks 2 and 3
  bench2       2 hosts x 2 ranks, `torchrun -m dpa.bench` (dpa and Gloo, every result verified):
               the same command measures across hosts; its ranks, on different hosts, keep Gloo's
               barrier (no shared-memory one between private /dev/shm)

The test re-executes itself in new PID, mount, network and UTS namespaces (unshare --kill-child)
and mounts its own scratch directory (PRIVATE, the children's TMPDIR), so whatever ends it, a ctest timeout's SIGKILL included, the kernel
removes every namespace, interface, mount, file and process it made. Exit 77 (ctest's skip) where namespaces are unavailable.
"""

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
INSIDE = "DPA_MULTIHOST_INSIDE"
HERE = os.path.dirname(os.path.abspath(__file__))
SUBNET = "10.70.0"
MASTER_PORT = 29500
RUN_TIMEOUT_S = 150
# A tmpfs of the test's own mount namespace (the directory stays behind, empty, in /run's tmpfs).
PRIVATE = "/run/dpa-multihost"
JOIN_TIMEOUT_MS = 4000  # the unreachable case's


def run(*argv):
    subprocess.run(argv, check=True, capture_output=True, text=True)


def enter_namespaces():
    """Re-executes this script as PID 1 of fresh namespaces, or exits 77 where they are missing."""
    try:
        probe = subprocess.run(["unshare", "--pid", "--fork", "--mount", "--net", "--uts", "--",
                                "ip", "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"],
                               capture_output=True, text=True)
        reason = probe.stderr.strip() if probe.returncode != 0 else ""
    except FileNotFoundError as error:  # no unshare (util-linux) or ip (iproute2)
        reason = str(error)
    if reason:
        print(f"SKIP: network/mount namespaces or veth unavailable here (needs root): {reason}")
        sys.exit(SKIP)
    os.environ[INSIDE] = "1"
    os.execvp("unshare", ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--net",
                          "--uts", "--", sys.executable, *sys.argv])


def host_ip(index):
    return f"{SUBNET}.{index + 1}"


def make_hosts(count, mtus):
    """Network namespaces h0..h{count-1}, each with eth0 at host_ip(i); `mtus` overrides some."""
    # Private: our own scratch directory (every file the test and its children write) and list of
    # named namespaces. Not /tmp itself: the checkout and its build may lie under /tmp.
    os.makedirs(PRIVATE, exist_ok=True)
    run("mount", "-t", "tmpfs", "dpa-tmp", PRIVATE)
    os.environ["TMPDIR"] = tempfile.tempdir = PRIVATE
    os.makedirs("/run/netns", exist_ok=True)
    run("mount", "-t", "tmpfs", "dpa-netns", "/run/netns")
    # Every host resolves the others' names, and its own as Debian does, to 127.0.1.1 (so
    # torchrun's --master_addr host0 is a loopback address on host 0 itself); on_host mounts it.
    for i in range(count):
        with open(hosts_file(i), "w") as hosts:
            hosts.write("127.0.0.1 localhost\n" + "".join(
                f"{'127.0.1.1' if j == i else host_ip(j)} host{j}\n" for j in range(count)))
    run("ip", "link", "set", "lo", "up")
    if count > 2:
        run("ip", "link", "add", "br0", "type", "bridge")
        run("ip", "link", "set", "br0", "up")
    for i in range(count):
        run("ip", "netns", "add", f"h{i}")
        run("ip", "-n", f"h{i}", "link", "set", "lo", "up")
    if count == 2:
        run("ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
        ends = ["v0", "v1"]
    else:
        ends = []
        for i in range(count):
            run("ip", "link", "add", f"v{i}", "type", "veth", "peer", "name", f"b{i}")
            run("ip", "link", "set", f"b{i}", "master", "br0", "up")
            ends.append(f"v{i}")
    for i, end in enumerate(ends):
        run("ip", "link", "set", end, "netns", f"h{i}")
        run("ip", "-n", f"h{i}", "link", "set", end, "name", "eth0")
        run("ip", "-n", f"h{i}", "addr", "add", f"{host_ip(i)}/24", "dev", "eth0")
        if i in mtus:
            run("ip", "-n", f"h{i}", "link", "set", "eth0", "mtu", str(mtus[i]))
        run("ip", "-n", f"h{i}", "link", "set", "eth0", "up")


def hosts_file(index):
    return f"{PRIVATE}/hosts-h{index}"


def on_host(index, argv):
    """argv run in host `index`: its network namespace, and in the mount namespace that
    `ip netns exec` makes, a private /dev/shm and its /etc/hosts; its hostname."""
    setup = ('mount -t tmpfs -o size=512m dpa-shm /dev/shm && mount --bind "$1" /etc/hosts && hostname "$0" '
             '&& shift && exec "$@"')
    return ["ip", "netns", "exec", f"h{index}", "unshare", "--uts", "--", "sh", "-c", setup, f"host{index}",
            hosts_file(index), *argv]


def add_loss(count):
    """2 % loss on every host's eth0 with tc netem; None where the kernel lacks netem."""
    for i in range(count):
        result = subprocess.run(["ip", "netns", "exec", f"h{i}", "tc", "qdisc", "add", "dev", "eth0", "root",
                                 "netem", "loss", "2%"], capture_output=True, text=True)
        if result.returncode != 0:
            print(f"tc netem unavailable ({result.stderr.strip()}): loss comes from the library's fault "
                  "injector (DPA_FAULT_DROP) instead")
            return "injector"
    return "netem"


class Processes:
    """Every process the test starts; stop() ends them all (PID 1 of the namespace reaps them)."""

    def __init__(self):
        self.started = []

    def start(self, argv, env, output):
        process = subprocess.Popen(argv, env=env, stdout=output, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)
        self.started.append(process)
        return process

    def stop(self):
        for process in self.started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        for process in self.started:
            process.wait()


def start_switch(processes, binary, world):
    """A dpa-switch on host 0 listening on every address; returns once it listens."""
    argv = on_host(0, [binary, "--host", "0.0.0.0", "--port", "4242", "--world-size", str(world),
                       "--payload", "256"])
    switch = processes.start(argv, dict(os.environ), subprocess.PIPE)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in switch.stdout] + [lines.put(None)],
                     daemon=True).start()
    seen = []
    while True:
        line = lines.get(timeout=60)
        if line is None:
            sys.exit("dpa-switch exited before listening:\n" + "".join(seen))
        seen.append(line)
        if "listening on" in line:
            return


def run_job(program, hosts, ranks_per_host, env, processes, directory):
    """torchrun of `program` (its arguments after torchrun's) on every host; returns each host's
    output once all ended."""
    outputs = []
    for i in range(hosts):
        path = os.path.join(directory, f"host{i}.log")
        outputs.append(path)
        argv = on_host(i, [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(hosts),
                           "--nproc_per_node", str(ranks_per_host), "--node_rank", str(i),
                           "--master_addr", "host0", "--master_port", str(MASTER_PORT),
                           "--max_restarts", "0", "--redirects", "1", "--tee", "1", *program])
        with open(path, "w") as output:
            processes.start(argv, env, output)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    codes = []
    for process in processes.started[-hosts:]:
        try:
            codes.append(process.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append("timed out")
    texts = [open(path).read() for path in outputs]
    for i, text in enumerate(texts):
        print(f"===== host{i} (torchrun exit {codes[i]}) =====\n{text}")
    return codes, "\n".join(texts)


def bench_failures(output):
    """What rank 0's `dpa.bench` report lacks: both backends at both sizes with 0 wrong, and the
    Gloo barrier alone (the ranks span two hosts)."""
    expected = ("# dpa.bench: 4 ranks on 2 host(s), cpu, float32", "every result verified; barrier: gloo\n",
                "# wrong elements in all: 0")
    failures = [f"no '{text.strip()}' in rank 0's report" for text in expected if text not in output]
    # torchrun's --tee prefixes each line with its local rank ("[default0]:").
    lines = [line.split("]:", 1)[-1] for line in output.splitlines()]
    rows = [line.split() for line in lines if line.split()[:1] in (["4096"], ["65536"])]
    backends = sorted((row[0], row[2]) for row in rows if len(row) == 10 and row[-1] == "0")
    if backends != [("4096", "dpa"), ("4096", "gloo"), ("65536", "dpa"), ("65536", "gloo")]:
        failures.append(f"rows with 0 wrong: {backends}")
    return failures


def train_failures(case, output, world, env):
    """What the training cases' output lacks: every rank's success line, or for the unreachable
    switch every rank's error naming the ranks and the address."""
    failures = []
    for rank in range(world):
        if case == "unreachable2":
            expected = (f"rank {rank} failed after", "the switch never heard from ranks 2, 3 (host host1)",
                        "they cannot reach 10.71.0.1:")
            line = next((line for line in output.splitlines() if f"rank {rank} failed after" in line), "")
            failures += [f"rank {rank}: no '{text}' in its error" for text in expected if text not in line]
        elif f"rank {rank} ok" not in output:
            failures.append(f"rank {rank} did not finish")
    if case == "embedded2":
        for rank in range(world):
            if f"rank {rank} loss" not in output or f"rank {rank} loss ({env['MH_LOSS']}): 0 retransmissions" in output:
                failures.append(f"rank {rank}: no retransmission under loss")
    return failures


def main():
    case, switch_binary = sys.argv[1], sys.argv[2]
    hosts = 4 if case == "embedded4" else 2
    ranks_per_host = 1 if hosts == 4 else 2
    world = hosts * ranks_per_host
    make_hosts(hosts, {3: 1280} if case == "embedded4" else {})
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="eth0",
               PYTHONPATH=os.pathsep.join([os.environ.get("PYTHONPATH", ""), os.path.join(HERE, "..", "python")]))
    env.pop(INSIDE)
    if case == "embedded2":
        env.update(MH_SWITCH_HOST=host_ip(0), MH_PAYLOAD="356", MH_STRAGGLER="1", MH_LOSS=add_loss(hosts))
    elif case == "embedded4":
        env.update(MH_SWITCH_HOST=host_ip(0), MH_PAYLOAD="301", MH_STRAGGLER="1")
    elif case == "external2":
        env.update(DPA_SWITCH=f"{host_ip(0)}:4242")
    elif case == "unreachable2":
        # Host 0 has the address, host 1 no route to it.
        run("ip", "-n", "h0", "addr", "add", "10.71.0.1/32", "dev", "lo")
        env.update(DPA_SWITCH_BIND="10.71.0.1", DPA_JOIN_TIMEOUT_MS=str(JOIN_TIMEOUT_MS))
    elif case != "bench2":
        sys.exit(f"unknown case {case}")
    if case == "bench2":
        program = ["-m", "dpa.bench", "--sizes", "4KiB,64KiB", "--iterations", "3", "--warmup", "1"]
    else:
        train_case = {"embedded2": "embedded", "embedded4": "embedded", "external2": "external",
                      "unreachable2": "unreachable"}[case]
        program = [os.path.join(HERE, "multihost_train.py"), train_case]

    processes = Processes()
    # A SIGTERM (ctest's, or a user's) ends the processes on the way out; SIGKILL leaves it to the
    # kernel, which ends every process of this PID namespace with it.
    signal.signal(signal.SIGTERM, lambda *_: (processes.stop(), sys.exit("terminated")))
    try:
        with tempfile.TemporaryDirectory(prefix="dpa-multihost-") as directory:
            if case == "external2":
                start_switch(processes, switch_binary, world)
            codes, output = run_job(program, hosts, ranks_per_host, env, processes, directory)
    finally:
        processes.stop()

    failures = [f"host{i}: torchrun exit {code}" for i, code in enumerate(codes) if code != 0]
    if case == "bench2":
        failures += bench_failures(output)
    else:
        failures += train_failures(case, output, world, env)
    if failures:
        sys.exit("FAILED: " + "; ".join(failures))
    print(f"{case}: passed")


if __name__ == "__main__":
    if os.environ.get(INSIDE) != "1":
        enter_namespaces()
    main()
