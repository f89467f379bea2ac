#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Quick start 1: install what is missing (the PyTorch backend's packages included), build,
# start dpa-switch on 127.0.0.1, run 4 workers that verify exact int32 sums and float32 sums
# within the documented bound, then the straggler scenario (rank 3 delayed before every
# operation) with K = N, reactive and preemptive fastest-K, and end with the straggler training
# demo (python -m dpa.demo): DDP on scikit-learn's digits with Gloo, dpa K = N and both
# fastest-K modes, whose plot and JSON land in <build>/dpa-demo/. Everything it starts is stopped
# again, also on failure or Ctrl-C.
#
#   scripts/dpa-demo.sh [--no-install]   build into ./build (DPA_BUILD_DIR overrides)
#     --no-install   skip scripts/install-deps.sh (the packages are there, or you have no root)
#
# Exit status: 0 when every step passed, 1 when one failed, 2 for a usage error.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-common.sh"
dpa_help_or_version "$@"
install=1
for argument in "$@"; do
  case "$argument" in
    --no-install) install=0 ;;
    *) dpa_usage_error "unknown argument '$argument'" ;;
  esac
done
# Whatever a step exits with (cmake, ctest's 8, apt-get's 100), this script's failure is 1.
trap 'dpa_fail "a step failed (status $?): see above"' ERR
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DPA_BUILD_DIR:-$root/build}"
started=$SECONDS

if ((install)); then "$root/scripts/install-deps.sh" --with-python; fi
configured="$(cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release)"
# Read the whole target list first: grep -q exits at the first match, and under pipefail the
# writer's broken pipe would fail the test.
targets="$(cmake --build "$build" --target help)"
if ! grep -qw torch-plugin <<<"$targets"; then
  echo "dpa-demo: the PyTorch backend cannot be built although its packages are installed:" >&2
  grep 'torch-plugin' <<<"$configured" >&2 || true
  exit 1
fi
cmake --build "$build" -j "$(nproc)" --target dpa-switch dpa-bench torch-plugin
echo "== built in $((SECONDS - started)) s"

workdir="$(mktemp -d)"
switch_pid=""
cleanup() {
  if [[ -n "$switch_pid" ]] && kill -0 "$switch_pid" 2>/dev/null; then
    kill -TERM "$switch_pid" 2>/dev/null || true
    wait "$switch_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Port 0: the kernel picks free ports, so the demo never collides with a running switch.
"$build/src/tools/dpa-switch" --config "$root/configs/softswitch.json" --port 0 \
  --port-file "$workdir/port" >"$workdir/switch.log" 2>&1 &
switch_pid=$!
switch="127.0.0.1:$(dpa_switch_port "$workdir/port" "$switch_pid" "$workdir/switch.log")"
bench=("$build/src/tools/dpa-bench" --switch "$switch" --ranks 4)

echo "== dpa-switch on $switch (configs/softswitch.json: 4 ranks, payload 2048)"
echo
echo "== 1. int32 allreduce, 4 workers, every element checked for the exact sum"
"${bench[@]}" --dtype int32 --sizes 4KiB,1MiB,16MiB --iterations 5
echo
echo "== 2. float32 allreduce, every element checked against the error bound"
"${bench[@]}" --dtype float32 --sizes 4KiB,1MiB,16MiB --iterations 5
echo
echo "== 3. straggler: rank 3 sleeps 50 ms before every operation (K = 3 for fastest-K)"
"${bench[@]}" --dtype float32 --sizes 64KiB,1MiB --iterations 10 --straggler-rank 3 \
  --straggler-delay-ms 50 --modes full,reactive,preemptive --k 3
echo
echo "   full: every block waits for all 4 ranks, so each operation takes the straggler's delay."
echo "   reactive: a block waits the switch's straggler timeout (10 ms), then completes with 3;"
echo "   later blocks of the operation complete at the first 3 at once."
echo "   preemptive: every block completes with the first 3 ranks."
echo
kill -TERM "$switch_pid"
wait "$switch_pid" || true
switch_pid=""
echo "== dpa-switch counters"
sed -n '/stopping/,$p' "$workdir/switch.log"

echo
python="$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")"
echo "== 4. straggler training: DDP on scikit-learn's digits, 4 ranks, rank 3 delayed at random steps"
PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" "${python:-python3}" -m dpa.demo --out "$build/dpa-demo"
echo "== dpa-demo done in $((SECONDS - started)) s"
