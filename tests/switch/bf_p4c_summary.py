#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Prints the resource summary of one bf-p4c output directory (compiled with -g): per MAU stage
the logical tables, input crossbar bytes, hash bits, gateways, SRAMs, map RAMs, TCAMs, stateful
(meter) ALUs and VLIW instructions from logs/resources.json, and the PHV containers allocated per
type and width from logs/phv.json. Exits 1 when a table sits in a stage the target does not have
(p4c-barefoot writes such a placement without an error; the assembler would reject it).
Usage: bf_p4c_summary.py OUT_DIR"""
import collections
import json
import pathlib
import sys


def find_log(out_dir, name):
    matches = sorted(out_dir.glob(f"**/logs/{name}"))
    if not matches:
        sys.exit(f"{out_dir}: no logs/{name} (was the program compiled with -g?)")
    return matches[0]


def count(stage, key, items):
    return len(stage.get(key, {}).get(items, []))


def used_instructions(stage):
    return sum(1 for instruction in stage.get("vliw", {}).get("instructions", [])
               if instruction.get("color_usages"))


COLUMNS = ("tables", "xbar bytes", "hash bits", "gateways", "SRAMs", "map RAMs", "TCAMs",
           "stateful ALUs", "VLIW")


def print_stages(resources):
    mau = resources["resources"]["mau"]
    rows = []
    for stage in mau["mau_stages"]:
        rows.append((stage["stage_number"], count(stage, "logical_tables", "ids"),
                     count(stage, "xbar_bytes", "bytes"), count(stage, "hash_bits", "bits"),
                     count(stage, "gateways", "gateways"), count(stage, "rams", "srams"),
                     count(stage, "map_rams", "maprams"), count(stage, "tcams", "tcams"),
                     count(stage, "meter_alus", "meters"), used_instructions(stage)))
    used = [row for row in rows if any(row[1:])]
    print(f"  MAU stages used: {len(used)} of {mau['nStages']}")
    fits = not used or used[-1][0] < mau["nStages"]
    widths = [max(len(name), 4) for name in COLUMNS]
    print("  stage " + " ".join(name.rjust(width) for name, width in zip(COLUMNS, widths)))
    for row in used:
        print(f"  {row[0]:>5} " + " ".join(str(v).rjust(width) for v, width in zip(row[1:], widths)))
    totals = [sum(column) for column in zip(*(row[1:] for row in rows))]
    print("  total " + " ".join(str(v).rjust(width) for v, width in zip(totals, widths)))
    if not fits:
        print(f"  DOES NOT FIT: stage {used[-1][0]} is beyond the target's {mau['nStages']} stages")
    return fits


def print_phv(phv):
    used = collections.Counter()
    for container in phv["containers"]:
        used[(container["container_type"], container["bit_width"], container["gress"])] += 1
    for kind in ("normal", "tagalong", "mocha", "dark"):
        widths = sorted({width for (k, width, _) in used if k == kind})
        if widths:
            text = ", ".join(
                f"{width}-bit {used[(kind, width, 'ingress')]} ingress + "
                f"{used[(kind, width, 'egress')]} egress" for width in widths)
            print(f"  PHV {kind} containers: {text}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bf_p4c_summary.py OUT_DIR")
    out_dir = pathlib.Path(sys.argv[1])
    fits = print_stages(json.loads(find_log(out_dir, "resources.json").read_text()))
    print_phv(json.loads(find_log(out_dir, "phv.json").read_text()))
    sys.exit(0 if fits else 1)


if __name__ == "__main__":
    main()
