"""Malformed policies: every error names the exact spot, the right kind, and what was expected.

* ``CASES`` is a corpus of small broken policies, each with the line, column
  (1-based; the column of the offending token) and kind of the error, and a
  piece of its message. Positions were worked out by hand from the text.
* The CLI reports each error as one ``FILE:LINE:COL: error: ...`` line.
* Security: a policy cannot reach imports, attributes outside task/node,
  files or the network, and the pipeline never evals/execs/compiles its text.

Nothing here starts Ray.
"""

from __future__ import annotations

import ast
import builtins
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ray_adaptive.dsl import format_policy, ir, parse_policy, policy_path, shipped_policies
from ray_adaptive.dsl.builtins import BUILTINS, NODE_ATTRIBUTES, TASK_ATTRIBUTES, VICTIM_ATTRIBUTES
from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.errors import PolicyError

CLI = Path(sys.executable).parent / "ray-adaptive"
SCORE = "Score(task, node):"


def P(*lines: str) -> str:
    """Policy text from its lines (line 1 first), so line numbers can be read off the call."""
    return "\n".join(lines) + "\n"


def case(id, text, line, col, kind, message):
    return pytest.param(text, line, col, kind, message, id=id)


def assert_policy_error(text, line, col, kind, message, file="bad.policy"):
    with pytest.raises(PolicyError) as info:
        parse_policy(text, file=file)
    err = info.value
    assert (err.line, err.col, err.kind) == (line, col, kind), f"got {err.line}:{err.col} {err.kind}: {err}"
    assert message in err.message, str(err)
    assert str(err) == f"{file}:{line}:{col}: error: {err.message}"
    assert "\n" not in str(err)
    return err


# fmt: off
CASES = [
    # ------------------------------------------------ syntax errors in bodies
    case("if-missing-colon", P(
        SCORE,
        "  if task.id == 'a'",          # ':' expected just past the end of the line
        "    return 1",
        "  return 0"), 2, 20, "syntax", "expected ':'"),
    case("unclosed-paren", P(
        SCORE,
        "  x = max(1, 2",               # the '(' that is never closed
        "  return x"), 2, 10, "syntax", "'(' was never closed"),
    case("unclosed-paren-last-line", P(
        SCORE,
        "  return max(1, 2"), 2, 13, "syntax", "'(' was never closed"),
    case("mismatched-bracket", P(
        SCORE,
        "  x = [1,",
        "    2)",                       # ')' closes a '[' opened on line 2 (a file line)
        "  return 0"), 3, 6, "syntax", "does not match opening parenthesis '[' on line 2"),
    case("unindent-mismatch", P(
        SCORE,
        "  if true:",
        "      return 1",
        "    return 0"), 4, 5, "syntax", "unindent does not match any outer indentation level"),
    case("unexpected-indent", P(
        SCORE,
        "  x = 1",
        "    return x"), 3, 5, "syntax", "unexpected indent"),
    case("indent-below-first-line", P(
        SCORE,
        "    x = 1",
        "  return x"), 3, 3, "syntax", "expected at least 4 spaces like the first line of Score, found 2"),
    case("if-without-block", P(
        SCORE,
        "  if true:",
        "  return 0"), 3, 3, "syntax", "expected an indented block after 'if' statement on line 2"),
    case("if-without-block-at-end-of-hook", P(
        "",
        SCORE,
        "  return 0",
        "OnDispatch(task, node):",
        "  if true:",                   # the block is expected after the ':'
        "OnFinish(task, node):",
        "  pass"), 5, 11, "syntax", "expected an indented block after 'if' statement on line 5"),
    case("tab-indent", P(
        SCORE,
        "\treturn 0"), 2, 1, "syntax", "tab in indentation; indent with spaces"),
    case("tab-after-spaces", P(
        SCORE,
        "  \treturn 0"), 2, 3, "syntax", "tab in indentation"),
    case("dangling-operator", P(
        SCORE,
        "  return 1 +"), 2, 13, "syntax", "invalid syntax"),
    # ------------------------------------------------------ section headers
    case("unknown-section", P(
        "Nodes:",
        "  zone: string",
        SCORE,
        "  return 0"), 1, 1, "section", "unknown section 'Nodes' (did you mean 'Node'?); expected Task:, Node:, State:, Score(task, node):"),
    case("misspelled-section", P(
        "Scroe(task, node):",
        "  return 0"), 1, 1, "section", "unknown section 'Scroe'"),
    case("lowercase-section", P(
        "state:",
        "  n: int",
        SCORE,
        "  return 0"), 1, 1, "section", "unknown section 'state'"),
    case("duplicate-section", P(
        SCORE,
        "  return 0",
        SCORE,
        "  return 1"), 3, 1, "section", "duplicate section 'Score' (first defined at line 1)"),
    case("score-one-param", P(
        "Score(task):",                 # 'node' is missing where the ')' is
        "  return 0"), 1, 11, "section", "Score takes parameters (task, node), found (task)"),
    case("score-wrong-param-names", P(
        "Score(t, n):",
        "  return 0"), 1, 7, "section", "Score takes parameters (task, node), found (t, n)"),
    case("score-extra-param", P(
        "Score(task, node, x):",
        "  return 0"), 1, 19, "section", "found (task, node, x)"),
    case("onarrival-with-node", P(
        SCORE,
        "  return 0",
        "OnArrival(task, node):",       # the extra 'node'
        "  pass"), 3, 17, "section", "OnArrival takes parameters (task), found (task, node)"),
    case("header-unclosed-paren", P(
        "Score(task, node",
        "  return 0"), 1, 17, "syntax", "expected ',' or ')' after a parameter of Score(task, node), found end of line"),
    case("header-missing-colon", P(
        "Score(task, node)",
        "  return 0"), 1, 18, "syntax", "expected ':' after section header 'Score', found end of line"),
    case("decl-section-with-params", P(
        "Task(x):",
        "  w: int",
        SCORE,
        "  return 0"), 1, 5, "section", "section 'Task' takes no parameters; expected 'Task:'"),
    case("body-on-header-line", P(
        "Score(task, node): return 0"), 1, 20, "syntax", "expected end of line after 'Score' header, found 'return 0'"),
    case("annotation-misspelled", P(
        "Score(task, node): [limt=1.2]",
        "  return 0"), 1, 21, "section", "unknown annotation 'limt'; expected [limit=NUMBER]"),
    case("annotation-not-a-number", P(
        "Score(task, node): [limit=abc]",
        "  return 0"), 1, 27, "syntax", "expected a number after 'limit=', found 'abc]'"),
    case("annotation-limit-below-1", P(
        "Score(task, node): [limit=0.5]",
        "  return 0"), 1, 27, "type", "limit is a competitive ratio and must be >= 1, found 0.5"),
    case("annotation-unclosed", P(
        "Score(task, node): [limit=1.2",
        "  return 0"), 1, 30, "syntax", "expected ']' to close [limit=...]"),
    case("annotation-on-hook", P(
        SCORE,
        "  return 0",
        "OnDispatch(task, node): [limit=2]",
        "  pass"), 3, 25, "section", "only Score and Preempt take annotations ([limit=1.2], [grace=2, max=1]); found one on 'OnDispatch'"),
    case("missing-score", P(
        "Task:",
        "  tenant: string"), 2, 1, "section", "missing section 'Score(task, node):'"),
    case("empty-file", "", 1, 1, "section", "every policy needs a Score"),
    case("empty-score-body", P(
        SCORE,
        "OnDispatch(task, node):",
        "  pass"), 1, 1, "structure", "Score has an empty body; expected a return statement, indented"),
    case("empty-score-at-end", P(
        SCORE), 1, 1, "structure", "Score has an empty body"),
    case("empty-hook-only-comment", P(
        SCORE,
        "  return 0",
        "OnFinish(task, node):",
        "  // nothing yet"), 3, 1, "structure", "OnFinish has an empty body; expected a statement (or 'pass')"),
    case("indented-line-before-header", P(
        "  x: int",
        SCORE,
        "  return 0"), 1, 3, "section", "expected a section header at column 1"),
    # -------------------------------------------------------- declarations
    case("decl-missing-colon", P(
        "Task:",
        "  tenant string",
        SCORE,
        "  return 0"), 2, 10, "syntax", "expected ':' after 'tenant' (name: type), found 'string'"),
    case("decl-unknown-type", P(
        "Task:",
        "  w: flaot",
        SCORE,
        "  return 0"), 2, 6, "type", "unknown type 'flaot'; expected a type: int, float, bool, string, vec<T> or map<K, V>"),
    case("vec-of-string", P(
        "State:",
        "  v: vec<string>",
        SCORE,
        "  return 0"), 2, 10, "type", "vec elements must be int, float or bool, found string"),
    case("vec-of-string-spaced", P(
        "State:",
        "  v: vec<  string >",
        SCORE,
        "  return 0"), 2, 12, "type", "vec elements must be int, float or bool"),
    case("map-float-key", P(
        "State:",
        "  m: map<float, int>",
        SCORE,
        "  return 0"), 2, 10, "type", "map keys must be string or int, found float"),
    case("map-of-map", P(
        "State:",
        "  m: map<string, map<string, int>>",   # the inner 'map', not the space before it
        SCORE,
        "  return 0"), 2, 18, "type", "map values cannot be maps"),
    case("unclosed-vec", P(
        "State:",
        "  v: vec<float",
        SCORE,
        "  return 0"), 2, 15, "syntax", "expected '>' to close vec<..., found end of line"),
    case("decl-trailing-junk", P(
        "State:",
        "  n: int 3",
        SCORE,
        "  return 0"), 2, 10, "syntax", "expected '=' or end of line after the type of 'n', found '3'"),
    case("task-field-initial-value", P(
        "Task:",
        "  w: float = 1.0",
        SCORE,
        "  return 0"), 2, 12, "syntax", "Task fields take no initial value; only State variables do"),
    case("duplicate-task-field", P(
        "Task:",
        "  w: float",
        "  w: int",
        SCORE,
        "  return 0"), 3, 3, "name", "duplicate Task field 'w' (first declared at line 2)"),
    case("task-field-named-id", P(
        "Task:",
        "  id: string",
        SCORE,
        "  return 0"), 2, 3, "name", "'id' is a built-in attribute of every task"),
    case("node-field-named-id", P(
        "Node:",
        "  id: string",
        SCORE,
        "  return 0"), 2, 3, "name", "'id' is a built-in attribute of every node"),
    case("state-named-like-builtin", P(
        "State:",
        "  max: int",
        SCORE,
        "  return 0"), 2, 3, "name", "'max' is a reserved name"),
    case("state-init-type-mismatch", P(
        "State:",
        '  c: vec<float> = "abc"',
        SCORE,
        "  return 0"), 2, 19, "type", "'c' is declared vec<float> but its initial value is string"),
    case("state-init-reads-task", P(
        "State:",
        "  c: float = task.arrival",
        SCORE,
        "  return 0"), 2, 14, "name", "an initial value cannot read 'task'"),
    case("state-init-reads-state", P(
        "State:",
        "  a: int = 1",
        "  b: int = a",
        SCORE,
        "  return 0"), 3, 12, "name", "an initial value cannot read other State variables"),
    case("state-init-uses-node", P(
        "State:",
        "  a: int = get_load(node)",
        SCORE,
        "  return 0"), 2, 21, "no-node", "a State initial value has no node"),
    case("state-init-syntax", P(
        "State:",
        "  c: float = 1 +",
        SCORE,
        "  return 0"), 2, 17, "syntax", "invalid syntax"),
    # ---------------------------------------------------------------- names
    case("unknown-name", P(
        SCORE,
        "  return foo"), 2, 10, "name", "unknown name 'foo'"),
    case("unknown-task-field", P(
        SCORE,
        "  return task.weight"), 2, 15, "name", "task has no field 'weight'; its fields are arrival, id"),
    case("unknown-function-open", P(
        SCORE,
        "  x = open('/etc/passwd')",
        "  return 0"), 2, 7, "name", "unknown function 'open'; expected one of abs, get_load, len"),
    case("unknown-function-print", P(
        SCORE,
        "  print(1)",
        "  return 0"), 2, 3, "name", "unknown function 'print'"),
    case("unknown-function-dunder-import", P(
        SCORE,
        "  return __import__('os')"), 2, 10, "name", "unknown function '__import__'"),
    case("keyword-argument", P(
        SCORE,
        "  return max(1, 2, key=3)"), 2, 20, "unsupported", "max() takes no keyword arguments"),
    case("get-load-of-task", P(
        SCORE,
        "  return get_load(task)"), 2, 19, "type", "expected get_load(node): its one argument is the name 'node'"),
    case("get-load-two-args", P(
        SCORE,
        "  return get_load(node, node)"), 2, 25, "type", "expected get_load(node)"),
    case("node-in-onarrival", P(
        SCORE,
        "  return 0",
        "OnArrival(task):",
        "  x = node.id"), 4, 7, "no-node", "OnArrival(task) has no node; 'node' is only available in Score, OnDispatch and OnFinish (and Preempt, OnPreempt)"),
    case("get-load-in-onarrival", P(
        "State:",
        "  n: int",
        SCORE,
        "  return 0",
        "OnArrival(task):",
        "  n = get_load(node)"), 6, 16, "no-node", "get_load(node) is only available in Score, OnDispatch and OnFinish (and Preempt, OnPreempt)"),
    case("used-before-assigned", P(
        SCORE,
        "  if task.arrival > 1:",
        "    x = 1",
        "  return x"), 4, 10, "name", "'x' may be used before it is assigned"),
    case("augassign-undefined-local", P(
        SCORE,
        "  x += 1",
        "  return 0"), 2, 3, "name", "unknown name 'x'; '+=' needs a variable that already has a value"),
    # -------------------------------------------------- read-only / structure
    case("assign-task-field", P(
        "Task:",
        "  w: float",
        SCORE,
        "  return 0",
        "OnDispatch(task, node):",
        "  task.w = 1"), 6, 3, "readonly", "task fields are read-only; keep values that change in State"),
    case("assign-state-in-score", P(
        "State:",
        "  n: int",
        SCORE,
        "  n = 1",
        "  return 0"), 4, 3, "readonly", "Score must not change state ('n')"),
    case("assign-state-item-in-score", P(
        "State:",
        "  m: map<string, int>",
        SCORE,
        "  m[task.id] = 1",
        "  return 0"), 4, 3, "readonly", "Score must not change state ('m')"),
    case("return-in-hook", P(
        SCORE,
        "  return 0",
        "OnDispatch(task, node):",
        "  return 1"), 4, 3, "structure", "OnDispatch is a hook and returns no value"),
    case("missing-return-on-a-path", P(
        SCORE,
        "  if task.arrival > 1:",
        "    return 1"), 2, 3, "structure", "Score must end in a return on every path"),
    case("code-after-return", P(
        SCORE,
        "  return 0",
        "  x = 1"), 3, 3, "structure", "unreachable code after return"),
    case("bare-return", P(
        SCORE,
        "  return"), 2, 3, "structure", "expected 'return <score>' with a number"),
    case("unused-expression", P(
        SCORE,
        "  task.arrival + 1",
        "  return 0"), 2, 3, "structure", "this expression's value is unused"),
    # ---------------------------------------------------------------- types
    case("string-plus-int", P(
        SCORE,
        "  x = task.id + 1",
        "  return 0"), 2, 7, "type", "operator '+' expects numbers or vecs, found string and int"),
    case("compare-vecs", P(
        "State:",
        "  a: vec<float>",
        SCORE,
        "  if a < a:",
        "    return 1",
        "  return 0"), 4, 6, "type", "cannot compare vec<float> with vec<float> using '<'; compare a reduction"),
    case("if-on-int", P(
        SCORE,
        "  if 1:",
        "    return 1",
        "  return 0"), 2, 6, "type", "expected bool for an if condition, found int"),
    case("not-on-float", P(
        SCORE,
        "  if not task.arrival:",
        "    return 1",
        "  return 0"), 2, 10, "type", "expected bool for 'not', found float"),
    case("string-lt-int", P(
        SCORE,
        "  if task.id < 1:",
        "    return 1",
        "  return 0"), 2, 6, "type", "cannot compare string with int using '<'"),
    case("and-on-int", P(
        SCORE,
        "  if true and 1:",
        "    return 1",
        "  return 0"), 2, 15, "type", "expected bool for 'and', found int"),
    case("index-a-float", P(
        SCORE,
        "  return task.arrival[0]"), 2, 10, "type", "cannot index a float; expected a map or a vec"),
    case("map-key-wrong-type", P(
        "State:",
        "  m: map<string, float>",
        SCORE,
        "  return m[1]"), 4, 12, "type", "expected a string key for a map<string, float>, found int"),
    case("vec-index-float", P(
        "State:",
        "  v: vec<float>",
        SCORE,
        "  return v[1.5]"), 4, 12, "type", "expected an int index into a vec<float>, found float"),
    case("int-state-plus-float", P(
        "State:",
        "  n: int",
        SCORE,
        "  return 0",
        "OnDispatch(task, node):",
        "  n += 0.5"), 6, 3, "type", "'n' is int; cannot store '+=' with a float in it"),
    case("local-changes-type", P(
        SCORE,
        "  x = 1",
        "  x = 'a'",
        "  return 0"), 3, 3, "type", "'x' is int; cannot store a string in it"),
    case("return-a-vec", P(
        "State:",
        "  v: vec<float>",
        SCORE,
        "  return v"), 4, 10, "type", "Score must return a number, found vec<float>; reduce it with max(), min() or sum()"),
    case("return-a-string", P(
        SCORE,
        "  return task.id"), 2, 10, "type", "Score must return a number, found string"),
    case("conditional-expression-mixed-types", P(
        SCORE,
        "  return 1 if true else 'a'"), 2, 10, "type", "both sides of 'x if c else y' must have one type, found int and string"),
    case("empty-vec-literal-in-body", P(
        SCORE,
        "  x = []",
        "  return 0"), 2, 7, "type", "an empty vec needs a declared type"),
    # ------------------------------------------------- not in the language
    case("power", P(
        SCORE,
        "  return 2 ** 3"), 2, 10, "unsupported", "'**' is not part of the policy language; use sqrt() or multiply"),
    case("bitwise-or-assign", P(
        "State:",
        "  n: int",
        SCORE,
        "  return 0",
        "OnDispatch(task, node):",
        "  n |= 1"), 6, 3, "unsupported", "this operator is not part of the policy language; use + - * / %"),
    case("chained-comparison", P(
        SCORE,
        "  if 1 < 2 < 3:",
        "    return 1",
        "  return 0"), 2, 6, "unsupported", "chained comparisons are not supported; write 'a < b and b < c'"),
    case("in-operator", P(
        "State:",
        "  m: map<string, float>",
        SCORE,
        "  if task.id in m:",
        "    return 1",
        "  return 0"), 4, 6, "unsupported", "'in'/'is' are not part of the policy language"),
    case("lambda", P(
        SCORE,
        "  f = lambda: 0",
        "  return 0"), 2, 7, "unsupported", "lambdas are not part of the policy language"),
    case("list-comprehension", P(
        SCORE,
        "  v = [x for x in [1, 2]]",
        "  return 0"), 2, 7, "unsupported", "comprehensions are not part of the policy language"),
    case("for-loop", P(
        SCORE,
        "  for x in [1, 2]:",
        "    pass",
        "  return 0"), 2, 3, "unsupported", "loops are not part of the policy language"),
    case("while-loop", P(
        SCORE,
        "  while true:",
        "    pass",
        "  return 0"), 2, 3, "unsupported", "loops are not part of the policy language"),
    case("import", P(
        SCORE,
        "  import os",
        "  return 0"), 2, 3, "unsupported", "imports are not allowed"),
    case("from-import", P(
        SCORE,
        "  from os import path",
        "  return 0"), 2, 3, "unsupported", "imports are not allowed"),
    case("dunder-attribute-of-task", P(
        SCORE,
        "  x = task.__class__",          # reported at '__class__'
        "  return 0"), 2, 12, "name", "task has no field '__class__'"),
    case("method-of-state", P(
        "State:",
        "  alloc: map<string, float>",
        SCORE,
        "  x = alloc.keys()",
        "  return 0"), 4, 7, "unsupported", "only the built-in functions can be called"),
    case("attribute-of-tuple", P(
        SCORE,
        "  x = ().__class__",
        "  return 0"), 2, 7, "unsupported", "attributes can only be read from task and node"),
    case("f-string", P(
        SCORE,
        "  x = f'{task.id}'",
        "  return 0"), 2, 7, "unsupported", "f-strings are not part of the policy language"),
    case("tuple", P(
        SCORE,
        "  x = (1, 2)",
        "  return 0"), 2, 7, "unsupported", "tuples are not part of the policy language"),
    case("slice", P(
        "State:",
        "  v: vec<float>",
        SCORE,
        "  return sum(v[1:])"), 4, 16, "unsupported", "slices are not part of the policy language"),
    case("chained-assignment", P(
        SCORE,
        "  x = y = 1",
        "  return x"), 2, 3, "unsupported", "chained assignment (a = b = ...) is not part of the policy language"),
    case("def", P(
        SCORE,
        "  def f():",
        "    return 1",
        "  return 0"), 2, 3, "unsupported", "functions cannot be defined in a policy"),
    case("raise", P(
        SCORE,
        "  raise ValueError"), 2, 3, "unsupported", "'raise' is not part of the policy language; return inf"),
    case("none-literal", P(
        SCORE,
        "  return None"), 2, 10, "unsupported", "NoneType literals are not part of the policy language"),
    # ------------------------------------------- limits (tests/test_input_limits.py has the rest)
    case("operator-chain-over-the-depth-limit", P(
        SCORE,
        "  return " + " + ".join(["1"] * 66)), 2, 10, "limit", "nested 65 levels deep, over the limit of 64"),
    case("minus-chain-over-the-depth-limit", P(
        SCORE,
        "  return " + "-" * 65 + "1"), 2, 75, "limit", "nested 65 levels deep, over the limit of 64"),
]
# fmt: on


@pytest.mark.parametrize("text, line, col, kind, message", CASES)
def test_malformed_policy(text, line, col, kind, message):
    assert_policy_error(text, line, col, kind, message)


def test_corpus_is_large_and_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 40
    assert {c.values[3] for c in CASES} == set(PolicyError.KINDS)  # every kind is exercised


# ------------------------------------------------------------- pinned quirks


def test_double_slash_starts_a_comment_so_floor_division_cannot_be_written():
    """``//`` is the comment marker, so ``x = a // b`` is ``x = a``: there is no floor division."""
    p = parse_policy(P(
        "State:",
        "  a: int = 7",
        "  b: int = 2",
        "  c: int = 7 // 2",
        SCORE,
        "  x = a // b",
        "  if task.id == 'a//b':",  # inside a string, '//' is text
        "    return x + c",
        "  return -1",
    ))
    assign = p.score.body[0]
    assert isinstance(assign, ir.Assign) and assign.target.name == "x"
    assert assign.value == ir.StateRef("a", ir.INT)
    assert p.state[2].init == ir.Const(7, ir.INT)
    assert "'a//b'" in format_policy(p) or '"a//b"' in format_policy(p)
    it = Interpreter(p)
    assert it.score(_task("a//b", p), _node("n0", 0, p)) == 7 + 7
    assert it.score(_task("t", p), _node("n0", 0, p)) == -1


def test_error_in_later_line_of_multi_section_file_reports_file_line():
    text = P(
        "// header comment",
        "Task:",
        "  tenant: string",
        "",
        "State:",
        "  alloc: map<string, float>",
        "",
        SCORE,
        "  return alloc[task.tenant]",
        "",
        "OnDispatch(task, node):",
        "  alloc[task.tenant] += 1",
        "  alloc[task.tenat] -= 1",  # typo, line 13, 'tenat' at col 14
    )
    assert_policy_error(text, 13, 14, "name", "task has no field 'tenat' (did you mean 'tenant'?); its fields are arrival, id, tenant")


# ---------------------------------------------------------------------- CLI


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def test_cli_reports_every_corpus_error_as_one_located_line(tmp_path):
    files = []
    for i, c in enumerate(CASES):
        f = tmp_path / f"case{i:03d}.policy"
        f.write_text(c.values[0])
        files.append(str(f))
    r = _run(str(CLI), "check", *files)
    assert r.returncode == 1
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == len(CASES), r.stderr
    for path, c, out in zip(files, CASES, lines):
        _, line, col, _, message = c.values
        assert out.startswith(f"{path}:{line}:{col}: error: "), (c.id, out)
        assert message in out, (c.id, out)


@pytest.mark.parametrize("command", [[str(CLI)], [sys.executable, "-m", "ray_adaptive"]], ids=["script", "python-m"])
def test_cli_check_bad_and_good_policy(tmp_path, command):
    bad = tmp_path / "bad.policy"
    bad.write_text(P(SCORE, "  return task.weight"))
    r = _run(*command, "check", str(bad))
    assert r.returncode == 1
    assert r.stdout == ""
    assert "Traceback" not in r.stderr + r.stdout
    assert len(r.stderr.splitlines()) == 1
    assert re.match(rf"^{re.escape(str(bad))}:\d+:\d+: error: ", r.stderr)
    assert r.stderr.startswith(f"{bad}:2:15: error: task has no field 'weight'")

    good = policy_path("drf_lb")
    r = _run(*command, "check", str(good))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert len(r.stdout.splitlines()) == 1
    assert r.stdout.startswith(f"{good}: ok: policy drf_lb: 2 task fields, 0 node fields, 2 state variables, Score, limit 1.2")


def test_cli_missing_file_is_one_line_without_traceback(tmp_path):
    missing = tmp_path / "nope.policy"
    r = _run(str(CLI), "check", str(missing))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith(f"{missing}: error: ") and len(r.stderr.splitlines()) == 1


# ----------------------------------------------------------------- security

ESCAPES = [
    pytest.param(P(SCORE, '  return __import__("os")'), id="dunder-import"),
    pytest.param(P(SCORE, '  x = __import__("socket").socket()', "  return 0"), id="socket"),
    pytest.param(P(SCORE, '  x = open("/etc/passwd")', "  return 0"), id="open"),
    pytest.param(P(SCORE, '  return eval("1")'), id="eval"),
    pytest.param(P(SCORE, '  exec("import os")', "  return 0"), id="exec-statement"),
    pytest.param(P(SCORE, '  return compile("1", "", "eval")'), id="compile"),
    pytest.param(P(SCORE, '  return getattr(task, "id")'), id="getattr"),
    pytest.param(P(SCORE, "  x = globals()", "  return 0"), id="globals"),
    pytest.param(P(SCORE, "  x = vars()", "  return 0"), id="vars"),
    pytest.param(P(SCORE, "  breakpoint()", "  return 0"), id="breakpoint"),
    pytest.param(P(SCORE, "  x = __builtins__", "  return 0"), id="builtins-name"),
    pytest.param(P(SCORE, "  x = task.__dict__", "  return 0"), id="task-dict"),
    pytest.param(P(SCORE, "  x = node.__class__", "  return 0"), id="node-class"),
    pytest.param(P(SCORE, "  x = task.id.__class__", "  return 0"), id="field-class"),
    pytest.param(P(SCORE, "  x = ().__class__.__bases__", "  return 0"), id="tuple-bases"),
    pytest.param(P(SCORE, "  x = max.__self__", "  return 0"), id="builtin-self"),
    pytest.param(P(SCORE, '  x = "".join', "  return 0"), id="str-method"),
    pytest.param(P(SCORE, "  return [max][0](1, 2)"), id="call-through-subscript"),
    pytest.param(P(SCORE, "  return (lambda: 0)()"), id="lambda-call"),
    pytest.param(P(SCORE, "  f = lambda: 0", "  return 0"), id="lambda"),
    pytest.param(P(SCORE, "  v = [x for x in [1, 2]]", "  return 0"), id="list-comprehension"),
    pytest.param(P(SCORE, "  v = sum(x for x in [1, 2])", "  return 0"), id="generator"),
    pytest.param(P(SCORE, "  import os", "  return 0"), id="import"),
    pytest.param(P(SCORE, "  from subprocess import run", "  return 0"), id="from-import"),
    pytest.param(P(SCORE, "  return (x := 1)"), id="walrus"),
    pytest.param(P(SCORE, "  with open('f') as f:", "    pass", "  return 0"), id="with"),
    pytest.param(P(SCORE, "  try:", "    pass", "  except:", "    pass", "  return 0"), id="try"),
    pytest.param(P(SCORE, "  class A:", "    pass", "  return 0"), id="class"),
    pytest.param(P(SCORE, "  global x", "  return 0"), id="global"),
    pytest.param(P("State:", '  x: int = __import__("os")', SCORE, "  return 0"), id="in-state-initial-value"),
    pytest.param(P(SCORE, "  return 0", "OnDispatch(task, node):", '  x = open("/tmp/f")'), id="in-hook"),
]


@pytest.mark.parametrize("text", ESCAPES)
def test_escape_attempts_are_rejected_at_check_time(text):
    with pytest.raises(PolicyError) as info:
        parse_policy(text, file="evil.policy")
    assert info.value.kind in ("name", "unsupported"), str(info.value)
    assert info.value.line >= 1 and info.value.col >= 1


def test_the_whitelist_is_exactly_this():
    """Growing the language's reach (a new built-in or attribute) must be a deliberate change."""
    assert set(BUILTINS) == {"abs", "get_load", "len", "log", "max", "min", "now", "num_nodes", "sqrt", "sum"}
    assert set(TASK_ATTRIBUTES) == {"id", "arrival", "waited"}  # waited: now() - arrival (issue 39, aging)
    assert set(VICTIM_ATTRIBUTES) == {"started", "preemptions"}  # Preempt's victim, besides the task's (issue 39)
    assert set(NODE_ATTRIBUTES) == {"id", "index", "executors", "queue", "resources", "available"}


def test_dsl_source_never_calls_eval_exec_compile_or_import():
    """Static check of the pipeline's own code: no dynamic evaluation or imports -- but for
    ``codegen``, which compiles the source it generates from checked IR (see the next test)."""
    import ray_adaptive.dsl as dsl

    banned = {"eval", "exec", "compile", "__import__", "import_module", "execfile"}
    for path in sorted(Path(dsl.__file__).parent.glob("*.py")):
        allowed = {"compile", "exec"} if path.name == "codegen.py" else set()
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Call):
                f = n.func
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "re":
                    continue  # re.compile builds a regular expression, not code
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                assert name not in banned - allowed, f"{path.name}:{n.lineno} calls {name}()"


def test_generated_hooks_hold_no_policy_text():
    """The policy's string and number constants reach a generated hook as values, never as
    source: a string that is Python code stays a string."""
    from ray_adaptive.dsl.codegen import compile_hook, hook_source

    payload = '__import__("os").system("echo pwned")'
    p = parse_policy(P("Task:", "  tenant: string", "State:", "  last: map<string, string>", SCORE, "  return 0",
                       "OnDispatch(task, node):", f"  last[task.tenant] = '{payload}' + \"x\"\n"))
    hook = p.hook("OnDispatch")
    source = hook_source(hook)
    assert "system" not in source and "echo" not in source and "'x'" not in source and '"x"' not in source, source
    state = {"last": {}}
    compile_hook(hook)(SimpleNamespace(id="t", arrival=0.0, fields={"tenant": "a"}), None, state, 0.0, 1)
    assert state == {"last": {"a": payload + "x"}}


# ------------------------------------------------- interpreter test doubles


def _value(t: ir.Type):
    if t.kind == "vec":
        return [1.0, 0.5, 0.25] if t.elem.kind == "float" else [1, 1, 1]
    return {"int": 1, "float": 1.5, "bool": True, "string": "a", "map": {}}[t.kind]


def _task(id: str, p: ir.Policy, arrival: float = 0.0):
    return SimpleNamespace(id=id, arrival=arrival, fields={f.name: _value(f.type) for f in p.task_fields})


def _node(id: str, index: int, p: ir.Policy):
    return SimpleNamespace(
        id=id, index=index, executors=1, queue=2, resources={"CPU": 2.0}, available={"CPU": 2.0},
        load=index, fields={f.name: _value(f.type) for f in p.node_fields},
    )


def _exercise(p: ir.Policy):
    """Score a 2 x 2 batch, run every hook, score again."""
    it = Interpreter(p, num_nodes=2)
    tasks = [_task("t0", p, 0.0), _task("t1", p, 0.1)]
    nodes = [_node("n0", 0, p), _node("n1", 1, p)]
    first = it.score_matrix(tasks, nodes, now=1.0)
    assert first.shape == (2, 2)
    for hook in ("OnArrival", "OnDispatch", "OnFinish"):
        it.run_hook(hook, tasks[0], None if hook == "OnArrival" else nodes[0], now=1.0)
    assert it.score_matrix(tasks, nodes, now=2.0).shape == (2, 2)


def _guard_dynamic_code(monkeypatch) -> list:
    """Patch eval to raise; let compile through as ``ast.parse`` uses it (ONLY_AST: a tree, never
    code) or for a generated hook's audited source; let exec run only code compiled so.

    ``ast.parse`` is ``compile(source, ..., flags=PyCF_ONLY_AST)`` via the builtin, so compile
    cannot be banned outright. Returns the calls seen, ``(mode, source)`` (proof the patch is live).
    """
    from ray_adaptive.dsl.codegen import audit

    seen, hooks = [], set()
    real_compile, real_exec = builtins.compile, builtins.exec

    def forbidden(*args, **kwargs):
        raise AssertionError(f"the policy pipeline called eval with {args[:1]!r}")

    def guarded_compile(source, filename, mode, flags=0, *args, **kwargs):
        seen.append((mode, source))
        if not flags & ast.PyCF_ONLY_AST:  # to code: only a generated hook, and only once audited
            assert str(filename).startswith("<hook "), f"compile() to code: {source!r:.80} ({filename}, {mode})"
            audit(source)
            code = real_compile(source, filename, mode, flags, *args, **kwargs)
            hooks.add(code)
            return code
        return real_compile(source, filename, mode, flags, *args, **kwargs)

    def guarded_exec(code, *args, **kwargs):
        assert code in hooks, f"exec() of {code!r:.80}"
        return real_exec(code, *args, **kwargs)

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", guarded_exec)
    monkeypatch.setattr(builtins, "compile", guarded_compile)
    return seen


def test_pipeline_never_evals_execs_or_compiles_policy_text(monkeypatch):
    """The only code ever compiled is a generated hook's audited source (no policy text in it)."""
    texts = {name: policy_path(name).read_text() for name in shipped_policies()}  # read before patching
    seen = _guard_dynamic_code(monkeypatch)
    policies = [parse_policy(text, file=f"{name}.policy") for name, text in texts.items()]
    assert len(seen) >= len(policies), "ast.parse did not go through builtins.compile; the patch proves nothing"
    for p in policies:
        _exercise(p)
    assert any(str(src).startswith("def On") for _, src in seen), "no hook compiled: the guard proves nothing"


def test_a_string_that_looks_like_code_is_only_data(tmp_path, monkeypatch):
    """Strings are values: comparing against or storing code text never runs it."""
    sentinel = tmp_path / "pwned"
    code = f"__import__('os').system('touch {sentinel}')"
    p = parse_policy(P(
        "State:",
        f'  last: string = "{code}"',
        "  seen: map<string, int>",
        SCORE,
        f'  if task.id == "{code}":',
        "    return 0",
        "  return 1",
        "OnDispatch(task, node):",
        f'  seen["{code}"] += 1',
        f'  last = task.id + "{code}"',
    ))
    _guard_dynamic_code(monkeypatch)
    it = Interpreter(p)
    assert it.score(_task(code, p), _node("n0", 0, p)) == 0
    assert it.score(_task("t", p), _node("n0", 0, p)) == 1
    it.run_hook("OnDispatch", _task("t", p), _node("n0", 0, p))
    assert it.state["seen"] == {code: 1}
    assert it.state["last"] == "t" + code
    assert not sentinel.exists()
