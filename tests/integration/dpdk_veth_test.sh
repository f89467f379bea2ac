#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# DPDK workers (net_af_packet) against a socket dpa-switch across a veth pair between two network
# namespaces this test creates, with loss injected on the workers: results must still be exact.
# The switch's kernel leaves its UDP checksums partial on the veth (TX offload), which af_packet
# passes on as they are: the workers check IPv4 header checksums only (dpdk.check_udp_checksum).
# With several worker threads each rank's port has that many queue pairs, among which the kernel
# spreads the received packets by a hash of their addresses (af_packet's fanout), not by thread:
# the threads hand each other's replies on in software.
#
#   dpdk_veth_test.sh <dpa-switch> <dpa-test-worker> <world size> [worker threads]
#
# Exit 77 (skipped) without root or without the tools; everything it creates (namespaces, DPDK
# runtime directories, processes, files) is removed on every exit path.
set -euo pipefail
switch_bin=$1
worker_bin=$2
world=${3:-2}
threads=${4:-1}

if ((EUID != 0)); then echo "SKIP: network namespaces need root"; exit 77; fi
command -v ip >/dev/null || { echo "SKIP: iproute2 (ip) is not installed"; exit 77; }

# Runtime and work directories of earlier runs killed outright (a SIGKILL on timeout runs no trap)
# carry the dead script's PID.
for stale in /var/run/dpdk/dpa-veth-* "${XDG_RUNTIME_DIR:-/nonexistent}"/dpdk/dpa-veth-* /tmp/dpa-veth-*; do
  [[ -e "$stale" ]] || continue
  owner=${stale##*/dpa-veth-}; owner=${owner%%[-.]*}
  if [[ "$owner" =~ ^[0-9]+$ ]] && ! kill -0 "$owner" 2>/dev/null; then rm -rf "$stale"; fi
done
id=$$
ns_workers=dpa_w_$id
ns_switch=dpa_s_$id
work=$(mktemp -d /tmp/dpa-veth-$id.XXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  ip netns del "$ns_workers" 2>/dev/null || true
  ip netns del "$ns_switch" 2>/dev/null || true
  rm -rf "$work" /var/run/dpdk/dpa-veth-"$id"-*
}
trap cleanup EXIT

ip netns add "$ns_workers"
ip netns add "$ns_switch"
ip link add veth_w netns "$ns_workers" type veth peer name veth_s netns "$ns_switch"
# The workers' side has no kernel address: the DPDK processes own 10.98.0.1 (and answer ARP).
ip -n "$ns_workers" link set veth_w up
ip -n "$ns_switch" addr add 10.98.0.2/24 dev veth_s
ip -n "$ns_switch" link set veth_s up

ip netns exec "$ns_switch" "$switch_bin" --host 10.98.0.2 --port 4242 --world-size "$world" --payload 256 \
  --port-file "$work/port" >"$work/switch.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do [[ -s "$work/port" ]] && break; sleep 0.05; done
[[ -s "$work/port" ]] || { echo "dpa-switch did not start:"; cat "$work/switch.log"; exit 1; }

status=0
for dtype in int32 float32; do
  worker_pids=()
  for ((rank = 0; rank < world; ++rank)); do
    cat >"$work/rank$rank.json" <<JSON
{"dpdk": {"vdevs": ["net_af_packet0,iface=veth_w,qpairs=$threads"], "no_huge": true, "memory_mb": 256,
          "file_prefix": "dpa-veth-$id-$rank", "eal_args": ["--no-pci", "--log-level=lib.eal:error"],
          "ports": ["net_af_packet0"], "local_ip": "10.98.0.1", "local_port": $((6000 + 100 * rank)),
          "mbufs": 2047, "rx_descriptors": 256, "tx_descriptors": 256, "check_udp_checksum": false}}
JSON
    ip netns exec "$ns_workers" "$worker_bin" --host 10.98.0.2 --port 4242 --rank "$rank" --world "$world" \
      --threads "$threads" --transport-config "$work/rank$rank.json" --dtype "$dtype" --count 20000 --iterations 3 \
      --drop 0.01 --seed $((rank + 1)) --rto-us 2000 --timeout-ms 20000 --join-timeout-ms 20000 \
      >"$work/rank$rank.$dtype.log" 2>&1 &
    worker_pids+=($!)
  done
  for ((rank = 0; rank < world; ++rank)); do
    if ! wait "${worker_pids[$rank]}"; then
      echo "rank $rank ($dtype) failed:"
      cat "$work/rank$rank.$dtype.log"
      status=1
    fi
  done
done
cat "$work"/rank*.log | grep '"iteration"' || true
((status == 0)) && echo "PASS: $world DPDK (af_packet) workers of $threads threads, socket switch, int32 exact and fp32 within bound"
exit $status
