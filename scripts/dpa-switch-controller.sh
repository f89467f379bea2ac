#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One-shot controller commands against a running dpa switch:
#
#   dpa-switch-controller.sh CONFIG INSTALL_DIR SDE_INSTALL reset|counters|setup
#   dpa-switch-controller.sh CONFIG INSTALL_DIR reset|counters|setup     SDE_INSTALL from the environment
#
# reset clears every table, register and counter the controller writes and sets the switch up
# again (the running controller's JOIN state is lost: restart it afterwards); counters prints
# the program's counters under the software switch's names; setup programs the switch again.
# SDE_INSTALL omitted or empty: $SDE_INSTALL, else $SDE/install; $SDE from the environment,
# else SDE_INSTALL's parent. bf_switchd must be up (its status port, DPA_SWITCHD_PORT 7777).
#
# Exit status: 0 done, 1 failed (no SDE, switchd not running, the command failed), 2 usage or
# config error.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-switch-common.sh"
dpa_help_or_version "$@"

case $# in
  4) config="$1" install_dir="$2" sde_install_argument="$3" command="$4" ;;
  3) config="$1" install_dir="$2" sde_install_argument="" command="$3" ;;
  *) dpa_usage_error "usage: $DPA_SCRIPT_NAME CONFIG INSTALL_DIR [SDE_INSTALL] reset|counters|setup" ;;
esac
install_dir="$(realpath -m "$install_dir")"
case "$command" in
  reset|counters|setup) ;;
  *) dpa_usage_error "unknown command '$command' (reset, counters or setup)" ;;
esac
dpa_check_config "$config"
sde_install="$(dpa_sde_install "$sde_install_argument")"
sde="$(dpa_sde "$sde_install")"
dpa_require_tool "run_bfshell.sh" "$sde/run_bfshell.sh" "SDE must be the SDE root"
[[ -r "$install_dir/dpa_config.p4" ]] || dpa_fail "$install_dir/dpa_config.p4 not found: compile first (dpa-switch-compile.sh)"
dpa_require_tool "ss" ss "apt-get install iproute2"
dpa_switchd_listening || dpa_fail "bf_switchd is not running (nothing listens on port $DPA_SWITCHD_PORT): start it with dpa-switch-start.sh"

DPA_CONFIG="$(realpath "$config")" DPA_DEFINES="$install_dir/dpa_config.p4" DPA_COMMAND="$command" \
  "$sde/run_bfshell.sh" -b "$install_dir/controller/dpa_bfshell.py" || dpa_fail "the controller's $command failed (see above)"
