#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Writes the JSON configs of dpa-switch and of workers connected by net_memif (no NIC, --no-huge):
# the switch has one memif port per rank (server), each rank one memif port (client) on the
# socket DIR/rankR.sock. The one source of these configs for scripts/dpa-bench-memif.sh, the
# DPDK memif tests and the torch-over-DPDK test.
#
#   dpa-memif-config.sh switch --dir DIR --ranks N --prefix PREFIX --ip IP [options] > switch.json
#   dpa-memif-config.sh worker --dir DIR[,DIR...] --rank R --prefix PREFIX --ip IP [options] > worker.json
#
# A worker of a job over several switch servers (DPA_SWITCH with a list) gives one DIR per server:
# its port net_memifI is a client of the socket DIR_I/rankR.sock of the switch whose --dir is DIR_I.
#
# Options: --port UDP_PORT (4242 switch, 5000 worker), --core CORES (dpdk.cores), --mtu MTU,
# --mbufs N, --memory-mb MB, --bsize BYTES (memif packet buffer size, default the PMD's 2048),
# --zero-copy (worker: the memif client sends and receives in its own mbufs, no copy),
# --queues Q (dpdk.queues: memif queue pairs per port, default 4; give the switch and every worker
# the same Q, at least the switch's threads and every worker's threads: a server queue pair its
# client lacks reads or writes the client's first ring, duplicating and tearing packets),
# --software-udp-checksum (dpdk.software_udp_checksum: every frame carries a UDP checksum computed
# on the CPU, which the receiver checks; memif has no offload and no CRC),
# switch only: --payload P (256), --pool-size SLOTS (1024), --threads T (1).
# R may be a placeholder such as {rank} (dpa-bench replaces it per rank); the socket path and
# file prefix follow it.
# Exit status: 0, or 2 for a usage error.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-common.sh"
dpa_help_or_version "$@"

role=${1:-}
shift || true
dir="" ranks=1 rank="" prefix="" ip="" port="" cores="" mtu=1500 mbufs=4095 memory_mb=256 bsize="" zero_copy=0
payload=256 pool_size=1024 threads=1 queues=4 software_checksum=false
while (($#)); do
  case "$1" in
    --dir) dir=$(dpa_option_value "$@"); shift 2 ;;
    --ranks) ranks=$(dpa_option_value "$@"); shift 2 ;;
    --rank) rank=$(dpa_option_value "$@"); shift 2 ;;
    --prefix) prefix=$(dpa_option_value "$@"); shift 2 ;;
    --ip) ip=$(dpa_option_value "$@"); shift 2 ;;
    --port) port=$(dpa_option_value "$@"); shift 2 ;;
    --core) cores=$(dpa_option_value "$@"); shift 2 ;;
    --mtu) mtu=$(dpa_option_value "$@"); shift 2 ;;
    --mbufs) mbufs=$(dpa_option_value "$@"); shift 2 ;;
    --memory-mb) memory_mb=$(dpa_option_value "$@"); shift 2 ;;
    --bsize) bsize=$(dpa_option_value "$@"); shift 2 ;;
    --zero-copy) zero_copy=1; shift ;;
    --payload) payload=$(dpa_option_value "$@"); shift 2 ;;
    --pool-size) pool_size=$(dpa_option_value "$@"); shift 2 ;;
    --threads) threads=$(dpa_option_value "$@"); shift 2 ;;
    --queues) queues=$(dpa_option_value "$@"); shift 2 ;;
    --software-udp-checksum) software_checksum=true; shift ;;
    *) dpa_usage_error "unknown option '$1'" ;;
  esac
done
[[ -n "$dir" && -n "$prefix" && -n "$ip" ]] || dpa_usage_error "--dir, --prefix and --ip are required"

# memif sizes its rings itself (rsize): the descriptor counts only size the pools' check.
memif_args() {  # the devargs every memif port shares, after its role: rank, then the socket's directory
  echo -n "id=0,socket-abstract=no,socket=${2:-$dir}/rank$1.sock${bsize:+,bsize=$bsize}"
}
cores_key() { [[ -n "$cores" ]] && echo -n "\"cores\": \"$cores\", "; true; }

case "$role" in
  switch)
    # The memif server refuses a client with more queue pairs than it has ("Invalid ring index").
    ((threads <= queues)) || dpa_usage_error "switch: --threads $threads exceeds --queues $queues (each thread sends on a queue pair of its own: raise --queues, and pass the same --queues to every worker)"
    vdevs="" ports=""
    for ((r = 0; r < ranks; ++r)); do
      vdevs+="${vdevs:+, }\"net_memif$r,role=server,$(memif_args "$r")\""
      ports+="${ports:+, }\"net_memif$r\""
    done
    cat <<JSON
{"switch": {"threads": $threads,
            "dpdk": {$(cores_key)"vdevs": [$vdevs], "no_huge": true, "memory_mb": $memory_mb,
                     "file_prefix": "$prefix", "eal_args": ["--no-pci", "--log-level=lib.eal:error"],
                     "ports": [$ports], "local_ip": "$ip", "local_port": ${port:-4242}, "mtu": $mtu,
                     "mbufs": $mbufs, "rx_descriptors": 64, "tx_descriptors": 64, "queues": $queues,
                     "software_udp_checksum": $software_checksum}},
 "sessions": [{"id": 1, "world_size": $ranks, "payload": $payload, "pool_size": $pool_size}]}
JSON
    ;;
  worker)
    [[ -n "$rank" ]] || dpa_usage_error "worker: --rank is required"
    zc="" eal='"--no-pci", "--log-level=lib.eal:error"'
    # Zero-copy memif shares the client's memory with the server: one file per memory list.
    ((zero_copy)) && { zc=",zero-copy=yes"; eal='"--no-pci", "--single-file-segments", "--log-level=lib.eal:error"'; }
    vdevs="" ports="" port_index=0
    IFS=, read -ra switch_dirs <<<"$dir"
    for switch_dir in "${switch_dirs[@]}"; do
      vdevs+="${vdevs:+, }\"net_memif$port_index,role=client,$(memif_args "$rank" "$switch_dir")$zc\""
      ports+="${ports:+, }\"net_memif$port_index\""
      port_index=$((port_index + 1))
    done
    cat <<JSON
{"dpdk": {"vdevs": [$vdevs],
          $(cores_key)"no_huge": true, "memory_mb": $memory_mb, "file_prefix": "$prefix",
          "eal_args": [$eal], "ports": [$ports],
          "local_ip": "$ip", "local_port": ${port:-5000}, "mtu": $mtu, "mbufs": $mbufs,
          "rx_descriptors": 64, "tx_descriptors": 64, "queues": $queues,
          "software_udp_checksum": $software_checksum}}
JSON
    ;;
  *) dpa_usage_error "the first argument is switch or worker, not '$role'" ;;
esac
