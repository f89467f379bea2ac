# SPDX-License-Identifier: Apache-2.0
# Sourced by every dpa script: --help and --version, and one exit-code convention:
# 0 success, 1 runtime failure (something on the machine is missing or failed), 2 usage error
# (the command line or a file named on it is wrong). --help and --version change nothing.

DPA_SCRIPT_NAME="$(basename "$0")"
DPA_SCRIPTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# The version: the repository's VERSION (source tree) or share/dpa/VERSION (installed).
dpa_version() {
  local file
  for file in "$DPA_SCRIPTS_DIR/../VERSION" "$DPA_SCRIPTS_DIR/../share/dpa/VERSION"; do
    if [[ -r "$file" ]]; then
      head -n 1 "$file"
      return
    fi
  done
  echo "unknown (no VERSION beside $DPA_SCRIPTS_DIR)"
}

# The usage: the script's leading comment block, after the shebang.
dpa_usage() {
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"
}

# Answers --help / -h and --version wherever they appear before "--", and exits 0 without doing
# anything else. Every script calls it first, with all its arguments.
dpa_help_or_version() {
  local argument
  for argument in "$@"; do
    case "$argument" in
      --) return ;;
      -h | --help) dpa_usage; exit 0 ;;
      --version) echo "$DPA_SCRIPT_NAME $(dpa_version)"; exit 0 ;;
    esac
  done
}

dpa_usage_error() {
  echo "$DPA_SCRIPT_NAME: $*" >&2
  echo "($DPA_SCRIPT_NAME --help shows the usage)" >&2
  exit 2
}

dpa_fail() {
  echo "$DPA_SCRIPT_NAME: $*" >&2
  exit 1
}

# The value of the option in $1, called with the remaining arguments ("$@"): $2, or a usage
# error when there is none.
dpa_option_value() {
  [[ $# -ge 2 && -n "$2" && "$2" != --* ]] || dpa_usage_error "$1 needs a value"
  printf '%s' "$2"
}

# The port a dpa-switch started with --port-file FILE (process PID, output in LOG) listens on,
# printed once the file is written: bounded at 20 s, and failing at once, with the switch's
# output, when the process ends first.
dpa_switch_port() {
  local file=$1 pid=$2 log=$3 tries
  for ((tries = 0; tries < 400; ++tries)); do
    [[ -s "$file" ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if [[ ! -s "$file" ]]; then
    cat "$log" >&2
    dpa_fail "dpa-switch did not start (its output is above)"
  fi
  head -n 1 "$file"
}
