#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 51's attack table at full length (docs/security.md): each storm runs 20 s while 4-rank jobs
# join one after another, each within 2 s, then the packet-level rows (a LEAVE without the rank's
# tag, forged data). Prints one line per row and exits non-zero if any row fails.
#   tests/storm/attack_table.sh BUILD_DIR
set -euo pipefail
build="${1:?usage: attack_table.sh BUILD_DIR}"
status=0
export DPA_STORM_SECONDS=20 DPA_STORM_JOIN_TIMEOUT_MS=2000
timeout 300 "$build/tests/storm/join_storm_test" --gtest_filter='Issue51/AttackTable.*' | grep -E '^\[ +(OK|FAILED) +\]|jobs of|failed as expected' || status=1
timeout 120 "$build/tests/auth_test" \
  --gtest_filter='AdmissionOnlySwitch.*:AuthenticatedSwitch.AForgedContributionFromAMembersOwnSocketIsDroppedAndCounted' |
  grep -E '^\[ +(OK|FAILED) +\]' || status=1
exit "$status"
