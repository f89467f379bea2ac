# SPDX-License-Identifier: Apache-2.0
"""scripts/gloo-baseline.py: every result checked against the exact sum (its self-check makes one
wrong element per size and exit status 1), the slowest rank's times in the JSON, the common flags
(-n/--ranks, --sizes, --iterations, --warmup, --json, --version) and exit status 2 for a usage
error."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gloo-baseline.py"
SMALL = ["-n", "2", "--sizes", "4KiB,64KiB", "--iterations", "3", "--warmup", "1"]


def run_script(*arguments, timeout=120):
    return subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, timeout=timeout)


def test_every_result_is_verified(tmp_path):
    output = tmp_path / "gloo.json"
    result = run_script(*SMALL, "--json", str(output))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads(output.read_text())
    assert [row["bytes"] for row in rows] == [4096, 65536]
    for row in rows:
        assert row["wrong"] == 0 and row["ranks"] == 2 and row["iterations"] == 3
        assert 0 < row["p50_us"] <= row["p99_us"]


def test_the_self_check_finds_one_wrong_element_per_size(tmp_path):
    output = tmp_path / "gloo.json"
    result = run_script(*SMALL, "--inject-wrong", "--json", str(output))
    assert result.returncode == 1, result.stdout + result.stderr
    assert [row["wrong"] for row in json.loads(output.read_text())] == [1, 1]
    assert "2 wrong elements" in result.stderr


def test_usage_errors_exit_2_and_name_the_option():
    result = run_script("--ranks", "0", timeout=60)
    assert result.returncode == 2
    assert "-n/--ranks" in result.stderr
    result = run_script("--sizes", "4XB", timeout=60)
    assert result.returncode == 2
    assert "--sizes" in result.stderr


def test_version_comes_from_the_repository():
    result = run_script("--version", timeout=60)
    version = (SCRIPT.parents[1] / "VERSION").read_text().strip()
    assert result.returncode == 0 and result.stdout.strip() == f"gloo-baseline.py {version}"
