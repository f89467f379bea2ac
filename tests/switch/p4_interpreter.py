# SPDX-License-Identifier: Apache-2.0
"""A reader and interpreter for the subset of P4-16/TNA that p4/ uses, without a P4 compiler.

It preprocesses the sources (#define with arguments and ##, #if/#else/#endif, #undef), reads
every control's tables (keys, const entries, default action), actions, RegisterActions, Hash
units, registers, instances of other controls and apply block (`switch` on a table's
action_run included), and runs them on one slot: a table lookup follows the const entries in
priority order (or, for a table the controller fills, the entries a test converts from the
controller's bfrt calls with `bfrt_entry`), an action and a RegisterAction run as written, with
P4's bit widths (wrap-around, slices, ++, |-|). Registers hold one slot's state. The P4 model test drives the
program through it, so each const entry, RegisterAction body and apply branch is the source's,
not a transcription. Standard library only.
"""
import os
import re

# ---------------------------------------------------------------- preprocessing

_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*)$")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


class Preprocessor:
    def __init__(self, defines):
        self.objects = {name: str(value) for name, value in defines.items()}
        self.functions = {}

    def expand(self, text, depth=0):
        if depth > 20:
            raise ValueError("macro expansion does not end: " + text[:80])
        original = text
        for name, (params, body) in self.functions.items():
            pattern = re.compile(r"\b%s\s*\(" % re.escape(name))
            match = pattern.search(text)
            while match:
                args, end = _split_call(text, match.end() - 1)
                text = text[:match.start()] + self._substitute(params, body, args) + text[end:]
                match = pattern.search(text)
        for name, body in self.objects.items():
            text = re.sub(r"\b%s\b" % re.escape(name), lambda _: body, text)
        return self.expand(text, depth + 1) if text != original else text

    @staticmethod
    def _substitute(params, body, args):
        for param, arg in zip(params, args):
            body = re.sub(r"\b%s\b" % re.escape(param), lambda _: arg.strip(), body)
        return re.sub(r"\s*##\s*", "", body)

    def condition(self, expression):
        expression = self.expand(expression)
        expression = re.sub(r"\b[A-Za-z_]\w*\b", "0", expression)  # undefined macros are 0
        expression = expression.replace("&&", " and ").replace("||", " or ")
        expression = re.sub(r"!(?!=)", " not ", expression)
        return bool(eval(expression, {"__builtins__": {}}))

    def run(self, text):
        text = strip_comments(text).replace("\\\n", " ")
        out, active = [], [True]
        for line in text.split("\n"):
            directive = _DIRECTIVE.match(line)
            if not directive:
                out.append(self.expand(line) if all(active) else "")
                continue
            word, rest = directive.groups()
            if word in ("if", "ifdef", "ifndef"):
                if not all(active):
                    active.append(False)
                elif word == "if":
                    active.append(self.condition(rest))
                else:
                    defined = rest.strip() in self.objects or rest.strip() in self.functions
                    active.append(defined == (word == "ifdef"))
            elif word == "else":
                active[-1] = not active[-1] and all(active[:-1])
            elif word == "endif":
                active.pop()
            elif not all(active) or word in ("include", "error"):
                pass
            elif word == "define":
                function = re.match(r"(\w+)\(([^)]*)\)\s*(.*)", rest)
                if function:
                    self.functions[function.group(1)] = (
                        [p.strip() for p in function.group(2).split(",")], function.group(3))
                else:
                    name, _, body = rest.partition(" ")
                    self.objects[name] = body.strip()
            elif word == "undef":
                self.objects.pop(rest.strip(), None)
                self.functions.pop(rest.strip(), None)
            out.append("")
        return "\n".join(out)


def _split_call(text, open_paren):
    """The comma-separated arguments of the call whose '(' is at open_paren, and its end."""
    depth, args, start = 0, [], open_paren + 1
    for i in range(open_paren, len(text)):
        c = text[i]
        if c in "({":
            depth += 1
        elif c in ")}":
            depth -= 1
            if depth == 0:
                args.append(text[start:i])
                return [a for a in args if a.strip()] if len(args) > 1 or args[0].strip() else [], i + 1
        elif c == "," and depth == 1:
            args.append(text[start:i])
            start = i + 1
    raise ValueError("unbalanced call")


def block(text, open_brace):
    """The text inside the braces that open at open_brace, and the index after the close."""
    depth = 0
    for i in range(open_brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_brace + 1:i], i + 1
    raise ValueError("unbalanced braces")


# ---------------------------------------------------------------- expressions

_TOKEN = re.compile(r"\s*(\d+w0x[0-9A-Fa-f]+|\d+w\d+|0x[0-9A-Fa-f]+|\d+|[A-Za-z_]\w*|&&&|\|-\||\|\+\||"
                    r"\+\+|&&|\|\||==|!=|<=|>=|<<|>>|\.\.|[-+*&|^~!<>=(){}\[\]:;,.?])")


def tokenize(text):
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            raise ValueError("cannot read P4 at %r" % text[pos:pos + 40])
        tokens.append(match.group(1))
        pos = match.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return tokens


class Value:
    """An unsigned value of `width` bits; width None is an integer literal of no width yet."""
    __slots__ = ("v", "w")

    def __init__(self, v, w):
        self.v, self.w = (v & ((1 << w) - 1)) if w else v, w


_BINARY = [("||",), ("&&",), ("==", "!="), ("<", ">", "<=", ">="), ("|",), ("^",), ("&",),
           ("<<", ">>"), ("+", "-", "|-|", "|+|", "++"), ("*",)]


class Parser:
    """Recursive descent over tokens into nested tuples."""

    def __init__(self, tokens):
        self.t, self.i = tokens, 0

    def peek(self, k=0):
        return self.t[self.i + k] if self.i + k < len(self.t) else None

    def take(self, expected=None):
        token = self.peek()
        if expected is not None and token != expected:
            raise ValueError("expected %r, found %r in %s" % (expected, token, " ".join(self.t)))
        self.i += 1
        return token

    def expression(self, level=0):
        if level == len(_BINARY):
            return self.unary()
        left = self.expression(level + 1)
        while self.peek() in _BINARY[level]:
            op = self.take()
            left = ("bin", op, left, self.expression(level + 1))
        return left

    def unary(self):
        if self.peek() in ("!", "~", "-"):
            return ("un", self.take(), self.unary())
        if self.peek() == "(" and self.peek(1) == "bit" and self.peek(2) == "<":
            self.take("(")
            self.take("bit")
            self.take("<")
            width = int(self.take())
            self.take(">")
            self.take(")")
            return ("cast", width, self.unary())
        return self.postfix(self.primary())

    def primary(self):
        token = self.take()
        if token == "(":
            inner = self.expression()
            self.take(")")
            return inner
        if token == "{":
            items = []
            while self.peek() != "}":
                items.append(self.expression())
                if self.peek() == ",":
                    self.take()
            self.take("}")
            return ("list", items)
        literal = re.fullmatch(r"(\d+)w(0x[0-9A-Fa-f]+|\d+)", token)
        if literal:
            return ("lit", int(literal.group(2), 0), int(literal.group(1)))
        if token[0].isdigit():
            return ("lit", int(token, 0), None)
        return ("name", token)

    def postfix(self, node):
        while True:
            if self.peek() == "." and self.peek(1) is not None:
                self.take()
                member = self.take()
                if node[0] == "name":
                    node = ("name", node[1] + "." + member)
                else:
                    raise ValueError("member of an expression")
            elif self.peek() == "[":
                self.take()
                hi = self.expression()
                self.take(":")
                lo = self.expression()
                self.take("]")
                node = ("slice", node, hi, lo)
            elif self.peek() == "(":
                self.take()
                args = []
                while self.peek() != ")":
                    args.append(self.expression())
                    if self.peek() == ",":
                        self.take()
                self.take(")")
                node = ("call", node, args)
            else:
                return node


def parse_expression(text):
    parser = Parser(tokenize(text))
    node = parser.expression()
    if parser.peek() is not None:
        raise ValueError("trailing tokens in %r" % text)
    return node


# ---------------------------------------------------------------- the program

class Table:
    def __init__(self, name, keys, entries, default, actions, fields):
        self.name, self.keys, self.entries, self.default, self.actions = name, keys, entries, default, actions
        self.fields = fields  # each key's bfrt name: its @name, else the field's last component


class RegisterAction:
    def __init__(self, name, register, value_type, has_rv, body):
        self.name, self.register, self.value_type, self.has_rv, self.body = (
            name, register, value_type, has_rv, body)


class Control:
    def __init__(self, name, params):
        self.name = name
        self.params = [p.split()[-1] for p in params]
        self.declarations = params  # "inout bit<32> lo_value", for applying it from another control
        self.tables, self.actions, self.register_actions, self.registers, self.hashes = {}, {}, {}, {}, {}
        self.instances = {}  # instance name -> control name (`Reducer() r00;`)
        self.apply = []


class Program:
    """Every control of p4/, read from the sources in `directory` with the given defines."""

    def __init__(self, directory, defines):
        self.pre = Preprocessor(defines)
        sources = {}
        for name in ("types.p4", "headers.p4", "admission.p4", "slot_state.p4", "exponent.p4",
                     "result_bitmap.p4", "delivery.p4", "chunk_state.p4", "reduce.p4", "next_pass.p4",
                     "egress_rewrite.p4"):
            with open(os.path.join(directory, name)) as f:
                sources[name] = self.pre.run(f.read())
        self.constants = {name: Value(int(self._const(value)), int(width)) for width, name, value in
                          re.findall(r"const bit<(\d+)> (\w+) = ([^;]+);", sources["types.p4"])}
        self.typedefs = {name: int(width) for width, name in
                         re.findall(r"typedef bit<(\d+)> (\w+);", sources["types.p4"])}
        self.types = self._types(sources["headers.p4"] + sources["slot_state.p4"] + sources["reduce.p4"])
        self.controls = {}
        for name, text in sources.items():
            if name not in ("types.p4", "headers.p4"):
                self._controls(text)

    def _const(self, text):
        return eval_const(parse_expression(text), getattr(self, "constants", {}))

    def _types(self, text):
        types = {}
        for kind, name, body in re.findall(r"\b(header|struct)\s+(\w+)\s*\{([^}]*)\}", text):
            fields = {}
            for width, field in re.findall(r"bit<(\d+)>\s+(\w+);", body):
                fields[field] = int(width)
            for type_name, field in re.findall(r"^\s*(\w+_[ht])\s+(\w+);", body, flags=re.M):
                fields[field] = type_name
            types[name] = fields
        return types

    def field_width(self, dotted):
        """bit width of hdr.a.b / md.x / eg_md.x (the egress metadata), from headers.p4."""
        head, *path = dotted.split(".")
        current = {"hdr": "headers_t", "md": "metadata_t", "eg_md": "egress_metadata_t"}.get(head)
        if current is None:
            return None
        for part in path:
            current = self.types[current][part]
        return current if isinstance(current, int) else None

    def _controls(self, text):
        for match in re.finditer(r"\bcontrol\s+(\w+)\s*\(([^)]*)\)\s*\{", text):
            body, _ = block(text, match.end() - 1)
            params = [p.strip() for p in match.group(2).split(",") if p.strip()]
            control = Control(match.group(1), params)
            self._read_control(control, body)
            self.controls[control.name] = control

    def _read_control(self, control, text):
        for m in re.finditer(r"\bRegister<\s*(\w+(?:<\d+>)?)\s*,\s*\w+\s*>\s*\([^;]*?\)\s*(\w+);", text):
            control.registers[m.group(2)] = m.group(1)
        for m in re.finditer(r"^\s*(\w+)\(\)\s+(\w+);", text, flags=re.M):
            control.instances[m.group(2)] = m.group(1)
        for m in re.finditer(r"\bHash<bit<(\d+)>>\([^)]*\)\s*(\w+);", text):
            control.hashes[m.group(2)] = int(m.group(1))
        for m in re.finditer(r"\bRegisterAction<\s*(\w+(?:<\d+>)?)\s*,\s*\w+\s*,\s*\w+(?:<\d+>)?\s*>\s*"
                             r"\((\w+)\)\s*(\w+)\s*=\s*\{", text):
            outer, _ = block(text, m.end() - 1)
            apply = re.search(r"void apply\(([^)]*)\)\s*\{", outer)
            body, _ = block(outer, apply.end() - 1)
            control.register_actions[m.group(3)] = RegisterAction(
                m.group(3), m.group(2), m.group(1), "out" in apply.group(1), parse_statements(body))
        for m in re.finditer(r"\baction\s+(\w+)\s*\(([^)]*)\)\s*\{", text):
            body, _ = block(text, m.end() - 1)
            params = [(p.split()[-1], _declared_width(p)) for p in m.group(2).split(",") if p.strip()]
            control.actions[m.group(1)] = (params, parse_statements(body))
        for m in re.finditer(r"\btable\s+(\w+)\s*\{", text):
            body, _ = block(text, m.end() - 1)
            control.tables[m.group(1)] = self._table(m.group(1), body)
        apply = re.search(r"(?<![\w.])apply\s*\{", _without_nested(text))
        if apply:
            stripped = _without_nested(text)
            body, _ = block(stripped, apply.end() - 1)
            control.apply = parse_statements(body)

    def _table(self, name, body):
        keys, fields = [], []
        key_block = re.search(r"\bkey\s*=\s*\{", body)
        if key_block:
            key_text, _ = block(body, key_block.end() - 1)
            for item in key_text.split(";"):
                annotation = re.search(r"@name\(\"([^\"]*)\"\)", item)
                item = re.sub(r"@\w+\([^)]*\)", "", item).strip()
                if item:
                    expression, kind = item.rsplit(":", 1)
                    keys.append((parse_expression(expression), kind.strip()))
                    fields.append(annotation.group(1) if annotation else
                                  re.sub(r"\[.*$", "", expression.strip()).rsplit(".", 1)[-1])
        actions = re.search(r"\bactions\s*=\s*\{([^}]*)\}", body).group(1)
        actions = [a.strip() for a in actions.split(";") if a.strip()]
        entries = []
        entry_block = re.search(r"\bconst entries\s*=\s*\{", body)
        if entry_block:
            entry_text, _ = block(body, entry_block.end() - 1)
            for item in entry_text.split(";"):
                if item.strip():
                    match, action = item.rsplit(":", 1)
                    entries.append((self._patterns(match, len(keys)), self._call(action)))
        default = re.search(r"default_action\s*=\s*([^;]+);", body)
        default = self._call(default.group(1)) if default else ("NoAction", [])
        return Table(name, keys, entries, default, actions, fields)

    def _patterns(self, text, count):
        text = text.strip()
        if text.startswith("(") and count > 1:
            items, _ = _split_call(text, 0)
        else:
            items = [text]
        if len(items) != count:
            raise ValueError("entry %r has %d keys, the table %d" % (text, len(items), count))
        patterns = []
        for item in (i.strip() for i in items):
            if item == "_":
                patterns.append(None)
            elif "&&&" in item:
                value, mask = item.split("&&&")
                patterns.append(("mask", self._const(value), self._const(mask)))
            elif ".." in item:
                lo, hi = item.split("..")
                patterns.append(("range", self._const(lo), self._const(hi)))
            else:
                patterns.append(("exact", self._const(item)))
        return patterns

    def _call(self, text):
        text = text.strip()
        name = re.match(r"\w+", text).group(0)
        if "(" not in text:
            return name, []
        args, _ = _split_call(text, text.index("("))
        return name, [self._const(a) for a in args]


def _declared_width(declaration):
    match = re.search(r"bit<(\d+)>", declaration)
    return int(match.group(1)) if match else None


def _without_nested(text):
    """The control's text with every action, table and RegisterAction body blanked (same length)."""
    out = list(text)
    for m in re.finditer(r"\b(?:action\s+\w+\s*\([^)]*\)|table\s+\w+|RegisterAction<[^=]*=)\s*\{", text):
        start = m.end() - 1
        _, end = block(text, start)
        for i in range(start + 1, end - 1):
            if out[i] not in "\n":
                out[i] = " "
    return "".join(out)


def eval_const(node, constants):
    value = Evaluator(None, constants, {}).eval(node)
    return value.v


# ---------------------------------------------------------------- statements

def parse_statements(text):
    parser = Parser(tokenize(text))
    statements = []
    while parser.peek() is not None:
        statements.append(_statement(parser))
    return statements


def _statement(parser):
    token = parser.peek()
    if token == "{":
        parser.take()
        body = []
        while parser.peek() != "}":
            body.append(_statement(parser))
        parser.take("}")
        return ("block", body)
    if token == "switch":  # switch (t.apply().action_run) { action: { ... } ... }
        parser.take()
        parser.take("(")
        table = parser.take()
        for expected in (".", "apply", "(", ")", ".", "action_run", ")", "{"):
            parser.take(expected)
        cases = {}
        while parser.peek() != "}":
            label = parser.take()
            parser.take(":")
            cases[label] = _statement(parser)
        parser.take("}")
        return ("switch", table, cases)
    if token == "if":
        parser.take()
        parser.take("(")
        condition = parser.expression()
        parser.take(")")
        then = _statement(parser)
        otherwise = None
        if parser.peek() == "else":
            parser.take()
            otherwise = _statement(parser)
        return ("if", condition, then, otherwise)
    if parser.peek(1) is not None and re.fullmatch(r"[A-Za-z_]\w*", token) and \
            re.fullmatch(r"[A-Za-z_]\w*", parser.peek(1)) and token not in ("return",):
        parser.take()  # a local declaration: `slot_index_t index = ...;`
        name = parser.take()
        parser.take("=")
        value = parser.expression()
        parser.take(";")
        return ("assign", ("name", name), value)
    target = parser.expression()
    if parser.peek() == "=":
        parser.take()
        value = parser.expression()
        parser.take(";")
        return ("assign", target, value)
    parser.take(";")
    return ("call", target)


class Evaluator:
    """Runs expressions and statements over `state` (dotted name -> int) for `program`."""

    def __init__(self, program, constants, state, control=None, registers=None, trace=None):
        self.program, self.constants, self.state = program, constants, state
        self.control, self.registers, self.trace = control, registers, trace
        self.locals = {}

    def width(self, name):
        if name in self.locals:
            return self.locals[name][1]
        return self.program.field_width(name) if self.program else None

    def eval(self, node):
        kind = node[0]
        if kind == "lit":
            return Value(node[1], node[2])
        if kind == "name":
            name = node[1]
            if name in self.locals:
                return Value(*self.locals[name])
            if name in self.constants:
                c = self.constants[name]
                return Value(c.v, c.w)
            if name in self.state or self.width(name):
                return Value(self.state.get(name, 0), self.width(name))
            raise KeyError("unknown name %s" % name)
        if kind == "slice":
            inner = self.eval(node[1])
            hi, lo = self.eval(node[2]).v, self.eval(node[3]).v
            return Value(inner.v >> lo, hi - lo + 1)
        if kind == "cast":
            return Value(self.eval(node[2]).v, node[1])
        if kind == "list":
            return self.concat([self.eval(item) for item in node[1]])
        if kind == "un":
            inner = self.eval(node[2])
            if node[1] == "!":
                return Value(int(not inner.v), 1)
            if node[1] == "~":
                return Value(~inner.v, inner.w)
            return Value(-inner.v, inner.w)
        if kind == "bin":
            return self.binary(node[1], self.eval(node[2]), self.eval(node[3]))
        if kind == "call":
            return self.call(node)
        raise ValueError(node)

    @staticmethod
    def concat(values):
        result, width = 0, 0
        for value in values:
            if value.w is None:
                raise ValueError("concatenation of a literal without a width")
            result, width = result << value.w | value.v, width + value.w
        return Value(result, width)

    def binary(self, op, a, b):
        w = a.w or b.w
        if op == "++":
            return self.concat([a, b])
        if op in ("&&", "||"):
            return Value(int(bool(a.v) and bool(b.v)) if op == "&&" else int(bool(a.v) or bool(b.v)), 1)
        x, y = (Value(a.v, w).v, Value(b.v, w).v) if w else (a.v, b.v)
        if op in ("==", "!=", "<", ">", "<=", ">="):
            return Value(int({"==": x == y, "!=": x != y, "<": x < y, ">": x > y, "<=": x <= y,
                              ">=": x >= y}[op]), 1)
        if op == "|-|":
            return Value(max(x - y, 0), w)
        if op == "|+|":
            return Value(min(x + y, (1 << w) - 1) if w else x + y, w)
        result = {"+": lambda: x + y, "-": lambda: x - y, "&": lambda: x & y, "|": lambda: x | y,
                  "^": lambda: x ^ y, "*": lambda: x * y, "<<": lambda: x << y, ">>": lambda: x >> y}[op]()
        if w is None and op == "-" and result < 0:
            raise ValueError("negative literal arithmetic")
        return Value(result, a.w if op in ("<<", ">>") else w)

    def call(self, node):
        callee, args = node[1], node[2]
        if callee[0] != "name":
            raise ValueError(node)
        name = callee[1]
        if name in ("max", "min"):
            a, b = (self.eval(x) for x in args)
            w = a.w or b.w
            return Value((max if name == "max" else min)(a.v, b.v), w)
        obj, _, method = name.rpartition(".")
        control = self.control
        if method == "execute":
            return self.execute(control.register_actions[obj])
        if method == "get" and obj in control.hashes:
            return Value(self.eval(args[0]).v, control.hashes[obj])
        if method == "apply" and obj in control.tables:
            self.apply_table(control.tables[obj])
            return Value(0, None)
        if method == "apply" and obj in control.instances:
            self.apply_instance(obj, args)
            return Value(0, None)
        if method in ("count", "setValid", "setInvalid"):
            return Value(0, None)
        if method == "isValid":  # every header is valid unless the state says `<header>.$valid` 0
            return Value(self.state.get(obj + ".$valid", 1), 1)
        if not obj and name in control.actions:
            self.run_action(name, [self.eval(a).v for a in args])
            return Value(0, None)
        raise KeyError("unknown call %s in %s" % (name, control.name))

    def apply_instance(self, instance, args):
        """Applies another control: its parameters bound to the arguments, its registers its own
        (one dict per instance), its inout and out parameters written back."""
        sub = self.program.controls[self.control.instances[instance]]
        registers = self.registers.setdefault(("instance", instance), {})
        inner = Evaluator(self.program, self.constants, self.state, sub, registers, self.trace)
        inner.hits = self.hits
        for declaration, arg in zip(sub.declarations, args):
            name, kind = declaration.split()[-1], declaration.split()[-2]
            width = _declared_width(declaration) or self.program.typedefs.get(kind)
            if width is not None:
                inner.locals[name] = (self.eval(arg).v & ((1 << width) - 1), width)
        inner.run(sub.apply)
        for declaration, arg in zip(sub.declarations, args):
            name = declaration.split()[-1]
            if declaration.split()[0] in ("inout", "out") and name in inner.locals:
                self.assign(arg, Value(*inner.locals[name]))

    def execute(self, register_action):
        if self.trace is not None:
            self.trace.append(("register_action", self.control.name, register_action.name))
        key = (self.control.name, register_action.register)
        value_type = self.control.registers[register_action.register]
        fields = self.program.types.get(value_type)
        stored = self.registers.setdefault(key, {f: 0 for f in fields} if fields else 0)
        width = int(re.search(r"\d+", value_type).group(0)) if not fields else None
        inner = Evaluator(self.program, self.constants, self.state, self.control, self.registers, self.trace)
        inner.locals = dict(self.locals)  # the control's parameters (Reducer's values)
        if fields:
            for field, field_width in fields.items():
                inner.locals["value." + field] = (stored[field], field_width)
            rv_width = 32
        else:
            inner.locals["value"] = (stored, width)
            rv_width = width
        inner.locals["rv"] = (0, rv_width)
        inner.run(register_action.body)
        if fields:
            self.registers[key] = {f: inner.locals["value." + f][0] for f in fields}
        else:
            self.registers[key] = inner.locals["value"][0]
        return Value(inner.locals["rv"][0], rv_width)

    def assign(self, target, value):
        if target[0] == "slice":
            name = target[1][1]
            hi, lo = self.eval(target[2]).v, self.eval(target[3]).v
            field_mask = ((1 << (hi - lo + 1)) - 1) << lo
            old = self.eval(target[1]).v
            self.store(name, (old & ~field_mask) | ((value.v << lo) & field_mask))
        else:
            self.store(target[1], value.v)

    def store(self, name, v):
        if name in self.locals:
            w = self.locals[name][1]
            self.locals[name] = (v & ((1 << w) - 1) if w else v, w)
        else:
            w = self.width(name)
            self.state[name] = v & ((1 << w) - 1) if w else v

    def run(self, statements):
        for statement in statements:
            kind = statement[0]
            if kind == "block":
                self.run(statement[1])
            elif kind == "switch":
                self.apply_table(self.control.tables[statement[1]])
                action = self.hits[statement[1]][0]
                if action in statement[2]:
                    self.run([statement[2][action]])
            elif kind == "if":
                if self.eval(statement[1]).v:
                    self.run([statement[2]])
                elif statement[3] is not None:
                    self.run([statement[3]])
            elif kind == "assign":
                target, value = statement[1], self.eval(statement[2])
                if target[0] == "name" and target[1] not in self.locals and "." not in target[1] \
                        and not self.width(target[1]) and target[1] not in ("rv", "value"):
                    self.locals[target[1]] = (value.v, value.w)  # a local declaration
                else:
                    self.assign(target, value)
            else:
                self.eval(statement[1])

    def run_action(self, name, args):
        params, body = self.control.actions[name]
        saved = self.locals
        self.locals = dict(saved)
        for (param, width), arg in zip(params, args):
            self.locals[param] = (arg & ((1 << width) - 1) if width else arg, width)
        self.run(body)
        names = {param for param, _ in params}
        for name in saved:  # the control's inout parameters keep what the action wrote
            if name not in names:
                saved[name] = self.locals[name]
        self.locals = saved

    def lookup(self, table):
        """(entry index or "default", (action, args)) of the entry the keys hit."""
        keys = [self.eval(expression) for expression, _ in table.keys]
        for index, (patterns, action) in enumerate(self.entries.get(table.name, table.entries)):
            if all(_matches(p, k) for p, k in zip(patterns, keys)):
                return index, action
        return "default", table.default

    def apply_table(self, table):
        entry, (action, args) = self.lookup(table)
        if self.trace is not None:
            self.trace.append(("table", table.name, entry))
        if action != "NoAction" and table.name not in self.record_only:
            self.run_action(action, args)
        self.hits[table.name] = (action, args)

    record_only = frozenset()
    hits = None
    entries = {}  # table name -> entries that take the place of its const ones


def _matches(pattern, key):
    if pattern is None:
        return True
    w = key.w
    mask = (1 << w) - 1 if w else -1
    if pattern[0] == "exact":
        return key.v == pattern[1] & mask
    if pattern[0] == "mask":
        return key.v & pattern[2] == pattern[1] & pattern[2] & mask
    return pattern[1] <= key.v <= pattern[2]


def run_control(program, control_name, state, registers, record_only=(), trace=None, bindings=None,
                entries=None):
    """Run a control's apply block; tables named in record_only are looked up, not executed;
    `entries` ({table: entries}) fills tables the controller writes. Returns {table: (action,
    args)} for every table applied."""
    control = program.controls[control_name]
    evaluator = Evaluator(program, program.constants, state, control, registers, trace)
    evaluator.record_only = frozenset(record_only)
    evaluator.entries = entries or {}
    evaluator.hits = {}
    for name, value in (bindings or {}).items():
        evaluator.locals[name] = value
    evaluator.run(control.apply)
    return evaluator.hits, evaluator.locals


def apply_table(program, control_name, table_name, state, registers=None, bindings=None, execute=True,
                trace=None):
    control = program.controls[control_name]
    evaluator = Evaluator(program, program.constants, state, control, registers if registers is not None else {},
                          trace)
    evaluator.hits = {}
    for name, value in (bindings or {}).items():
        evaluator.locals[name] = value
    if not execute:
        evaluator.record_only = frozenset([table_name])
    evaluator.apply_table(control.tables[table_name])
    return evaluator.hits[table_name], evaluator.locals


def bfrt_entry(program, control_name, table_name, action, kwargs):
    """A table entry from a controller's bfrt call `add_with_<action>(**kwargs)`: keys by their
    bfrt names (exact `f`, ternary `f` and `f_mask`, range `f_start` and `f_end`), the rest are
    the action's parameters. The caller checks that the names agree (table.fields)."""
    control = program.controls[control_name]
    table = control.tables[table_name]
    patterns = []
    for (_, kind), field in zip(table.keys, table.fields):
        if kind == "exact":
            patterns.append(("exact", kwargs[field]))
        elif kind == "ternary":
            patterns.append(("mask", kwargs[field], kwargs[field + "_mask"]))
        elif kind == "range":
            patterns.append(("range", kwargs[field + "_start"], kwargs[field + "_end"]))
        else:
            raise ValueError("table %s: match kind %s" % (table_name, kind))
    params, _ = control.actions[action]
    return patterns, (action, [kwargs[name] for name, _ in params])


def run_action(program, control_name, action, args, state, registers=None):
    evaluator = Evaluator(program, program.constants, state, program.controls[control_name],
                          registers if registers is not None else {})
    evaluator.run_action(action, args)


def key_names(program, control_name, table_name):
    """A table's keys as written: `md.gate`, `md.full_x[7:0]`."""
    def render(node):
        if node[0] == "name":
            return node[1]
        if node[0] == "lit":
            return str(node[1])
        if node[0] == "slice":
            return "%s[%s:%s]" % (render(node[1]), eval_const(node[2], program.constants),
                                  eval_const(node[3], program.constants))
        if node[0] == "call":
            return render(node[1]) + "()"
        return repr(node)
    return [render(expression) for expression, _ in program.controls[control_name].tables[table_name].keys]
