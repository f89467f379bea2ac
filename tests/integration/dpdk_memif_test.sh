#!/usr/bin/env bash
# Workers and dpa-switch all on DPDK, over net_memif (--no-huge): the switch has one memif port
# per rank (server), each rank one memif port (client). int32 results must be exact and fp32
# results within the quantisation bound (dpa-test-worker checks both). With several worker threads
# every rank's memif port has that many queue pairs and the one-thread switch replies on its
# queue 0 only: the workers' threads hand each other's replies on in software. With "auth" the
# session authenticates every packet (protocol.md §6.6): a random session key, each rank its own.
#
#   dpdk_memif_test.sh <dpa-switch> <dpa-test-worker> <world size> [worker threads] [auth]
#
# Every DPDK process has its own --file-prefix; processes, sockets and DPDK runtime directories
# are removed on every exit path.
set -euo pipefail
switch_bin=$1
worker_bin=$2
world=${3:-2}
threads=${4:-1}
auth=${5:-}

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
"$config" switch --dir "$work" --ranks "$world" --prefix "dpa-memif-$id-switch" --ip 10.97.0.100 --port 4242 \
  --memory-mb 256 --mbufs 4095 --payload 256 --pool-size 1024 --queues "$threads" >"$work/switch.json"
if [[ "$auth" == auth ]]; then
  (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/session.key")
  python3 - "$work/switch.json" "$work/session.key" <<'PY'
import json, sys
path, key = sys.argv[1], sys.argv[2]
config = json.load(open(path))
for session in config["sessions"]:
    session["auth_key_file"] = key
json.dump(config, open(path, "w"))
PY
  for ((rank = 0; rank < world; ++rank)); do
    (umask 077; "$(dirname "$switch_bin")/dpa-switch-ctl" rank-key "$work/session.key" "$rank" >"$work/rank$rank.key")
  done
fi

# One round: a fresh switch, the ranks run and then hold their (idle) contexts while the switch
# stops, and only then exit. The memif PMD unmaps a connection's rings in its control thread when
# the peer goes away, which races with a data-path thread still polling that port; stopping the
# busy side first keeps every disconnect on an idle peer (see docs/dpdk.md, "Troubleshooting").
run_round() {
  local dtype=$1 status=0 rank
  rm -f "$work/port" "$work"/rank*.sock  # a stopped memif server leaves its socket file
  ${DPA_SWITCH_WRAPPER:-} "$switch_bin" --config "$work/switch.json" --transport dpdk --port-file "$work/port" \
    >"$work/switch.$dtype.log" 2>&1 &
  local switch_pid=$!
  pids+=("$switch_pid")
  for _ in $(seq 1 400); do [[ -s "$work/port" ]] && break; sleep 0.05; done
  [[ -s "$work/port" ]] || { echo "dpa-switch did not start:"; cat "$work/switch.$dtype.log"; return 1; }

  local worker_pids=() holds=()
  for ((rank = 0; rank < world; ++rank)); do
    "$config" worker --dir "$work" --rank "$rank" --prefix "dpa-memif-$id-$rank" --ip "10.97.0.$((rank + 1))" \
      --port 5000 --memory-mb 128 --mbufs 2047 >"$work/rank$rank.json"
    mkfifo "$work/hold$rank.$dtype"
    "$worker_bin" --host 10.97.0.100 --port 4242 --rank "$rank" --world "$world" --threads "$threads" --hold \
      --transport-config "$work/rank$rank.json" --dtype "$dtype" --count 30000 --iterations 3 \
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
  kill -TERM "$switch_pid"
  wait "$switch_pid" || { echo "dpa-switch ($dtype) exited with $?:"; cat "$work/switch.$dtype.log"; status=1; }
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

status=0
run_round int32 || status=1
run_round float32 || status=1
((status == 0)) || exit 1
grep -h '"iteration"' "$work"/rank*.log
if [[ "$auth" == auth ]]; then
  # Every packet carried its rank's tag: the switches dropped none for a bad one.
  if grep -h '^dropped_bad_tag ' "$work"/switch.*.log | grep -qv '^dropped_bad_tag 0$'; then
    echo "the switch dropped packets with bad tags:"; grep -h '^dropped_bad_tag ' "$work"/switch.*.log; exit 1
  fi
  [[ $(grep -h '^dropped_bad_tag 0$' "$work"/switch.*.log | wc -l) -eq 2 ]] || {
    echo "no dropped_bad_tag counter in the switches' logs"; exit 1; }
fi
echo "PASS: $world workers of $threads threads and dpa-switch over net_memif${auth:+ (authenticated)}, int32 exact and fp32 within bound"
