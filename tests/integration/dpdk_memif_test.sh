#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Workers and dpa-switch all on DPDK, over net_memif (--no-huge): the switch has one memif port
# per rank (server), each rank one memif port (client). int32 results must be exact and fp32
# results within the quantisation bound (dpa-test-worker checks both). With several worker threads
# every rank's memif port has that many queue pairs and the one-thread switch replies on its
# queue 0 only: the workers' threads hand each other's replies on in software. With "auth" the
# session authenticates every packet (protocol.md §6.6): a random session key, each rank its own.
# With "two-switches" one job spreads over two DPDK switch servers (DPA_SWITCH with a list):
# every rank has one memif port per server, its thread t talks to server t mod 2 (whose address
# the neighbour table maps to that port by ARP), and each server must aggregate its threads'
# blocks, the two adding up to the job's. With "checksum" every frame, both ways, carries a UDP
# checksum computed on the CPU (dpdk.software_udp_checksum) that its receiver checks: none may fail.
#
#   dpdk_memif_test.sh <dpa-switch> <dpa-test-worker> <world size> [worker threads] [auth|two-switches|checksum]
#
# Every DPDK process has its own --file-prefix; processes, sockets and DPDK runtime directories
# are removed on every exit path.
set -euo pipefail
switch_bin=$1
worker_bin=$2
world=${3:-2}
threads=${4:-1}
mode=${5:-}
auth="" servers=1 checksum=""
case "$mode" in
  "") ;;
  auth) auth=auth ;;
  two-switches) servers=2 ;;
  checksum) checksum=--software-udp-checksum ;;
  *) echo "dpdk_memif_test.sh: unknown mode '$mode' (auth, two-switches or checksum)"; exit 2 ;;
esac
count=30000 iterations=10 payload=256  # over 1024 requests per rank: a memif ring wraps (see the duplicates check)

# Runtime and work directories of earlier runs killed outright (a SIGKILL on timeout runs no trap)
# carry the dead script's PID.
for stale in /var/run/dpdk/dpa-memif-* "${XDG_RUNTIME_DIR:-/nonexistent}"/dpdk/dpa-memif-* /tmp/dpa-memif-*; do
  [[ -e "$stale" ]] || continue
  owner=${stale##*/dpa-memif-}; owner=${owner%%[-.]*}
  if [[ "$owner" =~ ^[0-9]+$ ]] && ! kill -0 "$owner" 2>/dev/null; then rm -rf "$stale"; fi
done
id=$$
work=$(mktemp -d /tmp/dpa-memif-$id.XXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work" /var/run/dpdk/dpa-memif-"$id"-* "${XDG_RUNTIME_DIR:-/nonexistent}"/dpdk/dpa-memif-"$id"-*
}
trap cleanup EXIT

config="$(dirname "${BASH_SOURCE[0]}")/../../scripts/dpa-memif-config.sh"
# A switch thread beyond the queue pairs would send on a queue pair its clients lack: refused.
if "$config" switch --dir "$work" --ranks 1 --prefix p --ip 10.97.0.100 --threads 3 --queues 2 >/dev/null 2>"$work/usage"; then
  echo "dpa-memif-config.sh accepted a switch with 3 threads and 2 queue pairs"; exit 1
fi
grep -q -- "--threads 3 exceeds --queues 2" "$work/usage" || { echo "no usage error naming --threads and --queues:"; cat "$work/usage"; exit 1; }
# Server s: directory $work/s<s> for its memif sockets, address 10.97.0.(100 + s), port 4242.
switch_list="" worker_dirs=""
for ((s = 0; s < servers; ++s)); do
  mkdir "$work/s$s"
  "$config" switch --dir "$work/s$s" --ranks "$world" --prefix "dpa-memif-$id-switch$s" --ip "10.97.0.$((100 + s))" \
    --port 4242 --memory-mb 256 --mbufs 4095 --payload "$payload" --pool-size 1024 --queues "$threads" $checksum \
    >"$work/switch$s.json"
  switch_list+="${switch_list:+,}10.97.0.$((100 + s)):4242"
  worker_dirs+="${worker_dirs:+,}$work/s$s"
done
if [[ "$auth" == auth ]]; then
  (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/session.key")
  python3 - "$work/switch0.json" "$work/session.key" <<'PY'
import json, sys
path, key = sys.argv[1], sys.argv[2]
config = json.load(open(path))
for session in config["sessions"]:
    session["auth_key_file"] = key
    session["auth_data"] = True
json.dump(config, open(path, "w"))
PY
  for ((rank = 0; rank < world; ++rank)); do
    (umask 077; "$(dirname "$switch_bin")/dpa-switch-ctl" rank-key "$work/session.key" "$rank" >"$work/rank$rank.key")
  done
fi

# Busy lcores are pinned by default (docs/dpdk.md, "Cores"): in every DPDK process given as
# PID:LOG, each lcore thread runs on one core that no other listed process's lcore has, or floats
# and its process logged why (too few free cores). Read while the ranks hold their contexts.
check_pinning() {
  local entry pid log task name cpus found pinned=" "
  for entry in "$@"; do
    pid=${entry%%:*} log=${entry#*:} found=0
    for task in /proc/"$pid"/task/*; do
      name=$(cat "$task/comm" 2>/dev/null) || continue
      [[ "$name" == lcore-worker-* || "$name" == rte-worker-* ]] || continue
      found=1
      cpus=$(awk '/^Cpus_allowed_list:/ {print $2}' "$task/status")
      if [[ "$cpus" =~ ^[0-9]+$ ]]; then
        [[ "$pinned" == *" $cpus "* ]] && { echo "two busy lcores pinned to core $cpus (process $pid)"; return 1; }
        pinned+="$cpus "
      elif ! grep -q 'busy-polling thread(s) but only' "$log"; then
        echo "$name of process $pid floats over CPUs $cpus and its log says not why:"; cat "$log"; return 1
      fi
    done
    ((found)) || { echo "process $pid has no DPDK lcore thread"; return 1; }
  done
  echo "lcores pinned to cores:${pinned% }"
}

# One round: fresh switches, the ranks run and then hold their (idle) contexts while the switches
# stop, and only then exit. The memif PMD unmaps a connection's rings in its control thread when
# the peer goes away, which races with a data-path thread still polling that port; stopping the
# busy side first keeps every disconnect on an idle peer (see docs/dpdk.md, "Troubleshooting").
run_round() {
  local dtype=$1 status=0 rank s switch_pids=()
  for ((s = 0; s < servers; ++s)); do
    rm -f "$work/port$s" "$work/s$s"/rank*.sock  # a stopped memif server leaves its socket file
    ${DPA_SWITCH_WRAPPER:-} "$switch_bin" --config "$work/switch$s.json" --transport dpdk --port-file "$work/port$s" \
      >"$work/switch$s.$dtype.log" 2>&1 &
    switch_pids+=($!)
    pids+=($!)
  done
  for ((s = 0; s < servers; ++s)); do
    for _ in $(seq 1 400); do [[ -s "$work/port$s" ]] && break; sleep 0.05; done
    [[ -s "$work/port$s" ]] || { echo "dpa-switch $s did not start:"; cat "$work/switch$s.$dtype.log"; return 1; }
  done

  local worker_pids=() holds=()
  for ((rank = 0; rank < world; ++rank)); do
    "$config" worker --dir "$worker_dirs" --rank "$rank" --prefix "dpa-memif-$id-$rank" --ip "10.97.0.$((rank + 1))" \
      --port 5000 --memory-mb 128 --mbufs 2047 --queues "$threads" $checksum >"$work/rank$rank.json"
    mkfifo "$work/hold$rank.$dtype"
    "$worker_bin" --switch "$switch_list" --rank "$rank" --world "$world" --threads "$threads" --hold \
      --transport-config "$work/rank$rank.json" --dtype "$dtype" --count "$count" --iterations "$iterations" \
      --timeout-ms 30000 --join-timeout-ms 30000 ${auth:+--auth-key-file "$work/rank$rank.key"} <"$work/hold$rank.$dtype" >"$work/rank$rank.$dtype.log" 2>&1 &
    worker_pids+=($!)
    pids+=($!)
    local fd
    exec {fd}>"$work/hold$rank.$dtype"
    holds+=("$fd")
  done
  # Every rank either holds (done) or has exited (failed); the operations' own timeouts bound this.
  for ((rank = 0; rank < world; ++rank)); do
    while ! grep -q '^holding$' "$work/rank$rank.$dtype.log" && kill -0 "${worker_pids[$rank]}" 2>/dev/null; do
      sleep 0.05
    done
  done
  local processes=()
  for ((s = 0; s < servers; ++s)); do processes+=("${switch_pids[$s]}:$work/switch$s.$dtype.log"); done
  for ((rank = 0; rank < world; ++rank)); do processes+=("${worker_pids[$rank]}:$work/rank$rank.$dtype.log"); done
  check_pinning "${processes[@]}" || status=1
  for ((s = 0; s < servers; ++s)); do kill -TERM "${switch_pids[$s]}"; done
  for ((s = 0; s < servers; ++s)); do
    wait "${switch_pids[$s]}" || { echo "dpa-switch $s ($dtype) exited with $?:"; cat "$work/switch$s.$dtype.log"; status=1; }
  done
  for fd in "${holds[@]}"; do exec {fd}>&-; done
  for ((rank = 0; rank < world; ++rank)); do
    if ! wait "${worker_pids[$rank]}"; then
      echo "rank $rank ($dtype) failed:"
      cat "$work/rank$rank.$dtype.log"
      status=1
    fi
  done
  return $status
}

# Two servers, one round: every rank's thread t used server t mod 2, and each server completed
# blocks at N, the two together exactly the job's int32 blocks (each block aggregates on one
# server; float32 adds exponent rounds, so only that both served is checked there).
check_two_servers() {
  local dtype=$1
  python3 - "$switch_list" "$threads" "$dtype" "$count" "$payload" "$iterations" "$work"/rank*."$dtype".log \
    "$work"/switch0."$dtype".log "$work"/switch1."$dtype".log <<'PY'
import json, sys
servers, threads, dtype = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3]
count, payload, iterations = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
logs, switch_logs = sys.argv[7:-2], sys.argv[-2:]
bad = []
for path in logs:
    for line in open(path):
        if '"iteration"' not in line:
            continue
        used = json.loads(line)["switches"]
        expected = [servers[t % len(servers)] for t in range(threads)]
        if used != expected:
            bad.append(f"{path}: threads used {used}, expected {expected}")
completed = []
for path in switch_logs:
    counters = dict(l.split() for l in open(path) if l.startswith("completed_full "))
    completed.append(int(counters.get("completed_full", -1)))
if min(completed) <= 0:
    bad.append(f"a server completed no block at N: completed_full {completed} ({', '.join(servers)})")
blocks = iterations * -(-count // payload)
if dtype == "int32" and sum(completed) != blocks:
    bad.append(f"the servers completed {completed} blocks at N, {sum(completed)} in all, not the job's {blocks}")
print("\n".join(bad) if bad else f"{dtype}: threads on servers t mod {len(servers)}, blocks completed {completed}")
sys.exit(1 if bad else 0)
PY
}

status=0
for dtype in int32 float32; do
  run_round "$dtype" || status=1
  if ((servers == 2)); then check_two_servers "$dtype" || status=1; fi
done
((status == 0)) || exit 1
grep -h '"iteration"' "$work"/rank*.log
if [[ "$auth" == auth ]]; then
  # Every packet carried its rank's tag: the switches dropped none for a bad one.
  if grep -h '^dropped_bad_tag ' "$work"/switch[0-9].*.log | grep -qv '^dropped_bad_tag 0$'; then
    echo "the switch dropped packets with bad tags:"; grep -h '^dropped_bad_tag ' "$work"/switch[0-9].*.log; exit 1
  fi
  [[ $(grep -h '^dropped_bad_tag 0$' "$work"/switch[0-9].*.log | wc -l) -eq 2 ]] || {
    echo "no dropped_bad_tag counter in the switches' logs"; exit 1; }
fi
# A memif server queue pair its client lacks reads the client's first ring again: the switch then
# counts several duplicates per aggregated request (docs/troubleshooting.md). Resends stay far below.
for log in "$work"/switch[0-9].*.log; do
  read -r aggregated duplicates < <(awk '$1 == "aggregated" {a = $2} $1 == "duplicates" {d = $2} END {print a, d}' "$log")
  if [[ -z "$aggregated" || -z "$duplicates" ]] || ((duplicates > aggregated)); then
    echo "$log: duplicates ${duplicates:-?} for ${aggregated:-?} aggregated requests (memif queue pairs mismatched?)"
    exit 1
  fi
done
echo "PASS: $world workers of $threads threads and $servers dpa-switch server(s) over net_memif${auth:+ (authenticated)}, int32 exact and fp32 within bound"
