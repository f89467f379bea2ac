# SPDX-License-Identifier: Apache-2.0
"""The package's command-line tools and their private helpers: ``python -m dpa.bench``,
``python -m dpa.train`` and ``python -m dpa.demo`` run the ``main`` of the module of the same name
here (docs/benchmark-tools.md, docs/training-benchmark.md). The backend never imports them, and
they load dpa's extension only when a run starts, so --help and --version work without it."""
