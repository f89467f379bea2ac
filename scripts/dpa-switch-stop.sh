#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Stops what dpa-switch-start.sh started: the controller, bf_switchd and the tofino-model in the
# tmux session (default "dpa-switch"):
#
#   dpa-switch-stop.sh
#
# Each window gets Ctrl-C; once bf_switchd's status port (DPA_SWITCHD_PORT, 7777) has closed, or
# after DPA_STOP_TIMEOUT_S seconds (default 30), the session is killed. The kernel module stays
# loaded (the next start reuses it). DPA_TMUX_SESSION names the session.
#
# Exit status: 0 stopped (or nothing was running), 1 when bf_switchd still listens afterwards,
# 2 usage error.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/dpa-switch-common.sh"
dpa_help_or_version "$@"
(($# == 0)) || dpa_usage_error "takes no arguments"
timeout_s="${DPA_STOP_TIMEOUT_S:-30}"
[[ "$timeout_s" =~ ^[0-9]+$ ]] || dpa_usage_error "DPA_STOP_TIMEOUT_S=$timeout_s is not a number of seconds"
dpa_require_tool "tmux" tmux "apt-get install tmux"

if ! tmux has-session -t "$DPA_TMUX_SESSION" 2>/dev/null; then
  echo "no tmux session $DPA_TMUX_SESSION: nothing to stop"
  exit 0
fi
for window in controller switchd model; do
  tmux send-keys -t "$DPA_TMUX_SESSION:$window" C-c 2>/dev/null || true
done
started=$SECONDS
while dpa_switchd_listening && ((SECONDS - started < timeout_s)); do sleep 1; done
tmux kill-session -t "$DPA_TMUX_SESSION" 2>/dev/null || true
if dpa_switchd_listening; then
  dpa_fail "stopped the session $DPA_TMUX_SESSION, but port $DPA_SWITCHD_PORT is still open: a bf_switchd outlives it (ss -ltnp 'sport = :$DPA_SWITCHD_PORT' names it)"
fi
echo "stopped $DPA_TMUX_SESSION"
