# SPDX-License-Identifier: Apache-2.0
# Shared by dpa-switch-compile.sh, -start.sh, -stop.sh and -controller.sh (sourced). Every failure
# names what is missing and how to fix it: exit 2 when the command line or the config is wrong,
# 1 when the machine lacks something (the SDE, a tool) or a step fails.
source "$(dirname "${BASH_SOURCE[0]}")/dpa-common.sh"

# The tmux session the switch runs in, and bf_switchd's status port, which bfshell connects to
# and whose opening says the driver is up.
DPA_TMUX_SESSION="${DPA_TMUX_SESSION:-dpa-switch}"
DPA_SWITCHD_PORT="${DPA_SWITCHD_PORT:-7777}"

# Where the installed (or source-tree) pieces are, relative to the script.
DPA_SCRIPT_DIR="$DPA_SCRIPTS_DIR"
if [[ -d "$DPA_SCRIPT_DIR/../share/dpa/p4" ]]; then
  DPA_P4_DIR="$DPA_SCRIPT_DIR/../share/dpa/p4"
  DPA_CONTROLLER_DIR="$DPA_SCRIPT_DIR/../share/dpa/controller"
else
  DPA_P4_DIR="$DPA_SCRIPT_DIR/../p4"
  DPA_CONTROLLER_DIR="$DPA_SCRIPT_DIR/../p4/controller"
fi

dpa_find_p4gen() {
  if [[ -n "${DPA_P4GEN:-}" ]]; then
    [[ -x "$DPA_P4GEN" ]] || dpa_fail "DPA_P4GEN=$DPA_P4GEN is not an executable"
    echo "$DPA_P4GEN"
  elif [[ -x "$DPA_SCRIPT_DIR/dpa-p4gen" ]]; then
    echo "$DPA_SCRIPT_DIR/dpa-p4gen"
  elif [[ -x "$DPA_SCRIPT_DIR/../build/src/tools/p4gen/dpa-p4gen" ]]; then
    echo "$DPA_SCRIPT_DIR/../build/src/tools/p4gen/dpa-p4gen"  # a source tree's build/
  elif command -v dpa-p4gen >/dev/null; then
    command -v dpa-p4gen
  else
    dpa_fail "dpa-p4gen not found: install dpa (cmake -DDPA_SWITCH=ON), build it in build/, put it on PATH, or set DPA_P4GEN"
  fi
}

dpa_require_tool() {  # NAME PATH-OR-COMMAND HINT
  local name="$1" tool="$2" hint="$3"
  if [[ "$tool" == */* ]]; then
    [[ -x "$tool" ]] || dpa_fail "$name not found at $tool ($hint)"
  else
    command -v "$tool" >/dev/null || dpa_fail "$name ($tool) is not installed ($hint)"
  fi
}

dpa_check_config() {  # CONFIG: readable, and valid for dpa-p4gen (its error names the key)
  local config="$1" p4gen
  [[ -r "$config" ]] || dpa_usage_error "config $config cannot be read"
  p4gen="$(dpa_find_p4gen)" || exit 1
  "$p4gen" --print target "$config" >/dev/null || dpa_usage_error "config $config is invalid (see above)"
}

# SDE_INSTALL as the original artifact's scripts take it (argument 3), or, when that is omitted
# or empty, from the environment that the SDE's set_sde.bash sets up: $SDE_INSTALL, else
# $SDE/install.
dpa_sde_install() {  # [ARGUMENT]
  local sde_install="${1:-${SDE_INSTALL:-}}"
  if [[ -z "$sde_install" && -n "${SDE:-}" ]]; then sde_install="$SDE/install"; fi
  [[ -n "$sde_install" ]] ||
    dpa_fail "SDE_INSTALL is not given (argument 3) and neither SDE_INSTALL nor SDE is set: source the SDE's set_sde.bash, or pass \$SDE/install"
  [[ -d "$sde_install" ]] || dpa_fail "SDE_INSTALL=$sde_install is not a directory: pass the SDE's install directory (\$SDE/install)"
  echo "$sde_install"
}

# $SDE (the SDE root, which holds run_switchd.sh), or the parent of SDE_INSTALL where that holds
# run_switchd.sh.
dpa_sde() {  # SDE_INSTALL
  if [[ -z "${SDE:-}" ]]; then
    local parent
    parent="$(dirname "$1")"
    [[ -x "$parent/run_switchd.sh" ]] && { echo "$parent"; return; }
    dpa_fail "SDE is not set: export SDE=<the SDE root, which holds run_switchd.sh> (the SDE's set_sde.bash does)"
  fi
  [[ -d "$SDE" ]] || dpa_fail "SDE=$SDE is not a directory"
  echo "$SDE"
}

# Whether bf_switchd's status port is open (the driver is up).
dpa_switchd_listening() {
  [[ -n "$(ss -Hltn "sport = :$DPA_SWITCHD_PORT" 2>/dev/null)" ]]
}
