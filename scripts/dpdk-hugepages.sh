#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Reserves and mounts hugepages for DPDK, and gives back exactly what it reserved.
#
#   scripts/dpdk-hugepages.sh reserve [PAGES] [SIZE] [--no-mount]
#       make sure at least PAGES (default 1024) pages of SIZE (2M default, or 1G) are reserved,
#       and that a hugetlbfs of that page size is mounted (/dev/hugepages, /dev/hugepages-1G).
#       An existing larger reservation is left as it is: reserve never shrinks anything.
#   scripts/dpdk-hugepages.sh release [SIZE]
#       give back the pages this script added and unmount what it mounted; pages and mounts
#       that were there before (the kernel command line's, systemd's, another tool's) stay.
#   scripts/dpdk-hugepages.sh status
#       what is reserved, free and mounted, and what this script reserved.
#
# What reserve added is recorded in $DPA_HUGEPAGES_STATE (default /run/dpa/hugepages), so
# release undoes that and nothing else. The reservation does not survive a reboot (the record
# does not either); for a permanent one use hugepages=N on the kernel command line. Writing the
# kernel's settings needs root. Tests and memif runs need no hugepages (dpdk.no_huge).
#
# Environment: DPA_HUGEPAGES_STATE (the record's directory), DPA_HUGEPAGES_SYSFS (default
# /sys/kernel/mm/hugepages, the kernel's hugepage settings).
# Exit status: 0 done, 1 failed (not root, fewer pages than asked, mount busy), 2 usage error.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-common.sh"
dpa_help_or_version "$@"

sysfs="${DPA_HUGEPAGES_SYSFS:-/sys/kernel/mm/hugepages}"
state_dir="${DPA_HUGEPAGES_STATE:-/run/dpa/hugepages}"

normalise_size() {  # SIZE -> 2M or 1G
  case "$1" in
    2M | 2m | 2048k | 2048kB) echo 2M ;;
    1G | 1g | 1048576k | 1048576kB) echo 1G ;;
    *) dpa_usage_error "page size '$1' is not 2M or 1G" ;;
  esac
}
size_dir() { [[ "$1" == 2M ]] && echo "$sysfs/hugepages-2048kB" || echo "$sysfs/hugepages-1048576kB"; }
default_mount() { [[ "$1" == 2M ]] && echo /dev/hugepages || echo /dev/hugepages-1G; }

# A hugetlbfs of this page size mounted anywhere (/proc/mounts says pagesize=2M or 1024M; one
# without pagesize= has the default, 2M).
mounted_for() {
  local size="$1" kernel_name device mnt type options
  kernel_name="$([[ "$size" == 2M ]] && echo 2M || echo 1024M)"
  while read -r device mnt type options _; do
    [[ "$type" == hugetlbfs ]] || continue
    if [[ ",$options," == *",pagesize=$kernel_name,"* || ("$size" == 2M && "$options" != *pagesize=*) ]]; then
      echo "$mnt"
      return 0
    fi
  done </proc/mounts
  return 1
}

# The record of one page size: "added PAGES" and "mounted PATH" lines.
record_file() { echo "$state_dir/$1"; }
record_value() {  # SIZE KEY -> value, empty when none
  local file
  file="$(record_file "$1")"
  [[ -r "$file" ]] && awk -v key="$2" '$1 == key { print $2 }' "$file" || true
}
write_record() {  # SIZE ADDED MOUNTED
  mkdir -p "$state_dir"
  if [[ "$2" -eq 0 && -z "$3" ]]; then
    rm -f "$(record_file "$1")"
  else
    printf 'added %s\nmounted %s\n' "$2" "$3" >"$(record_file "$1").tmp"
    mv "$(record_file "$1").tmp" "$(record_file "$1")"
  fi
}

require_writable() {  # FILE COMMAND
  [[ -w "$1" ]] || dpa_fail "$2 writes $1, which needs root (sudo $0 $2 ...)"
}

reserve() {
  local pages=1024 size=2M mount=1 positional=()
  while (($#)); do
    case "$1" in
      --no-mount) mount=0 ;;
      -*) dpa_usage_error "reserve: unknown option '$1'" ;;
      *) positional+=("$1") ;;
    esac
    shift
  done
  ((${#positional[@]} <= 2)) || dpa_usage_error "reserve takes PAGES and SIZE, not '${positional[*]}'"
  [[ ${#positional[@]} -ge 1 ]] && pages="${positional[0]}"
  [[ ${#positional[@]} -ge 2 ]] && size="${positional[1]}"
  [[ "$pages" =~ ^[0-9]+$ ]] || dpa_usage_error "PAGES '$pages' is not a number"
  size="$(normalise_size "$size")"
  local dir
  dir="$(size_dir "$size")"
  [[ -d "$dir" ]] || dpa_fail "the kernel offers no $size pages ($dir missing)"
  local before added mounted got
  before="$(cat "$dir/nr_hugepages")"
  added="$(record_value "$size" added)"
  added="${added:-0}"
  mounted="$(record_value "$size" mounted)"
  got="$before"
  if ((before >= pages)); then
    echo "$before $size pages already reserved (>= $pages): left as they are"
  else
    require_writable "$dir/nr_hugepages" reserve
    echo "$pages" >"$dir/nr_hugepages"
    got="$(cat "$dir/nr_hugepages")"
    added=$((added + got - before))
    write_record "$size" "$added" "$mounted"
    echo "reserved $((got - before)) more $size pages: $got in all ($added of them by this script)"
  fi
  if ((mount)); then
    local where
    if where="$(mounted_for "$size")"; then
      echo "hugetlbfs for $size pages mounted on $where"
    else
      where="$(default_mount "$size")"
      [[ $EUID -eq 0 ]] || dpa_fail "mounting hugetlbfs on $where needs root (sudo $0 reserve ...)"
      mkdir -p "$where"
      mount -t hugetlbfs -o "pagesize=$size" nodev "$where"
      write_record "$size" "$added" "$where"
      echo "mounted hugetlbfs for $size pages on $where"
    fi
  fi
  if ((got < pages)); then
    dpa_fail "only $got of $pages $size pages: memory is fragmented; reserve at boot (hugepages=$pages) for all of them"
  fi
}

release() {
  (($# <= 1)) || dpa_usage_error "release takes one SIZE, not '$*'"
  local size dir added mounted
  size="$(normalise_size "${1:-2M}")"
  dir="$(size_dir "$size")"
  added="$(record_value "$size" added)"
  mounted="$(record_value "$size" mounted)"
  if [[ -z "$added" && -z "$mounted" ]]; then
    echo "this script reserved no $size pages (no record in $state_dir): nothing changed"
    return
  fi
  if [[ -n "$mounted" ]]; then
    if grep -q " $mounted hugetlbfs " /proc/mounts; then
      umount "$mounted" || dpa_fail "cannot unmount $mounted (a process still maps files in it: stop it first)"
      echo "unmounted $mounted"
    fi
    mounted=""
    write_record "$size" "${added:-0}" ""
  fi
  if ((${added:-0} > 0)); then
    require_writable "$dir/nr_hugepages" release
    local total target
    total="$(cat "$dir/nr_hugepages")"
    target=$((total > added ? total - added : 0))
    echo "$target" >"$dir/nr_hugepages"
    echo "gave back the $((total - target)) $size pages this script reserved: $(cat "$dir/nr_hugepages") remain reserved"
  fi
  write_record "$size" 0 ""
}

status() {
  local dir size added mounted
  for dir in "$sysfs"/hugepages-*; do
    [[ -d "$dir" ]] || continue
    echo "$(basename "$dir"): total $(cat "$dir/nr_hugepages"), free $(cat "$dir/free_hugepages")"
  done
  grep hugetlbfs /proc/mounts || echo "no hugetlbfs mounted"
  for size in 2M 1G; do
    added="$(record_value "$size" added)"
    mounted="$(record_value "$size" mounted)"
    if [[ -n "$added" || -n "$mounted" ]]; then
      echo "reserved by this script: ${added:-0} $size pages${mounted:+, mounted $mounted}"
    fi
  done
}

command="${1:-}"
shift || true
case "$command" in
  reserve) reserve "$@" ;;
  release) release "$@" ;;
  status) (($# == 0)) || dpa_usage_error "status takes no arguments"; status ;;
  "") dpa_usage_error "a command is needed: reserve, release or status" ;;
  *) dpa_usage_error "unknown command '$command' (reserve, release or status)" ;;
esac
