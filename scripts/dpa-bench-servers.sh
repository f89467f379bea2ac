#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One dpa-bench job over S software switch servers on this host (UDP loopback), for each S asked:
# how the aggregate goodput scales when a job's aggregation spreads over several dpa-switch
# instances (DPA_SWITCH with a list: worker thread t talks to server t mod S).
#
#   scripts/dpa-bench-servers.sh [-s COUNTS] [-n RANKS] [-p PAYLOAD] [--switch-threads N]
#                                [-- dpa-bench options...]
#
# -s: comma list of server counts, one run each (default 1,2,4); -n: ranks (default 2); -p: values
# per packet (default 1024); --switch-threads: threads of each server (default 1). dpa-bench's
# --threads defaults to the largest count (every server then has a thread of each rank); a smaller
# --threads than a count is refused by dpa-bench. Each run starts its servers on ephemeral ports,
# prints dpa-bench's table (every result verified) and stops them. Builds nothing: DPA_BUILD_DIR
# (default ./build) must hold dpa-switch and dpa-bench. Exit status: 0 every run passed, 1 a run
# failed or a server did not start, 2 usage.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-common.sh"
dpa_help_or_version "$@"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DPA_BUILD_DIR:-$root/build}"
counts="1,2,4"
ranks=2
payload=1024
switch_threads=1
while (($#)); do
  case "$1" in
    -s) counts=$(dpa_option_value "$@"); shift 2 ;;
    -n) ranks=$(dpa_option_value "$@"); shift 2 ;;
    -p) payload=$(dpa_option_value "$@"); shift 2 ;;
    --switch-threads) switch_threads=$(dpa_option_value "$@"); shift 2 ;;
    --) shift; break ;;
    *) dpa_usage_error "unknown option '$1' (dpa-bench options go after --)" ;;
  esac
done
[[ "$counts" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || dpa_usage_error "-s '$counts': expected a comma list of server counts such as 1,2,4"
[[ "$ranks" =~ ^[1-9][0-9]*$ ]] || dpa_usage_error "-n '$ranks': expected a number of ranks"
[[ "$payload" =~ ^[1-9][0-9]*$ ]] || dpa_usage_error "-p '$payload': expected values per packet"
[[ "$switch_threads" =~ ^[1-9][0-9]*$ ]] || dpa_usage_error "--switch-threads '$switch_threads': expected a number of threads"
for tool in dpa-switch dpa-bench; do
  [[ -x "$build/src/tools/$tool" ]] || dpa_fail "$build/src/tools/$tool not found: build it (cmake --build $build --target $tool) or set DPA_BUILD_DIR"
done

IFS=, read -r -a server_counts <<<"$counts"
largest=0
for count in "${server_counts[@]}"; do ((count > largest)) && largest=$count; done
bench_args=("$@")
has_threads=""
for argument in "${bench_args[@]}"; do [[ "$argument" == --threads ]] && has_threads=1; done
[[ -n "$has_threads" ]] || bench_args+=(--threads "$largest")

work=$(mktemp -d /tmp/dpa-bench-servers.$$.XXXX)
server_pids=()
# Every exit path stops the servers (each in a process group of its own) and removes the files.
cleanup() {
  trap - EXIT INT TERM HUP
  set +e
  stop_servers
  rm -rf "$work"
}
stop_servers() {
  local pid
  for pid in "${server_pids[@]}"; do kill -- -"$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  server_pids=()
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
set -m

status=0
for count in "${server_counts[@]}"; do
  servers=""
  for ((i = 0; i < count; ++i)); do
    port_file="$work/port-$count-$i"
    "$build/src/tools/dpa-switch" --port 0 --port-file "$port_file" --threads "$switch_threads" \
      --world-size "$ranks" --payload "$payload" >"$work/switch-$count-$i.log" 2>&1 &
    server_pids+=("$!")
  done
  for ((i = 0; i < count; ++i)); do
    port=$(dpa_switch_port "$work/port-$count-$i" "${server_pids[$i]}" "$work/switch-$count-$i.log")
    servers+="${servers:+,}127.0.0.1:$port"
  done
  echo "# $count server(s), $switch_threads thread(s) each: $servers"
  "$build/src/tools/dpa-bench" --switch "$servers" -n "$ranks" --payload "$payload" "${bench_args[@]}" || status=1
  stop_servers
done
exit "$status"
