#!/usr/bin/env bash
# Reserves and mounts hugepages for DPDK, or undoes it.
#
#   scripts/dpdk-hugepages.sh reserve [PAGES] [SIZE]   reserve PAGES (default 1024) pages of SIZE
#                                                      (2M default, or 1G) and mount hugetlbfs
#   scripts/dpdk-hugepages.sh release [SIZE]           unmount and give the pages back
#   scripts/dpdk-hugepages.sh status                   what is reserved, free and mounted
#
# The reservation is not persistent across reboots (add hugepages=... to the kernel command line
# for that). Needs root. Tests and memif runs do not need hugepages (they use --no-huge).
set -euo pipefail

usage() { sed -n '2,10s/^# \{0,1\}//p' "$0"; }

size_dir() {
  case "$1" in
    2M | 2m | 2048k | 2048kB) echo /sys/kernel/mm/hugepages/hugepages-2048kB ;;
    1G | 1g | 1048576k | 1048576kB) echo /sys/kernel/mm/hugepages/hugepages-1048576kB ;;
    *) echo "dpdk-hugepages.sh: page size '$1' is not 2M or 1G" >&2; exit 2 ;;
  esac
}

mount_point() {
  case "$1" in
    2M | 2m | 2048k | 2048kB) echo /dev/hugepages ;;
    *) echo /dev/hugepages-1G ;;
  esac
}

require_root() {
  if ((EUID != 0)); then
    echo "dpdk-hugepages.sh: $1 needs root (sudo $0 $*)" >&2
    exit 1
  fi
}

status() {
  for dir in /sys/kernel/mm/hugepages/hugepages-*; do
    [[ -d "$dir" ]] || continue
    echo "$(basename "$dir"): total $(cat "$dir/nr_hugepages"), free $(cat "$dir/free_hugepages")"
  done
  grep hugetlbfs /proc/mounts || echo "no hugetlbfs mounted"
}

command="${1:-}"
case "$command" in
  reserve)
    pages="${2:-1024}"
    size="${3:-2M}"
    [[ "$pages" =~ ^[0-9]+$ ]] || { echo "dpdk-hugepages.sh: PAGES '$pages' is not a number" >&2; exit 2; }
    require_root reserve
    dir=$(size_dir "$size")
    [[ -d "$dir" ]] || { echo "dpdk-hugepages.sh: the kernel offers no $size pages ($dir missing)" >&2; exit 1; }
    echo "$pages" > "$dir/nr_hugepages"
    got=$(cat "$dir/nr_hugepages")
    mnt=$(mount_point "$size")
    mkdir -p "$mnt"
    if ! grep -q " $mnt hugetlbfs " /proc/mounts; then
      mount -t hugetlbfs -o "pagesize=$size" nodev "$mnt"
    fi
    echo "reserved $got of $pages requested $size pages, mounted on $mnt"
    if ((got < pages)); then
      echo "dpdk-hugepages.sh: memory is fragmented; reserve at boot (hugepages=$pages) for all of them" >&2
      exit 1
    fi
    ;;
  release)
    size="${2:-2M}"
    require_root release
    dir=$(size_dir "$size")
    mnt=$(mount_point "$size")
    if grep -q " $mnt hugetlbfs " /proc/mounts; then umount "$mnt"; fi
    [[ -d "$dir" ]] && echo 0 > "$dir/nr_hugepages"
    echo "released $size pages and unmounted $mnt"
    ;;
  status) status ;;
  -h | --help | "") usage ;;
  *) echo "dpdk-hugepages.sh: unknown command '$command'" >&2; usage >&2; exit 2 ;;
esac
