#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks a worker host for dpa: one line per check, read-only (changes nothing).
#
#   scripts/dpa-worker-check.sh [options] [PCI_ADDRESS ...]
#
#   PCI_ADDRESS        a NIC for DPDK (0000:3b:00.0): it must be bound to a DPDK driver
#   --dpdk             the DPDK transport will be used: its checks become required
#   --switch HOST:PORT the switch (default: $DPA_SWITCH; several servers comma-separated): route to
#                      each, MTU of the first one's route's interface
#   --interface IF     the data interface (default: the route's to --switch)
#   --payload P        values per packet (default: $DPA_PAYLOAD, else 256; 0 counts as 256) for the MTU check
#   --python PY        the interpreter that runs the PyTorch backend: `import dpa` is required
#                      (without it python3 on PATH is tried, and a failure only warns)
#   --json             one JSON object instead of the table
#
# Each check is required or optional. A required check that fails prints FAIL and its fix;
# an optional one prints WARN (dpa runs, slower or without that feature), INFO only reports.
# Required: kernel >= 4.14, the switch's route and the interface's MTU >= 20 + 8 + 48 + 4 x P
# bytes (when a switch or an interface is given), `import dpa` (with --python), and with --dpdk:
# libdpdk, libdpa built with DPDK, hugepages, IOMMU/vfio, memlock, and the named NICs' drivers.
# Optional: socket buffer limits (net.core.rmem_max/wmem_max >= 32 MiB), /dev/shm room
# (>= 256 MiB), NUMA locality of the NICs, GPU, nvcc, torch, `import dpa` (without --python).
# NICs not named are listed as INFO: the management NIC keeps its kernel driver.
#
# Exit status: 0 when no required check fails, 1 when one does, 2 for a usage error.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-common.sh"
dpa_help_or_version "$@"

dpdk=0 json=0 switch="${DPA_SWITCH:-}" interface="" payload="${DPA_PAYLOAD:-}" python="" nics=()
while (($#)); do
  case "$1" in
    --dpdk) dpdk=1; shift ;;
    --json) json=1; shift ;;
    --switch | --interface | --payload | --python)
      [[ $# -ge 2 && -n "$2" && "$2" != --* ]] || dpa_usage_error "$1 needs a value"
      case "$1" in
        --switch) switch="$2" ;;
        --interface) interface="$2" ;;
        --payload) payload="$2" ;;
        --python) python="$2" ;;
      esac
      shift 2 ;;
    -*) dpa_usage_error "unknown option '$1'" ;;
    *)
      [[ "$1" =~ ^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$ ]] ||
        dpa_usage_error "'$1' is not a PCI address (such as 0000:3b:00.0; lspci -D lists them)"
      [[ "$1" == ????:* ]] && nics+=("$1") || nics+=("0000:$1")
      shift ;;
  esac
done
[[ -z "$payload" || "$payload" == 0 ]] && payload=256  # DPA_PAYLOAD=0: the session's, unknown here
[[ "$payload" =~ ^[1-9][0-9]*$ ]] || dpa_usage_error "--payload '$payload' is not a positive number"
dpdk_level=optional
((dpdk)) && dpdk_level=required

failures=0 results=()
# report NAME LEVEL STATUS DETAIL [FIX]; STATUS pass, fail (required fails), warn, info.
report() {
  local name="$1" level="$2" status="$3" detail="$4" fix="${5:-}"
  [[ "$status" == fail && "$level" == optional ]] && status=warn
  [[ "$status" == fail ]] && failures=$((failures + 1))
  if ((json)); then
    results+=("$(printf '{"check": "%s", "level": "%s", "status": "%s", "detail": "%s", "fix": "%s"}' \
      "$(json_escape "$name")" "$level" "$status" "$(json_escape "$detail")" "$(json_escape "$fix")")")
  else
    printf '%-4s  %-10s %-9s %s\n' "${status^^}" "$name" "($level)" "$detail"
    [[ -n "$fix" && "$status" != pass && "$status" != info ]] && printf '      fix: %s\n' "$fix"
  fi
}
json_escape() { local text="${1//\\/\\\\}"; text="${text//\"/\\\"}"; printf '%s' "${text//$'\t'/ }"; }

# --- kernel: DPDK 22.11 needs >= 4.14 (vfio-pci, hugetlbfs); memif and AF_XDP want >= 5.4.
kernel=$(uname -r)
major=${kernel%%.*} minor=${kernel#*.}
minor=${minor%%.*}
if ((major > 5 || (major == 5 && minor >= 4))); then
  report kernel required pass "$kernel"
elif ((major > 4 || (major == 4 && minor >= 14))); then
  report kernel optional fail "$kernel: DPDK's memif and AF_XDP vdevs want >= 5.4" "upgrade the kernel"
else
  report kernel required fail "$kernel is older than 4.14" "upgrade the kernel (DPDK 22.11 needs 4.14)"
fi

# --- Python: the PyTorch backend.
python_level=optional
if [[ -n "$python" ]]; then python_level=required; else python="$(command -v python3 || echo python3)"; fi
dpa_library=""
# dpa._C: import dpa alone does not load the extension (it loads at its first use).
if found=$("$python" -c 'import os, dpa; dpa._C; print(dpa.__version__, os.path.dirname(dpa.__file__))' 2>&1); then
  report dpa-python "$python_level" pass "dpa ${found%% *} in ${found#* } ($python)"
  [[ -e "${found#* }/libdpa.so.0" ]] && dpa_library="${found#* }/libdpa.so.0"
else
  report dpa-python "$python_level" fail "$python cannot import dpa: ${found##*$'\n'}" \
    "pip install ./python in that interpreter's environment (docs/install.md)"
fi
if torch=$("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "GPU available:", torch.cuda.is_available())' 2>/dev/null); then
  report torch optional pass "$torch ($python)"
else
  report torch optional fail "$python cannot import torch" "scripts/install-deps.sh --with-python, or pip install torch in the venv"
fi

# --- GPU and CUDA: optional, dpa runs on CPU tensors without them.
if command -v nvidia-smi >/dev/null && gpu=$(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>/dev/null | head -1) && [[ -n "$gpu" ]]; then
  report gpu optional pass "$gpu"
else
  report gpu optional info "no NVIDIA GPU or driver (CPU tensors only)"
fi
if nvcc_bin=$(command -v nvcc || { [[ -x /usr/local/cuda/bin/nvcc ]] && echo /usr/local/cuda/bin/nvcc; }); then
  report nvcc optional pass "$("$nvcc_bin" --version | awk -F', ' '/release/ {print $2}') ($nvcc_bin)"
else
  report nvcc optional info "nvcc not found: CUDA tensors are quantised on the host (install the CUDA toolkit for the GPU kernels)"
fi

# --- Socket buffers: below 32 MiB the worker shrinks its window (docs/configuration.md).
for limit in rmem_max wmem_max; do
  value=$(cat /proc/sys/net/core/$limit 2>/dev/null || echo 0)
  if ((value >= 33554432)); then
    report "$limit" optional pass "net.core.$limit = $value"
  else
    report "$limit" optional fail "net.core.$limit = $value (< 32 MiB: smaller windows, fewer packets in flight)" \
      "sysctl -w net.core.$limit=33554432"
  fi
done

# --- /dev/shm: the shared-memory transport of ranks on one host (twice the job's buffers).
shm_dir="${DPA_SHM_DIR:-/dev/shm}"
if free_kb=$(df -Pk "$shm_dir" 2>/dev/null | awk 'NR == 2 {print $4}') && [[ -n "$free_kb" ]]; then
  if ((free_kb >= 262144)); then
    report shm optional pass "$shm_dir: $((free_kb / 1024)) MiB free"
  else
    report shm optional fail "$shm_dir: $((free_kb / 1024)) MiB free (< 256 MiB: local jobs fall back to UDP on loopback)" \
      "docker run --shm-size=1g, or mount -o remount,size=1G $shm_dir"
  fi
else
  report shm optional fail "$shm_dir does not exist" "mount a tmpfs there, or set DPA_SHM_DIR"
fi

# --- memlock: DPDK (vfio DMA mappings) and pinned CUDA staging buffers lock memory.
memlock=$(ulimit -l)
if [[ "$memlock" == unlimited ]] || ((memlock >= 1048576)); then
  report memlock "$dpdk_level" pass "ulimit -l = $memlock"
else
  report memlock "$dpdk_level" fail "ulimit -l = $memlock KiB (DPDK with vfio locks its memory)" \
    "ulimit -l unlimited (or memlock in /etc/security/limits.conf; docker run --ulimit memlock=-1)"
fi

# --- The switch servers (a comma-separated list, as DPA_SWITCH takes): a route to each, and the
# interface the first one's route takes.
if [[ -n "$switch" ]]; then
  IFS=, read -ra servers <<<"$switch"
  for server in "${servers[@]}"; do
    host="${server%:*}"
    [[ "$server" == *:* ]] || host="$server"
    host="${host#[}" host="${host%]}"
    if route=$(ip route get "$host" 2>&1); then
      via=$(awk '{for (i = 1; i < NF; ++i) if ($i == "dev") print $(i + 1)}' <<<"$route" | head -1)
      report switch required pass "$server: routed via ${via:-?}"
      [[ -z "$interface" ]] && interface="$via"
      if command -v ping >/dev/null; then
        if ping -c 1 -W 1 "$host" >/dev/null 2>&1; then
          report switch-ping optional pass "$host answers ping"
        else
          report switch-ping optional info "$host does not answer ping (a Tofino's dpa address need not)"
        fi
      fi
    else
      report switch required fail "$server: no route (${route//$'\n'/ })" "check the address (DPA_SWITCH) and this host's routes"
    fi
  done
else
  report switch optional info "no switch given (--switch or DPA_SWITCH): route and MTU not checked"
fi

# --- MTU vs P: one packet is IPv4 (20) + UDP (8) + dpa header (48) + 4 x P bytes.
needed=$((20 + 8 + 48 + 4 * payload))
if [[ -n "$interface" ]]; then
  if mtu=$(cat "/sys/class/net/$interface/mtu" 2>/dev/null); then
    if ((mtu >= needed)); then
      report mtu required pass "$interface: MTU $mtu >= $needed (P = $payload)"
    else
      report mtu required fail "$interface: MTU $mtu < $needed bytes that P = $payload needs" \
        "ip link set $interface mtu $needed (and the switch ports), or P <= $(((mtu - 76) / 4))"
    fi
  else
    report mtu required fail "no interface $interface" "--interface names a network interface (ip link)"
  fi
fi

# --- DPDK: the library, libdpa built with it, hugepages, IOMMU and vfio.
if version=$(pkg-config --modversion libdpdk 2>/dev/null); then
  report dpdk "$dpdk_level" pass "libdpdk $version (pkg-config)"
else
  report dpdk "$dpdk_level" fail "libdpdk not found by pkg-config" "scripts/install-deps.sh --with-dpdk, then rebuild dpa"
fi
if [[ -z "$dpa_library" ]]; then
  for candidate in "${DPA_BUILD_DIR:-$DPA_SCRIPTS_DIR/../build}/src/libdpa.so" "$DPA_SCRIPTS_DIR/../lib/libdpa.so"; do
    [[ -e "$candidate" ]] && { dpa_library="$candidate"; break; }
  done
fi
if [[ -z "$dpa_library" ]]; then
  report libdpa "$dpdk_level" fail "no libdpa found (dpa's Python package, \$DPA_BUILD_DIR/src, ../lib)" \
    "build dpa (cmake --build build), or pip install ./python"
elif readelf -d "$dpa_library" 2>/dev/null | grep -q 'NEEDED.*librte_'; then
  report libdpa "$dpdk_level" pass "$dpa_library has the DPDK transport"
else
  report libdpa "$dpdk_level" fail "$dpa_library was built without DPDK" \
    "install libdpdk-dev (scripts/install-deps.sh --with-dpdk) and rebuild: CMake finds it with pkg-config"
fi
free_2m=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages 2>/dev/null || echo 0)
free_1g=$(cat /sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages 2>/dev/null || echo 0)
if ((free_2m + free_1g == 0)); then
  report hugepages "$dpdk_level" fail "no free hugepages" "sudo scripts/dpdk-hugepages.sh reserve 1024 2M (or dpdk.no_huge for tests)"
elif ! grep -q hugetlbfs /proc/mounts; then
  report hugepages "$dpdk_level" fail "$free_2m x 2M and $free_1g x 1G free, but hugetlbfs is not mounted" "sudo scripts/dpdk-hugepages.sh reserve"
else
  report hugepages "$dpdk_level" pass "$free_2m x 2M and $free_1g x 1G free, hugetlbfs mounted"
fi
groups=$(find /sys/kernel/iommu_groups -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
if ((groups > 0)); then
  report iommu "$dpdk_level" pass "$groups IOMMU groups"
elif [[ "$(cat /sys/module/vfio/parameters/enable_unsafe_noiommu_mode 2>/dev/null)" == "Y" ]]; then
  report iommu "$dpdk_level" pass "no IOMMU; vfio runs in unsafe no-IOMMU mode"
else
  report iommu "$dpdk_level" fail "no IOMMU groups" "enable VT-d/AMD-Vi in the BIOS and boot with intel_iommu=on iommu=pt"
fi
if [[ -d /sys/module/vfio_pci ]]; then
  report vfio "$dpdk_level" pass "vfio-pci module loaded"
else
  report vfio "$dpdk_level" fail "vfio-pci module not loaded" "sudo modprobe vfio-pci"
fi

# --- NICs: the named ones must be DPDK-bound (or bifurcated); the others are listed.
numa_of() { cat "/sys/bus/pci/devices/$1/numa_node" 2>/dev/null || echo -1; }
allowed_cpus=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
check_numa() {  # PCI: is the NIC's node among the nodes this process may run on?
  local node cpus
  node=$(numa_of "$1")
  ((node >= 0)) || return
  cpus=$(cat "/sys/devices/system/node/node$node/cpulist" 2>/dev/null) || return
  if [[ -n "$(comm -12 <(expand_cpus "$cpus") <(expand_cpus "$allowed_cpus"))" ]]; then
    report numa optional pass "$1 on NUMA node $node (cores $cpus), which this process may use"
  else
    report numa optional fail "$1 on NUMA node $node (cores $cpus), none of which this process may use ($allowed_cpus)" \
      "pin the workers (dpdk.cores, taskset/numactl) to node $node's cores"
  fi
}
expand_cpus() {  # "0-3,8" -> one CPU per line, sorted as text (for comm)
  tr ',' '\n' <<<"$1" | awk -F- 'NF == 2 {for (i = $1; i <= $2; ++i) print i; next} NF {print}' | sort
}
for slot in "${nics[@]}"; do
  if [[ ! -e "/sys/bus/pci/devices/$slot" ]]; then
    report nic "$dpdk_level" fail "$slot: no such PCI device" "list the devices with lspci -D"
    continue
  fi
  driver_link="/sys/bus/pci/devices/$slot/driver"
  driver=$([[ -L "$driver_link" ]] && basename "$(readlink "$driver_link")" || echo none)
  model=$(lspci -s "$slot" 2>/dev/null | cut -d' ' -f2-)
  case "$driver" in
    vfio-pci | uio_pci_generic | igb_uio) report nic required pass "$slot $model: $driver (DPDK-bound)" ;;
    mlx5_core | mlx4_core) report nic required pass "$slot $model: $driver (bifurcated: DPDK uses it beside the kernel)" ;;
    none) report nic required fail "$slot $model: no driver bound" "dpdk-devbind.py --bind=vfio-pci $slot" ;;
    *) report nic required fail "$slot $model: kernel driver $driver" "dpdk-devbind.py --bind=vfio-pci $slot (not the NIC of your SSH session)" ;;
  esac
  check_numa "$slot"
done
if ((${#nics[@]} == 0)); then
  while read -r slot rest; do
    report nic optional info "$slot $rest (not named: not checked for DPDK)"
  done < <(lspci -D 2>/dev/null | awk '/Ethernet controller/ {print}')
  if [[ -n "$interface" && -e "/sys/class/net/$interface/device" ]]; then
    check_numa "$(basename "$(readlink -f "/sys/class/net/$interface/device")")"
  fi
fi

if ((json)); then
  printf '{"version": "%s", "passed": %s, "failed_required": %d, "checks": [' "$(dpa_version)" \
    "$( ((failures == 0)) && echo true || echo false)" "$failures"
  for i in "${!results[@]}"; do printf '%s%s' "$( ((i > 0)) && echo ', ')" "${results[$i]}"; done
  printf ']}\n'
elif ((failures == 0)); then
  echo "every required check passed"
else
  echo "$failures required check(s) failed"
fi
((failures == 0)) || exit 1
exit 0
