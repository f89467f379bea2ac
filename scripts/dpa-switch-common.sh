# Shared by dpa-switch-compile.sh, dpa-switch-start.sh and dpa-switch-controller.sh (sourced).
# Every failure names what is missing and how to fix it.

dpa_die() {
  echo "$(basename "$0"): $*" >&2
  exit 2
}

# Where the installed (or source-tree) pieces are, relative to the script.
DPA_SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -d "$DPA_SCRIPT_DIR/../share/dpa/p4" ]]; then
  DPA_P4_DIR="$DPA_SCRIPT_DIR/../share/dpa/p4"
  DPA_CONTROLLER_DIR="$DPA_SCRIPT_DIR/../share/dpa/controller"
else
  DPA_P4_DIR="$DPA_SCRIPT_DIR/../p4"
  DPA_CONTROLLER_DIR="$DPA_SCRIPT_DIR/../p4/controller"
fi

dpa_find_p4gen() {
  if [[ -n "${DPA_P4GEN:-}" ]]; then
    [[ -x "$DPA_P4GEN" ]] || dpa_die "DPA_P4GEN=$DPA_P4GEN is not an executable"
    echo "$DPA_P4GEN"
  elif [[ -x "$DPA_SCRIPT_DIR/dpa-p4gen" ]]; then
    echo "$DPA_SCRIPT_DIR/dpa-p4gen"
  elif [[ -x "$DPA_SCRIPT_DIR/../build/src/tools/p4gen/dpa-p4gen" ]]; then
    echo "$DPA_SCRIPT_DIR/../build/src/tools/p4gen/dpa-p4gen"  # a source tree's build/
  elif command -v dpa-p4gen >/dev/null; then
    command -v dpa-p4gen
  else
    dpa_die "dpa-p4gen not found: install dpa (cmake -DDPA_SWITCH=ON), build it in build/, put it on PATH, or set DPA_P4GEN"
  fi
}

dpa_require_tool() {  # NAME PATH-OR-COMMAND HINT
  local name="$1" tool="$2" hint="$3"
  if [[ "$tool" == */* ]]; then
    [[ -x "$tool" ]] || dpa_die "$name not found at $tool ($hint)"
  else
    command -v "$tool" >/dev/null || dpa_die "$name ($tool) is not installed ($hint)"
  fi
}

dpa_check_config() {  # CONFIG: readable, and valid for dpa-p4gen (its error names the key)
  local config="$1" p4gen
  [[ -r "$config" ]] || dpa_die "config $config cannot be read"
  p4gen="$(dpa_find_p4gen)" || exit 2
  "$p4gen" --print target "$config" >/dev/null || dpa_die "config $config is invalid (see above)"
}

dpa_check_sde_install() {  # SDE_INSTALL
  local sde_install="$1"
  [[ -n "$sde_install" ]] || dpa_die "SDE_INSTALL (argument 3) is empty: pass the SDE's install directory (\$SDE/install)"
  [[ -d "$sde_install" ]] || dpa_die "SDE_INSTALL=$sde_install is not a directory: pass the SDE's install directory (\$SDE/install)"
}

dpa_check_sde() {
  [[ -n "${SDE:-}" ]] || dpa_die "SDE is not set: export SDE=<the SDE root, which holds run_switchd.sh>"
  [[ -d "$SDE" ]] || dpa_die "SDE=$SDE is not a directory"
}
