#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Type-checks p4/dpa.p4 with the open p4c front and mid end for every shipped Tofino config
# (netberg and tofino-model: Tofino1, the latter the only build with the drop simulator; edgecore
# and edgecore-linerate: Tofino2) and the straggler-unaware build of netberg. Needs P4TEST (a
# p4test binary) and P4TEST_INCLUDES (p4c's p4include and backends/tofino/bf-p4c/p4include,
# colon-separated); skips (exit 77) without them. Usage: p4test_check.sh SOURCE_DIR DPA_P4GEN
set -euo pipefail
source_dir="$1" p4gen="$2"
if [[ -z "${P4TEST:-}" ]]; then
  echo "skipped: P4TEST is not set (point it at a p4test built from p4lang/p4c, and P4TEST_INCLUDES at its p4include and backends/tofino/bf-p4c/p4include)"
  exit 77
fi
[[ -x "$P4TEST" ]] || { echo "P4TEST=$P4TEST is not an executable"; exit 1; }
[[ -n "${P4TEST_INCLUDES:-}" ]] || { echo "P4TEST_INCLUDES is not set (p4c's p4include:backends/tofino/bf-p4c/p4include)"; exit 1; }
includes=()
IFS=: read -ra dirs <<<"$P4TEST_INCLUDES"
for dir in "${dirs[@]}"; do includes+=(-I "$dir"); done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 "$(dirname "${BASH_SOURCE[0]}")/unaware_config.py" "$source_dir/configs/netberg.json" "$work/unaware.json"
for config in "$source_dir/configs/netberg.json" "$source_dir/configs/edgecore.json" \
    "$source_dir/configs/edgecore-linerate.json" "$source_dir/configs/tofino-model.json" \
    "$work/unaware.json"; do
  name="$(basename "$config" .json)"
  mkdir -p "$work/$name"
  "$p4gen" "$config" -o "$work/$name/dpa_config.p4"
  target=1; [[ "$("$p4gen" --print target "$config")" == tofino2 ]] && target=2
  echo "p4test: $name (Tofino$target)"
  # metadata_t is @pa_auto_init_metadata (zeroed by bf-p4c), which p4test does not know of.
  "$P4TEST" --std p4-16 --Wdisable=uninitialized_out_param --Werror "${includes[@]}" -I "$work/$name" -I "$source_dir/p4" \
    -D__TARGET_TOFINO__=$target "$source_dir/p4/dpa.p4"
done
