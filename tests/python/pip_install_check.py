# SPDX-License-Identifier: Apache-2.0
"""`pip install ./python` in a virtual environment gives a working backend: copies the
repository's sources to a temporary directory, makes a venv there that sees this interpreter's
packages (--system-site-packages: torch, setuptools; there is no package index here), pip-installs
the package into it (offline, --no-build-isolation: against that torch), and then, with nothing
but the venv (no build tree, no PYTHONPATH to dpa, no LD_LIBRARY_PATH):

- (the copied sources and pip's build directory deleted) dpa.__version__ is the repository's
  VERSION, libdpa lies next to the extension;
- the package's `torch.backends` entry point is installed, and two ranks that never
  `import dpa` run an all_reduce on backend "dpa": torch >= 2.5 calls the entry point at
  `import torch`; with an older torch the ranks call it as torch would.

Run by ctest (python_pip_install) with the interpreter the backend is built for:
    python3 tests/python/pip_install_check.py
Exits non-zero with pip's or the ranks' output on failure; removes everything it made."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("VERSION", "CMakeLists.txt", "cmake", "configs", "include", "src", "python")
PIP_TIMEOUT_S = 1800  # libdpa and the extension compile from scratch, on 2 cores too
RUN_TIMEOUT_S = 300
WORLD = 2

PACKAGE_CHECK = textwrap.dedent("""
    import os, sys
    import dpa
    site, version = sys.argv[1], sys.argv[2]
    assert dpa.__file__.startswith(site), f"dpa imported from {dpa.__file__}, not from {site}"
    assert dpa.__version__ == version, (dpa.__version__, version)
    assert os.path.exists(os.path.join(os.path.dirname(dpa.__file__), "libdpa.so.0"))
    print(f"installed dpa {dpa.__version__} in {site}: ok")
""")

RANK = textwrap.dedent("""
    import sys
    from importlib.metadata import entry_points

    import torch
    import torch.distributed as dist

    rank, world, init_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    group = entry_points(group="torch.backends") if sys.version_info >= (3, 10) \\
        else entry_points().get("torch.backends", ())
    (entry,) = [entry for entry in group if entry.name == "dpa"]
    assert entry.value == "_dpa_autoload:register", entry.value
    if not hasattr(dist.Backend, "DPA"):  # torch < 2.5 does not load the entry points
        entry.load()()
    assert "dpa" not in sys.modules, "the entry point imported dpa"
    dist.init_process_group("dpa", init_method="file://" + init_file, rank=rank, world_size=world)
    tensor = torch.full((1000,), float(rank + 1))
    dist.all_reduce(tensor)
    assert tensor.tolist() == [float(sum(range(1, world + 1)))] * 1000, tensor[:4]
    dist.destroy_process_group()
    print(f"rank {rank}: all_reduce on backend dpa without import dpa: ok")
""")


def ignore_build_outputs(directory, names):
    return [name for name in names if name.startswith("build") or name.endswith(".egg-info")
            or name == "__pycache__"]


def run(command, **options):
    print(" ".join("<script>" if "\n" in str(part) else str(part) for part in command), flush=True)
    return subprocess.run(command, capture_output=True, text=True, **options)


def run_ranks(python, scratch, environment):
    """WORLD processes of RANK; every one is waited for or killed within RUN_TIMEOUT_S."""
    script = scratch / "rank.py"
    script.write_text(RANK)
    init_file = scratch / "init"
    ranks = [subprocess.Popen([python, str(script), str(rank), str(WORLD), str(init_file)],
                              env=environment, cwd=scratch, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for rank in range(WORLD)]
    failed = False
    try:
        for process in ranks:
            output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
            print(output)
            failed |= process.returncode != 0
    except subprocess.TimeoutExpired:
        print(f"the ranks did not finish within {RUN_TIMEOUT_S} s")
        failed = True
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
                process.wait()
    return 1 if failed else 0


def main():
    version = (ROOT / "VERSION").read_text().strip()
    with tempfile.TemporaryDirectory(prefix="dpa-pip-") as scratch:
        scratch = Path(scratch)
        source, venv = scratch / "src", scratch / "venv"
        source.mkdir()
        for name in SOURCES:
            path = ROOT / name
            if path.is_dir():
                shutil.copytree(path, source / name, ignore=ignore_build_outputs)
            else:
                shutil.copy2(path, source / name)
        environment = {k: v for k, v in os.environ.items()
                       if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "DPA_PREFIX", "VIRTUAL_ENV")}
        made = run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   env=environment, timeout=RUN_TIMEOUT_S)
        if made.returncode != 0:
            print(made.stdout, made.stderr, sep="\n")
            return 1
        python = venv / "bin" / "python"
        environment["VIRTUAL_ENV"] = str(venv)
        environment["PATH"] = f"{venv / 'bin'}{os.pathsep}{environment.get('PATH', '')}"
        installed = run([python, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                         str(source / "python")], env=environment, cwd=scratch, timeout=PIP_TIMEOUT_S)
        if installed.returncode != 0:
            print(installed.stdout, installed.stderr, sep="\n")
            return 1
        # Nothing of the build may be needed any more (libdpa is found through $ORIGIN).
        shutil.rmtree(source)
        site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   env=environment).stdout.strip()
        checked = run([python, "-c", PACKAGE_CHECK, site, version], env=environment, cwd=scratch,
                      timeout=RUN_TIMEOUT_S)
        print(checked.stdout, checked.stderr, sep="\n")
        if checked.returncode != 0:
            return 1
        return run_ranks(python, scratch, environment)


if __name__ == "__main__":
    sys.exit(main())
