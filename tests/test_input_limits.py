"""A policy is bounded and means what it says (issues 21 and 24, the policy-language items).

* Limits: file size, statements, tokens per statement, depth -- each a
  ``FILE:LINE:COL`` PolicyError of kind "limit" naming the limit, found in
  time linear in the policy, before Python's parser can recurse on it.
* What ``check`` accepts runs: a policy at every limit compiles its hooks and
  replays (the generated code stays below Python's own parser limits).
* Run time is bounded: ints are 64-bit and wrap, strings and State maps have
  limits, and going over one stops the policy with the function and line.
* Silently wrong things are refused: a Node field named ``load``, int
  literals beyond 64 bits, ``[limit=1e999]``, a length-1 vec broadcasting.

``tests/test_input_files.py`` has the files, data and flags; ``tests/test_fuzz_inputs.py`` the fuzzing.
Time bounds are CPU time (the machine may be shared). Nothing here starts Ray.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from types import SimpleNamespace as NS

import numpy as np
import pytest

from ray_adaptive.dsl import format_policy, limits, parse_policy
from ray_adaptive.dsl import values
from ray_adaptive.dsl.codegen import compile_hook
from ray_adaptive.dsl.interp import Interpreter
from ray_adaptive.errors import PolicyError, PolicyRuntimeError
from ray_adaptive.sim import replay
from ray_adaptive.workload import scenario_from_dict

SCORE = "Score(task, node):"
HOOK_STATE = "State:\n  x: int\n  s: string = \"ab\"\n"


def P(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def hook(*body: str, state: str = HOOK_STATE) -> str:
    """A policy whose OnArrival runs ``body``."""
    return state + P(SCORE, "  return 0", "OnArrival(task):", *("  " + b for b in body))


def limit_error(text: str, file: str = "p.policy") -> PolicyError:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, file=file)
    err = info.value
    assert err.kind == "limit", str(err)
    assert str(err).startswith(f"{file}:{err.line}:{err.col}: error: ") and "\n" not in str(err)
    return err


def _child_cpu() -> float:
    """CPU seconds used by this process's finished children (a shared machine makes wall time noisy)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_small(policy, tasks: int = 3):
    """Replay ``policy`` on a two-node scenario with tasks that carry no fields."""
    sc = scenario_from_dict({"nodes": [{"id": "n0"}, {"id": "n1"}],
                             "tasks": [{"id": f"t{i}", "arrival": i * 0.01} for i in range(tasks)]})
    return replay(policy, sc)


# ------------------------------------------------------------------------------------ issue 21's table


def chain(op: str, n: int, term: str = "1") -> str:
    return f" {op} ".join([term] * n)


TABLE = {  # issue 21's rows, each a policy that ended in a traceback (or took 23 s and 1.4 GB)
    "plus-1000": P(SCORE, "  return " + chain("+", 1000)),
    "minus-1000": P(SCORE, "  return " + "-" * 1000 + "1"),
    "plus-100000": P(SCORE, "  return " + chain("+", 100_000)),
    "not-1000": P(SCORE, "  return 1 if " + "not " * 1000 + "true else 0"),
    "ifexp-1000": P(SCORE, "  return " + "1 if true else " * 1000 + "0"),
}


@pytest.mark.parametrize("name", TABLE)
def test_deep_expressions_of_the_table_are_limit_errors(name):
    err = limit_error(TABLE[name])
    assert err.line == 2 and f"limit of {limits.MAX_DEPTH}" in err.message


def test_the_table_through_the_cli_is_one_line_each_and_exit_1(tmp_path):
    files = []
    for name, text in TABLE.items():
        (tmp_path / f"{name}.policy").write_text(text)
        files.append(f"{name}.policy")
    big = tmp_path / "big.policy"  # a 5 MB policy of 300,000 simple statements
    big.write_text(P(SCORE, *["  x = 1"] * 300_000, "  return x") + "#" * (5_000_000 - 2_400_000))
    files.append("big.policy")
    start = _child_cpu()
    out = subprocess.run([sys.executable, "-m", "ray_adaptive", "check", *files], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert _child_cpu() - start < 20  # (it took 23 s for the big one alone)
    assert out.returncode == 1 and "Traceback" not in out.stderr + out.stdout
    lines = out.stderr.splitlines()
    assert len(lines) == len(files)
    for f, line in zip(files, lines):
        assert line.startswith(f"{f}:") and ": error: " in line and "limit" in line, line
    assert lines[-1].startswith("big.policy:") and f"{limits.MAX_POLICY_BYTES:,} bytes" in lines[-1]


# ---------------------------------------------------------------------------------- each limit


def test_depth_limit_is_exact_and_located():
    ok = P(SCORE, "  return " + chain("+", limits.MAX_DEPTH + 1))  # 64 operators: 64 levels
    parse_policy(ok)
    err = limit_error(P(SCORE, "  return " + chain("+", limits.MAX_DEPTH + 2)))
    assert (err.line, err.col) == (2, 10)  # the innermost '+' of the chain starts with its first term
    assert f"nested {limits.MAX_DEPTH + 1} levels deep, over the limit of {limits.MAX_DEPTH}" in err.message


def test_and_chains_count_each_operator_as_the_ir_does():
    parse_policy(hook("if " + chain("and", limits.MAX_DEPTH + 1, "true") + ":", "  x = 1"))
    limit_error(hook("if " + chain("and", limits.MAX_DEPTH + 2, "true") + ":", "  x = 1"))


def test_nested_ifs_and_elif_chains_count_toward_the_depth():
    deep = [("  " * i) + "if x > 0:" for i in range(limits.MAX_DEPTH + 1)] + ["  " * (limits.MAX_DEPTH + 1) + "x = 1"]
    err = limit_error(hook(*deep))
    assert "in if/elif blocks" in err.message
    elifs = ["if x == 0:", "  x = 1"] + [l for i in range(1, limits.MAX_DEPTH + 1) for l in (f"elif x == {i}:", f"  x = {i}")]
    err = limit_error(hook(*elifs))
    assert "elif" in err.message and err.line > 60


def test_statement_limit_counts_declarations_and_statements_before_parsing():
    n = limits.MAX_STATEMENTS
    decls = [f"  s{i}: int" for i in range(n // 2)]
    body = [f"  x{i} = 1" for i in range(n - n // 2 - 1)]
    text = P("State:", *decls, SCORE, *body, "  return 0")  # exactly at the limit
    parse_policy(text)
    err = limit_error(text.replace("  return 0", "  y = 2\n  return 0"))
    assert f"more than {n:,} statements" in err.message and err.line == n + 2 + 1


def _check_steps(declarations: int) -> int:
    """The Python lines executed to parse and check a policy of ``declarations`` State variables: the
    work itself, counted, not timed (a timing on this shared machine varies by more than the factor the
    test looks for)."""
    text = P("State:", *(f"  s{i}: int = {i}" for i in range(declarations)), SCORE, "  return s1")
    steps = 0

    def trace(frame, event, arg):
        nonlocal steps
        if event == "line":
            steps += 1
        return trace

    sys.settrace(trace)
    try:
        parse_policy(text)
    finally:
        sys.settrace(None)
    return steps


def test_many_declarations_are_checked_in_linear_time():
    """Four times the declarations take about four times the work (40,000 took 27 s: quadratic, sixteen
    times)."""
    small, large = _check_steps(2_400), _check_steps(limits.MAX_STATEMENTS - 1)
    ratio = (limits.MAX_STATEMENTS - 1) / 2_400
    assert large < 1.5 * ratio * small, (small, large, ratio)


def test_tokens_per_statement_limit():
    parse_policy(P("State:", "  v: vec<float> = [" + ", ".join(["1"] * 4000) + "]", SCORE, "  return 0"))
    err = limit_error(P("State:", "  v: vec<float> = [" + ", ".join(["1"] * 6000) + "]", SCORE, "  return 0"))
    assert f"{limits.MAX_TOKENS:,} tokens" in err.message and (err.line, err.col) == (2, 19)


def test_file_size_limit_is_reported_where_it_is_crossed():
    text = P(SCORE, "  return 1") + ("#" * 99 + "\n") * (limits.MAX_POLICY_BYTES // 100 + 5)
    err = limit_error(text)
    assert f"{limits.MAX_POLICY_BYTES:,} bytes" in err.message
    assert err.line == limits.MAX_POLICY_BYTES // 100 + 2


def test_the_token_scan_bounds_nesting_that_would_make_the_parser_recurse():
    for text in (P(SCORE, "  return " + "(" * 250 + "1" + ")" * 250),  # Python's own limit: 200 brackets
                 P(SCORE, "  return " + "max(" * 150 + "1, 2" + ")" * 150),
                 P(SCORE, "  return " + "-(" * 600 + "1" + ")" * 600)):
        with pytest.raises(PolicyError) as info:
            parse_policy(text)
        assert info.value.kind in ("limit", "syntax") and info.value.line == 2


# ------------------------------------------------------------------- accepted by check, then running


def _deepest(kind: str) -> str:
    """A policy whose OnArrival reaches the depth limit with the construct that nests generated code most."""
    d = limits.MAX_DEPTH
    if kind == "max":  # max(a, b) is _reduce(_max, (a, b,)): two brackets a level
        return hook("x = " + "max(" * d + "1" + ", 1)" * d)
    if kind == "plus":
        return hook("x = " + chain("+", d + 1))
    if kind == "vec":
        return hook("x = " + "max([" * (d // 2) + "1" + "])" * (d // 2))
    if kind == "ifs":
        return hook(*[("  " * i) + "if x >= 0:" for i in range(d)] + ["  " * d + "x = 1"])
    if kind == "cond":
        return hook("x = " + "1 if x > 0 else " * (d // 2) + "2")
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["max", "plus", "vec", "ifs", "cond"])
def test_a_policy_at_the_depth_limit_compiles_its_hooks_and_replays(kind):
    policy = parse_policy(_deepest(kind))
    compile_hook(policy.hook("OnArrival"))  # (201 terms failed here: 'too many nested parentheses')
    assert len(run_small(policy).decisions) == 3


@pytest.mark.parametrize("expr", [chain("+", limits.MAX_DEPTH + 1), "-" * limits.MAX_DEPTH + "1",
                                  "abs(" * limits.MAX_DEPTH + "1" + ")" * limits.MAX_DEPTH,
                                  chain("+", limits.MAX_DEPTH + 1, "true")], ids=["plus", "minus", "abs", "bools"])
def test_score_and_hooks_at_the_depth_limit_compile_in_linear_time(expr):
    """Each operand is compiled once: compiling one twice (a bug the fuzzer found) made n operators cost 2**n."""
    policy = parse_policy(hook(f"x = {expr}").replace("return 0", f"return {expr}"))
    start = time.process_time()
    assert run_small(policy).decisions
    assert time.process_time() - start < 2


@pytest.mark.parametrize("text", [
    hook("x = " + chain("+", 201)),                                                            # SyntaxError in replay
    hook("if x == 0:", "  x = 1", *[l for i in range(1, 99) for l in (f"elif x == {i}:", f"  x = {i}")]),  # IndentationError
    hook("if " + chain("and", 1000, "true") + ":", "  x = 1"),                                  # RecursionError
], ids=["plus-201", "elif-98", "and-1000"])
def test_what_failed_in_replay_is_refused_at_check(text):
    limit_error(text)


def test_a_local_name_the_hook_audit_would_refuse_is_refused_at_check():
    with pytest.raises(PolicyError) as info:
        parse_policy(hook("a\u00b7b = 1", "x = a\u00b7b"), file="p.policy")
    assert (info.value.kind, info.value.line, info.value.col) == ("name", 7, 3)
    assert "A-Z, a-z, 0-9 and '_'" in info.value.message


@pytest.mark.parametrize("text, col", [
    (P("State:", "  v: vec<int> = [999999999999999999999999999999]", SCORE, "  return 0"), 18),
    (P(SCORE, "  return -9223372036854775809"), 10),
    (P(SCORE, "  return 9223372036854775808"), 10),
])
def test_int_literals_beyond_64_bits_are_check_errors(text, col):
    with pytest.raises(PolicyError) as info:
        parse_policy(text)
    assert (info.value.kind, info.value.col) == ("type", col) and "64-bit range" in info.value.message


def test_the_smallest_int64_literal_is_exact():
    p = parse_policy(P(SCORE, "  return -9223372036854775808"))
    assert run_small(p).decisions[0].score == -9223372036854775808.0
    assert parse_policy(format_policy(p)) == p


def test_map_literal_unpacking_is_refused_at_check():
    with pytest.raises(PolicyError) as info:
        parse_policy(P("State:", "  m: map<string, int> = {**{}}", SCORE, "  return 0"))
    assert (info.value.kind, info.value.line, info.value.col) == ("unsupported", 2, 28)


# ----------------------------------------------------------------------------------- run-time bounds


def _hook_runs(text: str, times: int, node=None):
    it = Interpreter(parse_policy(text, file="p.policy"))
    task = NS(id="t0", arrival=0.0, fields={})
    for _ in range(times):
        it.run_hook("OnArrival", task, node)
    return it


def test_a_string_that_doubles_stops_at_the_limit_naming_the_hook_and_line():
    start = time.process_time()
    with pytest.raises(PolicyRuntimeError) as info:
        _hook_runs(hook("s = s + s"), 100)
    assert time.process_time() - start < 2
    assert str(info.value).startswith("p.policy:7:7: ") and "(in OnArrival)" in str(info.value)
    assert f"over the limit of {limits.MAX_STRING_CHARS:,}" in str(info.value)


def test_a_map_keyed_by_a_doubling_string_stops_too():
    with pytest.raises(PolicyRuntimeError, match="over the limit"):
        _hook_runs(hook("s = s + s", "m[s] = 1", state=HOOK_STATE + "  m: map<string, int>\n"), 100)


def test_a_map_holds_at_most_the_limit_s_keys(monkeypatch):
    monkeypatch.setattr(values, "MAX_MAP_KEYS", 5)
    text = hook("x += 1", "m[s + \"k\" + \"\"] = x", "s = s + \"a\"", state=HOOK_STATE + "  m: map<string, int>\n")
    it = _hook_runs(text, 5)
    assert len(it.state["m"]) == 5
    with pytest.raises(PolicyRuntimeError, match=r"p\.policy:9:3: a map would hold more than 5 keys .*\(in OnArrival\)"):
        it.run_hook("OnArrival", NS(id="t0", arrival=0.0, fields={}))
    it.state["s"] = "ab"  # an existing key may still be written
    it.run_hook("OnArrival", NS(id="t0", arrival=0.0, fields={}))


def test_int_arithmetic_wraps_at_64_bits_and_score_reads_it():
    text = hook("x = x * x + 3", state="State:\n  x: int = 3\n").replace("return 0", "return x")
    start = time.process_time()
    it = _hook_runs(text, 200)  # (this grew without bound: seconds, then an OverflowError in Score)
    assert time.process_time() - start < 2
    assert isinstance(it.state["x"], int) and limits.INT_MIN <= it.state["x"] <= limits.INT_MAX
    expected = np.int64(3)
    with np.errstate(all="ignore"):
        for _ in range(200):
            expected = expected * expected + np.int64(3)
    assert it.state["x"] == int(expected)
    assert it.score(NS(id="t", arrival=0.0, fields={}), NS(id="n", index=0, executors=1, queue=2, resources={},
                                                          available={}, load=0, fields={})) == float(expected)


def test_bools_count_as_0_or_1_in_lanes_and_hooks_alike():
    text = P("Task:", "  f: bool", "State:", "  x: int", "  y: int", SCORE, "  return task.f + task.f - (-task.f)",
             "OnArrival(task):", "  x = task.f + task.f", "  y = -task.f")
    it = Interpreter(parse_policy(text))
    t = NS(id="t", arrival=0.0, fields={"f": True})
    n = NS(id="n", index=0, executors=1, queue=2, resources={}, available={}, load=0, fields={})
    assert it.score_matrix([t, t], [n]).tolist() == [[3.0], [3.0]]  # (lanes of bools added as logical or: 1)
    it.run_hook("OnArrival", t)
    assert it.state == {"x": 2, "y": -1}  # (-task.flag was a numpy TypeError)


# -------------------------------------------------------------------------------- silently wrong


def test_a_node_field_named_load_is_refused():
    with pytest.raises(PolicyError) as info:
        parse_policy(P("Node:", "  load: int", SCORE, "  return node.load"))
    assert (info.value.kind, info.value.line, info.value.col) == ("name", 2, 3) and "get_load" in info.value.message


def test_an_infinite_limit_is_refused_as_it_does_not_print_back():
    with pytest.raises(PolicyError) as info:
        parse_policy(P(SCORE + " [limit=1e999]", "  return 0"))
    assert info.value.kind == "type" and "finite" in info.value.message
    p = parse_policy(P(SCORE + " [limit=1e300]", "  return 0"))
    assert parse_policy(format_policy(p)) == p


def test_a_length_1_vec_does_not_broadcast_but_a_missing_key_does():
    with pytest.raises(PolicyRuntimeError, match="different lengths \\(1 and 3\\)"):
        run_small(parse_policy(P(SCORE, "  return sum([5.0] + [1.0, 2.0, 3.0])")))
    missing = P("State:", "  m: map<string, vec<float>>", SCORE, '  return sum(m["x"] + [1.0, 2.0, 3.0])')
    assert run_small(parse_policy(missing)).decisions[0].score == 6.0
    with pytest.raises(PolicyRuntimeError, match="different lengths"):  # the same rule in the hooks
        _hook_runs(hook("v = v + [1.0, 2.0, 3.0]", state="State:\n  v: vec<float> = [5.0]\n"), 1)


def test_replay_through_the_cli_names_the_hook_and_line_of_a_run_time_limit(tmp_path):
    (tmp_path / "p.policy").write_text(hook("s = s + s"))
    (tmp_path / "sc.json").write_text(json.dumps({"nodes": [{"id": "n0"}],
                                                  "tasks": [{"id": f"t{i}", "arrival": i} for i in range(40)]}))
    out = subprocess.run([sys.executable, "-m", "ray_adaptive", "replay", "p.policy", "sc.json", "--quiet"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.splitlines() == [out.stderr.strip()]
    assert out.stderr.startswith("error: p.policy:7:7: a string of ") and "(in OnArrival)" in out.stderr
