#!/usr/bin/env bash
# dpa-bench with workers and dpa-switch all on DPDK over net_memif (no NIC, no hugepages): the
# switch thread busy-polls on an lcore pinned to one core, each rank's worker thread on its own.
#
#   scripts/dpa-bench-memif.sh [-n RANKS] [-p PAYLOAD] [--mtu MTU] [--switch-core C]
#                              [-- dpa-bench options...]
#
# Builds nothing: DPA_BUILD_DIR (default ./build) must hold dpa-switch and dpa-bench built with DPDK.
# Rank r's worker thread runs on an lcore pinned to core r (dpdk.cores), the switch thread on
# --switch-core (default 1); the processes' main threads keep every CPU and mostly sleep.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DPA_BUILD_DIR:-$root/build}"
ranks=1
payload=256
mtu=1500
switch_core=1
while (($#)); do
  case "$1" in
    -n) ranks=$2; shift 2 ;;
    -p) payload=$2; shift 2 ;;
    --mtu) mtu=$2; shift 2 ;;
    --switch-core) switch_core=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "dpa-bench-memif.sh: unknown option '$1' (dpa-bench options go after --)" >&2; exit 2 ;;
  esac
done

work=$(mktemp -d /tmp/dpa-bench-memif.XXXX)
prefix="dpa-bench-$$"
switch_pid=""
cleanup() {
  [[ -n "$switch_pid" ]] && kill "$switch_pid" 2>/dev/null && wait "$switch_pid" 2>/dev/null
  cat "$work/switch.log" >&2; rm -rf "$work" /var/run/dpdk/"$prefix"-* "${XDG_RUNTIME_DIR:-/nonexistent}"/dpdk/"$prefix"-*
}
trap cleanup EXIT

vdevs=""
ports=""
for ((rank = 0; rank < ranks; ++rank)); do
  vdevs+="${vdevs:+, }\"net_memif$rank,role=server,id=0,socket-abstract=no,socket=$work/rank$rank.sock\""
  ports+="${ports:+, }\"net_memif$rank\""
done
cat >"$work/switch.json" <<JSON
{"switch": {"threads": 1,
            "dpdk": {"cores": "$switch_core", "vdevs": [$vdevs], "no_huge": true, "memory_mb": 512,
                     "file_prefix": "$prefix-switch", "eal_args": ["--no-pci", "--log-level=lib.eal:error"],
                     "ports": [$ports], "local_ip": "10.96.0.100", "local_port": 4242, "mtu": $mtu,
                     "mbufs": 16383}},
 "sessions": [{"id": 1, "world_size": $ranks, "payload": $payload, "pool_size": 8192}]}
JSON
# {rank} is replaced by dpa-bench for every rank.
cat >"$work/worker.json" <<JSON
{"dpdk": {"vdevs": ["net_memif0,role=client,id=0,socket-abstract=no,socket=$work/rank{rank}.sock"],
          "cores": "{rank}", "no_huge": true, "memory_mb": 512, "file_prefix": "$prefix-{rank}",
          "eal_args": ["--no-pci", "--log-level=lib.eal:error"], "ports": ["net_memif0"],
          "local_ip": "10.96.1.{rank}", "local_port": 5000, "mtu": $mtu, "mbufs": 16383}}
JSON

"$build/src/tools/dpa-switch" --config "$work/switch.json" --transport dpdk --port-file "$work/port" \
  >"$work/switch.log" 2>&1 &
switch_pid=$!
for _ in $(seq 1 400); do [[ -s "$work/port" ]] && break; sleep 0.05; done
[[ -s "$work/port" ]] || { echo "dpa-switch did not start:"; cat "$work/switch.log"; exit 1; }

"$build/src/tools/dpa-bench" -n "$ranks" --switch 10.96.0.100:4242 --transport dpdk \
  --transport-config "$work/worker.json" "$@"
