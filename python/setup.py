"""Builds and installs the dpa Python package (the torch.distributed backend) with pip:

    cmake -S . -B build && cmake --build build && cmake --install build --prefix /opt/dpa
    DPA_PREFIX=/opt/dpa pip install --no-build-isolation ./python

DPA_PREFIX (default /usr/local) is where libdpa is installed: include/dpa/*.hpp and
lib/libdpa.so (or lib64/). The extension is compiled against the torch that this Python imports
(hence --no-build-isolation) and records its version; importing dpa with another torch fails with
an ImportError that says so. The module finds libdpa through an rpath to DPA_PREFIX's lib.
"""

import os
from pathlib import Path

import torch
from setuptools import setup
from setuptools.command.build_py import build_py
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = Path(__file__).resolve().parent
PREFIX = Path(os.environ.get("DPA_PREFIX", "/usr/local")).resolve()


def find_libdpa():
    header = PREFIX / "include" / "dpa" / "context.hpp"
    for libdir in ("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"):
        if header.exists() and (PREFIX / libdir / "libdpa.so").exists():
            return PREFIX / libdir
    raise SystemExit(
        f"dpa setup.py: no libdpa under DPA_PREFIX={PREFIX} (looked for include/dpa/context.hpp "
        "and lib/libdpa.so); build and install it first: cmake --install <build> --prefix <dir>, "
        "then DPA_PREFIX=<dir> pip install --no-build-isolation ./python"
    )


class BuildPyRecordingTorch(build_py):
    """Writes dpa/_build_info.py with the torch version the extension is compiled against."""

    def run(self):
        super().run()
        template = (HERE / "dpa" / "_build_info.py.in").read_text()
        target = Path(self.build_lib) / "dpa" / "_build_info.py"
        target.write_text(template.replace("@DPA_TORCH_PY_VERSION@", torch.__version__))


LIBDIR = find_libdpa()

setup(
    name="dpa",
    version="0.1.0",
    description="dpa in-network allreduce: torch.distributed backend",
    packages=["dpa"],
    python_requires=">=3.8",
    ext_modules=[
        CppExtension(
            "dpa._C",
            sorted(str(path.relative_to(HERE)) for path in (HERE / "csrc").glob("*.cpp")),
            include_dirs=[str(PREFIX / "include")],
            library_dirs=[str(LIBDIR)],
            libraries=["dpa"],
            runtime_library_dirs=[str(LIBDIR)],
            extra_compile_args=["-std=c++20", "-O2", "-fvisibility=hidden"],
        )
    ],
    cmdclass={"build_ext": BuildExtension, "build_py": BuildPyRecordingTorch},
)
