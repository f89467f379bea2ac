#!/usr/bin/env bash
# The switch scripts' error paths (no SDE can run here): each failure must stop with a message
# naming what is wrong. Usage: scripts_test.sh SOURCE_DIR DPA_P4GEN
set -uo pipefail
source_dir="$1"
export DPA_P4GEN="$2"
scripts="$source_dir/scripts"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0

expect_error() {  # DESCRIPTION PATTERN COMMAND...
  local description="$1" pattern="$2"
  shift 2
  local output status
  output="$(env "$@" 2>&1)"
  status=$?
  if [[ $status -eq 0 ]] || ! grep -q -- "$pattern" <<<"$output"; then
    echo "FAIL: $description: status $status, output: $output"
    failures=$((failures + 1))
  else
    echo "ok: $description"
  fi
}

config="$source_dir/configs/netberg.json"
mkdir -p "$work/sde_install/bin" "$work/sde"
python3 - "$config" "$work/bad.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["switch"]["program"]["reducers"] = 40
json.dump(c, open(sys.argv[2], "w"))
PY

expect_error "compile: usage" "usage:" "$scripts/dpa-switch-compile.sh" "$config"
expect_error "compile: unreadable config" "cannot be read" "$scripts/dpa-switch-compile.sh" "$work/none.json" "$work/i" "$work/sde_install" "$work/b"
expect_error "compile: bad config names the key" "switch.program.reducers" "$scripts/dpa-switch-compile.sh" "$work/bad.json" "$work/i" "$work/sde_install" "$work/b"
expect_error "compile: SDE_INSTALL missing" "SDE_INSTALL=$work/nothing is not a directory" "$scripts/dpa-switch-compile.sh" "$config" "$work/i" "$work/nothing" "$work/b"
expect_error "compile: no bf-p4c" "bf-p4c not found at $work/sde_install/bin/bf-p4c" "$scripts/dpa-switch-compile.sh" "$config" "$work/i" "$work/sde_install" "$work/b"
expect_error "compile: no dpa-p4gen" "dpa-p4gen not found\|DPA_P4GEN=" DPA_P4GEN="$work/none" "$scripts/dpa-switch-compile.sh" "$config" "$work/i" "$work/sde_install" "$work/b"
expect_error "start: SDE unset" "SDE is not set" -u SDE "$scripts/dpa-switch-start.sh" "$config" "$work/i" "$work/sde_install" "$work/b"
expect_error "start: no run_switchd.sh" "run_switchd.sh not found at $work/sde/run_switchd.sh" SDE="$work/sde" PATH="$PATH" "$scripts/dpa-switch-start.sh" "$config" "$work/i" "$work/sde_install" "$work/b"
touch "$work/sde/run_switchd.sh" "$work/sde/run_bfshell.sh"
chmod +x "$work/sde/run_switchd.sh" "$work/sde/run_bfshell.sh"
if command -v tmux >/dev/null; then
  expect_error "start: not compiled" "dpa.conf not found: compile first" SDE="$work/sde" "$scripts/dpa-switch-start.sh" "$config" "$work/i" "$work/sde_install" "$work/b"
fi
expect_error "controller: unknown command" "unknown command 'restart'" SDE="$work/sde" "$scripts/dpa-switch-controller.sh" "$config" "$work/i" "$work/sde_install" restart
expect_error "controller: not compiled" "dpa_config.p4 not found" SDE="$work/sde" "$scripts/dpa-switch-controller.sh" "$config" "$work/i" "$work/sde_install" counters

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
