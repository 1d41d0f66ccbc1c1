"""Tiny builders for scenarios and runs, shared by the DSL/sim tests."""

from __future__ import annotations

from ray_adaptive.dsl import load_policy, parse_policy
from ray_adaptive.sim import replay
from ray_adaptive.workload import scenario_from_dict


def node(id, executors=1, queue=2, **fields):
    return {"id": id, "executors": executors, "queue": queue, "fields": fields}


def task(id, arrival=0.0, duration=1.0, timeout=None, **fields):
    t = {"id": id, "arrival": arrival, "duration": duration, "fields": fields}
    if timeout is not None:
        t["timeout"] = timeout
    return t


def run(policy, nodes, tasks):
    """Replay; ``policy`` is a shipped name or policy text."""
    p = load_policy(policy) if "\n" not in policy else parse_policy(policy)
    return replay(p, scenario_from_dict({"nodes": nodes, "tasks": tasks}))


def placements(result):
    """[(task, node)] in decision order."""
    return [(d.task, d.node) for d in result.decisions]
