#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Keeps src/'s folders layered (ctest: include_layers).

Each folder of src/ has a layer; a file may include headers of its own folder and of folders of
lower layers only, so every include points down and no two folders include each other:

    common  <-  protocol  <-  quant  <-  transport  <-  engine, switch  <-  api  <-  tools

engine and switch stand side by side (the worker and the software switch share the protocol, the
quantiser and the transports, never each other). The public headers under include/dpa/ are the
library's interface and may be included from every layer; they include nothing under src/.

The PyTorch backend's python/csrc/ is layered the same way (module.cpp, at its root, on top):

    job, cuda  <-  run  <-  c10d

job (the switch, sizing, keys) and cuda (device copies, kernels, staging memory) side by side;
run (operations through libdpa, their works) above them; c10d (the backend, its collectives).
Prints every include that breaks the order, with its file and line, and exits 1 if there is one.
"""
import argparse
import re
import sys
from pathlib import Path

LAYERS = {"common": 0, "protocol": 1, "quant": 2, "transport": 3, "engine": 4, "switch": 4, "api": 5, "tools": 6}
CSRC_LAYERS = {"job": 0, "cuda": 0, "run": 1, "c10d": 2}
SOURCE_SUFFIXES = {".cpp", ".hpp", ".h", ".cc", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def folder_of(path, src):
    return path.relative_to(src).parts[0]


def layered_tree(root, tree, layers):
    """Every include in `tree`'s folders that does not point to a lower layer."""
    found = []
    unknown = sorted({folder_of(path, tree) for path in tree.iterdir() if path.is_dir()} - set(layers))
    for folder in unknown:
        found.append(f"{tree.relative_to(root)}/{folder}/ has no layer: give it one in tests/structure/include_layers.py")
    for path in sorted(tree.rglob("*")):
        if path.suffix not in SOURCE_SUFFIXES or not path.is_file() or path.parent == tree:
            continue
        here = folder_of(path, tree)
        if here not in layers:
            continue
        text = path.read_text(encoding="utf-8")
        for match in INCLUDE.finditer(text):
            target = match.group(1).split("/")[0]
            if target == here or target not in layers:
                continue
            if layers[target] >= layers[here]:
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(root)}:{line}: {tree.relative_to(root)}/{here}/ (layer {layers[here]}) "
                             f"includes \"{match.group(1)}\" of {tree.relative_to(root)}/{target}/ (layer {layers[target]}): "
                             "includes must point to a lower layer")
    return found


def violations(root):
    found = layered_tree(root, root / "src", LAYERS) + layered_tree(root, root / "python" / "csrc", CSRC_LAYERS)
    for path in sorted((root / "include").rglob("*")):
        if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        for match in INCLUDE.finditer(text):
            if match.group(1).split("/")[0] in LAYERS:
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(root)}:{line}: a public header includes \"{match.group(1)}\" from src/")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[2], help="the repository's root")
    args = parser.parse_args()
    found = violations(args.source.resolve())
    for problem in found:
        print(f"include_layers: {problem}")
    print(f"include_layers: {len(found)} include(s) against the layers")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
