"""Scenario files: the nodes and tasks a replay or simulation runs.

Format (JSON)::

    {"nodes": [{"id": "n0", "executors": 1, "queue": 2, "resources": {"CPU": 4},
                "fields": {"zone": "a"}}],
     "tasks": [{"id": "t0", "arrival": 0.0, "duration": 0.02, "timeout": 1.0,
                "resources": {"CPU": 1}, "fields": {"tenant": "a"}}]}

Optional keys and their defaults: node ``executors`` 1, ``queue`` 2,
``resources`` {}, ``fields`` {}; task ``duration`` 0.02 s, ``timeout``
unlimited (``null`` also means unlimited), ``resources`` {}, ``fields`` {},
``submitter`` "" (the client that submitted it; decentralized plans receive a
task at its submitter's scheduler -- the ideal scheduler ignores it).
Every error names the entry (index and id) and the key.

Numbers mean what they say or are refused: ``arrival`` and ``duration`` are
finite and >= 0 (an infinite arrival never comes: a replay would wait for it,
and print ``Infinity``, which is not JSON), ``timeout`` is >= 0 or unlimited,
resources are finite and >= 0, ``executors`` and ``queue`` at most
:data:`MAX_SLOTS`; a field's number is never NaN and an ``int`` field's fits
64 bits. Unknown keys, at the top level too, are errors: a misspelt key would
otherwise be silently ignored.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from ray_adaptive.dsl.ir import Policy, field_checker
from ray_adaptive.dsl.lengths import vec_lengths
from ray_adaptive.errors import ScenarioError
from ray_adaptive.files import read_text
from ray_adaptive.workload import specs
from ray_adaptive.workload.specs import NodeSpec, TaskSpec

_TOP_KEYS = {"nodes", "tasks"}
_NODE_KEYS = {"id", "executors", "queue", "resources", "fields"}
_TASK_KEYS = {"id", "arrival", "duration", "timeout", "resources", "fields", "submitter", "preemptible"}
#: The most executors, and the most queue places, a node may have (a simulated node keeps a slot each).
MAX_SLOTS = 100_000


@dataclass(frozen=True)
class Scenario:
    nodes: tuple[NodeSpec, ...]
    tasks: tuple[TaskSpec, ...]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v: Any) -> bool:
    return _is_number(v) and math.isfinite(v)


class _Reader:
    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, message: str):
        raise ScenarioError(f"{self.source}: {where}: {message}")

    def get(self, entry: dict, key: str, where: str, kind: str, default: Any = ...):
        if key not in entry:
            if default is ...:
                self.fail(where, f"missing key '{key}'")
            return default
        v = entry[key]
        if key == "timeout" and v is None:
            return math.inf
        ok, want = _KINDS[kind]
        if not ok(v):
            self.fail(where, f"'{key}' must be {want}, found {json.dumps(v)[:60]}")
        in_range, want = _RANGES.get(kind, (None, ""))
        if in_range is not None and not in_range(v):
            self.fail(where, f"'{key}' must be {want}, found {json.dumps(v)}")
        return v

    def resources(self, entry: dict, where: str) -> dict:
        res = self.get(entry, "resources", where, "object", {})
        for name, amount in res.items():
            if not _finite(amount) or amount < 0:
                self.fail(where, f"resource '{name}' must be a finite number >= 0, found {json.dumps(amount)}")
        return {k: float(v) for k, v in res.items()}

    def entries(self, data: dict, key: str) -> list:
        if key not in data:
            self.fail("top level", f"missing key '{key}'")
        if not isinstance(data[key], list):
            self.fail("top level", f"'{key}' must be a list")
        return data[key]

    def check_keys(self, entry: Any, allowed: set, where: str) -> None:
        if not isinstance(entry, dict):
            self.fail(where, f"expected an object, found {json.dumps(entry)[:40]}")
        unknown = sorted(set(entry) - allowed)
        if unknown:
            self.fail(where, f"unknown key '{unknown[0]}'; expected keys: {', '.join(sorted(allowed))}")


# what each kind of value is, and how an error says it
_KINDS = {
    "string": (lambda v: isinstance(v, str), "a string"),
    "time": (_is_number, "a number"),
    "timeout": (_is_number, "a number"),
    "count": (lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_SLOTS,
              f"a non-negative integer (at most {MAX_SLOTS:,})"),
    "object": (lambda v: isinstance(v, dict), "an object"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
}


# the values a number of each kind may take
_RANGES = {
    "time": (lambda v: math.isfinite(v) and v >= 0, ">= 0 and finite (seconds)"),
    "timeout": (lambda v: v >= 0, ">= 0 (seconds; null for none)"),
}


def _where(kind: str, i: int, entry: Any) -> str:
    ident = entry.get("id") if isinstance(entry, dict) else None
    return f"{kind}[{i}]" + (f" (id {json.dumps(ident)})" if ident is not None else "")


def scenario_from_dict(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate ``data`` (parsed JSON) into a Scenario; raise ScenarioError naming entry and key."""
    r = _Reader(source)
    if not isinstance(data, dict):
        r.fail("top level", "expected an object with 'nodes' and 'tasks'")
    r.check_keys(data, _TOP_KEYS, "top level")
    nodes, tasks, seen = [], [], set()
    for i, e in enumerate(r.entries(data, "nodes")):
        where = _where("nodes", i, e)
        r.check_keys(e, _NODE_KEYS, where)
        nid = r.get(e, "id", where, "string")
        if nid in seen:
            r.fail(where, f"duplicate node id {json.dumps(nid)}")
        seen.add(nid)
        executors = r.get(e, "executors", where, "count", specs.DEFAULT_EXECUTORS)
        if executors < 1:
            r.fail(where, "'executors' must be at least 1")
        nodes.append(NodeSpec(nid, executors, r.get(e, "queue", where, "count", specs.DEFAULT_QUEUE),
                              r.resources(e, where), r.get(e, "fields", where, "object", {})))
    if not nodes:
        r.fail("nodes", "a scenario needs at least one node")
    seen = set()
    for i, e in enumerate(r.entries(data, "tasks")):
        where = _where("tasks", i, e)
        r.check_keys(e, _TASK_KEYS, where)
        tid = r.get(e, "id", where, "string")
        if tid in seen:
            r.fail(where, f"duplicate task id {json.dumps(tid)}")
        seen.add(tid)
        arrival = float(r.get(e, "arrival", where, "time"))
        duration = float(r.get(e, "duration", where, "time", specs.DEFAULT_DURATION))
        timeout = float(r.get(e, "timeout", where, "timeout", specs.DEFAULT_TIMEOUT))
        tasks.append(TaskSpec(tid, arrival, duration, timeout, r.get(e, "fields", where, "object", {}), r.resources(e, where),
                              r.get(e, "submitter", where, "string", ""), r.get(e, "preemptible", where, "bool", False)))
    return Scenario(tuple(nodes), tuple(tasks))


def scenario_to_dict(scenario: Scenario) -> dict:
    """``scenario`` in the file format (JSON-ready): :func:`scenario_from_dict` reads it back equal.
    Empty resources, node fields and submitters are left out; a timeout of none is ``null``.

    Example:
        >>> sc = Scenario((NodeSpec("n0"),), (TaskSpec("t0", 0.5, fields={"tenant": "a"}),))
        >>> scenario_to_dict(sc)["tasks"]
        [{'id': 't0', 'arrival': 0.5, 'duration': 0.02, 'timeout': None, 'fields': {'tenant': 'a'}}]
    """
    nodes = []
    for n in scenario.nodes:
        d = {"id": n.id, "executors": n.executors, "queue": n.queue}
        d.update({k: dict(v) for k, v in (("resources", n.resources), ("fields", n.fields)) if v})
        nodes.append(d)
    tasks = []
    for t in scenario.tasks:
        d = {"id": t.id, "arrival": t.arrival, "duration": t.duration,
             "timeout": None if t.timeout == math.inf else t.timeout, "fields": dict(t.fields)}
        d.update({k: v for k, v in (("resources", dict(t.resources)), ("submitter", t.submitter),
                                    ("preemptible", t.preemptible)) if v})
        tasks.append(d)
    return {"nodes": nodes, "tasks": tasks}


def load_scenario(path: "str | Path") -> Scenario:
    """Read and validate a scenario JSON file (a FileError if it cannot be read as UTF-8 text)."""
    path = Path(path)
    text = read_text(path, "scenario")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ScenarioError(f"{path}:{err.lineno}:{err.colno}: invalid JSON: {err.msg}") from None
    except RecursionError:  # (json recurses on nested lists and objects)
        raise ScenarioError(f"{path}: invalid JSON: nested too deeply") from None
    return scenario_from_dict(data, str(path))


# what a type's values are, for a field that does not hold one
_MEANING = {"int": " (a 64-bit integer)", "float": " (a finite number)",
            "vec": " (a list of finite numbers)", "map": " (an object)"}


def check_fields(policy: Policy, scenario: Scenario, source: str = "<scenario>") -> None:
    """Check that every task/node carries exactly the fields the policy declares, well typed."""
    lengths = vec_lengths(policy)
    for kind, decls, entries in (("tasks", policy.task_fields, scenario.tasks), ("nodes", policy.node_fields, scenario.nodes)):
        obj = kind[:-1] + "."
        sized = {k[len(obj):]: n for k, n in lengths.items() if k.startswith(obj)}
        problem_of = field_checker(decls, sized)
        for i, entry in enumerate(entries):
            problem = problem_of(entry.fields)
            if problem is None:
                continue
            what, name, t = problem
            where = f"{source}: {kind}[{i}] (id {json.dumps(entry.id)})"
            if what == "unknown":
                have = ", ".join(d.name for d in decls) or "none"
                raise ScenarioError(f"{where}: unknown field '{name}'; policy {policy.name} declares: {have}")
            if what == "missing":
                raise ScenarioError(f"{where}: missing field '{name}' ({t}) that policy {policy.name} needs")
            found = json.dumps(entry.fields[name])[:60]
            if what == "length":
                place = name if name in sized else name + "[]"
                raise ScenarioError(f"{where}: field '{name}' must {'be a vec' if place == name else 'hold vecs'} of "
                                    f"length {sized[place]}{lengths.why(obj + place)}, found {found}")
            raise ScenarioError(f"{where}: field '{name}' must be {t}{_MEANING.get(t.kind, '')}, found {found}")


def unplaceable(tasks: "Sequence[TaskSpec]", nodes: "Sequence[NodeSpec]") -> "Optional[TaskSpec]":
    """The first task whose resources no node has in all (none free is enough): it could never be placed."""
    fits: dict = {}
    for t in tasks:
        if not t.resources:
            continue
        key = tuple(sorted(t.resources.items()))  # (tasks ask for a few distinct shapes: each checked once)
        if key not in fits:
            fits[key] = any(all(n.resources.get(r, 0.0) >= a - 1e-9 for r, a in t.resources.items()) for n in nodes)
        if not fits[key]:
            return t
    return None


def check_placeable(scenario: Scenario, source: str = "<scenario>", hint: str = "") -> None:
    """Refuse a scenario with a task no node could ever take (a simulation would wait for it forever)."""
    t = unplaceable(scenario.tasks, scenario.nodes)
    if t is not None:
        shapes = sorted({json.dumps(n.resources, sort_keys=True) for n in scenario.nodes})
        have = ", ".join(shapes[:3]) + (", ..." if len(shapes) > 3 else "")
        raise ScenarioError(f"{source}: task {json.dumps(t.id)} asks for {json.dumps(t.resources, sort_keys=True)}, "
                            f"more than any node has (nodes have {have}): it could never be placed{hint}")
