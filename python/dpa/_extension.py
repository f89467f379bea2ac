# SPDX-License-Identifier: Apache-2.0
"""The compiled backend dpa._C, loaded at its first use rather than at ``import dpa``.

``import dpa`` registers the backend and the tools answer --help and --version without it (a
checkout that was never built, a build that skipped the extension); whatever needs it (a "dpa"
process group, ``dpa.last_stats()``, ``dpa._C``) loads it here, checked against the torch this
process imports, and fails there with the reason it cannot be loaded."""

import importlib

import torch

_module = None


def load():
    """dpa._C, imported and checked at the first call."""
    global _module
    if _module is None:
        _module = _checked_import()
    return _module


def close_all():
    """Stops the worker threads and embedded switches before the interpreter tears down, where
    the extension was loaded (nothing else can have started any)."""
    if _module is not None:
        _module.close_all()


def _checked_import():
    try:
        from ._build_info import BUILT_WITH_TORCH
    except ImportError as error:
        raise ImportError(
            f"dpa._C is not built in {__file__.rsplit('/', 1)[0]}: build it (cmake --build <build> "
            "--target torch-plugin, then PYTHONPATH=<build>/python) or install the package "
            "(pip install ./python; docs/install.md)"
        ) from error
    if torch.__version__ != BUILT_WITH_TORCH:
        raise ImportError(
            f"dpa._C was built against torch {BUILT_WITH_TORCH}, but this Python "
            f"imports torch {torch.__version__} from {torch.__file__}. The C++ ABI of torch "
            "changes between releases: rebuild the extension with this torch "
            "(cmake --build <build> --target torch-plugin, or pip install --no-build-isolation ./python)."
        )
    try:
        # Not `from . import _C`: that asks the package for the attribute, whose lookup
        # (dpa.__getattr__) comes back here.
        module = importlib.import_module("._C", __package__)
    except ImportError as error:
        raise ImportError(
            f"dpa._C could not be loaded with torch {torch.__version__} ({error}). "
            "Check that libdpa is found (the extension's rpath, or LD_LIBRARY_PATH) and that the "
            "extension was built against this torch."
        ) from error
    if (module.TORCH_VERSION_MAJOR, module.TORCH_VERSION_MINOR) != tuple(
        int(part) for part in torch.__version__.split(".")[:2]
    ) or module.CXX11_ABI != torch._C._GLIBCXX_USE_CXX11_ABI:
        raise ImportError(
            f"dpa._C was compiled against torch headers {module.TORCH_VERSION} "
            f"(_GLIBCXX_USE_CXX11_ABI={int(module.CXX11_ABI)}), which do not match torch "
            f"{torch.__version__} (_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}); "
            "rebuild the extension with this torch."
        )
    return module
