#!/usr/bin/env bash
# Starts the compiled dpa program in a tmux session "dpa-switch":
#   dpa-switch-start.sh CONFIG INSTALL_DIR SDE_INSTALL BUILD_DIR
# window "switchd": the kernel module (ASIC only), then run_switchd.sh with INSTALL_DIR's conf
# (on the tofino-model, window "model" runs the model first); window "controller": the bfshell
# controller once switchd answers. Logs go to BUILD_DIR. Attach with `tmux attach -t dpa-switch`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-switch-common.sh"

[[ $# -eq 4 ]] || dpa_die "usage: $(basename "$0") CONFIG INSTALL_DIR SDE_INSTALL BUILD_DIR"
config="$1" install_dir="$(realpath -m "$2")" sde_install="$3" build_dir="$(realpath -m "$4")"

dpa_check_config "$config"
dpa_check_sde
dpa_check_sde_install "$sde_install"
dpa_require_tool "tmux" tmux "apt-get install tmux"
dpa_require_tool "run_switchd.sh" "$SDE/run_switchd.sh" "SDE must be the SDE root"
dpa_require_tool "run_bfshell.sh" "$SDE/run_bfshell.sh" "SDE must be the SDE root"
conf="$install_dir/dpa/dpa.conf"
[[ -r "$conf" ]] || dpa_die "$conf not found: compile first (dpa-switch-compile.sh $config $install_dir $sde_install $build_dir)"
p4gen="$(dpa_find_p4gen)" || exit 2
model="$("$p4gen" --print model "$config")"
target="$("$p4gen" --print target "$config")"   # the model's --arch: tofino or tofino2
arch="tf1"; [[ "$target" == tofino2 ]] && arch="tf2"  # run_switchd.sh's --arch
if [[ "$model" == 0 ]]; then
  dpa_require_tool "bf_kdrv_mod_load" "$sde_install/bin/bf_kdrv_mod_load" "the SDE's kernel driver"
fi
tmux has-session -t dpa-switch 2>/dev/null && dpa_die "tmux session dpa-switch exists: stop it first (tmux kill-session -t dpa-switch)"

mkdir -p "$build_dir"
config="$(realpath "$config")"
controller_env="DPA_CONFIG=$config DPA_DEFINES=$install_dir/dpa_config.p4 DPA_COMMAND=run"
tmux new-session -d -s dpa-switch -n switchd
if [[ "$model" == 1 ]]; then
  tmux new-window -t dpa-switch -n model
  tmux send-keys -t dpa-switch:model "cd $SDE && ./run_tofino_model.sh --arch $target -c $conf 2>&1 | tee $build_dir/model.log" C-m
  tmux send-keys -t dpa-switch:switchd "cd $SDE && ./run_switchd.sh --arch $arch -c $conf 2>&1 | tee $build_dir/switchd.log" C-m
else
  tmux send-keys -t dpa-switch:switchd "sudo $sde_install/bin/bf_kdrv_mod_load $sde_install && cd $SDE && ./run_switchd.sh --arch $arch -c $conf 2>&1 | tee $build_dir/switchd.log" C-m
fi
tmux new-window -t dpa-switch -n controller
# bfshell needs a running switchd: wait for its status port before starting the controller.
tmux send-keys -t dpa-switch:controller "for i in \$(seq 120); do ss -ltn | grep -q ':7777 ' && break; sleep 1; done; $controller_env $SDE/run_bfshell.sh -b $install_dir/controller/dpa_bfshell.py 2>&1 | tee $build_dir/controller.log" C-m
echo "started: tmux attach -t dpa-switch (logs in $build_dir)"
