"""Fuzzing the inputs of ``ray-adaptive``: generators of bad input, and the one property every run must have.

Shared by the bounded fuzz tests of CI (``tests/test_fuzz_inputs.py``) and the
long release run (``release_tests/fuzz_inputs.py``), so both try the same kinds
of input:

* **policies** -- the shipped ones mutated (tokens deleted, duplicated,
  swapped, replaced; lines dropped or doubled; numbers made extreme; random
  characters), deep and long expressions around and far beyond the limits,
  generated policies whose hooks grow State (``s = s + s``, ``x = x * x``, map
  keys) to reach the run-time bounds, and random text or bytes. Every policy
  that passes ``check`` is also replayed (and sometimes compiled);
* **scenarios** (JSON) and **traces** (CSV): a valid document for a policy with
  values made wrong -- wrong types, missing and extra keys, huge and non-finite
  numbers, short vecs, duplicate ids -- and bad encodings;
* **command lines**: check / replay / compile with flags drawn from good and
  bad values, unknown options, missing arguments, unreadable paths;
* **simulate**: its flags and rate profiles (NaN and infinite times and
  rates, all-zero profiles with ``--adaptive``, empty and out-of-range rates,
  runs over the task cap, tenants' shares and fields, workload files);
* **addresses**: ``status`` / ``why`` with addresses that are no cluster's
  (malformed, ports out of range, nothing listening, ``local``).

The property (:meth:`Outcome.problem`): exit code 0 or 1; no traceback and no
"internal error"; on exit 1, one error line (one per file for ``check``); on
exit 0, nothing on stderr; finished within a time bound. Runs happen in this
process through click's runner -- the same ``main`` as the installed script --
with interval timers as the time bound (CPU time, and a multiple of it in wall time).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import signal
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hypothesis import strategies as st

from ray_adaptive.dsl import policy_path, shipped_policies

SHIPPED = {name: policy_path(name).read_text() for name in shipped_policies()}

# --------------------------------------------------------------------------------------------- running


class Hang(BaseException):
    """Raised by the time bound's timer (a BaseException: no ``except Exception`` of the CLI swallows it)."""


#: How much longer than its CPU bound a run may take in wall time: the machine may be shared, and a
#: compile waits for its forked workers (their CPU is not this process's).
WALL_FACTOR = 10


@contextlib.contextmanager
def time_bound(cpu_s: float):
    """Raise :class:`Hang` in this (main) thread once the block has used ``cpu_s`` seconds of CPU, or
    ``WALL_FACTOR`` times that of wall time. CPU time measures a busy loop whatever else the
    machine runs; wall time catches a wait that never ends."""
    def alarm(signum, frame):
        raise Hang("".join(traceback.format_stack(frame, limit=12)))  # (where it was: for the report)

    previous = {sig: signal.signal(sig, alarm) for sig in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, cpu_s)
    signal.setitimer(signal.ITIMER_REAL, cpu_s * WALL_FACTOR)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass
class Outcome:
    args: list
    exit_code: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    hang: bool = False
    files: int = 1  # error lines allowed on exit 1 (check reports one per file)

    def problem(self) -> Optional[str]:
        """What is wrong with this run, or None: "hang", "traceback", "exit N", "no error line",
        "not one line", "noise on stderr"."""
        if self.hang:
            return "hang"
        if "Traceback" in self.stdout + self.stderr or "internal error" in self.stderr:
            return "traceback"
        if self.exit_code not in (0, 1):
            return f"exit {self.exit_code}"
        lines = self.stderr.strip().splitlines()
        if self.exit_code == 1 and not lines:
            return "no error line"
        if self.exit_code == 1 and len(lines) > self.files:
            return "not one line"
        if self.exit_code == 0 and lines:
            return "noise on stderr"
        return None

    def as_dict(self) -> dict:
        return {"args": [str(a)[:200] for a in self.args], "exit_code": self.exit_code, "seconds": round(self.seconds, 3),
                "problem": self.problem(), "stderr": self.stderr[-1500:], "stdout_tail": self.stdout[-300:]}


def _check_files(args: list) -> int:
    """How many error lines a run may print: one per file ``check`` is given (after a ``--`` every
    argument is a file, even ``--rate``; a ``--`` before the command only ends the group's options)."""
    if args[:1] == ["--"]:
        args = args[1:]
    if args[:1] != ["check"]:
        return 1
    files, positional = 0, False
    for a in args[1:]:
        if a == "--" and not positional:
            positional = True
        elif positional or not a.startswith("-"):
            files += 1
    return max(1, files)


def run_cli(args: list, bound_s: float) -> Outcome:
    """``ray-adaptive ARGS`` in this process (click's runner), within ``bound_s`` seconds of CPU (see
    :func:`time_bound`)."""
    from click.testing import CliRunner

    from ray_adaptive.cli import main

    args = [str(a) for a in args]
    files = _check_files(args)
    start = time.perf_counter()
    try:
        with time_bound(bound_s), warnings.catch_warnings():
            warnings.simplefilter("always")  # (a warning each time it happens, as a fresh process would show it)
            result = CliRunner().invoke(main, args, catch_exceptions=True)
    except Hang as hang:
        return Outcome(args, stderr=f"hung at:\n{hang}", seconds=time.perf_counter() - start, hang=True, files=files)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += f"\nTraceback (caught by the runner): {result.exception!r}"
    return Outcome(args, result.exit_code, result.stdout, stderr, time.perf_counter() - start, files=files)


# ------------------------------------------------------------------------------------------ policies

_TOKENS = re.compile(r"\s+|[A-Za-z_]\w*|\d+\.?\d*(?:[eE][-+]?\d+)?|//[^\n]*|#[^\n]*|\"[^\"\n]*\"|'[^'\n]*'|.",
                     re.DOTALL)
VOCABULARY = [
    "+", "-", "*", "/", "%", "**", "//", "==", "<", ">=", "(", ")", "[", "]", "{", "}", ":", ",", ".", "=", "+=",
    " and ", " or ", " not ", " if ", " else ", "return ", "pass", "elif ", "\n", "\n  ", "\n    ", "  ", "\t", ";",
    "inf", "true", "false", "True", "None", "task", "node", "task.id", "node.index", "get_load(node)", "max", "min",
    "sum", "len", "abs", "sqrt", "log", "now()", "num_nodes()", "1e999", "-1e999", "9223372036854775807",
    "9223372036854775808", "-9223372036854775809", "10000000000000000000000000", "0", "1", "-1", "1.5", "0.0",
    '"s"', "'", '"', "\\", "\u00b7", "\u00e9", "\u0394x", "\x00", "\ufeff", "\x0c", "\x1c", "\u2028", "lambda x: x",
    "import os", "for i in x:", "while true:", "del x", "x := 1", "*x", "**m", "State:", "Task:", "Node:",
    "Score(task, node):", "OnArrival(task):", "OnDispatch(task, node):", "OnFinish(task, node):", "[limit=1e999]",
    "[limit=0.5]", "{**{}}", "f'{x}'", "b'x'", "1j", "...", "x", "alloc", "capacity", "load", "vec<float>",
    "vec<int>", "map<string, int>", "map<string, vec<float>>", "string", "int", "float", "bool", "__class__",
]
EXTREME_NUMBERS = ["1e999", "-1e999", "0", "-0.0", "1e-320", "1e308", "9223372036854775807", "9223372036854775808",
                   "-9223372036854775808", "-9223372036854775809", "1" + "0" * 40, "0.1"]


@st.composite
def mutated_policy(draw) -> str:
    """A shipped policy with a few tokens or lines changed."""
    text = SHIPPED[draw(st.sampled_from(sorted(SHIPPED)))]
    tokens = _TOKENS.findall(text)
    for _ in range(draw(st.integers(1, 6))):
        if not tokens:
            tokens = [""]
        i = draw(st.integers(0, len(tokens) - 1))
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "insert", "replace", "number", "line", "chars"]))
        if op == "delete":
            del tokens[i]
        elif op == "duplicate":
            tokens.insert(i, tokens[i] * draw(st.integers(2, 3)))
        elif op == "swap":
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif op in ("insert", "replace"):
            word = draw(st.sampled_from(VOCABULARY))
            tokens[i:i + (op == "replace")] = [word]
        elif op == "number":
            numbers = [k for k, t in enumerate(tokens) if t[:1].isdigit()]
            if numbers:
                tokens[draw(st.sampled_from(numbers))] = draw(st.sampled_from(EXTREME_NUMBERS))
        elif op == "line":
            lines = "".join(tokens).split("\n")
            k = draw(st.integers(0, len(lines) - 1))
            lines[k:k + 1] = draw(st.sampled_from([[], [lines[k]] * 2, [lines[k]] * 300, [lines[k].strip()]]))
            tokens = _TOKENS.findall("\n".join(lines))
        else:
            tokens.insert(i, draw(st.text(min_size=1, max_size=8)))
    return "".join(tokens)


def _chain(kind: str, n: int) -> str:
    """An expression nesting ``n`` deep (in operators, brackets or branches), of type int or bool."""
    if kind in ("+", "-", "*", "%"):
        return f" {kind} ".join(["1"] * (n + 1))
    if kind in ("and", "or"):
        return "1 if " + f" {kind} ".join(["true"] * (n + 1)) + " else 0"
    if kind == "neg":
        return "-" * n + "1"
    if kind == "not":
        return "1 if " + "not " * n + "true else 0"
    if kind == "ifexp":
        return "1 if true else " * n + "0"
    if kind == "parens":
        return "(" * n + "1" + ")" * n
    if kind == "max":
        return "max(" * n + "1" + ", 2)" * n
    if kind == "vec":
        return "max([" * n + "1" + "])" * n
    raise ValueError(kind)


_DEPTHS = st.one_of(st.integers(1, 80), st.sampled_from([199, 201, 999, 1001, 3000, 20_000]))


@st.composite
def deep_policy(draw) -> str:
    """A deep or long expression, nested ifs, or a long elif chain, in Score, a hook or a State initial value."""
    kind = draw(st.sampled_from(["+", "-", "*", "%", "and", "or", "neg", "not", "ifexp", "parens", "max", "vec",
                                 "ifs", "elifs", "statements"]))
    n = draw(_DEPTHS)
    where = draw(st.sampled_from(["score", "hook", "state"]))
    head = "State:\n  x: int\n"
    if kind == "ifs":
        body = [("  " * i) + "if x >= 0:" for i in range(min(n, 120))] + ["  " * min(n, 120) + "x = 1"]
        return head + "Score(task, node):\n  return x\nOnArrival(task):\n" + "\n".join("  " + b for b in body) + "\n"
    if kind == "elifs":
        body = ["if x == 0:", "  x = 1"] + [line for i in range(1, n) for line in (f"elif x == {i}:", f"  x = {i}")]
        return head + "Score(task, node):\n  return x\nOnArrival(task):\n" + "\n".join("  " + b for b in body) + "\n"
    if kind == "statements":
        return head + "Score(task, node):\n" + "  x1 = 1\n" * n + "  return 0\n"
    expr = _chain(kind, n)
    if where == "state":
        return f"State:\n  x: int = {expr}\nScore(task, node):\n  return x\n"
    if where == "hook":
        return head + f"Score(task, node):\n  return x\nOnArrival(task):\n  x = {expr}\n"
    return f"Score(task, node):\n  return {expr}\n"


# fields a generated policy may declare (the scenario gives them synthetic values: vecs of length 3, empty maps)
_FIELDS = {"tenant": "string", "prio": "int", "w": "float", "flag": "bool", "v": "vec<float>", "iv": "vec<int>",
           "m": "map<string, float>"}
_STATE = {"s": ('string = "ab"', "s"), "x": ("int = 3", "x"), "f": ("float = 1.5", "f"), "b": ("bool", "b"),
          "cnt": ("map<string, int>", None), "acc": ("map<string, vec<float>>", None),
          "keys": ("map<string, string>", None), "vv": ("vec<float> = [1.0, 2.0, 3.0]", "max(vv)")}
_HOOK_LINES = [
    "s = s + s", "s = s + task.id", "x = x * x", "x = x * x + 7", "x += 1", "x = x % 0", "x = -x", "f = f * f",
    "f = f / 0", "f = f - f", "b = not b", "cnt[task.id] = x", "cnt[s] = 1", "cnt[task.id] += 1", "keys[s] = s",
    "acc[task.id] += vv", "vv = vv * 2.0", "vv = vv + [1.0]", "vv[x] = 1.0", "x = len(cnt)", "x = len(vv)",
    "if x > 100:\n    x = 0", "if len(s) > 1000:\n    s = \"ab\"", "f = sqrt(f) + log(f)", "x = abs(x) % 7",
    "f = max(f, 1e308) * 10.0", "x = 9223372036854775807 + x", "pass",
]
_TASK_LINES = ["vv = vv + task.v", "acc[task.tenant] += task.v", "x = x + task.prio", "f = f * task.w",
               "b = task.flag", "x = x + task.flag", "x = -task.flag", "cnt[task.tenant] = len(task.iv)",
               "f = f + task.m[\"k\"]", "vv = task.v if task.flag else vv", "x = task.iv[x]"]
_SCORES = ["x", "f", "len(s)", "max(vv)", "x * f", "cnt[task.id]", "get_load(node) + x", "-x", "f / 0",
           "sum(acc[task.id])", "1e308 * f", "x if b else -x", "len(keys)", "task.prio", "task.w * x",
           "max(task.v + vv)", "sum(task.v * vv) / (x - 3)", "-inf", "inf", "log(0.0)", "task.flag + task.flag"]


@st.composite
def generated_policy(draw) -> str:
    """A well-formed policy built to run: State that grows in hooks, task fields, Score reading them."""
    fields = draw(st.lists(st.sampled_from(sorted(_FIELDS)), unique=True, max_size=4))
    lines = ["Task:", *(f"  {f}: {_FIELDS[f]}" for f in fields)] if fields else []
    lines += ["State:", *(f"  {name}: {decl}" for name, (decl, _) in _STATE.items())]
    task_lines = [l for l in _TASK_LINES if all(f"task.{f}" not in l or f in fields for f in _FIELDS)]
    scores = [s for s in _SCORES if all(f"task.{f}" not in s or f in fields for f in _FIELDS)]
    lines += ["Score(task, node):", f"  return {draw(st.sampled_from(scores))}"]
    for hook, params in (("OnArrival", "task"), ("OnDispatch", "task, node"), ("OnFinish", "task, node")):
        body = draw(st.lists(st.sampled_from(_HOOK_LINES + task_lines), max_size=5))
        if body:
            lines += [f"{hook}({params}):", *("  " + b for b in body)]
    return "\n".join(lines) + "\n"


POLICY_TEXT = st.one_of(mutated_policy(), mutated_policy(), deep_policy(), generated_policy(), generated_policy(),
                        st.text(max_size=200))


@st.composite
def policy_input(draw) -> bytes:
    """A policy file's bytes: text from :data:`POLICY_TEXT`, sometimes in a bad encoding."""
    text = draw(POLICY_TEXT)
    data = text.encode("utf-8", "surrogatepass")
    return draw(st.sampled_from([data] * 6 + [b"\xff" + data, data + b"\x80", text.encode("utf-16")]))


# ------------------------------------------------------------------------------------------ data files

WEIRD_VALUES = [None, math.nan, math.inf, -math.inf, -1, 0, -0.0, 1e-320, 1e308, 10**30, -(10**30), 2**63, "x", "",
                [], {}, True, [math.nan], [0.5], [1, 2, 3, 4], {"CPU": math.nan}, {"CPU": -1}, {"CPU": "x"}, "\x00",
                "a" * 10_000]
TASK_KEYS = ["id", "arrival", "duration", "timeout", "resources", "fields", "submitter", "bogus"]
NODE_KEYS = ["id", "executors", "queue", "resources", "fields", "bogus"]


def base_scenario(policy, tasks: int = 12, nodes: int = 3, seed: int = 0) -> dict:
    """A valid scenario for ``policy`` (its fields synthesised): what the data fuzzers spoil."""
    from ray_adaptive.workload import scenario_to_dict
    from ray_adaptive.workload.generate import paper_tenants, policy_workload

    sc = scenario_to_dict(policy_workload(policy, paper_tenants(tasks / 0.1), 0.1, nodes=nodes, seed=seed))
    return {"nodes": sc["nodes"], "tasks": sc["tasks"][:tasks]}


@st.composite
def spoiled_scenario(draw, base: dict) -> dict:
    """``base`` (deep-copied) with one to four values made wrong, keys dropped or added, ids duplicated."""
    sc = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 4))):
        what = draw(st.sampled_from(["task", "node", "field", "drop", "top", "dup", "vec", "list"]))
        entries = sc.get("tasks") if what in ("task", "field", "dup", "vec") else sc.get("nodes")
        if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
            continue
        e = entries[draw(st.integers(0, len(entries) - 1))]
        if what in ("task", "node"):
            e[draw(st.sampled_from(TASK_KEYS if what == "task" else NODE_KEYS))] = draw(st.sampled_from(WEIRD_VALUES))
        elif what == "field" and isinstance(e.get("fields"), dict):
            e["fields"][draw(st.sampled_from(sorted(e["fields"]) + ["bogus"]))] = draw(st.sampled_from(WEIRD_VALUES))
        elif what == "drop" and e:
            e.pop(draw(st.sampled_from(sorted(e))))
        elif what == "top":
            sc[draw(st.sampled_from(["nodes", "tasks", "notes"]))] = draw(st.sampled_from([[], {}, 1, None, [1], "x"]))
        elif what == "dup":
            entries.append(dict(e))
        elif what == "vec" and isinstance(e.get("fields"), dict):
            for k, v in e["fields"].items():
                if isinstance(v, list):
                    e["fields"][k] = draw(st.sampled_from([[0.5], [], [1.0] * 50, [math.inf, 1, 1], ["a", 1, 1]]))
        elif what == "list":
            entries.extend(json.loads(json.dumps(entries)) * draw(st.integers(1, 3)))
    return sc


def _spoil_encoding(draw, data: bytes) -> bytes:
    return draw(st.sampled_from([data] * 8 + [b"\xef\xbb\xbf" + data, b"\xff" + data, data[: len(data) // 2],
                                             data.replace(b'"', b"\x00", 1), data.decode("utf-8").encode("utf-16"),
                                             b"[" * 100_000 + b"]" * 100_000]))


@st.composite
def scenario_input(draw, base: dict) -> bytes:
    """A scenario file's bytes (JSON as Python writes it, NaN and Infinity included)."""
    return _spoil_encoding(draw, json.dumps(draw(spoiled_scenario(base))).encode())


TRACE_CELLS = ["inf", "-inf", "nan", "NaN", "-1", "", "x", "1e999", "1e-320", "99999999999999999999", '"{""CPU"": NaN}"',
               '"{""CPU"": -1}"', '"{""CPU"": 1}"', '"[1, 2]"', '"[[[[1]]]]"', '"' + "[" * 5000 + "]" * 5000 + '"',
               '"{""tenant"": 1}"', "0", "0.5", '"[0.1, 0.2]"', '"[NaN, 1, 1]"', "true"]


@st.composite
def trace_input(draw, base: dict) -> bytes:
    """A trace (CSV) of ``base``'s tasks with some cells, columns or encodings made wrong."""
    from ray_adaptive.workload.trace import BASE_COLUMNS

    tasks = base["tasks"]
    fields = sorted({k for t in tasks for k in t.get("fields", {})})
    columns = [c for c in BASE_COLUMNS if c not in ("timeout", "submitter")] + [f"task.{f}" for f in fields]
    if draw(st.booleans()):
        columns = draw(st.permutations(columns + ["bogus", "timeout"]))[: draw(st.integers(1, len(columns) + 2))]

    def cell(t, c):
        v = {"id": t["id"], "arrival": t["arrival"], "duration": t.get("duration", 0.02), "resources": "",
             "timeout": "", "bogus": 1}.get(c, t.get("fields", {}).get(c[5:], ""))
        return '"' + json.dumps(v).replace('"', '""') + '"' if isinstance(v, (list, dict)) else str(v)

    rows = [[cell(t, c) for c in columns] for t in tasks]
    for _ in range(draw(st.integers(0, 4))):
        if rows and columns:
            rows[draw(st.integers(0, len(rows) - 1))][draw(st.integers(0, len(columns) - 1))] = draw(st.sampled_from(TRACE_CELLS))
    text = ",".join(columns) + "\n" + "\n".join(",".join(r) for r in rows) + "\n"
    return _spoil_encoding(draw, text.encode())


# ----------------------------------------------------------------------------------------- command lines

NUMBERS = ["-5", "0", "1", "2", "10", "12", "nan", "inf", "-inf", "1e-300", "1e300", "abc", "", "3.5", "-0", "0x10",
           "1_000", " 5", "100000000", "20"]
FLAGS = {  # compile's flags, with values that keep a valid run short
    "--rate": NUMBERS + ["50", "700", "1e9"], "--nodes": ["0", "1", "3", "100000", "x", "-1"],
    "--executors": ["0", "1", "2", "1001"], "--queue": ["-1", "0", "2", "5000"], "--window": ["5", "10", "20", "0",
                                                                                               "100000000", "x"],
    "--limit": ["0", "0.5", "1", "1.2", "nan", "inf", "x"], "--headroom": ["-1", "0", "0.1", "nan", "11"],
    "--seed": ["-1", "0", "7", "99999999999999999999999"], "--node-resources": ['{"CPU": 2}', '{"CPU": NaN}', "[]", "x", "{}"],
}


@dataclass
class Workspace:
    """Files the command lines name: a good and bad policy, scenario, trace and profile, a folder."""

    root: Path
    paths: dict = field(default_factory=dict)

    @classmethod
    def make(cls, root: Path) -> "Workspace":
        from ray_adaptive.dsl import load_policy

        root.mkdir(parents=True, exist_ok=True)
        base = base_scenario(load_policy("drf_lb"))
        files = {
            "good.policy": SHIPPED["drf_lb"].encode(), "bad.policy": b"Score(task, node):\n  return (\n",
            "bin.policy": b"\xff\xfe", "good.json": json.dumps(base).encode(), "bad.json": b'{"nodes": [}',
            "bin.json": b"\xff{}", "good.csv": b"id,arrival,task.tenant,task.resource_vec\n" + b"".join(
                f't{i},{i * 0.01},a,"[0.1, 0.2, 0.1]"\n'.encode() for i in range(40)),
            "bad.csv": b"id,arrival\nt0,inf\n", "profile.json": b'{"message_s": -1}', "list.json": b"[1, 2]",
            "tenants.json": json.dumps({"tenants": [{"name": "a", "share": 1}, {"name": "b", "share": 3}],
                                        "rate": "steps:0=40,0.1=120", "seconds": 0.3}).encode(),
            "tenants_bad.json": b'{"tenants": [{"name": "a", "share": Infinity, "fields": {"nofield": 1}}], '
                                b'"rate": {"kind": "steps", "points": [[NaN, 5]]}}',
        }
        for name, data in files.items():
            (root / name).write_bytes(data)
        (root / "folder").mkdir(exist_ok=True)
        return cls(root, {name: str(root / name) for name in [*files, "folder"]} | {"missing": str(root / "none.x")})


def cli_args(ws: Workspace):
    """A strategy of ``ray-adaptive`` argument lists over the workspace's files."""
    policies = st.sampled_from(["drf_lb", "fifo", "nope", "", ws.paths["good.policy"], ws.paths["bad.policy"],
                                ws.paths["bin.policy"], ws.paths["folder"], ws.paths["missing"]])
    scenarios = st.sampled_from(["drf_3tenants", "nope", ws.paths["good.json"], ws.paths["bad.json"],
                                 ws.paths["bin.json"], ws.paths["folder"], ws.paths["missing"], ws.paths["list.json"]])
    paths = st.sampled_from([ws.paths[k] for k in ("good.csv", "bad.csv", "bin.json", "folder", "missing", "good.json",
                                                   "profile.json", "list.json")] + [str(ws.root / "none" / "out.json"),
                                                                                    str(ws.root / "out.json"), ""])
    flag = st.one_of(st.sampled_from(sorted(FLAGS)).flatmap(lambda f: st.tuples(st.just(f), st.sampled_from(FLAGS[f]))),
                     st.tuples(st.sampled_from(["--trace", "--profile", "--out"]), paths),
                     st.sampled_from([("--no-measure",), ("--json",), ("--whole-window",), ("--bogus",), ("-h",),
                                      ("--rate",), ("--quiet",)]))

    def compile_line(policy, flags):
        line = ["compile", policy]
        for f in flags:
            line += list(f)
        if "--window" not in line and "-h" not in line:
            line += ["--window", "10"]  # (a valid window is kept small: a run stays short)
        return line + (["--no-measure"] if "--no-measure" not in line else [])

    return st.one_of(
        st.lists(policies, min_size=0, max_size=3).map(lambda ps: ["check", *ps]),
        st.tuples(policies, scenarios, st.sampled_from([[], ["--quiet"], ["--bogus"], ["extra"]])).map(
            lambda t: ["replay", t[0], t[1], *t[2]]),
        st.tuples(policies, st.lists(flag, max_size=5)).map(lambda t: compile_line(*t)),
        st.lists(st.sampled_from(["check", "replay", "compile", "--version", "--help", "x", "--rate", "5", "--"]),
                 max_size=4),
    )


# --------------------------------------------------------------------------------------------- simulate

SIM_RATES = [  # tasks/s, percentages, rate profiles: good ones sized for a 0.3 s run on 3 nodes, and bad
    "50", "20,60", "60%", "const:40", "steps:0=40,0.1=120", "ramp:0=10,0.2=80", "sine:mean=50,amplitude=20,period=0.2",
    "bursts:base=20,peak=80,every=0.1,length=0.05", "", " ", ",", "200,,400", "inf", "-inf", "nan", "1e308", "0", "-5",
    "1e99%", "nan%", "0%", "%", "x", "1e9", "1e10", "steps:0=200,nan=800", "steps:nan=800", "ramp:nan=200",
    "ramp:0=1,inf=2", "steps:0=0", "ramp:0=0,5=0", "bursts:base=0,peak=0,every=1,length=1",
    "sine:mean=0,amplitude=0,period=5", "const:0", "const:inf", "const:1e308", "const:", "steps:", "steps:0",
    "steps:1=5,0=5", "steps:-1=5", "steps:0=5,0=6", "sine:mean=1", "sine:mean=1,amplitude=2,period=1",
    "sine:mean=50,amplitude=20,period=0.2,phase=nan", "bursts:base=1,peak=2,every=0,length=0", "weird:1", "steps:0=1e10",
    ":", "steps:0=50,0.1=-3", "ramp:0=5,1=nan",
]
SIM_FLAGS = {  # simulate's flags, with values that keep a valid run short
    "--rates": SIM_RATES, "--seconds": ["0.3", "0.5", "0", "-1", "nan", "inf", "1e-9", "3601", "x"],
    "--duration": ["0.02", "0.05", "1e-300", "1e-9", "3600", "100", "0", "nan", "inf", "-1"],
    "--tenants": ["a:1", "a:1,b:3", "a:inf", "a:nan", "a:0", "a:-1", "a", "", ",", "a:1,a:2", "a:1:nofield=3",
                  "a:1:weight=2", "a:1:weight=Infinity", "a:1:resource_vec=[1]", "a:1:resource_vec=[Infinity]",
                  "a/b:1", "a:1:=3", "a:1:tenant=x", "a:1e308,b:1e308"],
    "--every": ["0.1", "0", "1e-9", "nan", "0.001"], "--warmup": ["0.05", "0", "1", "-1", "nan"],
    "--nodes": ["0", "1", "3", "1001", "x"], "--executors": ["0", "2", "1001"], "--queue": ["-1", "0", "5000"],
    "--limit": ["0.5", "1", "1.2", "nan", "inf"], "--window": ["5", "10", "x", "100000000"],
    "--switch-pause": ["0", "-1", "nan", "0.05"], "--arrivals": ["bursty", "x"],
    "--durations": ["exponential", "lognormal", "x"], "--plan": ["centralized", "hybrid,centralized", "nope", ""],
    "--seed": ["-1", "0", "7"],
}


def simulate_args(ws: Workspace):
    """A strategy of ``ray-adaptive simulate`` argument lists: a short valid run's base, then flags drawn
    from good and bad values (click takes an option's last value), a rate over the task cap at times."""
    out = str(ws.root / "folder" / "sim")
    base = ["--nodes", "3", "--window", "10", "--seconds", "0.3", "--warmup", "0.05", "--plan", "centralized",
            "--no-progress", "--out", out]
    flag = st.one_of(
        st.sampled_from(sorted(SIM_FLAGS)).flatmap(lambda f: st.tuples(st.just(f), st.sampled_from(SIM_FLAGS[f]))),
        st.tuples(st.sampled_from(["--workload", "--tenants"]),
                  st.sampled_from([ws.paths[k] for k in ("good.csv", "bad.csv", "good.json", "tenants.json",
                                                         "tenants_bad.json", "list.json", "folder", "missing")])),
        st.sampled_from([("--adaptive",), ("--adaptive",), ("--bogus",), ("-h",), ("--rates",),
                         ("--seconds", "3600", "--rates", "100000"), ("--seconds", "3600", "--rates", "steps:0=1000")]))
    policies = st.sampled_from(["drf_lb", "weighted_fair", "fifo", "nope", ws.paths["bad.policy"]])
    return st.tuples(policies, st.lists(flag, max_size=4)).map(
        lambda t: ["simulate", t[0], *base, *[x for f in t[1] for x in f]])


# -------------------------------------------------------------------------------------------- addresses

ADDRESSES = ["[::1]:6379", "127.0.0.1:-1", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:1", "[::1]:1", "localhost:9",
             "local", "", " ", ":6379", "[zz]:1", "[::1]", "::1:6379", "host", "a:b:c", "http://x:1",
             "ray://localhost:1", "ray://", "ray://[::1]:1", "nohost.invalid:6379", "127.0.0.1:+80",
             "127.0.0.1:99999999999999999999", "1.2.3.4.5:1", "\x00:1", "x y:1", "\uff41:1", "127.0.0.1:6379/path",
             "[::1]:6379:1", "[]:1", "-1:-1"]


def address_args():
    """A strategy of ``status`` / ``why`` argument lists with an address that is no cluster's (never ``auto``:
    that would join whatever cluster this machine runs)."""
    status = st.tuples(st.sampled_from([[], ["drf_lb"], ["nope"]]), st.sampled_from(ADDRESSES),
                       st.sampled_from([[], ["--json"]])).map(lambda t: ["status", *t[0], "--address", t[1], *t[2]])
    why = st.tuples(st.sampled_from(["drf_lb", "nope"]), st.sampled_from(["t1", ""]), st.sampled_from(ADDRESSES)).map(
        lambda t: ["why", t[0], t[1], "--address", t[2]])
    return st.one_of(status, why)
