# SPDX-License-Identifier: Apache-2.0
"""Builds the dpa Python package (the torch.distributed backend) for pip (pyproject.toml):

    pip install ./python                        # in a venv with PyPI torch
    pip install --no-build-isolation ./python   # against the torch this Python already has

CMake builds everything (the target torch-plugin of the repository this directory belongs to:
libdpa, the extension dpa._C and, where torch has CUDA and nvcc is found, the CUDA kernels);
this file only tells CMake which interpreter, torch and CUDA architectures to build for and
copies the results into the package: libdpa.so.<major> lies next to the extension, which finds
it through the rpath $ORIGIN, so the package needs no LD_LIBRARY_PATH and no separate libdpa.

- Interpreter: the one running this build (sys.executable), and the torch it imports.
- CUDA architectures: TORCH_CUDA_ARCH_LIST when set ("8.0;9.0+PTX"), else those this torch was
  built for, with the PTX of the highest; CMake drops what the local nvcc cannot build.
- DPA_PREFIX=/opt/dpa: link the libdpa installed there (cmake --install <build> --prefix
  /opt/dpa) instead of building one, through an rpath to its lib directory.
- CMAKE names the CMake to run (default: cmake on PATH), MAX_JOBS the compile jobs (default:
  every core).

The sources: in a checkout, the repository this directory belongs to; in an sdist (python -m
build, pip wheel from the sdist), the copy of the repository's build inputs that the sdist carries
under _source/ (CMAKE_SOURCE_PARTS). Each configuration (interpreter, torch, DPA_PREFIX, CUDA
architectures) builds in a CMake tree of its own, so installs in any order never reuse a tree
configured for another.

docs/install.md says when --no-build-isolation is needed and why. Nothing is downloaded here:
CMake, a C++20 compiler and libdpa's build dependencies (scripts/install-deps.sh) must be there.
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
BUNDLED_SOURCE = "_source"  # where an sdist carries the repository's build inputs
# What CMake's torch-plugin target reads from the repository (DPA_TESTS and DPA_SWITCH off).
CMAKE_SOURCE_PARTS = ("CMakeLists.txt", "VERSION", "LICENSE", "cmake", "include", "src", "configs",
                      "python/CMakeLists.txt", "python/csrc", "python/dpa")


def fail(message):
    raise SystemExit(f"dpa setup.py: {message}")


def is_source_root(path):
    return (path / "VERSION").is_file() and (path / "src").is_dir() and (path / "CMakeLists.txt").is_file()


def find_source_root():
    for candidate in (HERE.parent, HERE / BUNDLED_SOURCE):
        if is_source_root(candidate):
            return candidate
    fail(f"neither {HERE.parent} (a dpa checkout) nor {HERE / BUNDLED_SOURCE} (an sdist) holds the dpa "
         "sources (VERSION, CMakeLists.txt, src/): run pip on the python/ directory of a checkout or on "
         "an sdist made from one")


SOURCE_ROOT = find_source_root()
VERSION = (SOURCE_ROOT / "VERSION").read_text().strip()


def ignored_in_copy(directory, names):
    return [name for name in names if name in ("__pycache__", "build") or name.endswith((".pyc", ".so"))
            or name == "_build_info.py"]


class SdistWithSources(sdist):
    """An sdist that builds anywhere: it carries the repository's build inputs under _source/."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        if SOURCE_ROOT != HERE.parent:
            fail("an sdist is made from a checkout, not from another sdist")
        for part in CMAKE_SOURCE_PARTS:
            source = SOURCE_ROOT / part
            target = Path(base_dir) / BUNDLED_SOURCE / part
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, ignore=ignored_in_copy)
            else:
                shutil.copy2(source, target)


def torch_arch_list_entries(value):
    """TORCH_CUDA_ARCH_LIST ("8.0;8.6 9.0+PTX", torch's own notation) as CMake entries."""
    entries = []
    for item in re.split(r"[;\s]+", value.strip()):
        match = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", item)
        if not match:
            fail(f"TORCH_CUDA_ARCH_LIST={value}: '{item}' is not a compute capability such as 8.6 or 9.0+PTX")
        number = match.group(1) + match.group(2) + match.group(3)
        entries.append(number if match.group(4) else f"{number}-real")
    return entries


def torch_build_entries(torch):
    """The architectures this torch was compiled for (sm_XY machine code, compute_XY PTX) as
    CMake entries, with the PTX of the highest when torch carries none. Read from the build's
    flags, which, unlike torch.cuda.get_arch_list(), need no GPU in the machine."""
    flags = torch._C._cuda_getArchFlags() if hasattr(torch._C, "_cuda_getArchFlags") else None
    names = flags.split() if flags else torch.cuda.get_arch_list()
    entries, ptx, machine = [], [], []
    for name in names:
        kind, _, number = name.partition("_")
        if kind == "sm":
            machine.append(number)
            entries.append(f"{number}-real")
        elif kind == "compute":
            ptx.append(number)
            entries.append(f"{number}-virtual")
    portable = [number for number in machine if number.isdigit()]
    if not ptx and portable:
        entries.append(f"{max(portable, key=int)}-virtual")
    return entries


def cuda_arguments(torch):
    if torch.version.cuda is None:
        return ["-DDPA_CUDA=OFF"]  # a CPU torch: CUDA tensors cannot occur
    wanted = os.environ.get("TORCH_CUDA_ARCH_LIST")
    entries = torch_arch_list_entries(wanted) if wanted else torch_build_entries(torch)
    arguments = ["-DCMAKE_CUDA_ARCHITECTURES=" + ";".join(entries)] if entries else []
    from torch.utils.cpp_extension import CUDA_HOME

    nvcc = Path(CUDA_HOME) / "bin" / "nvcc" if CUDA_HOME else None
    if "CUDACXX" not in os.environ and nvcc is not None and nvcc.exists():
        arguments.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
    return arguments


class CMakeExtension(Extension):
    """The extension dpa._C, built by CMake's target torch-plugin rather than by setuptools."""

    def __init__(self, name):
        super().__init__(name, sources=[])


class BuildWithCMake(build_ext):
    def build_extension(self, extension):
        import torch  # the torch this build compiles against: the build environment's

        cmake = os.environ.get("CMAKE", "cmake")
        if shutil.which(cmake) is None:
            fail(f"'{cmake}' not found; install CMake (scripts/install-deps.sh) or set CMAKE")
        prefix = os.environ.get("DPA_PREFIX")
        settings = [
            "-DCMAKE_BUILD_TYPE=Release",
            "-DDPA_TESTS=OFF", "-DDPA_BENCHMARKS=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
            # The bundled libdpa exports its own API only. Where the toolchain links static archives
            # into it (a -static-libstdc++ in LDFLAGS, as wheel-building images set), their symbols
            # would otherwise be exported too, and the extension, which lists libdpa before
            # libstdc++, would bind its iostreams to that private copy and crash.
            "-DCMAKE_SHARED_LINKER_FLAGS=" + " ".join(
                filter(None, [os.environ.get("LDFLAGS", ""), "-Wl,--exclude-libs,ALL"])),
            *cuda_arguments(torch),
        ]
        if prefix:
            settings.append(f"-DDPA_TORCH_PLUGIN_LIBDPA_PREFIX={Path(prefix).resolve()}")
        else:
            settings.append("-DDPA_TORCH_PLUGIN_RPATH=$ORIGIN")
        # One tree per configuration: a tree configured for DPA_PREFIX links no libdpa of its own,
        # so a later plain install that reused it would find none to copy.
        key = hashlib.sha256("\0".join([str(SOURCE_ROOT), *settings]).encode()).hexdigest()[:12]
        build_dir = Path(self.build_temp).resolve() / f"cmake-{key}"
        configure = [cmake, "-S", str(SOURCE_ROOT), "-B", str(build_dir), *settings]
        jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
        for command in (configure, [cmake, "--build", str(build_dir), "--target", "torch-plugin", "-j", jobs]):
            print("dpa setup.py:", " ".join(command), flush=True)
            subprocess.run(command, check=True)

        built = build_dir / "python" / "dpa"
        modules = list(built.glob("_C*.so"))
        if len(modules) != 1:
            fail(f"CMake built no extension in {built} (see the 'dpa: torch-plugin' line of its output)")
        target = Path(self.get_ext_fullpath(extension.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(modules[0], target)
        shutil.copyfile(built / "_build_info.py", target.parent / "_build_info.py")
        if not prefix:
            # The real file under the SONAME (SOVERSION = the major version): the only name the
            # dynamic loader asks for.
            soname = f"libdpa.so.{VERSION.split('.')[0]}"
            shutil.copyfile(build_dir / "src" / soname, target.parent / soname)


if __name__ == "__main__":  # as pip's backend runs it; tests import the helpers above
    setup(
        version=VERSION,
        ext_modules=[CMakeExtension("dpa._C")],
        cmdclass={"build_ext": BuildWithCMake, "sdist": SdistWithSources},
    )
