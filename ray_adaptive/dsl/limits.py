"""The limits of the policy language, and the cheap checks that keep a policy inside them.

A policy is data from anywhere -- written by hand, generated, mangled by an
edit -- and must never take the checker, the interpreter, the generated hooks
or the host down. Every limit here is far above what a real policy needs
(the shipped ones use a few percent of each), is checked in time linear in
the policy's size, and is reported as a ``FILE:LINE:COL`` PolicyError of kind
``"limit"`` naming the limit and its value. ``docs/limits.md`` lists them.

Nesting is checked twice. Python's own parser recurses on a deeply nested
expression (a chain ``1 + 1 + ... + 1`` is as deep as it is long) and fails
with a RecursionError or MemoryError near a few thousand levels, so
:func:`scan` bounds the nesting from the tokens *before* the text reaches
:func:`ast.parse`; :func:`check_depth` then measures the exact depth of the
parsed tree, iteratively, against :data:`MAX_DEPTH`.

Example:
    >>> from ray_adaptive.dsl import parse_policy
    >>> try:
    ...     parse_policy("Score(task, node):\\n  return " + " + ".join(["1"] * 70), file="p.policy")
    ... except PolicyError as err:
    ...     print(err.kind, err.line, err.col, err.message[:43])
    limit 2 10 nested 65 levels deep, over the limit of 64
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterator, Optional

from ray_adaptive.errors import PolicyError

__all__ = ["MAX_POLICY_BYTES", "MAX_STATEMENTS", "MAX_DEPTH", "MAX_TOKENS", "MAX_STRING_CHARS", "MAX_MAP_KEYS",
           "MAX_GRACE_S", "MAX_PREEMPTIONS",
           "INT_MIN", "INT_MAX", "check_file_size", "Budget", "scan", "check_depth", "limit_error"]

#: A policy file's size in bytes (UTF-8). The shipped policies are under 2 KB.
MAX_POLICY_BYTES = 1_000_000
#: Statements and declarations in one policy, nested ones included (a statement
#: per logical line, or per ``;``-separated part). Checked before parsing.
MAX_STATEMENTS = 10_000
#: Nesting depth of a body: each ``if``/``elif`` nests its body one level deeper,
#: each operator, call, index, attribute, conditional and literal nests its operands
#: one level deeper; chains count (``a + b + c`` is ``(a + b) + c``). Kept far below
#: Python's parser limits (200 nested brackets, 100 indentation levels) with room for
#: the generated hooks, which nest at most twice as deep as the policy.
MAX_DEPTH = 64
#: Tokens in one statement (names, numbers, operators, brackets, commas).
MAX_TOKENS = 10_000
#: Characters in a string a policy computes (``s + t``); longer stops the policy.
MAX_STRING_CHARS = 100_000
#: Keys of one State map; a hook adding a key beyond it stops the policy.
MAX_MAP_KEYS = 1_000_000
#: Preempt's ``[grace=S]``: seconds a victim runs on once chosen (an hour: far above YARN's 15 s default).
MAX_GRACE_S = 3600.0
#: Preempt's ``[max=K]``: times one task may be preempted; with it a run's preemptions are at most K per task.
MAX_PREEMPTIONS = 100
#: ``int`` is 64-bit: literals outside this range are errors, arithmetic wraps around.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1

#: The checker's word on f-strings, said by the token scan (their expressions hide in one token).
F_STRINGS = "f-strings are not part of the policy language"

# The token scan's bound on nesting (see scan) below which ast.parse is safe: it
# fails near 3 x (recursion limit - current depth) levels, and the bound may
# exceed the true depth by a few times for mixed operators.
_PARSE_SAFE_BOUND = 1_000


def limit_error(message: str, file: str, line: int, col: int) -> PolicyError:
    return PolicyError(message, file, line, col, "limit")


# ----------------------------------------------------------------- file size


def check_file_size(data: "bytes | str", file: str) -> None:
    """Refuse a policy over :data:`MAX_POLICY_BYTES`, at the line and column where it crosses the limit."""
    size = len(data) if isinstance(data, bytes) else (len(data) if len(data) * 4 <= MAX_POLICY_BYTES
                                                       else len(data.encode("utf-8", "surrogatepass")))
    if size <= MAX_POLICY_BYTES:
        return
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    head = raw[:MAX_POLICY_BYTES].decode("utf-8", "ignore")
    lines = re.split(r"\r\n|\r|\n", head)
    raise limit_error(f"the policy is over the limit of {MAX_POLICY_BYTES:,} bytes; the limit is crossed here",
                      file, len(lines), len(lines[-1]) + 1)


# ---------------------------------------------------------- statement budget


@dataclass
class Budget:
    """The statements and declarations counted so far in one policy (against :data:`MAX_STATEMENTS`)."""

    file: str
    used: int = 0

    def take(self, line: int, col: int) -> None:
        self.used += 1
        if self.used > MAX_STATEMENTS:
            raise limit_error(f"the policy has more than {MAX_STATEMENTS:,} statements and declarations "
                              f"(the limit); this is statement {self.used:,}", self.file, line, col)


# ----------------------------------------------------------- the token scan

_TOKEN = re.compile(r"""
    (?P<blank>[ \t\f]+|\\\n)
  | (?P<newline>\n)
  | (?P<string>(?P<prefix>[rRbBuUfF]{1,2})?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"
                                            |'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*"))
  | (?P<name>[^\W\d]\w*)
  | (?P<number>\.?\d(?:[eE][-+]|[\w.])*)
  | (?P<open>[(\[{])
  | (?P<close>[)\]}])
  | (?P<comma>,)
  | (?P<semicolon>;)
  | (?P<op>\*\*=?|//=?|>>=?|<<=?|->|:=|[-+*/%@&|^<>=!]=?|[~.:])
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)

# keywords that make a node of the syntax tree, as operators do
_NODE_WORDS = frozenset({"and", "or", "not", "if", "else", "lambda", "in", "is", "for", "await", "yield"})


def _tokens(text: str, line0: int, col0: int) -> Iterator[tuple[str, re.Match, int, int]]:
    """``(kind, match, file line, file col)`` for each token of ``text``, blanks skipped (``text``'s lines
    all start at file column ``col0 + 1``: a body is dedented as a whole)."""
    line, line_start = line0, 0
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup if m.lastgroup != "prefix" else "string"
        if kind != "blank":
            yield kind, m, line, m.start() - line_start + col0 + 1
        breaks = m.group().count("\n")  # (a newline, a continuation, a string over several lines)
        if breaks:
            line += breaks
            line_start = m.start() + m.group().rfind("\n") + 1


class _Nesting:
    """A bound on the nesting depth of one statement, from its tokens.

    Per open bracket it keeps, for the comma-separated item being read, the
    tokens that make a node of the tree (operators, keywords such as ``not``,
    opening brackets: a call, an index, a literal) and the deepest bound of
    the bracket groups already closed in it; ``path`` sums the counts along
    the open brackets. Within one item every node of the tree at that level
    owns one such token, so no node lies deeper than ``path`` plus the
    deepest closed child: :meth:`bound` never underestimates what the text
    read so far nests, and reaches the true bound by the statement's end.
    """

    def __init__(self):
        self.frames = [[0, 0]]  # per open bracket: [node tokens in this item, deepest closed child]
        self.path = 0

    def bound(self) -> int:
        return self.path + self.frames[-1][1]

    def node(self) -> None:
        self.frames[-1][0] += 1
        self.path += 1

    def open(self) -> None:
        self.node()
        self.frames.append([0, 0])

    def close(self) -> None:
        if len(self.frames) > 1:  # (an unbalanced ')' is the parser's to report)
            count, child = self.frames.pop()
            self.path -= count
            self.frames[-1][1] = max(self.frames[-1][1], count + child)

    def comma(self) -> None:
        # the next item is a sibling: it starts from this level again (the finished one was bounded)
        self.path -= self.frames[-1][0]
        self.frames[-1] = [0, 0]


def scan(text: str, file: str, line0: int, col0: int, budget: Optional[Budget] = None) -> None:
    """Check the statements of ``text`` (a body, or one expression) before :func:`ast.parse` sees them:
    count them against ``budget``, their tokens against :data:`MAX_TOKENS`, and bound their nesting
    (far above :data:`MAX_DEPTH`, which :func:`check_depth` applies exactly once the text is parsed).

    ``line0``/``col0``: the file position of the text's first character (lines 1-based, columns 0-based).
    f-strings are refused here already: their expressions hide inside one token.
    """
    start: Optional[tuple[int, int]] = None  # where the statement being read starts
    tokens = brackets = 0
    nesting = _Nesting()
    for kind, m, line, col in _tokens(text, line0, col0):
        if kind in ("newline", "semicolon") and (brackets == 0 or kind == "semicolon"):
            start, tokens, brackets, nesting = None, 0, 0, _Nesting()  # the statement ends
            continue
        if kind == "newline":
            continue
        if start is None:
            start = (line, col)
            if budget is not None and m.group() != "else":  # (an `else:` line is no statement)
                budget.take(line, col)
        tokens += 1
        if tokens > MAX_TOKENS:
            raise limit_error(f"statement over the limit of {MAX_TOKENS:,} tokens; split it into several "
                              "statements", file, *start)
        if kind == "string" and "f" in (m.group("prefix") or "").lower():
            raise PolicyError(F_STRINGS, file, line, col, "unsupported")
        if kind == "open":
            brackets += 1
            nesting.open()
        elif kind == "close":
            brackets = max(brackets - 1, 0)
            nesting.close()
        elif kind == "comma":
            nesting.comma()
        elif kind == "op" or (kind == "name" and m.group() in _NODE_WORDS):
            nesting.node()
        if nesting.bound() > _PARSE_SAFE_BOUND:
            raise limit_error(f"nested deeper than the limit of {MAX_DEPTH} levels: over {_PARSE_SAFE_BOUND:,} "
                              "operators and brackets in one nest; split it with local variables", file, *start)


# ------------------------------------------------------------ exact depth


def _children(node: ast.AST, level: int, blocks: int) -> Iterator[tuple[ast.AST, int, int]]:
    """The statements and expressions directly inside ``node``, each with its nesting level and the
    number of those levels that are if/elif blocks."""
    if isinstance(node, ast.BoolOp):
        # `a and b and c` is one node in Python's tree but a chain of operators in the policy's
        # IR: value i sits under (n - i) of them (the first under n - 1)
        n = len(node.values)
        for i, v in enumerate(node.values):
            yield v, level + (n - 1 if i == 0 else n - i), blocks
        return
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt):
            yield child, level + 1, blocks + 1  # a compound statement's body
        elif isinstance(child, ast.expr):
            # a statement's expressions start at its level; an expression's operands are one deeper, and
            # so are those of `x += v`, which is `x = x + v`
            yield child, level + (1 if isinstance(node, (ast.expr, ast.AugAssign)) else 0), blocks
        else:  # keywords, comprehensions, arguments: transparent
            yield from _children(child, level, blocks)


def check_depth(nodes: "list[ast.AST]", file: str) -> None:
    """Refuse the first node (in source order) nested deeper than :data:`MAX_DEPTH` (``nodes``: a body's
    statements, or one expression, all at level 0). Iterative: no depth reaches Python's recursion limit."""
    stack = [(n, 0, 0) for n in reversed(nodes)]
    while stack:
        node, level, blocks = stack.pop()
        if level > MAX_DEPTH:
            where = (f"{blocks} of them in if/elif blocks (an elif is an if inside an else)" if blocks == level
                     else f"{blocks} in if/elif blocks, {level - blocks} in the expression" if blocks
                     else "an operator chain counts each operator: `a + b + c` is 2 levels")
            raise limit_error(f"nested {level} levels deep, over the limit of {MAX_DEPTH} ({where}); "
                              "split it with local variables, or a map instead of a long elif chain",
                              file, node.lineno, node.col_offset + 1)
        stack.extend(reversed(list(_children(node, level, blocks))))
