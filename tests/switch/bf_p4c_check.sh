#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compiles p4/dpa.p4 with the Tofino back end for Tofino1 (netberg), Tofino2 (edgecore) and the
# straggler-unaware build, and prints each target's resource summary. BF_P4C is an SDE's bf-p4c
# or the open back end's p4c-barefoot (p4c built with -DENABLE_TOFINO=ON); BF_P4C_INCLUDES
# (colon-separated) adds include directories, which p4c-barefoot run from its build tree needs
# (p4c's p4include and backends/tofino/bf-p4c/p4include). BF_P4C_OUT keeps the outputs (logs in
# <name>/pipe/logs) instead of a temporary directory. Skips (exit 77) without BF_P4C.
# Usage: bf_p4c_check.sh SOURCE_DIR DPA_P4GEN
set -euo pipefail
source_dir="$1" p4gen="$2"
if [[ -z "${BF_P4C:-}" ]]; then
  echo "skipped: BF_P4C is not set (point it at an SDE's bf-p4c or at p4c-barefoot built from p4lang/p4c with -DENABLE_TOFINO=ON, and BF_P4C_INCLUDES at p4c's p4include:backends/tofino/bf-p4c/p4include)"
  exit 77
fi
[[ -x "$BF_P4C" ]] || { echo "BF_P4C=$BF_P4C is not an executable"; exit 1; }
includes=()
if [[ -n "${BF_P4C_INCLUDES:-}" ]]; then
  IFS=: read -ra dirs <<<"$BF_P4C_INCLUDES"
  for dir in "${dirs[@]}"; do
    [[ -d "$dir" ]] || { echo "BF_P4C_INCLUDES: $dir is not a directory"; exit 1; }
    includes+=(-I "$dir")
  done
fi

if [[ -n "${BF_P4C_OUT:-}" ]]; then
  work="$BF_P4C_OUT"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
python3 "$(dirname "${BASH_SOURCE[0]}")/unaware_config.py" "$source_dir/configs/netberg.json" "$work/unaware.json"

failures=0
for config in "$source_dir/configs/netberg.json" "$source_dir/configs/edgecore.json" \
    "$source_dir/configs/edgecore-linerate.json" "$work/unaware.json"; do
  name="$(basename "$config" .json)"
  rm -rf "${work:?}/$name"
  mkdir -p "$work/$name"
  "$p4gen" "$config" -o "$work/$name/dpa_config.p4"
  target="$("$p4gen" --print target "$config")"
  arch="$("$p4gen" --print arch "$config")"
  generation=1; [[ "$target" == tofino2 ]] && generation=2
  echo "bf-p4c: $name ($target, $arch)"
  start=$SECONDS
  if "$BF_P4C" --target "$target" --arch "$arch" --std p4-16 -g -D__TARGET_TOFINO__=$generation \
      "${includes[@]}" -I "$work/$name" -I "$source_dir/p4" -o "$work/$name/out" \
      "$source_dir/p4/dpa.p4" >"$work/$name/compile.log" 2>&1; then
    echo "  compiled in $((SECONDS - start)) s"
    python3 "$source_dir/tests/switch/bf_p4c_summary.py" "$work/$name/out" || failures=$((failures + 1))
  else
    echo "  FAILED after $((SECONDS - start)) s (the whole log is compile.log, kept with BF_P4C_OUT):"
    # The errors and the PHV allocator's verdict; what follows them in the log is a diagnosis
    # of the unallocated fields that can run to thousands of lines.
    grep -E "error:|field slices remain unallocated" "$work/$name/compile.log" | head -n 20 | sed 's/^/    /' || true
    grep -A 12 "following fields were not allocated" "$work/$name/compile.log" | sed 's/^/    /' || true
    failures=$((failures + 1))
  fi
done
exit $((failures > 0))
