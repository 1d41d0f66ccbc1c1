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
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_adaptive.dsl.ir import Policy, field_problem
from ray_adaptive.errors import ScenarioError
from ray_adaptive.workload import specs
from ray_adaptive.workload.specs import NodeSpec, TaskSpec

_NODE_KEYS = {"id", "executors", "queue", "resources", "fields"}
_TASK_KEYS = {"id", "arrival", "duration", "timeout", "resources", "fields", "submitter"}


@dataclass(frozen=True)
class Scenario:
    nodes: tuple[NodeSpec, ...]
    tasks: tuple[TaskSpec, ...]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


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
        ok = {
            "string": isinstance(v, str),
            "number": _is_number(v),
            "count": isinstance(v, int) and not isinstance(v, bool) and v >= 0,
            "object": isinstance(v, dict),
        }[kind]
        if key == "timeout" and v is None:
            return math.inf
        if not ok:
            want = {"string": "a string", "number": "a number", "count": "a non-negative integer", "object": "an object"}[kind]
            self.fail(where, f"'{key}' must be {want}, found {json.dumps(v)}")
        return v

    def resources(self, entry: dict, where: str) -> dict:
        res = self.get(entry, "resources", where, "object", {})
        for name, amount in res.items():
            if not _is_number(amount) or amount < 0:
                self.fail(where, f"resource '{name}' must be a non-negative number, found {json.dumps(amount)}")
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


def _where(kind: str, i: int, entry: Any) -> str:
    ident = entry.get("id") if isinstance(entry, dict) else None
    return f"{kind}[{i}]" + (f" (id {json.dumps(ident)})" if ident is not None else "")


def scenario_from_dict(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate ``data`` (parsed JSON) into a Scenario; raise ScenarioError naming entry and key."""
    r = _Reader(source)
    if not isinstance(data, dict):
        r.fail("top level", "expected an object with 'nodes' and 'tasks'")
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
        arrival = float(r.get(e, "arrival", where, "number"))
        duration = float(r.get(e, "duration", where, "number", specs.DEFAULT_DURATION))
        timeout = float(r.get(e, "timeout", where, "number", specs.DEFAULT_TIMEOUT))
        for key, v in (("arrival", arrival), ("duration", duration), ("timeout", timeout)):
            if v < 0 or math.isnan(v):
                r.fail(where, f"'{key}' must be >= 0, found {v}")
        tasks.append(TaskSpec(tid, arrival, duration, timeout, r.get(e, "fields", where, "object", {}), r.resources(e, where),
                              r.get(e, "submitter", where, "string", "")))
    return Scenario(tuple(nodes), tuple(tasks))


def load_scenario(path: "str | Path") -> Scenario:
    """Read and validate a scenario JSON file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such scenario file") from None
    except json.JSONDecodeError as err:
        raise ScenarioError(f"{path}:{err.lineno}:{err.colno}: invalid JSON: {err.msg}") from None
    return scenario_from_dict(data, str(path))


def check_fields(policy: Policy, scenario: Scenario, source: str = "<scenario>") -> None:
    """Check that every task/node carries exactly the fields the policy declares, well typed."""
    for kind, decls, entries in (("tasks", policy.task_fields, scenario.tasks), ("nodes", policy.node_fields, scenario.nodes)):
        for i, entry in enumerate(entries):
            problem = field_problem(decls, entry.fields)
            if problem is None:
                continue
            what, name, t = problem
            where = f"{source}: {kind}[{i}] (id {json.dumps(entry.id)})"
            if what == "unknown":
                have = ", ".join(d.name for d in decls) or "none"
                raise ScenarioError(f"{where}: unknown field '{name}'; policy {policy.name} declares: {have}")
            if what == "missing":
                raise ScenarioError(f"{where}: missing field '{name}' ({t}) that policy {policy.name} needs")
            raise ScenarioError(f"{where}: field '{name}' must be {t}, found {json.dumps(entry.fields[name])}")
