#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
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

3. Every tool's flags are documented. Each option of dpa-switch, dpa-bench, dpa-switch-ctl,
   dpa-p4gen, the Python modules and the scripts (one option with its aliases, "-n, --ranks") must
   be shown somewhere in the docs for that tool: after its name in a command, or in a table under a
   heading (or on a page titled) that names it. And where such a table has a "default" column, its
   default must be the one the tool prints in --help ("[4242]") or its argparse default= says.

4. CMake options. Every option() of CMakeLists.txt and every DPA_* cache variable under cmake/,
   src/, python/ and tests/ has a row in the one table whose first header is "CMake option" (in
   docs/configuration.md; no other page has such a table), with the default the code gives.

5. Configs. Every configs/*.json parses as strict JSON (no comments, no duplicate keys) and loads
   through the real parser of the program that reads it: a Tofino config ("switch" holds
   "tofino") through dpa-p4gen and the controller's config.load, a switch config ("sessions", or
   "switch" an object) through dpa::SwitchConfig, any other through dpa::Config (config_check).
"""
import argparse
import ast
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

TOOL_BINARIES = ("dpa-switch", "dpa-bench", "dpa-p4gen", "dpa-switch-ctl")
PYTHON_MODULES = {"dpa.bench": "python/dpa/tools/bench.py", "dpa.demo": "python/dpa/tools/demo.py",
                  "dpa.train": "python/dpa/tools/train.py", "gloo-baseline.py": "scripts/gloo-baseline.py"}
# Flags every tool has and that the docs describe once for all (docs/configuration.md).
COMMON_FLAGS = {"-h", "--help", "--version"}
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


class Options:
    """A tool's options: groups of spellings ({"-n", "--ranks"}) and each group's default, if known."""

    def __init__(self):
        self.groups = []  # [(frozenset of spellings, default text or None)]

    def add(self, spellings, default=None):
        spellings = frozenset(spellings)
        if spellings:
            self.groups.append((spellings, default))

    def __contains__(self, flag):
        return any(flag in spellings for spellings, _ in self.groups)

    def default_of(self, flag):
        return next((default for spellings, default in self.groups if flag in spellings), None)


def help_options(binary, arguments=()):
    """The options that the binary's --help lists (CLI11: "  --port UINT=4242  description"), with
    the default CLI11 prints after "="; subcommands' options too."""
    result = subprocess.run([binary, *arguments, "--help"], capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{binary} --help exited with {result.returncode}: {result.stderr.strip()}")
    options = Options()
    in_subcommands = False
    subcommands = []
    for line in result.stdout.splitlines():
        if line.strip().upper().startswith("SUBCOMMANDS"):
            in_subcommands = True
            continue
        if in_subcommands and re.match(r"^\s+[a-z][\w-]*\s", line):
            subcommands.append(line.split()[0])
            continue
        option = line.strip().split("  ")[0]
        if option.startswith("-"):
            names = option.split()[0]
            default = re.search(r"=(\S+)$", option)
            options.add(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", names), default.group(1) if default else None)
    for subcommand in subcommands if not arguments else ():
        for spellings, default in help_options(binary, [subcommand]).groups:
            options.add(spellings, default)
    return options


def help_flags(binary):
    """Every -x / --xyz that the binary's --help lists."""
    return {flag for spellings, _ in help_options(binary).groups for flag in spellings}


def script_options(path):
    """The flags of a script's `case` arms: lines such as `  -n|--ranks) ...`, one group per arm."""
    options = Options()
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\s*([-\w|\"' *]+)\)", line)
        if match:
            spellings = {pattern.strip().strip("\"'") for pattern in match.group(1).split("|")}
            options.add({flag for flag in spellings if re.fullmatch(r"--?[A-Za-z][\w-]*", flag)})
    return options


def literal_default(call):
    """An add_argument call's default=, as the docs would write it, when it is a literal."""
    for keyword in call.keywords:
        if keyword.arg == "default":
            try:
                value = ast.literal_eval(keyword.value)
            except ValueError:
                return None
            return None if value is None or isinstance(value, bool) else str(value)
    if any(keyword.arg == "action" and getattr(keyword.value, "value", None) == "store_true"
           for keyword in call.keywords):
        return None
    return None


def module_options(path):
    """The options of a Python tool: every add_argument (or a helper named add) with string flags."""
    options = Options()
    options.add({"-h", "--help"})
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                "add_argument", "add"):
            spellings = {arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                         and re.fullmatch(r"--?[A-Za-z][\w-]*", arg.value)}
            options.add(spellings, literal_default(node))
    return options


def known_options(root, binaries, problems):
    known = {}
    for name, binary in binaries.items():
        try:
            known[name] = help_options(binary)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as error:
            problems.append(f"{name} --help could not be read: {error}")
            known[name] = Options()
    for module, source in PYTHON_MODULES.items():
        known[module] = module_options(root / source)
    for script in sorted((root / "scripts").glob("*.sh")):
        known[script.name] = script_options(script)
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


def headings(text):
    """Line number -> the text of the nearest heading at or above it (the page's title first)."""
    current, found = "", []
    for line in text.splitlines():
        if line.startswith("#"):
            current = line
        found.append(current)
    return found


def tool_named(text, known):
    """The known tool that a heading or title names (the longest name, so dpa-switch-ctl beats
    dpa-switch), or None."""
    names = [tool for tool in known if re.search(r"(?<![\w-])" + re.escape(tool) + r"(?![\w-])", text)]
    return max(names, key=len) if names else None


def plain_default(cell):
    return cell.replace("`", "").strip().lower()


def same_default(documented, actual):
    """A documented default ("4242", "`1`", "10000 (10 s)") against the tool's ("4242", "3600.0")."""
    actual = plain_default(actual).strip("\"'")
    first = re.split(r"[\s,;(]", documented, maxsplit=1)[0].strip("\"'")
    try:
        return float(first) == float(actual)
    except ValueError:
        return documented.startswith(actual)


def check_flags(root, binaries, problems):
    """Flags the docs show exist (and their documented defaults are the tools'); returns how many
    were checked and the (tool, flag) pairs shown."""
    known = known_options(root, binaries, problems)
    checked = 0
    shown = set()
    for path in markdown_files(root):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        where = relative(path, root)
        page_title = next((line for line in text.splitlines() if line.startswith("# ")), "")
        for command, line in commands(text):
            for tool, flag in shown_flags(command, known):
                checked += 1
                shown.add((tool, flag))
                if flag not in known[tool]:
                    problems.append(f"flag {flag} of {tool} is shown in {where}:{line} (`{command.strip()[:80]}`) "
                                    f"but {tool} has no such flag")
        above = headings(text)
        for command, line in commands(text):
            section_tool = tool_named(above[line - 1], known) or tool_named(page_title, known)
            if section_tool is not None:
                for flag in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", command):
                    if flag in known[section_tool]:
                        shown.add((section_tool, flag))
        for header, cells, line in table_rows(text):
            titles = [plain(title) for title in header]
            for column, title in enumerate(header):
                title_tool = next((tool for tool in known if tool in title and "flag" in title.lower()), None)
                if title_tool is None and column == 0 and titles[0] in ("flag", "option"):
                    title_tool = tool_named(above[line - 1], known) or tool_named(page_title, known)
                if title_tool is None or column >= len(cells):
                    continue
                flags = re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", cells[column].replace("`", " "))
                for flag in flags:
                    checked += 1
                    shown.add((title_tool, flag))
                    if flag not in known[title_tool]:
                        problems.append(f"flag {flag} of {title_tool} is listed in {where}:{line} "
                                        f"but {title_tool} has no such flag")
                if "default" in titles and flags:
                    documented = plain_default(cells[titles.index("default")])
                    actual = known[title_tool].default_of(flags[0])
                    if actual is not None and documented and not same_default(documented, actual):
                        problems.append(f"default of {flags[0]} of {title_tool} is \"{documented}\" in {where}:{line} "
                                        f"but {title_tool} says {actual}")
    for tool, options in sorted(known.items()):
        for spellings, _ in options.groups:
            if spellings & COMMON_FLAGS or any((tool, flag) in shown for flag in spellings):
                continue
            problems.append(f"option {', '.join(sorted(spellings))} of {tool} is documented nowhere: show it in a "
                            f"command after {tool} or in a flag table under a heading that names {tool}")
    return checked


CMAKE_OPTION = re.compile(r"\boption\(\s*(DPA_\w+)\s+\"[^\"]*\"\s+(ON|OFF)\s*\)")
CMAKE_CACHE = re.compile(r"\bset\(\s*(DPA_\w+)\s+(\"[^\"]*\"|\S+)\s+CACHE\s")


def check_cmake_options(root, problems):
    """Every option() and DPA_* cache variable has its row, with its default, in the one "CMake
    option" table."""
    declared = {}
    for path in [root / "CMakeLists.txt", *sorted(root.glob("cmake/*.cmake")), *sorted(root.glob("src/**/CMakeLists.txt")),
                 root / "python" / "CMakeLists.txt", root / "tests" / "CMakeLists.txt"]:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        for match in CMAKE_OPTION.finditer(text):
            declared[match.group(1)] = match.group(2)
        for match in CMAKE_CACHE.finditer(text):
            declared.setdefault(match.group(1), match.group(2).strip('"'))
    tables = []
    for path in markdown_files(root):
        if path.is_file():
            rows = {}
            for header, cells, line in table_rows(path.read_text(encoding="utf-8")):
                if plain(header[0]) == "cmake option" and cells:
                    rows[cells[0].replace("`", "").strip()] = (cells[1] if len(cells) > 1 else "", line)
            if rows:
                tables.append((relative(path, root), rows))
    if [where for where, _ in tables] != ["docs/configuration.md"]:
        problems.append(f"the CMake options belong in one table, in docs/configuration.md; tables whose first header "
                        f"is \"CMake option\" are in: {', '.join(where for where, _ in tables) or 'no page'}")
    rows = dict(item for _, table in tables for item in table.items())
    for name, default in sorted(declared.items()):
        if name not in rows:
            problems.append(f"CMake option {name} (default {default or 'empty'}) has no row in the CMake option table")
            continue
        documented, line = rows[name]
        documented = documented.replace("`", "").strip()
        if default in ("ON", "OFF") and documented != default:
            problems.append(f"CMake option {name} defaults to {default} but docs/configuration.md:{line} says {documented}")
        elif default and default not in ("ON", "OFF") and not documented.startswith(default):
            problems.append(f"CMake option {name} defaults to {default} but docs/configuration.md:{line} says {documented}")
    return len(declared)


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
    cmake_options = check_cmake_options(root, problems)
    configs = check_configs(root, binaries, args.config_check, problems)
    for problem in problems:
        print(f"docs_in_step: {problem}")
    print(f"docs_in_step: {read} variables read, {documented} in docs/configuration.md; {flags} flags shown "
          f"in the docs; {cmake_options} CMake options; {configs} configs; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
