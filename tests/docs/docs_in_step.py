#!/usr/bin/env python3
"""Keeps the documentation and the code in step (ctest: docs_in_step).

Three checks, each reporting exactly what is missing and where:

1. Environment variables. A DPA_* variable counts as *read* when the code under src/, include/,
   python/, scripts/ or p4/ passes its name as a string literal to one of the readers below, or a
   shell script expands it with a default (${DPA_X:-...}) or uses it without ever assigning it:
     C++     getenv, env_string, env_integer, env_flag, env_choice, check_env_choice, apply_env,
             is_set ("DPA_X", ...)
     Python  os.environ.get("DPA_X"), os.getenv("DPA_X"), os.environ["DPA_X"] (not assigned),
             "DPA_X" in os.environ, _environment("DPA_X") (the controller's bfshell entry)
     shell   ${DPA_X:-...} ${DPA_X-...} ${DPA_X:?...} ${DPA_X:+...}, or $DPA_X never assigned
   A variable counts as *documented* when it appears in the first column of a table whose first
   header cell is "variable" in docs/configuration.md. Every variable read must be documented
   there, and every DPA_* variable in such a table (in README.md or any docs/*.md) must be read.
   Names that are not environment variables (CMake options, P4 defines) belong in tables with
   another first header ("CMake option", "define").

2. Flags. Every flag the docs show for dpa-switch, dpa-bench, dpa-p4gen, python -m dpa.bench /
   dpa.demo or a script under scripts/ must exist. Shown means: in a command line of a fenced
   code block or an inline code span, after the tool's name (until |, ;, &, #, a redirection or
   the end of the command; after `--`, dpa-bench-memif.sh's arguments are dpa-bench's), or in a
   table column whose header names the tool and says "flag" ("`dpa-switch` flag"). Existing means:
   listed by the binary's --help, an add_argument of the Python module, or a `case` arm of the
   script's argument loop (scripts are not run: some of them install packages).

3. Configs. Every configs/*.json parses as strict JSON (no comments, no duplicate keys) and loads
   through the real parser of the program that reads it: a Tofino config ("switch" holds
   "tofino") through dpa-p4gen and the controller's config.load, a switch config ("sessions", or
   "switch" an object) through dpa::SwitchConfig, any other through dpa::Config (config_check).
"""
import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

CODE_DIRS = ("src", "include", "python", "scripts", "p4")
CPP_SUFFIXES = {".cpp", ".hpp", ".h", ".cc", ".cu", ".cuh", ".in"}
VARIABLE = r"(DPA_[A-Z0-9_]+)"
CPP_READ = re.compile(r"\b(?:getenv|env_string|env_integer|env_flag|env_choice|check_env_choice|apply_env|is_set)"
                      r"\(\s*\"" + VARIABLE + r"\"")
PY_READS = (
    re.compile(r"os\.environ\.get\(\s*[\"']" + VARIABLE + r"[\"']"),
    re.compile(r"os\.getenv\(\s*[\"']" + VARIABLE + r"[\"']"),
    re.compile(r"os\.environ\[\s*[\"']" + VARIABLE + r"[\"']\s*\](?!\s*=[^=])"),
    re.compile(r"[\"']" + VARIABLE + r"[\"']\s+in\s+os\.environ"),
    re.compile(r"\b_environment\(\s*[\"']" + VARIABLE + r"[\"']\s*\)"),
)
SH_DEFAULTED = re.compile(r"\$\{" + VARIABLE + r"(?::?[-?+=])")
SH_USE = re.compile(r"\$\{?" + VARIABLE + r"\b")
SH_ASSIGN = re.compile(r"(?:^|[\s;(])(?:export\s+|local\s+|readonly\s+)?" + VARIABLE + r"=")

TOOL_BINARIES = ("dpa-switch", "dpa-bench", "dpa-p4gen")
PYTHON_MODULES = {"dpa.bench": "python/dpa/bench.py", "dpa.demo": "python/dpa/demo.py",
                  "dpa.train": "python/dpa/train.py"}
PASS_THROUGH = {"dpa-bench-memif.sh": "dpa-bench", "dpa-bench-servers.sh": "dpa-bench"}  # arguments after `--` go to this tool
COMMAND_END = re.compile(r"^(\||;|&|#|>|<|\d>|\$\()")


def relative(path, root):
    return str(path.relative_to(root))


def code_files(root):
    for top in CODE_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                yield path


def variables_read(root):
    """DPA_* name -> ["file:line", ...] of the places that read it."""
    reads = {}

    def note(name, path, text, offset):
        line = text.count("\n", 0, offset) + 1
        reads.setdefault(name, []).append(f"{relative(path, root)}:{line}")

    shell_files = []
    for path in code_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if path.suffix in CPP_SUFFIXES:
            for match in CPP_READ.finditer(text):
                note(match.group(1), path, text, match.start())
        elif path.suffix == ".py":
            for pattern in PY_READS:
                for match in pattern.finditer(text):
                    note(match.group(1), path, text, match.start())
        elif path.suffix == ".sh" or text.startswith("#!/usr/bin/env bash") or text.startswith("#!/bin/bash"):
            shell_files.append((path, text))
    # A shell variable that some script assigns is that script's own (or passed on to a child,
    # whose reader is checked in its own language); one expanded with a default is an input.
    assigned = {match.group(1) for _, text in shell_files for match in SH_ASSIGN.finditer(text)}
    for path, text in shell_files:
        for match in SH_DEFAULTED.finditer(text):
            note(match.group(1), path, text, match.start())
        for match in SH_USE.finditer(text):
            if match.group(1) not in assigned:
                note(match.group(1), path, text, match.start())
    return reads


def markdown_files(root):
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


def table_rows(text):
    """Yields (header cells, row cells, line number) for every body row of every table."""
    header = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", stripped.strip("|"))]  # not at \|
        if header is None:
            header = cells
        elif all(re.fullmatch(r":?-{3,}:?", cell) for cell in cells if cell):
            continue
        else:
            yield header, cells, number


def plain(cell):
    return cell.replace("`", "").strip().lower()


def documented_variables(path):
    """DPA_* name -> line, from tables whose first header cell is "variable"."""
    found = {}
    for header, cells, number in table_rows(path.read_text(encoding="utf-8")):
        if plain(header[0]) == "variable" and cells:
            for name in re.findall(VARIABLE, cells[0]):
                found.setdefault(name, number)
    return found


def check_variables(root, problems):
    reads = variables_read(root)
    configuration = root / "docs" / "configuration.md"
    if not configuration.is_file():
        problems.append("docs/configuration.md is missing: it must list every DPA_* variable the code reads")
        return 0, 0
    in_configuration = documented_variables(configuration)
    for name in sorted(set(reads) - set(in_configuration)):
        problems.append(f"variable {name} is read ({', '.join(reads[name][:3])}) but has no row in a "
                        "\"variable\" table of docs/configuration.md")
    for path in markdown_files(root):
        if not path.is_file():
            continue
        for name, line in sorted(documented_variables(path).items()):
            if name not in reads:
                problems.append(f"variable {name} is documented ({relative(path, root)}:{line}) but nothing under "
                                f"{', '.join(CODE_DIRS)} reads it (a reader this test does not know belongs in "
                                "CPP_READ or PY_READS of tests/docs/docs_in_step.py)")
    return len(reads), len(in_configuration)


def help_flags(binary):
    """Every -x / --xyz that the binary's --help lists: an option line's text before its description."""
    result = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{binary} --help exited with {result.returncode}: {result.stderr.strip()}")
    flags = set()
    for line in result.stdout.splitlines():
        option = line.strip().split("  ")[0]
        if option.startswith("-"):
            flags.update(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", option))
    return flags


def script_flags(path):
    """The flags of a script's `case` arms: lines such as `  -n|--ranks) ...`."""
    flags = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\s*([-\w|\"' *]+)\)", line)
        if match:
            for pattern in match.group(1).split("|"):
                pattern = pattern.strip().strip("\"'")
                if re.fullmatch(r"--?[A-Za-z][\w-]*", pattern):
                    flags.add(pattern)
    return flags


def module_flags(path):
    text = path.read_text(encoding="utf-8")
    flags = {"-h", "--help"}
    for call in re.finditer(r"(?:add_argument|\badd)\(([^)]*)", text):
        flags.update(re.findall(r"[\"'](--?[A-Za-z][\w-]*)[\"']", call.group(1)))
    return flags


def known_flags(root, binaries, problems):
    known = {}
    for name, binary in binaries.items():
        try:
            known[name] = help_flags(binary)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as error:
            problems.append(f"{name} --help could not be read: {error}")
            known[name] = set()
    for module, source in PYTHON_MODULES.items():
        known[module] = module_flags(root / source)
    for script in sorted((root / "scripts").glob("*.sh")):
        known[script.name] = script_flags(script)
    return known


def commands(text):
    """Yields (command line, line number) from fenced code blocks (continuations joined) and
    inline code spans of a markdown text."""
    fence = None
    pending, pending_line = "", 0
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            if fence is None:
                fence = stripped[3:].strip().lower()
            else:
                if pending:
                    yield pending, pending_line
                fence, pending = None, ""
            continue
        if fence is not None:
            if fence in ("python", "cpp", "c++", "cmake", "json", "text"):
                continue
            if not pending:
                pending_line = number
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            yield pending + stripped, pending_line
            pending = ""
            continue
        for span in re.findall(r"`([^`]+)`", line):
            yield span, number


def shown_flags(command, known):
    """(tool, flag) pairs that a command line shows."""
    tool = None
    shown = []
    for token in command.split():
        token = token.strip("\"'")
        if COMMAND_END.match(token):
            tool = None
            continue
        name = token.rsplit("/", 1)[-1]
        if name in known:
            tool = name
            continue
        if tool is None:
            continue
        if token == "--":
            tool = PASS_THROUGH.get(tool)
            continue
        if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", token):
            shown.append((tool, token.split("=", 1)[0]))
    return shown


def check_flags(root, binaries, problems):
    known = known_flags(root, binaries, problems)
    checked = 0
    for path in markdown_files(root):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        where = relative(path, root)
        for command, line in commands(text):
            for tool, flag in shown_flags(command, known):
                checked += 1
                if flag not in known[tool]:
                    problems.append(f"flag {flag} of {tool} is shown in {where}:{line} (`{command.strip()[:80]}`) "
                                    f"but {tool} has no such flag")
        for header, cells, line in table_rows(text):
            for column, title in enumerate(header):
                title_tool = next((tool for tool in known if tool in title and "flag" in title.lower()), None)
                if title_tool is None or column >= len(cells):
                    continue
                for flag in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", cells[column].replace("`", " ")):
                    checked += 1
                    if flag not in known[title_tool]:
                        problems.append(f"flag {flag} of {title_tool} is listed in {where}:{line} "
                                        f"but {title_tool} has no such flag")
    return checked


def unique_keys(pairs):
    keys = [key for key, _ in pairs]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise ValueError(f"duplicate key(s) {', '.join(duplicates)}")
    return dict(pairs)


def reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def check_configs(root, binaries, config_check, problems):
    sys.path.insert(0, str(root / "p4" / "controller"))
    from dpa_controller import config as controller_config  # noqa: E402 (the controller's own parser)

    paths = sorted((root / "configs").glob("*.json"))
    for path in paths:
        where = relative(path, root)
        try:
            data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=unique_keys,
                              parse_constant=reject_constant)
        except ValueError as error:
            problems.append(f"config {where} is not strict JSON: {error}")
            continue
        if not isinstance(data, dict):
            problems.append(f"config {where}: the top level is not an object")
            continue
        switch = data.get("switch")
        if isinstance(switch, dict) and "tofino" in switch:
            defines = subprocess.run([binaries["dpa-p4gen"], str(path)], capture_output=True, text=True,
                                     timeout=60, check=False)
            if defines.returncode != 0:
                problems.append(f"config {where} is refused by dpa-p4gen: {defines.stderr.strip()}")
                continue
            try:
                controller_config.load(path.read_text(encoding="utf-8"), defines.stdout)
            except controller_config.ConfigError as error:
                problems.append(f"config {where} is refused by the controller's config.load: {error}")
            continue
        kind = "switch" if "sessions" in data or isinstance(switch, dict) else "worker"
        result = subprocess.run([config_check, kind, str(path)], capture_output=True, text=True, timeout=60,
                                check=False)
        if result.returncode != 0:
            problems.append(f"config {where} is refused by the {kind} config parser: {result.stderr.strip()}")
    return len(paths)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, type=Path, help="the repository's root")
    parser.add_argument("--config-check", required=True, help="tests/docs/config_check binary")
    for binary in TOOL_BINARIES:
        parser.add_argument(f"--{binary}", required=True, help=f"the {binary} binary")
    args = parser.parse_args()
    root = args.source.resolve()
    binaries = {binary: getattr(args, binary.replace("-", "_")) for binary in TOOL_BINARIES}

    problems = []
    read, documented = check_variables(root, problems)
    flags = check_flags(root, binaries, problems)
    configs = check_configs(root, binaries, args.config_check, problems)
    for problem in problems:
        print(f"docs_in_step: {problem}")
    print(f"docs_in_step: {read} variables read, {documented} in docs/configuration.md; {flags} flags shown "
          f"in the docs; {configs} configs; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
