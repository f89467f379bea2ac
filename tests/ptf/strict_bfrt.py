# SPDX-License-Identifier: Apache-2.0
"""A fake of bfshell's `bfrt` that rejects every table, register, counter, value set and action
path the P4 program does not define, and every table entry whose key or action-data names are
not the table's: the names are read from p4/*.p4 (each control's tables with their keys and
actions, the actions' parameters, registers, counters, value sets and the controls it
instantiates), so a controller call that bfrt would refuse on the switch fails here first.
A key's bfrt name is its @name, else the field's last component; a ternary key also takes
`<name>_mask`, a range key `<name>_start` and `<name>_end` instead of `<name>`."""

import re
import sys
from pathlib import Path

P4_DIR = Path(__file__).resolve().parents[2] / "p4"
sys.path.insert(0, str(P4_DIR / "controller" / "tests"))
import fake_bfrt  # noqa: E402

# bfrt objects outside the program that the controller uses (fixed by the SDE).
FIXED = {"port.port": {"add", "clear"}, "port.port_hdl_info": {"get"},
         "pre.mgid": {"add", "mod", "delete", "clear", "get"},
         "pre.node": {"add", "mod", "delete", "clear", "get"},
         "pre.prune": {"add", "mod", "delete", "clear", "get"}}
TABLE_METHODS = {"clear", "get", "get_default", "delete"}
REGISTER_METHODS = {"mod", "get", "clear"}
COUNTER_METHODS = {"get", "clear"}
VALUE_SET_METHODS = {"add", "clear", "get"}
_BLOCK = re.compile(r"\b(control|parser)\s+(\w+)\s*\(")
_KEY_NAMES = {"exact": ("",), "ternary": ("", "_mask"), "range": ("_start", "_end"), "lpm": ("", "_p_length")}


def _blocks(text):
    """{control or parser name: its body}, by brace matching."""
    blocks = {}
    for match in _BLOCK.finditer(text):
        start = text.index("{", match.end())
        depth, i = 0, start
        while True:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        blocks[match.group(2)] = text[start + 1:i]
    return blocks


def _key_names(rest):
    """The bfrt names of a table's key fields, from the text after `table name {`."""
    key = re.match(r"[^{}]*?\bkey\s*=\s*\{([^}]*)\}", rest)
    names = set()
    for item in (key.group(1).split(";") if key else ()):
        if not item.strip():
            continue
        annotation = re.search(r'@name\("([^"]*)"\)', item)
        field, kind = re.sub(r"@\w+\([^)]*\)", "", item).rsplit(":", 1)
        base = annotation.group(1) if annotation else re.sub(r"\[.*$", "", field.strip()).rsplit(".", 1)[-1]
        names |= {base + suffix for suffix in _KEY_NAMES[kind.strip()]}
    return names


def program_objects(p4_dir=P4_DIR):
    """{control: {"tables": {name: {actions}}, "keys": {table: {bfrt key names}}, "params":
    {action: {parameter names}}, "registers", "counters", "value_sets", "instances": {name: control}}}."""
    text = "\n".join(re.sub(r"//[^\n]*", "", path.read_text()) for path in sorted(p4_dir.glob("*.p4")))
    objects = {}
    for name, body in _blocks(text).items():
        tables, keys = {}, {}
        for table in re.finditer(r"\btable\s+(\w+)\s*\{", body):
            rest = body[table.end():]
            actions = re.search(r"\bactions\s*=\s*\{([^}]*)\}", rest)
            tables[table.group(1)] = set(re.findall(r"\w+", actions.group(1))) if actions else set()
            keys[table.group(1)] = _key_names(rest)
        params = {action.group(1): {p.split()[-1] for p in action.group(2).split(",") if p.strip()}
                  for action in re.finditer(r"\baction\s+(\w+)\s*\(([^)]*)\)", body)}
        objects[name] = {
            "tables": tables, "keys": keys, "params": params,
            "registers": set(re.findall(r"\bRegister<[^;]*?>\s*\([^;]*?\)\s*(\w+)\s*;", body)),
            "counters": set(re.findall(r"\b(?:Direct)?Counter<[^;]*?>\s*\([^;]*?\)\s*(\w+)\s*;", body)),
            "value_sets": set(re.findall(r"\bvalue_set<[^;]*?>\s*\([^;]*?\)\s*(\w+)\s*;", body)),
            "instances": dict((inst, kind) for kind, inst in re.findall(r"^\s*([A-Z]\w*)\(\)\s+(\w+)\s*;", body, re.M)),
        }
    return objects


class StrictRecorder(fake_bfrt.Recorder):
    def __init__(self, dev_ports, objects, program="dpa"):
        super().__init__(dev_ports)
        self.objects = objects
        self.prefix = program + ".pipe."

    def check(self, path, method, kwargs):
        if path == "" and method in ("batch_begin", "batch_end"):
            return
        if path in FIXED:
            if method not in FIXED[path]:
                raise AttributeError("bfrt: %s has no method %s" % (path, method))
            return
        if not path.startswith(self.prefix):
            raise AttributeError("bfrt: no object %s" % path)
        parts = path[len(self.prefix):].split(".")
        control = self.objects.get(parts[0])
        if control is None:
            raise AttributeError("bfrt: the program has no %s" % parts[0])
        for part in parts[1:-1]:
            kind = control["instances"].get(part)
            if kind is None or kind not in self.objects:
                raise AttributeError("bfrt: %s: no control instance %s" % (path, part))
            control = self.objects[kind]
        leaf = parts[-1]
        if leaf in control["tables"]:
            actions = control["tables"][leaf]
            verb, _, action = method.partition("_with_")
            if action:
                if verb not in ("add", "mod", "set_default") or action not in actions:
                    raise AttributeError("bfrt: table %s has no action %s (it has %s)"
                                         % (path, action, sorted(actions)))
            elif method not in TABLE_METHODS:
                raise AttributeError("bfrt: table %s has no method %s" % (path, method))
            if verb in ("add", "mod", "delete"):
                self.check_entry(path, control["keys"][leaf], control["params"].get(action, set()), kwargs)
        elif leaf in control["registers"]:
            if method not in REGISTER_METHODS:
                raise AttributeError("bfrt: register %s has no method %s" % (path, method))
        elif leaf in control["counters"]:
            if method not in COUNTER_METHODS:
                raise AttributeError("bfrt: counter %s has no method %s" % (path, method))
        elif leaf in control["value_sets"]:
            if method not in VALUE_SET_METHODS:
                raise AttributeError("bfrt: value set %s has no method %s" % (path, method))
        else:
            raise AttributeError("bfrt: %s: the program defines no %s" % (path, leaf))

    @staticmethod
    def check_entry(path, keys, params, kwargs):
        """An entry names every key field of the table and nothing but keys, the action's
        parameters and the match priority."""
        written = set(kwargs) - params - {"MATCH_PRIORITY"}
        if written != keys:
            raise AttributeError("bfrt: %s: an entry with key fields %s; the table's are %s"
                                 % (path, sorted(written), sorted(keys)))

    def answer(self, path, method, kwargs):
        self.check(path, method, kwargs)
        return super().answer(path, method, kwargs)


def make(dev_ports, objects=None):
    recorder = StrictRecorder(dev_ports, objects if objects is not None else program_objects())
    return fake_bfrt.Node(recorder, ()), recorder
