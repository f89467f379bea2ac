"""Builds and installs the dpa Python package (the torch.distributed backend) with pip:

    pip install --no-build-isolation ./python

builds libdpa with CMake from the repository this directory belongs to (its parent), compiles
the extension dpa._C against it and installs both: libdpa.so.0 lies next to the extension, which
finds it through the rpath $ORIGIN, so the package needs no LD_LIBRARY_PATH and no separate
install of libdpa. CMake, a C++20 compiler and libdpa's build dependencies (spdlog, fmt,
nlohmann-json, CLI11: scripts/install-deps.sh) must be installed; nothing is downloaded.

    DPA_PREFIX=/opt/dpa pip install --no-build-isolation ./python

uses a libdpa installed there instead (cmake --install <build> --prefix /opt/dpa: include/dpa/
and lib/libdpa.so), found through an rpath to that lib directory.

Where that torch has CUDA and its CUDA_HOME has nvcc, the extension is a CUDAExtension that also
compiles the block floating point kernels (src/quant/cuda, for TORCH_CUDA_ARCH_LIST, default
"9.0+PTX"), and CUDA float tensors are quantised and dequantised on the GPU; otherwise they are
staged as floats and quantised by libdpa on the host.

The extension is compiled against the torch that this Python imports (hence
--no-build-isolation) and records its version; importing dpa with another torch fails with an
ImportError that says so. CMAKE (default: cmake on PATH) names the CMake to run, MAX_JOBS the
parallel compile jobs (default: every core).
"""

import os
import shutil
import subprocess
from pathlib import Path

import torch
from setuptools import setup
from setuptools.command.build_py import build_py
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

HERE = Path(__file__).resolve().parent
SOURCE_ROOT = HERE.parent
PREFIX = Path(os.environ["DPA_PREFIX"]).resolve() if os.environ.get("DPA_PREFIX") else None
# The SONAME of libdpa (SOVERSION 0 in src/CMakeLists.txt): the file the extension loads.
LIBDPA_SONAME = "libdpa.so.0"


def installed_libdir(prefix):
    header = prefix / "include" / "dpa" / "context.hpp"
    for libdir in ("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"):
        if header.exists() and (prefix / libdir / "libdpa.so").exists():
            return prefix / libdir
    raise SystemExit(
        f"dpa setup.py: no libdpa under DPA_PREFIX={prefix} (looked for include/dpa/context.hpp "
        "and lib/libdpa.so); install it there (cmake --install <build> --prefix <dir>), or "
        "leave DPA_PREFIX unset to build libdpa from this repository"
    )


def jobs():
    return os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)


def build_libdpa(build_dir):
    """Configures and builds the target libdpa alone from SOURCE_ROOT; returns its directory."""
    if not (SOURCE_ROOT / "CMakeLists.txt").exists() or not (SOURCE_ROOT / "src").is_dir():
        raise SystemExit(
            f"dpa setup.py: {SOURCE_ROOT} is not the dpa repository, so libdpa cannot be built "
            "from it; run pip on the python/ directory of a dpa checkout, or install libdpa and "
            "set DPA_PREFIX"
        )
    cmake = os.environ.get("CMAKE", "cmake")
    if shutil.which(cmake) is None:
        raise SystemExit(f"dpa setup.py: '{cmake}' not found; install CMake (scripts/install-deps.sh) "
                         "or set CMAKE, or set DPA_PREFIX to an installed libdpa")
    configure = [
        cmake, "-S", str(SOURCE_ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
        "-DDPA_TESTS=OFF", "-DDPA_BENCHMARKS=OFF",
        # libdpa has no CUDA code; the extension compiles the kernels itself (extension()).
        "-DDPA_CUDA=OFF",
        # The extension is built here by setuptools, not by the CMake target torch-plugin.
        "-DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON",
        # The bundled libdpa exports its own API only. Where the toolchain links static archives
        # into it (a -static-libstdc++ in LDFLAGS, as wheel-building images set), their symbols
        # would otherwise be exported too, and the extension, which lists libdpa before
        # libstdc++, would bind its iostreams to that private copy and crash.
        "-DCMAKE_SHARED_LINKER_FLAGS=" + " ".join(
            filter(None, [os.environ.get("LDFLAGS", ""), "-Wl,--exclude-libs,ALL"])),
    ]
    for command in (configure, [cmake, "--build", str(build_dir), "--target", "dpa", "-j", jobs()]):
        print("dpa setup.py:", " ".join(command), flush=True)
        subprocess.run(command, check=True)
    return build_dir / "src"


class BuildExtensionWithLibdpa(BuildExtension):
    """Builds libdpa first (unless DPA_PREFIX is set) and ships it next to the extension."""

    def build_extensions(self):
        if PREFIX is None:
            libdir = build_libdpa(Path(self.build_temp).resolve() / "libdpa")
            include_dir, rpath = SOURCE_ROOT / "include", "$ORIGIN"
        else:
            libdir = installed_libdir(PREFIX)
            include_dir, rpath = PREFIX / "include", str(libdir)
        for extension in self.extensions:
            extension.include_dirs.append(str(include_dir))
            extension.library_dirs.append(str(libdir))
            extension.extra_link_args.append(f"-Wl,-rpath,{rpath}")
        super().build_extensions()
        if PREFIX is None:
            target = Path(self.get_ext_fullpath("dpa._C")).parent
            # The real file under the SONAME: the only name the dynamic loader asks for.
            shutil.copyfile(libdir / LIBDPA_SONAME, target / LIBDPA_SONAME)


class BuildPyRecordingTorch(build_py):
    """Writes dpa/_build_info.py with the torch version the extension is compiled against."""

    def run(self):
        super().run()
        template = (HERE / "dpa" / "_build_info.py.in").read_text()
        target = Path(self.build_lib) / "dpa" / "_build_info.py"
        target.write_text(template.replace("@DPA_TORCH_PY_VERSION@", torch.__version__))


CUDA_KERNELS = SOURCE_ROOT / "src" / "quant" / "cuda" / "block_float_cuda.cu"
SOURCES = sorted(str(path.relative_to(HERE)) for path in (HERE / "csrc").glob("*.cpp"))
CXX_FLAGS = ["-std=c++20", "-O2", "-fvisibility=hidden"]


def with_cuda_kernels():
    """Whether torch has CUDA, nvcc is there and the kernels' source is (a repository checkout)."""
    return (torch.version.cuda is not None and CUDA_HOME is not None
            and (Path(CUDA_HOME) / "bin" / "nvcc").exists() and CUDA_KERNELS.exists())


def extension():
    if not with_cuda_kernels():
        return CppExtension("dpa._C", SOURCES, libraries=["dpa"], extra_compile_args=CXX_FLAGS)
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0+PTX")
    return CUDAExtension(
        "dpa._C",
        SOURCES + [str(CUDA_KERNELS)],
        include_dirs=[str(SOURCE_ROOT / "src")],
        define_macros=[("DPA_WITH_CUDA", None)],
        libraries=["dpa"],
        # As CMake builds them (src/CMakeLists.txt): bit-identical to the host kernels.
        extra_compile_args={"cxx": CXX_FLAGS,
                            "nvcc": ["-O2", "-fmad=false", "-ftz=false", "-prec-div=true"]},
    )


setup(
    name="dpa",
    version="0.1.0",
    description="dpa in-network allreduce: torch.distributed backend",
    packages=["dpa"],
    python_requires=">=3.8",
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildExtensionWithLibdpa, "build_py": BuildPyRecordingTorch},
)
