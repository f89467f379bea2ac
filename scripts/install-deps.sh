#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 / Ubuntu 24.04 packages that building and testing dpa needs.
# Only missing packages are installed, so running it again is cheap.
#
#   scripts/install-deps.sh [--with-python-build] [--with-python] [--with-dpdk]
#     --with-python-build  also what building the Python package needs beside a torch of your own
#                          (a venv with PyPI torch): Python headers, pybind11, venv, pip,
#                          setuptools, wheel
#     --with-python        all of that, plus Debian's torch and what the demo and tests use
#     --with-dpdk          also DPDK for the kernel-bypass transport
#
# Exit status: 0 when everything is installed, 1 when installing failed, 2 for a usage error.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-common.sh"
dpa_help_or_version "$@"

packages=(
  build-essential cmake pkg-config
  libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  iproute2 procps
  libcpp-httplib-dev libsodium-dev
)
python_build_packages=(
  python3 python3-dev pybind11-dev python3-pybind11 python3-pip python3-venv python3-setuptools python3-wheel
)
python_packages=(
  "${python_build_packages[@]}"
  python3-torch python3-numpy python3-sklearn python3-matplotlib python3-pytest libtorch-dev
  python3-prometheus-client
)
dpdk_packages=(dpdk dpdk-dev libdpdk-dev)

for arg in "$@"; do
  case "$arg" in
    --with-python-build) packages+=("${python_build_packages[@]}") ;;
    --with-python) packages+=("${python_packages[@]}") ;;
    --with-dpdk) packages+=("${dpdk_packages[@]}") ;;
    *) dpa_usage_error "unknown option '$arg'" ;;
  esac
done

# Whatever a step exits with (cmake, ctest's 8, apt-get's 100), this script's failure is 1.
trap 'dpa_fail "a step failed (status $?): see above"' ERR
missing=()
for package in "${packages[@]}"; do
  # dpkg-query fails for packages it has never heard of; treat that as missing too.
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "all dependencies present"
  exit 0
fi

sudo_cmd=()
if ((EUID != 0)); then
  if ! command -v sudo >/dev/null; then
    dpa_fail "not root and sudo is unavailable; install as root: ${missing[*]}"
  fi
  sudo_cmd=(sudo)
fi

echo "installing: ${missing[*]}"
"${sudo_cmd[@]}" apt-get update
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
echo "installed: ${missing[*]}"
