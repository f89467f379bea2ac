#!/usr/bin/env bash
# One-shot controller commands against a running dpa switch:
#   dpa-switch-controller.sh CONFIG INSTALL_DIR SDE_INSTALL reset|counters|setup
# reset clears every table, register and counter the controller writes and sets the switch up
# again (the running controller's JOIN state is lost: restart it afterwards); counters prints
# the program's counters under the software switch's names.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-switch-common.sh"

[[ $# -eq 4 ]] || dpa_die "usage: $(basename "$0") CONFIG INSTALL_DIR SDE_INSTALL reset|counters|setup"
config="$1" install_dir="$(realpath -m "$2")" sde_install="$3" command="$4"
case "$command" in
  reset|counters|setup) ;;
  *) dpa_die "unknown command '$command' (reset, counters or setup)" ;;
esac
dpa_check_config "$config"
dpa_check_sde
dpa_check_sde_install "$sde_install"
dpa_require_tool "run_bfshell.sh" "$SDE/run_bfshell.sh" "SDE must be the SDE root"
[[ -r "$install_dir/dpa_config.p4" ]] || dpa_die "$install_dir/dpa_config.p4 not found: compile first (dpa-switch-compile.sh)"

DPA_CONFIG="$(realpath "$config")" DPA_DEFINES="$install_dir/dpa_config.p4" DPA_COMMAND="$command" \
  "$SDE/run_bfshell.sh" -b "$install_dir/controller/dpa_bfshell.py"
