"""Stage 1: policy text -> untyped syntax (sections, declarations, body ASTs).

Why this approach: section headers and declarations are parsed by hand (a few
regular shapes, so every message can say exactly what was expected), while
expressions and hook bodies -- which are Python-shaped -- go through Python's
own ``ast`` parser, which gives precise, well-worded syntax errors and costs
little next to a run. Nothing is ever evaluated here: ``ast.parse`` only
builds a tree, and the checker (stage 2) accepts a small whitelist of node
kinds from it.

Positions: every line and column reported is 1-based in the policy file.
Lines end at ``\n``, ``\r\n`` or ``\r``, as for Python and editors (not at
the other separators ``str.splitlines`` knows).

Limits (:mod:`ray_adaptive.dsl.limits`): the file's size is checked first,
every statement and declaration is counted, and each body or initial value
is scanned before ``ast.parse`` sees it, then its tree's depth measured.
"""

from __future__ import annotations

import ast
import difflib
import math
import re
import warnings
from dataclasses import dataclass, field
from typing import Optional

from ray_adaptive.dsl import limits
from ray_adaptive.dsl.ir import BOOL, FLOAT, INT, STRING, Loc, Type, map_of, vec
from ray_adaptive.errors import PolicyError

DECL_SECTIONS = ("Task", "Node", "State")
FUNCTION_PARAMS = {
    "Score": ("task", "node"),
    "OnArrival": ("task",),
    "OnDispatch": ("task", "node"),
    "OnFinish": ("task", "node"),
    "Preempt": ("task", "victim", "node"),
    "OnPreempt": ("task", "node"),
}
SECTIONS = DECL_SECTIONS + tuple(FUNCTION_PARAMS)
_EXPECTED_SECTIONS = ("Task:, Node:, State:, Score(task, node):, OnArrival(task):, OnDispatch(task, node):, "
                      "OnFinish(task, node):, Preempt(task, victim, node): or OnPreempt(task, node):")

#: The annotations a section takes (``Score(task, node): [limit=1.2]``), each with its range:
#: (low, high, integer?, what it is). Preempt's are its safety rules (docs/language.md, Preemption).
ANNOTATIONS: dict[str, dict[str, tuple[float, float, bool, str]]] = {
    "Score": {"limit": (1.0, math.inf, False, "the competitive-ratio limit")},
    "Preempt": {
        "grace": (0.0, limits.MAX_GRACE_S, False, "seconds a victim runs on once chosen"),
        "max": (1.0, limits.MAX_PREEMPTIONS, True, "times one task may be preempted"),
    },
}

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class Decl:
    """``name: type [= init]`` in a Task, Node or State section."""

    name: str
    type: Type
    init: Optional[ast.expr]
    loc: Loc
    init_loc: Optional[Loc] = None


@dataclass
class Section:
    name: str
    loc: Loc
    params: tuple[str, ...] = ()
    limit: Optional[float] = None
    annotations: dict[str, float] = field(default_factory=dict)  # e.g. Preempt's grace and max
    decls: list[Decl] = field(default_factory=list)
    body: list[ast.stmt] = field(default_factory=list)


@dataclass
class SourcePolicy:
    file: str
    sections: dict[str, Section]

    def loc(self, node: ast.AST) -> Loc:
        """File location of an ast node (their positions are shifted to the file's)."""
        return Loc(self.file, node.lineno, node.col_offset + 1)


def _shift(tree: ast.AST, lines: int, cols: int) -> None:
    """Move every position in ``tree`` by ``lines`` and ``cols`` (to file positions)."""
    for node in ast.walk(tree):
        if hasattr(node, "lineno"):
            node.lineno += lines
            node.col_offset += cols
            if getattr(node, "end_lineno", None) is not None:
                node.end_lineno += lines
                node.end_col_offset += cols


def strip_comment(line: str) -> str:
    """The line without its ``//`` or ``#`` comment (quotes respected)."""
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#" or line.startswith("//", i):
            return line[:i]
        i += 1
    return line


class _Cursor:
    """A position in one line, for the hand-written header/declaration parsers."""

    def __init__(self, text: str, file: str, line: int, col0: int = 0):
        self.text, self.file, self.line, self.pos = text, file, line, col0

    def loc(self, pos: Optional[int] = None) -> Loc:
        return Loc(self.file, self.line, (self.pos if pos is None else pos) + 1)

    def error(self, message: str, pos: Optional[int] = None, kind: str = "syntax"):
        loc = self.loc(pos)
        raise PolicyError(message, loc.file, loc.line, loc.col, kind)

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def peek(self) -> str:
        self.skip_ws()
        return self.text[self.pos : self.pos + 1]

    def found(self) -> str:
        self.skip_ws()
        rest = self.text[self.pos :].strip()
        return f"'{rest[:20]}'" if rest else "end of line"

    def ident(self, what: str) -> str:
        self.skip_ws()
        m = _IDENT.match(self.text, self.pos)
        if not m:
            self.error(f"expected {what}, found {self.found()}")
        self.pos = m.end()
        return m.group()

    def expect(self, token: str, after: str) -> None:
        self.skip_ws()
        if not self.text.startswith(token, self.pos):
            self.error(f"expected '{token}' {after}, found {self.found()}")
        self.pos += len(token)

    def at_end(self) -> bool:
        self.skip_ws()
        return self.pos >= len(self.text)


_SCALARS = {"int": INT, "float": FLOAT, "bool": BOOL, "string": STRING}
_TYPE_HELP = "expected a type: int, float, bool, string, vec<T> or map<K, V>"


def parse_type(cur: _Cursor) -> Type:
    start = cur.pos
    cur.skip_ws()
    start = cur.pos
    m = _IDENT.match(cur.text, cur.pos)
    if not m:
        cur.error(f"{_TYPE_HELP}, found {cur.found()}", kind="type")
    name = m.group()
    cur.pos = m.end()
    if name in _SCALARS:
        return _SCALARS[name]
    if name == "vec":
        cur.expect("<", "after 'vec' (vec<T>)")
        cur.skip_ws()
        elem_pos = cur.pos
        elem = parse_type(cur)
        if elem.kind not in ("int", "float", "bool"):
            cur.error(f"vec elements must be int, float or bool, found {elem}", elem_pos, kind="type")
        cur.expect(">", "to close vec<...")
        return vec(elem)
    if name == "map":
        cur.expect("<", "after 'map' (map<K, V>)")
        cur.skip_ws()
        key_pos = cur.pos
        key = parse_type(cur)
        if key.kind not in ("string", "int"):
            cur.error(f"map keys must be string or int, found {key}", key_pos, kind="type")
        cur.expect(",", "between the key and value types of map<K, V>")
        cur.skip_ws()
        val_pos = cur.pos
        val = parse_type(cur)
        if val.kind == "map":
            cur.error("map values cannot be maps; use a key that combines both levels", val_pos, kind="type")
        cur.expect(">", "to close map<...")
        return map_of(key, val)
    cur.error(f"unknown type '{name}'; {_TYPE_HELP}", start, kind="type")


def _parse_header(cur: _Cursor, seen: dict[str, Section]) -> Section:
    name_pos = cur.pos
    m = _IDENT.match(cur.text, cur.pos)
    if not m:
        cur.error(f"expected a section header ({_EXPECTED_SECTIONS}), found {cur.found()}", kind="section")
    name = m.group()
    if name not in SECTIONS:
        close = difflib.get_close_matches(name, SECTIONS, n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        cur.error(f"unknown section '{name}'{hint}; expected {_EXPECTED_SECTIONS}", kind="section")
    if name in seen:
        first = seen[name].loc.line
        cur.error(f"duplicate section '{name}' (first defined at line {first})", kind="section")
    cur.pos = m.end()
    section = Section(name, cur.loc(name_pos))
    if name in FUNCTION_PARAMS:
        want = FUNCTION_PARAMS[name]
        shape = f"{name}({', '.join(want)})"
        cur.expect("(", f"after '{name}' ({shape}:)")
        params, starts = [], []
        while cur.peek() != ")":
            if params:
                cur.expect(",", f"or ')' after a parameter of {shape}")
            cur.skip_ws()
            starts.append(cur.pos)
            params.append(cur.ident(f"a parameter name ({shape})"))
        if tuple(params) != want:
            # the first parameter that differs, or the ')' where one is missing
            bad = next((i for i, (p, w) in enumerate(zip(params, want)) if p != w), len(want))
            pos = starts[bad] if bad < len(params) else cur.pos
            cur.error(f"{name} takes parameters ({', '.join(want)}), found ({', '.join(params)})", pos, kind="section")
        cur.pos += 1
        section.params = want
    elif cur.peek() == "(":
        cur.error(f"section '{name}' takes no parameters; expected '{name}:'", kind="section")
    cur.expect(":", f"after section header '{name}'")
    if cur.peek() == "[":
        _parse_annotations(cur, section)
    if not cur.at_end():
        cur.error(f"expected end of line after '{name}' header, found {cur.found()}")
    return section


def _parse_annotations(cur: _Cursor, section: Section) -> None:
    """``[key=NUMBER, ...]`` after a header: each key one the section takes (:data:`ANNOTATIONS`), in its range."""
    name = section.name
    allowed = ANNOTATIONS.get(name)
    if allowed is None:
        cur.error(f"only Score and Preempt take annotations ([limit=1.2], [grace=2, max=1]); found one on '{name}'",
                  kind="section")
    wanted = ", ".join(f"{k}=NUMBER" for k in allowed)
    cur.pos += 1
    while True:
        key_pos = cur.pos + len(cur.text[cur.pos:]) - len(cur.text[cur.pos:].lstrip(" \t"))
        key = cur.ident(f"an annotation of {name} ([{wanted}])")
        if key not in allowed:
            cur.error(f"unknown annotation '{key}'; expected [{wanted}]", key_pos, kind="section")
        if key in section.annotations:
            cur.error(f"annotation '{key}' given twice", key_pos, kind="section")
        cur.expect("=", f"after '{key}'")
        cur.skip_ws()
        num_pos = cur.pos
        num = re.compile(r"[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?").match(cur.text, cur.pos)
        if not num:
            cur.error(f"expected a number after '{key}=', found {cur.found()}")
        value = float(num.group())
        low, high, integer, what = allowed[key]
        if key == "limit" and not value < math.inf:
            cur.error(f"limit must be a finite number, found {num.group()}; leave [limit=...] out for no limit",
                      num_pos, kind="type")
        if key == "limit" and value < low:
            cur.error(f"limit is a competitive ratio and must be >= 1, found {num.group()}", num_pos, kind="type")
        if integer and value != int(value):
            cur.error(f"{key} ({what}) must be a whole number, found {num.group()}", num_pos, kind="type")
        if not low <= value <= high:
            cur.error(f"{key} ({what}) must be in [{low:g}, {high:g}], found {num.group()}", num_pos, kind="type")
        section.annotations[key] = int(value) if integer else value
        cur.pos = num.end()
        if cur.peek() != ",":
            break
        cur.pos += 1
    cur.expect("]", f"to close [{', '.join(f'{k}=...' for k in allowed)}]")
    if name == "Score":
        section.limit = section.annotations["limit"]


def _parse_decl(cur: _Cursor, section: Section, budget: limits.Budget) -> Decl:
    name_pos = cur.pos
    budget.take(cur.line, name_pos + 1)
    name = cur.ident(f"a field name in {section.name}")
    cur.expect(":", f"after '{name}' (name: type)")
    typ = parse_type(cur)
    init = init_loc = None
    cur.skip_ws()
    if cur.peek() == "=":
        if section.name != "State":
            cur.error(f"{section.name} fields take no initial value; only State variables do", kind="syntax")
        cur.pos += 1
        cur.skip_ws()
        init_loc = cur.loc()
        init = _parse_expr(cur.text[cur.pos :], init_loc)
    elif not cur.at_end():
        cur.error(f"expected '=' or end of line after the type of '{name}', found {cur.found()}")
    return Decl(name, typ, init, cur.loc(name_pos), init_loc)


def _syntax_error(err: SyntaxError, file: str, line0: int, col0: int) -> PolicyError:
    line = line0 + (err.lineno or 1) - 1
    col = col0 + (err.offset or 1)
    if isinstance(err, IndentationError) and err.text and err.msg.startswith(("unexpected indent", "unindent")):
        # Python points at (or past) the end of the indentation; point at the statement
        col = col0 + len(err.text) - len(err.text.lstrip(" ")) + 1
    # messages such as "... on line 3" count lines of the parsed text; make them file lines
    msg = re.sub(r"\bon line (\d+)", lambda m: f"on line {line0 + int(m.group(1)) - 1}", err.msg)
    return PolicyError(msg, file, line, col, "syntax")


def _parse(text: str, mode: str, file: str, line0: int, col0: int, budget: Optional[limits.Budget]) -> ast.AST:
    """``ast.parse(text)`` within the limits, its positions moved to the file's (the text starts at
    file line ``line0``, column ``col0 + 1``; each of its lines at that column)."""
    limits.scan(text, file, line0, col0, budget)  # before the parser can recurse on it
    try:
        with warnings.catch_warnings():
            # Python's own warnings about the text ("invalid decimal literal" for `1if`) would print
            # a second, unlocated line; the policy's errors are ours to report, one line each
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(text, mode=mode)
    except SyntaxError as err:
        raise _syntax_error(err, file, line0, col0) from None
    except (RecursionError, MemoryError):  # (the scan's bound keeps every policy we know of away from this)
        raise limits.limit_error(f"too deeply nested for the parser; keep within the depth limit of "
                                 f"{limits.MAX_DEPTH}", file, line0, col0 + 1) from None
    _shift(tree, line0 - 1, col0)
    return tree


def _parse_expr(text: str, loc: Loc) -> ast.expr:
    col0 = loc.col - 1 + (len(text) - len(text.lstrip()))
    tree = _parse(text.strip() + "\n", "eval", loc.file, loc.line, col0, None)
    limits.check_depth([tree.body], loc.file)
    return tree.body


def _parse_body(lines: list[tuple[int, str]], section: Section, file: str, budget: limits.Budget) -> None:
    body_lines = [(n, s) for n, s in lines if s.strip()]
    if not body_lines:
        want = "a return statement" if section.name == "Score" else "a statement (or 'pass')"
        raise PolicyError(f"{section.name} has an empty body; expected {want}, indented", file, section.loc.line, section.loc.col, "structure")
    first_no, first = body_lines[0]
    indent = len(first) - len(first.lstrip(" "))
    text = []
    for n, s in lines[lines.index((first_no, first)) :]:
        lead = len(s) - len(s.lstrip(" "))
        if s.strip() and lead < indent:
            raise PolicyError(
                f"inconsistent indentation: expected at least {indent} spaces like the first line of {section.name}, found {lead}",
                file, n, lead + 1, "syntax",
            )
        text.append(s[indent:])
    tree = _parse("\n".join(text), "exec", file, first_no, indent, budget)
    limits.check_depth(tree.body, file)
    section.body = tree.body


def _lines(text: str) -> list[str]:
    """The lines of ``text`` as Python and editors count them (``\n``, ``\r\n``, ``\r``)."""
    lines = re.split(r"\r\n|\r|\n", text)
    return lines[:-1] if lines and lines[-1] == "" else lines


def parse_source(text: str, file: str = "<policy>") -> SourcePolicy:
    """Split ``text`` into sections and parse each; raise PolicyError on the first error."""
    limits.check_file_size(text, file)
    text = text[1:] if text.startswith("\ufeff") else text  # a byte-order mark some editors write
    budget = limits.Budget(file)
    sections: dict[str, Section] = {}
    declared: dict[str, Decl] = {}  # this section's fields by name (a list made duplicates quadratic)
    current: Optional[Section] = None
    body: list[tuple[int, str]] = []

    def close() -> None:
        if current is not None and current.name in FUNCTION_PARAMS:
            _parse_body(body, current, file, budget)

    lines = _lines(text)
    for line_no, raw in enumerate(lines, start=1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise PolicyError("tab in indentation; indent with spaces", file, line_no, raw.index("\t") + 1, "syntax")
        line = strip_comment(raw).rstrip()
        if not line.strip():
            if current is not None and current.name in FUNCTION_PARAMS:
                body.append((line_no, ""))
            continue
        if not line[0].isspace():  # a section header
            close()
            current = _parse_header(_Cursor(line, file, line_no), sections)
            sections[current.name] = current
            body = []
            declared = {}
            continue
        if current is None:
            col = len(line) - len(line.lstrip()) + 1
            raise PolicyError(f"expected a section header at column 1 ({_EXPECTED_SECTIONS}), found an indented line", file, line_no, col, "section")
        if current.name in FUNCTION_PARAMS:
            body.append((line_no, line))
        else:
            cur = _Cursor(line, file, line_no)
            cur.skip_ws()
            decl = _parse_decl(cur, current, budget)
            other = declared.get(decl.name)
            if other is not None:
                raise PolicyError(
                    f"duplicate {current.name} field '{decl.name}' (first declared at line {other.loc.line})",
                    file, decl.loc.line, decl.loc.col, "name",
                )
            declared[decl.name] = decl
            current.decls.append(decl)
    close()
    if "Score" not in sections:
        last = len(lines) or 1
        raise PolicyError("missing section 'Score(task, node):'; every policy needs a Score", file, last, 1, "section")
    return SourcePolicy(file, sections)
