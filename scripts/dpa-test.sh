#!/usr/bin/env bash
# Quick start 2: install what is missing, build, and run every test (unit, conformance,
# multi-process integration over UDP loopback and DPDK virtual devices, install/find_package
# consumer). DPDK is installed so that the DPDK transport is built and its tests run.
#
#   scripts/dpa-test.sh            build into ./build (DPA_BUILD_DIR overrides)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DPA_BUILD_DIR:-$root/build}"
jobs="$(nproc)"

"$root/scripts/install-deps.sh" --with-python --with-dpdk
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"
# Every test carries its own timeout (see tests/CMakeLists.txt); --timeout is a backstop.
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 600
