#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs a built dpa into a scratch prefix, builds tests/consumer/project against it with
# find_package(dpa) and checks that the program runs.
#
#   run.sh <dpa build dir> <dpa source dir>
set -euo pipefail

if (($# != 2)); then
  echo "usage: $0 <dpa build dir> <dpa source dir>" >&2
  exit 2
fi
build_dir=$1
source_dir=$2
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  echo "run.sh: $build_dir is not a CMake build directory" >&2
  exit 1
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/dpa-consumer.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
prefix=$scratch/prefix

# Read back the build's settings: the library directory GNUInstallDirs chose and the compiler,
# so that the consumer is built with the same C++ ABI as the library.
cache_value() {
  sed -n "s/^$1:[A-Z]*=//p" "$build_dir/CMakeCache.txt"
}
libdir=$(cache_value CMAKE_INSTALL_LIBDIR)
cxx=$(cache_value CMAKE_CXX_COMPILER)
if [[ -z "$libdir" || -z "$cxx" ]]; then
  echo "run.sh: $build_dir/CMakeCache.txt lacks CMAKE_INSTALL_LIBDIR or CMAKE_CXX_COMPILER" >&2
  exit 1
fi

cmake --install "$build_dir" --prefix "$prefix"
cmake -S "$source_dir/tests/consumer/project" -B "$scratch/build" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release
cmake --build "$scratch/build"

output=$(LD_LIBRARY_PATH="$prefix/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$scratch/build/app")
echo "$output"
if [[ "$output" != "dpa consumer ok" ]]; then
  echo "run.sh: unexpected output from the consumer" >&2
  exit 1
fi
