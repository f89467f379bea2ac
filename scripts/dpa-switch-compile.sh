#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compiles the dpa P4 program for one switch config with the Tofino compiler (bf-p4c):
#
#   dpa-switch-compile.sh CONFIG INSTALL_DIR SDE_INSTALL BUILD_DIR
#   dpa-switch-compile.sh CONFIG INSTALL_DIR BUILD_DIR     SDE_INSTALL from the environment
#
# The original artifact's form, e.g. dpa-switch-compile.sh configs/edgecore.json install
# $SDE_INSTALL p4build. SDE_INSTALL omitted or empty: $SDE_INSTALL, else $SDE/install (the SDE's
# set_sde.bash exports both). dpa-p4gen writes BUILD_DIR/dpa_config.p4 from CONFIG, bf-p4c
# compiles p4/dpa.p4 for the config's Tofino generation into BUILD_DIR/dpa (its output also in
# BUILD_DIR/bf-p4c.log), and INSTALL_DIR receives what dpa-switch-start.sh needs: the compiled
# program (dpa/dpa.conf, bfrt.json, pipe/), the defines, the config and the controller.
#
# The compile takes 10 to 60 minutes: a progress line every DPA_PROGRESS_INTERVAL_S seconds
# (default 30) gives the time so far and the newest file bf-p4c wrote (its phase).
# Exit status: 0 compiled, 1 failed (no SDE or bf-p4c, or the compile failed), 2 usage or config error.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-switch-common.sh"
dpa_help_or_version "$@"

case $# in
  4) config="$1" install_dir="$2" sde_install_argument="$3" build_dir="$4" ;;
  3) config="$1" install_dir="$2" sde_install_argument="" build_dir="$3" ;;
  *) dpa_usage_error "usage: $DPA_SCRIPT_NAME CONFIG INSTALL_DIR [SDE_INSTALL] BUILD_DIR" ;;
esac
interval="${DPA_PROGRESS_INTERVAL_S:-30}"
[[ "$interval" =~ ^[1-9][0-9]*$ ]] || dpa_usage_error "DPA_PROGRESS_INTERVAL_S=$interval is not a positive number of seconds"

dpa_check_config "$config"
sde_install="$(dpa_sde_install "$sde_install_argument")"
compiler="$sde_install/bin/bf-p4c"
dpa_require_tool "bf-p4c" "$compiler" "SDE_INSTALL must be an SDE install with the Tofino compiler"
p4gen="$(dpa_find_p4gen)"

mkdir -p "$build_dir" "$install_dir"
"$p4gen" "$config" -o "$build_dir/dpa_config.p4"
target="$("$p4gen" --print target "$config")"
arch="$("$p4gen" --print arch "$config")"

# What bf-p4c is doing, read from the newest file under its output directory.
phase_of() {
  case "$1" in
    "") echo "front and mid end" ;;
    *phv_allocation* | *pa.*) echo "PHV allocation" ;;
    *table_placement* | *mau.*) echo "table placement" ;;
    *.bfa) echo "assembly" ;;
    *.bin | *context.json) echo "binary" ;;
    *) echo "working" ;;
  esac
}
newest_output() {
  find "$build_dir/dpa" -type f -printf '%T@ %P\n' 2>/dev/null | sort -n | tail -1 | cut -d' ' -f2-
}

log="$build_dir/bf-p4c.log"
echo "compiling dpa for $target ($arch), P = $("$p4gen" --print payload "$config") values: bf-p4c started" \
  "(10-60 minutes; progress every $interval s, output in $log)"
started=$SECONDS
"$compiler" --target "$target" --arch "$arch" --std p4-16 -g --program-name dpa \
  -I "$build_dir" -I "$DPA_P4_DIR" -o "$build_dir/dpa" "$DPA_P4_DIR/dpa.p4" > >(tee "$log") 2>&1 &
compiler_pid=$!
trap 'kill "$compiler_pid" 2>/dev/null; exit 130' INT TERM
next=$((started + interval))
while kill -0 "$compiler_pid" 2>/dev/null; do
  if ((SECONDS >= next)); then
    elapsed=$((SECONDS - started))
    newest="$(newest_output)"
    printf 'bf-p4c: %dm%02ds elapsed, %s%s\n' $((elapsed / 60)) $((elapsed % 60)) "$(phase_of "$newest")" \
      "${newest:+ (newest output: $newest)}"
    next=$((next + interval))
  fi
  sleep 1
done
status=0
wait "$compiler_pid" || status=$?
trap - INT TERM
elapsed=$((SECONDS - started))
if ((status != 0)); then
  dpa_fail "bf-p4c failed (status $status) after $((elapsed / 60))m$((elapsed % 60))s: see $log and $build_dir/dpa/pipe/logs"
fi
echo "bf-p4c finished in $((elapsed / 60))m$((elapsed % 60))s"

rm -rf "$install_dir/dpa" "$install_dir/controller"
cp -r "$build_dir/dpa" "$install_dir/dpa"
cp "$build_dir/dpa_config.p4" "$install_dir/dpa_config.p4"
cp "$config" "$install_dir/config.json"
mkdir -p "$install_dir/controller"
cp -r "$DPA_CONTROLLER_DIR/dpa_controller" "$DPA_CONTROLLER_DIR/dpa_bfshell.py" "$install_dir/controller/"
echo "installed in $install_dir (resource logs: $build_dir/dpa/pipe/logs)"
