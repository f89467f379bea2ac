#!/usr/bin/env bash
# Checks a worker host for dpa over DPDK: one line per item, PASS / FAIL / INFO with how to fix.
#
#   scripts/dpa-worker-check.sh [PCI address ...]   check these NICs' driver binding too
#
# Exit status: 0 when nothing FAILs, 1 otherwise. Read-only; changes nothing.
set -uo pipefail

failures=0
pass() { printf 'PASS  %-12s %s\n' "$1" "$2"; }
fail() { printf 'FAIL  %-12s %s\n      fix: %s\n' "$1" "$2" "$3"; failures=$((failures + 1)); }
info() { printf 'INFO  %-12s %s\n' "$1" "$2"; }

# Kernel: DPDK 22.11 needs >= 4.14 (vfio-pci, hugetlbfs); the memif and AF_XDP vdevs want >= 5.4.
kernel=$(uname -r)
major=${kernel%%.*}
minor=${kernel#*.}
minor=${minor%%.*}
if ((major > 5 || (major == 5 && minor >= 4))); then
  pass kernel "$kernel"
else
  fail kernel "$kernel is older than 5.4" "upgrade the kernel (DPDK 22.11 needs 4.14, AF_XDP 5.4)"
fi

# DPDK: the library dpa builds against.
if version=$(pkg-config --modversion libdpdk 2>/dev/null); then
  pass dpdk "libdpdk $version (pkg-config)"
else
  fail dpdk "libdpdk not found by pkg-config" "scripts/install-deps.sh --with-dpdk, then rebuild dpa"
fi

# NICs and drivers: a DPDK port needs vfio-pci (or a bifurcated driver such as mlx5_core).
nics=("$@")
if ((${#nics[@]} == 0)); then
  while read -r slot; do nics+=("$slot"); done < <(lspci -D 2>/dev/null | awk '/Ethernet controller/ {print $1}')
fi
if ((${#nics[@]} == 0)); then
  fail nic "no Ethernet controller on the PCI bus" "use a host with a NIC, or DPDK virtual devices (dpdk.vdevs) for tests"
fi
for slot in "${nics[@]}"; do
  driver_link="/sys/bus/pci/devices/$slot/driver"
  if [[ ! -e "/sys/bus/pci/devices/$slot" ]]; then
    fail nic "$slot: no such PCI device" "list devices with lspci -D"
    continue
  fi
  driver=$([[ -L "$driver_link" ]] && basename "$(readlink "$driver_link")" || echo none)
  model=$(lspci -s "$slot" 2>/dev/null | cut -d' ' -f2-)
  case "$driver" in
    vfio-pci | uio_pci_generic | igb_uio) pass nic "$slot $model: $driver (DPDK-bound)" ;;
    mlx5_core | mlx4_core) pass nic "$slot $model: $driver (bifurcated: DPDK uses it beside the kernel)" ;;
    none) fail nic "$slot $model: no driver bound" "dpdk-devbind.py --bind=vfio-pci $slot" ;;
    *) fail nic "$slot $model: kernel driver $driver" "dpdk-devbind.py --bind=vfio-pci $slot (not the NIC that carries your SSH session)" ;;
  esac
done

# Hugepages: DPDK's default memory (not needed with dpdk.no_huge, which tests and memif use).
free_2m=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages 2>/dev/null || echo 0)
free_1g=$(cat /sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages 2>/dev/null || echo 0)
if ((free_2m + free_1g == 0)); then
  fail hugepages "no free hugepages" "sudo scripts/dpdk-hugepages.sh reserve 1024 2M (or dpdk.no_huge for tests)"
elif ! grep -q hugetlbfs /proc/mounts; then
  fail hugepages "$free_2m x 2M and $free_1g x 1G free, but hugetlbfs is not mounted" "sudo scripts/dpdk-hugepages.sh reserve"
else
  pass hugepages "$free_2m x 2M and $free_1g x 1G free, hugetlbfs mounted"
fi

# IOMMU and vfio: vfio-pci needs an IOMMU (or the unsafe no-IOMMU mode).
groups=$(find /sys/kernel/iommu_groups -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
if ((groups > 0)); then
  pass iommu "$groups IOMMU groups"
elif [[ "$(cat /sys/module/vfio/parameters/enable_unsafe_noiommu_mode 2>/dev/null)" == "Y" ]]; then
  info iommu "no IOMMU; vfio runs in unsafe no-IOMMU mode"
else
  fail iommu "no IOMMU groups" "enable VT-d/AMD-Vi in the BIOS and boot with intel_iommu=on iommu=pt"
fi
if [[ -d /sys/module/vfio_pci ]]; then
  pass vfio "vfio-pci module loaded"
else
  fail vfio "vfio-pci module not loaded" "sudo modprobe vfio-pci"
fi

# GPU, CUDA and torch: what the PyTorch backend uses.
if command -v nvidia-smi >/dev/null && gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1) && [[ -n "$gpu" ]]; then
  pass gpu "$gpu"
else
  fail gpu "no NVIDIA GPU or driver (nvidia-smi fails)" "install the NVIDIA driver; dpa itself runs without a GPU"
fi
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  pass cuda "$("$nvcc_bin" --version | awk -F', ' '/release/ {print $2}')"
else
  fail cuda "nvcc not found" "install the CUDA toolkit (/usr/local/cuda)"
fi
if torch=$(/usr/bin/python3 -c 'import torch; print(torch.__version__, "cuda", torch.cuda.is_available())' 2>/dev/null); then
  pass torch "$torch (/usr/bin/python3)"
else
  fail torch "/usr/bin/python3 cannot import torch" "scripts/install-deps.sh --with-python"
fi

if ((failures == 0)); then echo "all checks passed"; else echo "$failures check(s) failed"; fi
((failures == 0))
