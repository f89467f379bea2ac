#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Starts the compiled dpa program and its controller in a tmux session (default "dpa-switch"):
#
#   dpa-switch-start.sh CONFIG INSTALL_DIR SDE_INSTALL BUILD_DIR
#   dpa-switch-start.sh CONFIG INSTALL_DIR BUILD_DIR     SDE_INSTALL from the environment
#
# The original artifact's form; SDE_INSTALL omitted or empty: $SDE_INSTALL, else $SDE/install.
# $SDE (the SDE root, with run_switchd.sh) comes from the environment, else it is SDE_INSTALL's
# parent. Window "switchd": the kernel module (ASIC only), then run_switchd.sh with INSTALL_DIR's
# conf (on the tofino-model, window "model" runs the model first). The script then waits for
# bf_switchd's status port (DPA_SWITCHD_PORT, 7777) for at most DPA_SWITCHD_TIMEOUT_S seconds
# (default 300); only once the driver is up does window "controller" start the bfshell controller.
# If switchd exits or does not come up in time, the script says so with the end of its log, stops
# the session and fails. Logs go to BUILD_DIR. Attach with `tmux attach -t dpa-switch`; stop with
# dpa-switch-stop.sh. DPA_TMUX_SESSION names the session.
#
# Exit status: 0 started, 1 failed (no SDE, switchd did not come up), 2 usage or config error.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-switch-common.sh"
dpa_help_or_version "$@"

case $# in
  4) config="$1" install_dir="$2" sde_install_argument="$3" build_dir="$4" ;;
  3) config="$1" install_dir="$2" sde_install_argument="" build_dir="$3" ;;
  *) dpa_usage_error "usage: $DPA_SCRIPT_NAME CONFIG INSTALL_DIR [SDE_INSTALL] BUILD_DIR" ;;
esac
install_dir="$(realpath -m "$install_dir")" build_dir="$(realpath -m "$build_dir")"
timeout_s="${DPA_SWITCHD_TIMEOUT_S:-300}"
[[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || dpa_usage_error "DPA_SWITCHD_TIMEOUT_S=$timeout_s is not a positive number of seconds"

dpa_check_config "$config"
sde_install="$(dpa_sde_install "$sde_install_argument")"
sde="$(dpa_sde "$sde_install")"
dpa_require_tool "tmux" tmux "apt-get install tmux"
dpa_require_tool "ss" ss "apt-get install iproute2"
dpa_require_tool "run_switchd.sh" "$sde/run_switchd.sh" "SDE must be the SDE root"
dpa_require_tool "run_bfshell.sh" "$sde/run_bfshell.sh" "SDE must be the SDE root"
conf="$install_dir/dpa/dpa.conf"
[[ -r "$conf" ]] || dpa_fail "$conf not found: compile first (dpa-switch-compile.sh $config $install_dir $sde_install $build_dir)"
p4gen="$(dpa_find_p4gen)"
model="$("$p4gen" --print model "$config")"
target="$("$p4gen" --print target "$config")"   # the model's --arch: tofino or tofino2
arch="tf1"; [[ "$target" == tofino2 ]] && arch="tf2"  # run_switchd.sh's --arch
if [[ "$model" == 0 ]]; then
  dpa_require_tool "bf_kdrv_mod_load" "$sde_install/bin/bf_kdrv_mod_load" "the SDE's kernel driver"
fi
tmux has-session -t "$DPA_TMUX_SESSION" 2>/dev/null &&
  dpa_fail "tmux session $DPA_TMUX_SESSION exists: stop it first (dpa-switch-stop.sh)"
dpa_switchd_listening && dpa_fail "port $DPA_SWITCHD_PORT is already open: another bf_switchd runs (dpa-switch-stop.sh, or DPA_SWITCHD_PORT)"

mkdir -p "$build_dir"
config="$(realpath "$config")"
status_file="$build_dir/switchd.status"
rm -f "$status_file"
# What each window runs, as scripts in BUILD_DIR (whatever the user's shell, and readable).
{
  echo "cd $(printf %q "$sde")"
  if [[ "$model" == 0 ]]; then
    echo "sudo $(printf %q "$sde_install/bin/bf_kdrv_mod_load") $(printf %q "$sde_install") || { echo \$? > $(printf %q "$status_file"); exit; }"
  fi
  echo "./run_switchd.sh --arch $arch -c $(printf %q "$conf") 2>&1 | tee $(printf %q "$build_dir/switchd.log")"
  echo "echo \${PIPESTATUS[0]} > $(printf %q "$status_file")"
} >"$build_dir/run-switchd.sh"
{
  echo "cd $(printf %q "$sde")"
  echo "./run_tofino_model.sh --arch $target -c $(printf %q "$conf") 2>&1 | tee $(printf %q "$build_dir/model.log")"
} >"$build_dir/run-model.sh"
{
  printf 'DPA_CONFIG=%q DPA_DEFINES=%q DPA_COMMAND=run ' "$config" "$install_dir/dpa_config.p4"
  printf '%q -b %q 2>&1 | tee %q\n' "$sde/run_bfshell.sh" "$install_dir/controller/dpa_bfshell.py" "$build_dir/controller.log"
} >"$build_dir/run-controller.sh"

tmux new-session -d -s "$DPA_TMUX_SESSION" -n switchd
if [[ "$model" == 1 ]]; then
  tmux new-window -t "$DPA_TMUX_SESSION" -n model
  tmux send-keys -t "$DPA_TMUX_SESSION:model" "bash $(printf %q "$build_dir/run-model.sh")" C-m
fi
tmux send-keys -t "$DPA_TMUX_SESSION:switchd" "bash $(printf %q "$build_dir/run-switchd.sh")" C-m

give_up() {
  echo "$DPA_SCRIPT_NAME: $1; the end of $build_dir/switchd.log:" >&2
  tail -n 20 "$build_dir/switchd.log" >&2 2>/dev/null || true
  tmux kill-session -t "$DPA_TMUX_SESSION" 2>/dev/null || true
  dpa_fail "stopped the session $DPA_TMUX_SESSION; fix the cause and start again"
}
echo "waiting for bf_switchd (port $DPA_SWITCHD_PORT, at most $timeout_s s)"
started=$SECONDS
until dpa_switchd_listening; do
  [[ -s "$status_file" ]] && give_up "switchd exited with status $(cat "$status_file") before its port $DPA_SWITCHD_PORT opened"
  ((SECONDS - started < timeout_s)) || give_up "bf_switchd did not open port $DPA_SWITCHD_PORT within $timeout_s s (DPA_SWITCHD_TIMEOUT_S)"
  sleep 1
done
echo "bf_switchd is up after $((SECONDS - started)) s; starting the controller"
tmux new-window -t "$DPA_TMUX_SESSION" -n controller
tmux send-keys -t "$DPA_TMUX_SESSION:controller" "bash $(printf %q "$build_dir/run-controller.sh")" C-m
echo "started: tmux attach -t $DPA_TMUX_SESSION (logs in $build_dir); stop with dpa-switch-stop.sh"
