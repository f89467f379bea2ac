#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Quick start 2: install what is missing, build, and run every test (unit, conformance,
# multi-process integration over UDP loopback and DPDK virtual devices, install/find_package
# consumer). DPDK is installed so that the DPDK transport is built and its tests run.
#
#   scripts/dpa-test.sh [--no-install] [-- CTEST_ARGS...]   build into ./build (DPA_BUILD_DIR overrides)
#     --no-install   skip scripts/install-deps.sh (the packages are there, or you have no root)
#     -- ARGS        passed to ctest, e.g. -- -R python_ to run some tests only
#
# Exit status: 0 when every test passed, 1 when a step or a test failed, 2 for a usage error.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-common.sh"
dpa_help_or_version "$@"
install=1
while (($#)); do
  case "$1" in
    --no-install) install=0; shift ;;
    --) shift; break ;;
    *) dpa_usage_error "unknown argument '$1' (ctest's arguments go after --)" ;;
  esac
done
# Whatever a step exits with (cmake, ctest's 8, apt-get's 100), this script's failure is 1.
trap 'dpa_fail "a step failed (status $?): see above"' ERR
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DPA_BUILD_DIR:-$root/build}"
jobs="$(nproc)"

if ((install)); then "$root/scripts/install-deps.sh" --with-python --with-dpdk; fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"
# Every test carries its own timeout (see tests/CMakeLists.txt); --timeout is a backstop.
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 600 "$@"
