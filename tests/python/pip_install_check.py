"""`pip install ./python` alone gives a working backend: copies the repository's sources to a
temporary directory, pip-installs the package from there into a temporary target (offline, no
build isolation: the torch this Python has), and in a fresh process that sees only that target
(no build tree, no LD_LIBRARY_PATH) imports dpa and runs a 2-rank all_reduce on backend "dpa".

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
SOURCES = ("CMakeLists.txt", "cmake", "configs", "include", "src", "python")
PIP_TIMEOUT_S = 1800  # libdpa and the extension compile from scratch, on 2 cores too
RUN_TIMEOUT_S = 300

RANKS_SCRIPT = textwrap.dedent("""
    import os, sys
    import dpa
    from dpa._launch import run_ranks
    import install_check_worker

    if __name__ == "__main__":  # the ranks are spawned: they import this file again
        site = sys.argv[1]
        assert dpa.__file__.startswith(site), f"dpa imported from {dpa.__file__}, not from {site}"
        assert os.path.exists(os.path.join(os.path.dirname(dpa.__file__), "libdpa.so.0"))
        sums = run_ranks(install_check_worker.worker, 2, timeout=120)
        assert sums == [[3.0] * 1000, [3.0] * 1000], sums
        print("installed dpa all_reduce on 2 ranks: ok")
""")

WORKER_MODULE = textwrap.dedent("""
    def worker(rank, world, init_file):
        import torch
        import torch.distributed as dist
        import dpa

        dist.init_process_group("dpa", init_method="file://" + init_file, rank=rank,
                                world_size=world)
        tensor = torch.full((1000,), float(rank + 1))
        dist.all_reduce(tensor)
        return tensor.tolist()
""")


def ignore_build_outputs(directory, names):
    return [name for name in names if name.startswith("build") or name.endswith(".egg-info")
            or name == "__pycache__"]


def main():
    with tempfile.TemporaryDirectory(prefix="dpa-pip-") as scratch:
        scratch = Path(scratch)
        source, site = scratch / "src", scratch / "site"
        source.mkdir()
        for name in SOURCES:
            path = ROOT / name
            if path.is_dir():
                shutil.copytree(path, source / name, ignore=ignore_build_outputs)
            else:
                shutil.copy2(path, source / name)
        environment = {k: v for k, v in os.environ.items()
                       if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "DPA_PREFIX")}
        install = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                   "--no-index", "--target", str(site), str(source / "python")]
        print(" ".join(install), flush=True)
        installed = subprocess.run(install, env=environment, cwd=scratch, capture_output=True,
                                   text=True, timeout=PIP_TIMEOUT_S)
        if installed.returncode != 0:
            print(installed.stdout, installed.stderr, sep="\n")
            return 1
        (scratch / "install_check_worker.py").write_text(WORKER_MODULE)
        (scratch / "ranks.py").write_text(RANKS_SCRIPT)
        environment["PYTHONPATH"] = f"{site}{os.pathsep}{scratch}"
        ran = subprocess.run([sys.executable, str(scratch / "ranks.py"), str(site)],
                             env=environment, cwd=scratch, capture_output=True, text=True,
                             timeout=RUN_TIMEOUT_S)
        print(ran.stdout, ran.stderr, sep="\n")
        return ran.returncode


if __name__ == "__main__":
    sys.exit(main())
