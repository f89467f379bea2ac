# SPDX-License-Identifier: Apache-2.0
"""python -m dpa.demo end to end, on small settings: the report it writes holds every run asked
for, and bad arguments are refused with a message that names the option (python -m dpa.bench:
test_bench.py). The launcher they share (dpa.tools._launch): each rank's environment is in force
from its start, and a rank that overruns is reported with its stacks. The one version (VERSION) in
dpa.__version__ and the C++ tools' --version, their exit codes (0, and 2 for usage errors), the
Python tools' --help and --version in a checkout without the extension, the CUDA architecture
rule of the extension's run-time check, and the torch.backends entry point, which registers "dpa"
without importing it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import BASE_ENV, run_ranks


def run_module(module, *arguments, timeout=300):
    return subprocess.run([sys.executable, "-m", module, *arguments], env=dict(os.environ, **BASE_ENV),
                          capture_output=True, text=True, timeout=timeout)


def test_demo_trains_every_run_and_reports_fastest_k(tmp_path):
    result = run_module("dpa.demo", "-n", "2", "--epochs", "3", "--straggler-delay-ms", "20",
                        "--delay-probability", "0.3", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "demo.json").read_text())
    assert (tmp_path / "demo.png").stat().st_size > 0
    runs = {run["run"]: run for run in report["runs"]}
    assert sorted(runs) == ["dpa", "gloo", "preemptive", "reactive"]
    for run in runs.values():
        assert [point["epoch"] for point in run["curve"]] == [1, 2, 3]
        assert run["steps"] > 0 and run["ms_per_step"] > 0
        # Ten classes: three epochs of SGD on the digits get far beyond guessing.
        assert run["final_accuracy"] > 0.5, run
    # K = N waits for both ranks, so both replicas stay identical.
    assert runs["dpa"]["rank0_ops_completed_without_all"] == 0
    assert runs["dpa"]["straggler_drift"] == 0.0
    assert runs["gloo"]["straggler_drift"] == 0.0
    # Preemptive fastest-K with K = 1 of 2 completes blocks with the first rank.
    assert runs["preemptive"]["rank0_blocks_partial"] > 0
    assert runs["preemptive"]["rank0_mean_min_contributors"] < 2
    assert "dpa, preemptive fastest-K" in result.stdout


@pytest.mark.parametrize("module, arguments, message", [
    ("dpa.demo", ["--runs", "gloo,nccl"], "--runs: unknown run(s) ['nccl']"),
    ("dpa.demo", ["--ranks", "4", "--k", "5"], "--k must be in 1..4, got 5"),
    ("dpa.demo", ["-n", "3", "--straggler-rank", "3"], "--straggler-rank must be a rank in 0..2, got 3"),
    pytest.param("dpa.demo", ["--device", "cuda"], "--device cuda, but torch sees no CUDA device",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a CUDA device here")),
])
def test_bad_arguments_name_the_option(module, arguments, message):
    result = run_module(module, *arguments, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr


def threads_worker(rank, world, init_file):
    import torch

    return torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")


def test_ranks_start_with_their_environment(monkeypatch):
    # Unpickling the worker imports torch before any code of the rank runs, so torch must find
    # the rank's OMP_NUM_THREADS at spawn, not the parent's (which is 3 here).
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert run_ranks(threads_worker, 2, env={"OMP_NUM_THREADS": "1"}, timeout=60) == [(1, "1"), (1, "1")]
    assert os.environ["OMP_NUM_THREADS"] == "3"
    # The launcher's default of one thread gives way to the caller's setting, as torchrun's does.
    assert run_ranks(threads_worker, 2, timeout=60) == [(3, "3"), (3, "3")]
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert run_ranks(threads_worker, 2, timeout=60) == [(1, "1"), (1, "1")]


def stuck_worker(rank, world, init_file):
    import threading

    if rank == 1:
        threading.Event().wait()  # never set: the rank overruns
    return rank


def test_a_rank_that_overruns_is_reported_with_its_stacks():
    with pytest.raises(RuntimeError) as failure:
        run_ranks(stuck_worker, 2, timeout=3)
    message = str(failure.value)
    assert message.startswith("ranks [1] did not finish within 3 s")
    assert "--- rank 1 (still running) ---" in message
    assert "in stuck_worker" in message


SOURCE_DIR = Path(__file__).resolve().parents[2]
VERSION = (SOURCE_DIR / "VERSION").read_text().strip()
BUILD_DIR = Path(os.environ.get("DPA_BUILD_DIR", SOURCE_DIR / "build"))
TOOLS = {"dpa-switch": "src/tools/dpa-switch", "dpa-bench": "src/tools/dpa-bench",
         "dpa-p4gen": "src/tools/p4gen/dpa-p4gen", "dpa-microbench": "src/tools/dpa-microbench"}


def test_package_version_is_the_repository_version():
    import dpa

    assert dpa.__version__ == VERSION


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_tools_version_help_and_usage_exit_codes(tool):
    path = BUILD_DIR / TOOLS[tool]
    if not path.exists():
        pytest.skip(f"{path} is not built")
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    assert (version.returncode, version.stdout.strip()) == (0, f"{tool} {VERSION}")
    assert subprocess.run([path, "--help"], capture_output=True, timeout=30).returncode == 0
    usage = subprocess.run([path, "--no-such-flag"], capture_output=True, text=True, timeout=30)
    assert usage.returncode == 2 and usage.stderr.strip(), usage


@pytest.fixture(scope="module")
def checkout_without_extension(tmp_path_factory):
    """PYTHONPATH of a copy of this checkout's Python sources and VERSION with no build: no dpa._C,
    no _build_info.py, whatever an in-place build left in the source tree."""
    root = tmp_path_factory.mktemp("checkout")
    shutil.copy(SOURCE_DIR / "VERSION", root / "VERSION")
    shutil.copytree(SOURCE_DIR / "python" / "dpa", root / "python" / "dpa",
                    ignore=shutil.ignore_patterns("_C*.so", "_build_info.py", "__pycache__"))
    return str(root / "python")


@pytest.mark.parametrize("tool", ["dpa.bench", "dpa.train", "dpa.demo"])
def test_python_tools_answer_help_and_version_without_the_extension(tool, checkout_without_extension):
    env = dict(os.environ, PYTHONPATH=checkout_without_extension)
    run = [sys.executable, "-m", tool]
    usage = subprocess.run(run + ["--help"], env=env, capture_output=True, text=True, timeout=120)
    assert usage.returncode == 0, usage.stderr
    assert usage.stdout.startswith(f"usage: python -m {tool} "), usage.stdout
    version = subprocess.run(run + ["--version"], env=env, capture_output=True, text=True, timeout=120)
    assert (version.returncode, version.stdout.strip()) == (0, f"python -m {tool} {VERSION}"), version.stderr
    wrong = subprocess.run(run + ["--no-such-flag"], env=env, capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2 and "--no-such-flag" in wrong.stderr, wrong.stderr


def test_import_without_the_extension_registers_the_backend_and_defers_the_error(checkout_without_extension):
    code = ("import sys, torch.distributed as dist, dpa\n"
            "assert hasattr(dist.Backend, 'DPA') and 'dpa._C' not in sys.modules\n"
            "dpa.last_stats()\n")
    result = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=checkout_without_extension),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "ImportError: dpa._C is not built in " in result.stderr, result.stderr


@pytest.mark.parametrize("architectures, capability, covered", [
    ("90-real,90-virtual", (9, 0), True),
    ("90-real,90-virtual", (8, 0), False),      # older than everything built
    ("90-real,90-virtual", (10, 0), True),      # PTX of 9.0 runs on 10.0
    ("90-real", (10, 0), False),                # machine code only within its major
    ("80-real", (8, 6), True),                  # sm_80 code runs on 8.x from 8.0
    ("86-real", (8, 0), False),
    ("90a-real", (9, 0), True),                 # architecture-specific: 9.0 only
    ("90a-real,90a-virtual", (10, 0), False),
    ("75-real,80-real,86-real,90-real,100-real,110-real,120", (12, 1), True),
    ("75-real,80-real,86-real,90-real,100-real,110-real,120", (7, 0), False),
    ("native", (5, 0), True),                   # CMake's keyword: nvcc chose, trust it
    ("", (9, 0), False),
])
def test_cuda_architectures_cover(architectures, capability, covered):
    from dpa import _C

    assert _C.cuda_architectures_cover(architectures, *capability) is covered


def test_cuda_architectures_are_recorded():
    from dpa import _C

    # Empty without the kernels; otherwise CMake's list, each entry a number with a suffix.
    for entry in filter(None, _C.CUDA_ARCHITECTURES.split(",")):
        assert entry[:2].isdigit(), _C.CUDA_ARCHITECTURES


def test_entry_point_registers_the_backend_without_importing_dpa():
    # What torch >= 2.5 does at import with the entry point pip installs (python/pyproject.toml).
    script = """
import sys
import torch.distributed as dist
import _dpa_autoload
assert not hasattr(dist.Backend, "DPA")
_dpa_autoload.register()
_dpa_autoload.register()  # idempotent
assert hasattr(dist.Backend, "DPA") and "dpa" not in sys.modules
"""
    environment = dict(os.environ, PYTHONPATH=f"{SOURCE_DIR / 'python'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    result = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    pyproject = (SOURCE_DIR / "python" / "pyproject.toml").read_text()
    assert '[project.entry-points."torch.backends"]\ndpa = "_dpa_autoload:register"' in pyproject


def load_setup_py():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dpa_setup", SOURCE_DIR / "python" / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("value, entries", [
    ("9.0", ["90-real"]),
    ("8.0;8.6 9.0+PTX", ["80-real", "86-real", "90"]),
    ("9.0a;10.0+PTX", ["90a-real", "100"]),
])
def test_setup_reads_torch_cuda_arch_list(value, entries):
    assert load_setup_py().torch_arch_list_entries(value) == entries


def test_setup_refuses_a_bad_torch_cuda_arch_list():
    with pytest.raises(SystemExit, match="TORCH_CUDA_ARCH_LIST=Hopper: 'Hopper' is not a compute capability"):
        load_setup_py().torch_arch_list_entries("Hopper")


class FakeTorch:
    """What setup.py reads of a CUDA torch: its build's architecture flags."""

    def __init__(self, flags):
        self._C = type("C", (), {"_cuda_getArchFlags": staticmethod(lambda: flags)})


@pytest.mark.parametrize("flags, entries", [
    # No PTX in the build: the highest portable architecture's PTX is added.
    ("sm_75 sm_80 sm_86 sm_90 sm_90a", ["75-real", "80-real", "86-real", "90-real", "90a-real", "90-virtual"]),
    ("sm_80 sm_90 compute_90", ["80-real", "90-real", "90-virtual"]),
    ("sm_100 sm_120", ["100-real", "120-real", "120-virtual"]),
])
def test_setup_takes_the_architectures_of_the_torch(flags, entries):
    assert load_setup_py().torch_build_entries(FakeTorch(flags)) == entries
