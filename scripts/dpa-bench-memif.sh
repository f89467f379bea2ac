#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# dpa-bench with workers and dpa-switch all on DPDK over net_memif (no NIC, no hugepages): the
# switch thread busy-polls on an lcore pinned to one core, each rank's worker thread on its own.
#
#   scripts/dpa-bench-memif.sh [-n RANKS] [-p PAYLOAD] [--mtu MTU] [--switch-core C | --no-pinning]
#                              [--bsize BYTES] [--zero-copy] [-- dpa-bench options...]
#
# Builds nothing: DPA_BUILD_DIR (default ./build) must hold dpa-switch and dpa-bench built with DPDK.
# Every busy lcore is pinned to a free core of its own by default (docs/dpdk.md, "Cores"; the
# switch starts first, so it takes the lowest), the switch thread to --switch-core if given;
# --no-pinning leaves them all floating (dpdk.cores "none"), to compare. With too few free cores
# the lcores float and say so. The processes' main threads keep every CPU and mostly sleep.
# --bsize sets memif's packet buffer size (jumbo MTUs), --zero-copy the workers' memif zero-copy
# mode (configs from scripts/dpa-memif-config.sh). The switch prints its packets per busy core.
# Exit status: dpa-bench's (0 ok, 1 failure, 2 usage); 1 when dpa-switch does not start.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-common.sh"
dpa_help_or_version "$@"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DPA_BUILD_DIR:-$root/build}"
ranks=1
payload=256
mtu=1500
switch_core=""
worker_cores=""
bsize=""
zero_copy=""
while (($#)); do
  case "$1" in
    -n) ranks=$(dpa_option_value "$@"); shift 2 ;;
    -p) payload=$(dpa_option_value "$@"); shift 2 ;;
    --mtu) mtu=$(dpa_option_value "$@"); shift 2 ;;
    --switch-core) switch_core=$(dpa_option_value "$@"); shift 2 ;;
    --no-pinning) switch_core=none worker_cores=none; shift ;;
    --bsize) bsize=$(dpa_option_value "$@"); shift 2 ;;
    --zero-copy) zero_copy=1; shift ;;
    --) shift; break ;;
    *) dpa_usage_error "unknown option '$1' (dpa-bench options go after --)" ;;
  esac
done

for tool in dpa-switch dpa-bench; do
  [[ -x "$build/src/tools/$tool" ]] || dpa_fail "$build/src/tools/$tool not found: build it with DPDK (cmake --build $build --target $tool) or set DPA_BUILD_DIR"
done

# Files of earlier runs that were killed outright (SIGKILL leaves no trap a chance): their
# DPDK runtime directories and work directories carry the dead script's PID.
for stale in /var/run/dpdk/dpa-bench-* "${XDG_RUNTIME_DIR:-/nonexistent}"/dpdk/dpa-bench-* /tmp/dpa-bench-memif.*; do
  [[ -e "$stale" ]] || continue
  owner=${stale##*/dpa-bench-}; owner=${owner#memif.}; owner=${owner%%[-.]*}
  if [[ "$owner" =~ ^[0-9]+$ ]] && ! kill -0 "$owner" 2>/dev/null; then rm -rf "$stale"; fi
done

work=$(mktemp -d /tmp/dpa-bench-memif.$$.XXXX)
prefix="dpa-bench-$$"
switch_pid=""
bench_pid=""
# Every exit path (an error, Ctrl-C, kill) stops the switch and dpa-bench with its worker processes
# (own process groups: set -m below) and removes the run's files.
cleanup() {
  trap - EXIT INT TERM HUP
  set +e  # a killed process's status must not end the cleanup half way
  if [[ -n "$bench_pid" ]]; then kill -- -"$bench_pid" 2>/dev/null; wait "$bench_pid" 2>/dev/null; fi
  if [[ -n "$switch_pid" ]]; then kill -- -"$switch_pid" 2>/dev/null; wait "$switch_pid" 2>/dev/null; fi
  cat "$work/switch.log" >&2 2>/dev/null
  rm -rf "$work" /var/run/dpdk/"$prefix"-* "${XDG_RUNTIME_DIR:-/nonexistent}"/dpdk/"$prefix"-*
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
set -m  # background jobs in process groups of their own, killed as a whole by cleanup

config="$root/scripts/dpa-memif-config.sh"
# The switch and every worker get one queue pair per worker thread (dpa-bench's --threads): a
# memif server with a queue pair its client lacks reads the client's first ring twice.
worker_threads=1
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; ++i)); do [[ "${args[$i]}" == --threads ]] && worker_threads=${args[$((i + 1))]}; done
"$config" switch --dir "$work" --ranks "$ranks" --prefix "$prefix-switch" --ip 10.96.0.100 --port 4242 \
  --queues "$worker_threads" ${switch_core:+--core "$switch_core"} --mtu "$mtu" --mbufs 16383 --memory-mb 512 --payload "$payload" --pool-size 8192 \
  ${bsize:+--bsize "$bsize"} >"$work/switch.json"
# {rank} is replaced by dpa-bench for every rank.
"$config" worker --dir "$work" --rank '{rank}' --prefix "$prefix-{rank}" --ip '10.96.1.{rank}' --port 5000 \
  --queues "$worker_threads" ${worker_cores:+--core "$worker_cores"} --mtu "$mtu" --mbufs 16383 --memory-mb 512 \
  ${bsize:+--bsize "$bsize"} ${zero_copy:+--zero-copy} >"$work/worker.json"

"$build/src/tools/dpa-switch" --config "$work/switch.json" --transport dpdk --port-file "$work/port" \
  >"$work/switch.log" 2>&1 &
switch_pid=$!
dpa_switch_port "$work/port" "$switch_pid" "$work/switch.log" >/dev/null

# In the background, so that a signal reaches the trap at once and cleanup can stop it.
"$build/src/tools/dpa-bench" -n "$ranks" --switch 10.96.0.100:4242 --transport dpdk \
  --transport-config "$work/worker.json" "$@" &
bench_pid=$!
status=0
wait "$bench_pid" || status=$?
bench_pid=""
exit "$status"
