#!/usr/bin/env bash
# Quick start 2: install what is missing, build, and run every test (unit, conformance,
# multi-process integration over UDP loopback, install/find_package consumer).
#
#   scripts/dpa-test.sh            build into ./build (DPA_BUILD_DIR overrides)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DPA_BUILD_DIR:-$root/build}"
jobs="$(nproc)"

"$root/scripts/install-deps.sh" --with-python
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"
# Every test carries its own timeout (see tests/CMakeLists.txt); --timeout is a backstop.
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 600
