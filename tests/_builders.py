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


# priority_preemptive (grace 2 s, max 3) with a State that counts the tasks holding an executor: OnDispatch
# adds one, OnPreempt and OnFinish take it back -- it returns to zero only if each stopped run's OnPreempt ran
# once and no OnFinish ran for it (the Ray test, the selector's test and release_tests/preempt_ray.py)
COUNTED_HOLDING = """
State:
  holding: int

OnDispatch(task, node):
  holding += 1

OnPreempt(task, node):
  holding -= 1

OnFinish(task, node):
  holding -= 1
"""


def counted_preemptive() -> str:
    """The text of priority_preemptive with :data:`COUNTED_HOLDING` added."""
    from ray_adaptive.dsl import policy_path

    return policy_path("priority_preemptive").read_text() + COUNTED_HOLDING
