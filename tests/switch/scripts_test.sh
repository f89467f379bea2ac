#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The scripts without an SDE (none can run here): --help and --version on every script, which
# must change nothing; the exit codes (0 ok, 1 runtime failure, 2 usage); each failure's message
# naming what is wrong; the Tofino scripts' positional forms with SDE/SDE_INSTALL from the
# environment, the P4 compile's progress lines (a fake bf-p4c), the start script waiting for
# bf_switchd and failing when it does not come up, the stop script (fake SDE scripts in a private
# tmux server); dpdk-hugepages.sh on a fake sysfs; dpa-worker-check.sh's exit status and --json.
# Usage: scripts_test.sh SOURCE_DIR DPA_P4GEN
set -uo pipefail
source_dir="$1"
export DPA_P4GEN="$2"
scripts="$source_dir/scripts"
version="$(head -n 1 "$source_dir/VERSION")"
work="$(mktemp -d)"
# A tmux server of this test's own, and no SDE of the caller's. Its windows' login shells get a
# HOME of their own: the caller's dotfiles may run anything there (pyenv's rehash waits for a
# lock that a shell killed by an earlier test can leave behind, and the keys typed wait with it).
export TMUX_TMPDIR="$work/tmux" HOME="$work/home"
mkdir -p "$TMUX_TMPDIR" "$HOME"
unset TMUX SDE SDE_INSTALL
export DPA_TMUX_SESSION="dpa-switch-test-$$" DPA_STOP_TIMEOUT_S=10
cleanup() {
  if command -v tmux >/dev/null; then tmux kill-server 2>/dev/null; fi
  [[ -s "$work/switchd.pid" ]] && kill "$(cat "$work/switchd.pid")" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect DESCRIPTION STATUS PATTERN [VAR=VALUE...] COMMAND...: the command exits with STATUS and
# its output (stdout and stderr) matches PATTERN (grep; "" for any).
expect() {
  local description="$1" expected="$2" pattern="$3"
  shift 3
  local output status
  output="$(env "$@" 2>&1)"
  status=$?
  if [[ $status -ne $expected ]] || { [[ -n "$pattern" ]] && ! grep -q -- "$pattern" <<<"$output"; }; then
    fail "$description: status $status (expected $expected), output: $output"
  else
    echo "ok: $description"
  fi
}

# until_true SECONDS COMMAND...: polls COMMAND until it succeeds, at most SECONDS.
until_true() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# --- Every script: --help prints the usage and --version the version, both exit 0 and change
# nothing (the commands a script could change the machine with are fakes that record a call).
mkdir -p "$work/fakes"
for tool in sudo apt-get dpkg-query cmake ctest make mount umount tmux modprobe sysctl; do
  printf '#!/bin/sh\necho "%s $*" >> %q\n' "$tool" "$work/called" >"$work/fakes/$tool"
  chmod +x "$work/fakes/$tool"
done
user_scripts=()
for script in "$scripts"/*.sh; do
  [[ "$script" == */dpa-common.sh || "$script" == */dpa-switch-common.sh ]] || user_scripts+=("$script")
done
for script in "${user_scripts[@]}"; do
  name="$(basename "$script")"
  expect "$name --help" 0 "" PATH="$work/fakes:$PATH" bash "$script" --help
  [[ -n "$(PATH="$work/fakes:$PATH" bash "$script" -h 2>&1)" ]] || fail "$name -h printed nothing"
  expect "$name --version" 0 "^$name $version\$" PATH="$work/fakes:$PATH" bash "$script" --version
  expect "$name: an unknown option is a usage error" 2 "" PATH="$work/fakes:$PATH" bash "$script" --no-such-option
done
[[ -e "$work/called" ]] && fail "--help/--version ran: $(cat "$work/called")"
expect "dpa-demo.sh --help installs nothing" 0 "--no-install" PATH="$work/fakes:$PATH" bash "$scripts/dpa-demo.sh" --help

# --- The Tofino scripts' errors.
config="$source_dir/configs/netberg.json"
model_config="$source_dir/configs/tofino-model.json"
mkdir -p "$work/sde_install/bin" "$work/sde"
python3 - "$config" "$work/bad.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["switch"]["program"]["reducers"] = 40
json.dump(c, open(sys.argv[2], "w"))
PY
compile="$scripts/dpa-switch-compile.sh"
expect "compile: usage" 2 "usage:" "$compile" "$config"
expect "compile: unreadable config" 2 "cannot be read" "$compile" "$work/none.json" "$work/i" "$work/sde_install" "$work/b"
expect "compile: bad config names the key" 2 "switch.program.reducers" "$compile" "$work/bad.json" "$work/i" "$work/sde_install" "$work/b"
expect "compile: SDE_INSTALL missing" 1 "SDE_INSTALL=$work/nothing is not a directory" "$compile" "$config" "$work/i" "$work/nothing" "$work/b"
expect "compile: no bf-p4c" 1 "bf-p4c not found at $work/sde_install/bin/bf-p4c" "$compile" "$config" "$work/i" "$work/sde_install" "$work/b"
expect "compile: no dpa-p4gen" 1 "DPA_P4GEN=" DPA_P4GEN="$work/none" "$compile" "$config" "$work/i" "$work/sde_install" "$work/b"
expect "compile: neither argument nor environment names the SDE" 1 "neither SDE_INSTALL nor SDE is set" "$compile" "$config" "$work/i" "$work/b"
expect "compile: an empty SDE_INSTALL argument with no environment" 1 "neither SDE_INSTALL nor SDE is set" "$compile" "$config" "$work/i" "" "$work/b"

# A bf-p4c that writes a log, waits (at most 20 s) until the script has printed a progress line,
# then writes the program; FAKE_STATUS makes it fail instead.
cat >"$work/sde_install/bin/bf-p4c" <<'SH'
#!/usr/bin/env bash
while (($#)); do [[ "$1" == -o ]] && out="$2"; shift; done
mkdir -p "$out/pipe/logs"
echo "table placement" >"$out/pipe/logs/table_placement_1.log"
[[ -n "${FAKE_STATUS:-}" ]] && exit "$FAKE_STATUS"
if [[ -n "${FAKE_WAIT_FOR:-}" ]]; then
  for _ in $(seq 200); do grep -q elapsed "$FAKE_WAIT_FOR" 2>/dev/null && break; sleep 0.1; done
fi
echo "conf" >"$out/dpa.conf"
SH
chmod +x "$work/sde_install/bin/bf-p4c"
SDE_INSTALL="$work/sde_install" DPA_PROGRESS_INTERVAL_S=1 FAKE_WAIT_FOR="$work/compile.out" \
  "$compile" "$config" "$work/install" "$work/build" >"$work/compile.out" 2>&1
status=$?
if [[ $status -ne 0 ]] || ! grep -q "^bf-p4c: 0m0[0-9]s elapsed, table placement (newest output: pipe/logs/table_placement_1.log)" "$work/compile.out" ||
  ! grep -q "bf-p4c finished" "$work/compile.out" || [[ ! -s "$work/install/dpa/dpa.conf" || ! -s "$work/install/config.json" ||
  ! -e "$work/install/controller/dpa_bfshell.py" || ! -s "$work/install/dpa_config.p4" ]]; then
  fail "compile: 3 arguments, SDE_INSTALL from the environment, progress lines: status $status, output: $(cat "$work/compile.out")"
else
  echo "ok: compile: 3 arguments, SDE_INSTALL from the environment, progress lines"
fi
mkdir -p "$work/sde/install/bin"
cp "$work/sde_install/bin/bf-p4c" "$work/sde/install/bin/bf-p4c"
expect "compile: the artifact's form with an empty SDE_INSTALL falls back to \$SDE/install" 0 "installed in $work/install2" \
  SDE="$work/sde" "$compile" "$config" "$work/install2" "" "$work/build2"
expect "compile: bf-p4c fails" 1 "bf-p4c failed (status 4)" FAKE_STATUS=4 "$compile" "$config" "$work/install3" "$work/sde_install" "$work/build3"
expect "compile: a bad DPA_PROGRESS_INTERVAL_S" 2 "DPA_PROGRESS_INTERVAL_S=soon" DPA_PROGRESS_INTERVAL_S=soon "$compile" "$config" "$work/i" "$work/sde_install" "$work/b"

start="$scripts/dpa-switch-start.sh"
controller="$scripts/dpa-switch-controller.sh"
expect "start: SDE unset" 1 "SDE is not set" "$start" "$config" "$work/i" "$work/sde_install" "$work/b"
expect "start: no run_switchd.sh" 1 "run_switchd.sh not found at $work/sde/run_switchd.sh" SDE="$work/sde" "$start" "$config" "$work/i" "$work/sde_install" "$work/b"
expect "controller: unknown command" 2 "unknown command 'restart'" SDE="$work/sde" "$controller" "$config" "$work/i" "$work/sde_install" restart
expect "controller: usage" 2 "usage:" "$controller" "$config"
printf '#!/bin/sh\nexit 0\n' >"$work/sde/run_tofino_model.sh"
# The controller records how it was started.
printf '#!/bin/sh\necho "$DPA_COMMAND $DPA_CONFIG" >> %q\n' "$work/controller.ran" >"$work/sde/run_bfshell.sh"
chmod +x "$work/sde/run_tofino_model.sh" "$work/sde/run_bfshell.sh"
expect "controller: not compiled" 1 "dpa_config.p4 not found" SDE="$work/sde" "$controller" "$config" "$work/i" "$work/sde_install" counters

if command -v tmux >/dev/null && command -v ss >/dev/null; then
  switchd_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  export DPA_SWITCHD_PORT="$switchd_port"
  printf '#!/bin/sh\necho "no ASIC found" >&2\nexit 3\n' >"$work/sde/run_switchd.sh"
  chmod +x "$work/sde/run_switchd.sh"
  expect "start: not compiled" 1 "dpa.conf not found: compile first" SDE="$work/sde" "$start" "$config" "$work/i" "$work/sde_install" "$work/b"
  # $work/install holds the program compiled above (for netberg.json; the start script only
  # checks that its conf is there).
  expect "start: switchd exits at once" 1 "switchd exited with status 3 before its port $switchd_port opened" \
    SDE="$work/sde" DPA_SWITCHD_TIMEOUT_S=60 "$start" "$model_config" "$work/install" "$work/build"
  tmux has-session -t "$DPA_TMUX_SESSION" 2>/dev/null && fail "start: the session of a failed start is still there"
  grep -q "no ASIC found" "$work/build/switchd.log" || fail "start: switchd's output is not in BUILD_DIR/switchd.log"
  printf '#!/bin/sh\nexec tail -f /dev/null\n' >"$work/sde/run_switchd.sh"
  expect "start: switchd never opens its port" 1 "did not open port $switchd_port within 2 s" \
    SDE="$work/sde" DPA_SWITCHD_TIMEOUT_S=2 "$start" "$model_config" "$work/install" "$work/build"
  tmux has-session -t "$DPA_TMUX_SESSION" 2>/dev/null && fail "start: the session of a timed-out start is still there"
  # A switchd that comes up: listens on the status port until Ctrl-C.
  cat >"$work/sde/run_switchd.sh" <<SH
#!/bin/sh
exec python3 -c 'import os, socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", $switchd_port)); s.listen()
open("$work/switchd.pid", "w").write(str(os.getpid()))
while True: s.accept()'
SH
  # SDE_INSTALL and SDE from the environment, the 3-argument form.
  expect "start: waits for switchd, then starts the controller" 0 "bf_switchd is up" \
    SDE="$work/sde" SDE_INSTALL="$work/sde_install" DPA_SWITCHD_TIMEOUT_S=60 "$start" "$model_config" "$work/install" "$work/build"
  until_true 20 test -s "$work/controller.ran" || fail "start: the controller did not start"
  grep -q "^run $model_config" "$work/controller.ran" 2>/dev/null || fail "start: the controller ran as $(cat "$work/controller.ran" 2>/dev/null)"
  expect "start: refuses a second start" 1 "tmux session $DPA_TMUX_SESSION exists" \
    SDE="$work/sde" SDE_INSTALL="$work/sde_install" "$start" "$model_config" "$work/install" "$work/build"
  expect "controller: counters on the running switch, SDE from SDE_INSTALL's parent" 0 "" \
    SDE_INSTALL="$work/sde/install" "$controller" "$model_config" "$work/install" counters
  grep -q "^counters $model_config" "$work/controller.ran" || fail "controller: counters did not reach bfshell: $(cat "$work/controller.ran")"
  expect "stop: stops the session" 0 "stopped $DPA_TMUX_SESSION" "$scripts/dpa-switch-stop.sh"
  tmux has-session -t "$DPA_TMUX_SESSION" 2>/dev/null && fail "stop: the session is still there"
  [[ -z "$(ss -Hltn "sport = :$switchd_port")" ]] || fail "stop: port $switchd_port is still open"
  expect "stop: nothing running" 0 "nothing to stop" "$scripts/dpa-switch-stop.sh"
  expect "controller: switchd not running" 1 "bf_switchd is not running" \
    SDE="$work/sde" "$controller" "$model_config" "$work/install" "$work/sde_install" counters
else
  echo "skipped: the start/stop cases need tmux and ss"
fi

# --- dpdk-hugepages.sh on a fake sysfs: reserve never shrinks, release gives back only what
# reserve added.
hugepages="$scripts/dpdk-hugepages.sh"
pages_dir="$work/sys/hugepages-2048kB"
mkdir -p "$pages_dir"
echo 100 >"$pages_dir/nr_hugepages"
echo 100 >"$pages_dir/free_hugepages"
export DPA_HUGEPAGES_SYSFS="$work/sys" DPA_HUGEPAGES_STATE="$work/hugepages-state"
expect "hugepages: a smaller reservation is not shrunk" 0 "left as they are" "$hugepages" reserve 50 --no-mount
[[ "$(cat "$pages_dir/nr_hugepages")" == 100 ]] || fail "hugepages: reserve 50 changed 100 to $(cat "$pages_dir/nr_hugepages")"
expect "hugepages: release without a reservation changes nothing" 0 "nothing changed" "$hugepages" release
[[ "$(cat "$pages_dir/nr_hugepages")" == 100 ]] || fail "hugepages: release freed pages it did not reserve"
expect "hugepages: reserve adds" 0 "reserved 200 more 2M pages" "$hugepages" reserve 300 2M --no-mount
expect "hugepages: status shows what the script reserved" 0 "reserved by this script: 200 2M pages" "$hugepages" status
echo 350 >"$pages_dir/nr_hugepages"  # someone else reserves 50 more
expect "hugepages: release gives back only its own" 0 "gave back the 200 2M pages" "$hugepages" release 2M
[[ "$(cat "$pages_dir/nr_hugepages")" == 150 ]] || fail "hugepages: release left $(cat "$pages_dir/nr_hugepages"), not 150"
expect "hugepages: bad page count" 2 "PAGES 'many' is not a number" "$hugepages" reserve many
expect "hugepages: bad page size" 2 "page size '4M' is not 2M or 1G" "$hugepages" reserve 10 4M
expect "hugepages: no command" 2 "a command is needed" "$hugepages"
expect "hugepages: no such page size on this kernel" 1 "offers no 1G pages" "$hugepages" reserve 1 1G --no-mount
unset DPA_HUGEPAGES_SYSFS DPA_HUGEPAGES_STATE

# --- dpa-worker-check.sh: usage errors, a failing required check, --json.
check="$scripts/dpa-worker-check.sh"
expect "worker-check: a PCI address is checked" 2 "'zz:1' is not a PCI address" "$check" zz:1
expect "worker-check: a value is missing" 2 "--payload needs a value" "$check" --payload
expect "worker-check: a missing interface fails the required MTU check" 1 "FAIL  mtu" "$check" --interface no-such-if0
python3 - "$check" <<'PY' || fail "worker-check --json"
import json, subprocess, sys
run = subprocess.run(["bash", sys.argv[1], "--json", "--interface", "no-such-if0", "--payload", "356"],
                     capture_output=True, text=True, timeout=60)
report = json.loads(run.stdout)
checks = {check["check"]: check for check in report["checks"]}
assert run.returncode == 1 and report["passed"] is False and report["failed_required"] >= 1, report
assert checks["mtu"]["status"] == "fail" and checks["mtu"]["level"] == "required", checks["mtu"]
assert checks["gpu"]["level"] == "optional" and checks["gpu"]["status"] in ("pass", "info"), checks["gpu"]
assert all(check["status"] in ("pass", "fail", "warn", "info") for check in report["checks"])
PY
expect "worker-check: loopback's MTU fits P = 2048" 0 "PASS  mtu" "$check" --interface lo --payload 2048
expect "worker-check: every server of a switch list needs a route" 1 "FAIL  switch     (required) no-such-host.invalid:4243: no route" \
  "$check" --switch 127.0.0.1:4242,no-such-host.invalid:4243

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "all script checks passed"
