#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/dpa-bench-servers.sh: one verified dpa-bench run per server count, thread t on server
# t mod S, the servers gone afterwards; usage errors exit 2 and name the option.
#   bench_servers_script_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
source_dir=$1
export DPA_BUILD_DIR=$2
script="$source_dir/scripts/dpa-bench-servers.sh"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

output=$(timeout 100 "$script" -s 1,2 -n 2 -- --sizes 64KiB --iterations 3 --warmup 1 2>&1)
status=$?
[[ $status == 0 ]] || fail "two runs exited $status: $output"
[[ $(grep -c '^# [12] server(s), 1 thread(s) each: ' <<<"$output") == 2 ]] || fail "not one run per count: $output"
[[ $(grep -c '^# wrong elements in all: 0$' <<<"$output") == 2 ]] || fail "a run is not verified right: $output"
two=$(grep '^# switch servers of threads 0..1: ' <<<"$output" | tail -n 1 | sed 's/.*: //')
read -r first second <<<"$two"
[[ -n "$first" && -n "$second" && "$first" != "$second" ]] || fail "with 2 servers threads 0 and 1 share one: '$two'"
pgrep -f "$DPA_BUILD_DIR/src/tools/dpa-switch --port 0 --port-file /tmp/dpa-bench-servers" >/dev/null && fail "a server outlived the script"
ls -d /tmp/dpa-bench-servers.* >/dev/null 2>&1 && fail "the script left its files"

output=$("$script" -s 1,x 2>&1)
status=$?
[[ $status == 2 && "$output" == *"-s '1,x'"* ]] || fail "a bad -s gave $status: $output"
output=$("$script" -s 2 -- --threads 1 --sizes 4KiB --iterations 1 2>&1)
status=$?
[[ $status == 1 && "$output" == *"fewer than the 2 switch servers"* ]] || fail "--threads below the count gave $status: $output"
output=$(DPA_BUILD_DIR=/nonexistent "$script" -s 1 2>&1)
status=$?
[[ $status == 1 && "$output" == *"/nonexistent/src/tools/dpa-switch not found"* ]] || fail "a missing build gave $status: $output"

((failures == 0)) && echo "bench_servers_script_test: passed"
exit $((failures > 0))
