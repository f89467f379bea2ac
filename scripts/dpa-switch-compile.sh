#!/usr/bin/env bash
# Compiles the dpa P4 program for one switch config with the Intel/open Tofino compiler:
#   dpa-switch-compile.sh CONFIG INSTALL_DIR SDE_INSTALL BUILD_DIR
# dpa-p4gen writes BUILD_DIR/dpa_config.p4 from CONFIG, bf-p4c compiles p4/dpa.p4 for the
# config's Tofino generation into BUILD_DIR/dpa, and INSTALL_DIR receives what
# dpa-switch-start.sh needs: the compiled program (dpa/dpa.conf, bfrt.json, pipe/), the
# defines, the config and the controller.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-switch-common.sh"

[[ $# -eq 4 ]] || dpa_die "usage: $(basename "$0") CONFIG INSTALL_DIR SDE_INSTALL BUILD_DIR"
config="$1" install_dir="$2" sde_install="$3" build_dir="$4"

dpa_check_config "$config"
dpa_check_sde_install "$sde_install"
compiler="$sde_install/bin/bf-p4c"
dpa_require_tool "bf-p4c" "$compiler" "SDE_INSTALL must be an SDE install with the Tofino compiler"
p4gen="$(dpa_find_p4gen)" || exit 2

mkdir -p "$build_dir" "$install_dir"
"$p4gen" "$config" -o "$build_dir/dpa_config.p4"
target="$("$p4gen" --print target "$config")"
arch="$("$p4gen" --print arch "$config")"

echo "compiling dpa for $target ($arch), P = $("$p4gen" --print payload "$config") values"
"$compiler" --target "$target" --arch "$arch" --std p4-16 -g --program-name dpa \
  -I "$build_dir" -I "$DPA_P4_DIR" -o "$build_dir/dpa" "$DPA_P4_DIR/dpa.p4"

rm -rf "$install_dir/dpa" "$install_dir/controller"
cp -r "$build_dir/dpa" "$install_dir/dpa"
cp "$build_dir/dpa_config.p4" "$install_dir/dpa_config.p4"
cp "$config" "$install_dir/config.json"
mkdir -p "$install_dir/controller"
cp -r "$DPA_CONTROLLER_DIR/dpa_controller" "$DPA_CONTROLLER_DIR/dpa_bfshell.py" "$install_dir/controller/"
echo "installed in $install_dir (resource logs: $build_dir/dpa/pipe/logs)"
