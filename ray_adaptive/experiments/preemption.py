"""Preemption and aging in the simulator (issue 39): ``python -m ray_adaptive.experiments.preemption``.

Three experiments, each on the ideal replay (the reference semantics) and on the compiler's plan for the
policy (centralized: the only architecture that can preempt, see docs/compiler.md), printed as JSON lines:

* **reclaim** -- a greedy tenant A fills 12 single-executor nodes with a backlog of long tasks (duration
  ``d``); at 10 s tenants B (and C) arrive, each with two rounds of its fair share (B alone: 12 tasks,
  two rounds of 6 executors; B and C: 8 each). Jain's index of the tenants'
  allocations (executor-seconds held, stopped runs included) over the *backlog period* -- from the
  newcomers' arrival until the first tenant's backlog is empty -- each divided by its equal fair share;
  and when each newcomer first holds its fair share. ``drf_reclaim`` against ``drf_lb`` (no preemption).
* **aging** -- ``priority``: 4 single-executor nodes, a steady stream of priority-1 tasks of 1 s
  (evenly spaced, or Poisson) and a priority-0 task of 1 s every 10 s; the cluster exactly full (load 1:
  the high tasks at 3.9/s) or the high tasks alone filling it (load 1.025: 4/s, the low ones on top);
  the low tasks' waits against ``max_age`` (10 s): the policy, Slurm's factor alone (no tier at
  ``max_age``), and no aging.
* **urgent** -- ``priority_preemptive``: 2 nodes full of preemptible priority-0 tasks of 20 s, a
  priority-5 task of 1 s at 5 s: when it starts (its grace is 2 s) and ends, against ``priority``.
"""

from __future__ import annotations

import argparse
import json
from typing import Callable, Optional

import numpy as np

from ray_adaptive.compiler.analysis import analyze
from ray_adaptive.compiler.enumeration import enumerate_plans
from ray_adaptive.compiler.lowering import lower
from ray_adaptive.compiler.profile import Profile
from ray_adaptive.dsl import format_policy, load_policy, parse_policy
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.sim import replay, simulate
from ray_adaptive.sim.metrics import jain_index
from ray_adaptive.workload.scenario import Scenario
from ray_adaptive.workload.specs import NodeSpec, TaskSpec

#: A twelfth of drf_lb's capacity [1.5, 2.0, 1.0]: 12 tasks fill the cluster (dominant share 1/12 each).
VEC12 = [0.125, 1 / 6, 1 / 12]


def _run(policy: Policy, sc: Scenario, plan: str) -> list:
    """The tasks after a run: the ideal replay (``plan`` "ideal") or the compiler's first plan of that name."""
    if plan == "ideal":
        return replay(policy, sc).tasks
    a = analyze(policy)
    plans, _ = enumerate_plans(a, nodes=len(sc.nodes))
    chosen = next(p for p in plans if p.name == plan)
    # (the compiler's fixed cost model: 0.7 ms a message, 35 us a probe, 10 us a unit)
    return simulate(lower(chosen, a, Profile(), nodes=len(sc.nodes)), sc, deadline="start").tasks


def _runs(t) -> list[tuple[float, float]]:
    """Every run of a task: those a preemption cut short, then its last (to its finish)."""
    out = [(start, stop) for _, start, stop in t.stopped]
    if t.started_at is not None:
        out.append((t.started_at, t.finished_at if t.finished_at is not None else np.inf))
    return out


def reclaim_scenario(d: float, newcomers: int, nodes: int = 12, rounds: int = 2) -> Scenario:
    """Tenant A's backlog at 0 (enough to keep every node busy throughout); each newcomer's at 10 s:
    ``rounds`` times its fair share of the nodes; every task preemptible."""
    share = nodes // (newcomers + 1)
    tasks = [TaskSpec(f"A{i:03d}", 0.0, d, fields={"tenant": "A", "resource_vec": VEC12}, submitter="A",
                      preemptible=True) for i in range(nodes * (rounds + 2))]
    for n in "BCD"[:newcomers]:
        tasks += [TaskSpec(f"{n}{i:03d}", 10.0, d, fields={"tenant": n, "resource_vec": VEC12}, submitter=n,
                           preemptible=True) for i in range(share * rounds)]
    return Scenario(tuple(NodeSpec(f"n{i:02d}", 1, 0) for i in range(nodes)), tuple(tasks))


def reclaim(d: float, newcomers: int, policy: str, plan: str, rounds: int = 2) -> dict:
    sc = reclaim_scenario(d, newcomers, rounds=rounds)
    tasks = _run(load_policy(policy), sc, plan)
    tenants = sorted({t.fields["tenant"] for t in tasks})
    start = 10.0
    # the backlog period ends when the first tenant has no task waiting: its last task's (final) start
    end = min(max(t.started_at for t in tasks if t.fields["tenant"] == n) for n in tenants)
    held = {n: 0.0 for n in tenants}
    for t in tasks:
        for a, b in _runs(t):
            held[t.fields["tenant"]] += max(0.0, min(b, end) - max(a, start))
    fair = len(sc.nodes) / len(tenants)  # executors each tenant's share is
    reach = {}
    for n in tenants[1:]:  # when each newcomer first holds its fair share
        events = sorted([(a, 1) for t in tasks if t.fields["tenant"] == n for a, _ in _runs(t)]
                        + [(b, -1) for t in tasks if t.fields["tenant"] == n for _, b in _runs(t)])
        count, reach[n] = 0, None
        for time, step in events:
            count += step
            if count >= int(fair) and reach[n] is None:
                reach[n] = round(time - start, 3)
    return {"experiment": "reclaim", "policy": policy, "plan": plan, "task_s": d, "tenants": len(tenants),
            "rounds": rounds,
            "backlog_period_s": [start, round(end, 3)],
            "jain": round(jain_index([held[n] / fair for n in tenants]), 4),
            "share_of_fair": {n: round(held[n] / (fair * (end - start)), 3) for n in tenants},
            "reaches_fair_share_after_s": reach,
            "preemptions": sum(t.preemptions for t in tasks),
            "wasted_s": round(sum(t.wasted_s for t in tasks), 3)}


def aging_scenario(seconds: float, poisson: bool, load: float, seed: int = 0) -> Scenario:
    """High tasks at ``load`` x the execution bound of 4/s less the low tasks' 0.1/s (``load`` 1: the cluster
    exactly full; 1.025: the high tasks alone fill it, the low ones come on top)."""
    rng = np.random.default_rng(seed)
    gap = 1.0 / (4.0 * load - 0.1)
    if poisson:
        times = np.cumsum(rng.exponential(gap, int(seconds / gap * 1.2)))
        times = times[times < seconds]
    else:
        times = np.arange(0.0, seconds, gap)
    tasks = [TaskSpec(f"h{i:05d}", float(a), 1.0, fields={"priority": 1}) for i, a in enumerate(times)]
    tasks += [TaskSpec(f"low{k:03d}", 10.0 * k + 5.0, 1.0, fields={"priority": 0})
              for k in range(int(seconds // 10) - 1)]
    return Scenario(tuple(NodeSpec(f"n{i}", 1, 0) for i in range(4)), tuple(tasks))


#: ``priority`` with its aging, with Slurm's factor alone (no tier at max_age), and without aging (strict priority).
AGING = {"aging": None, "slurm-factor-only": (" - 1000000000.0 * aged", ""),
         "none": ("max_age: float = 10.0", "max_age: float = 1e9")}


def aging(variant: str, poisson: bool, plan: str, seconds: float = 300.0, load: float = 1.0) -> dict:
    policy = load_policy("priority")
    change = AGING[variant]
    if change is not None:
        policy = parse_policy(format_policy(policy).replace(*change), name="priority")
    tasks = _run(policy, aging_scenario(seconds, poisson, load), plan)
    lows = [t for t in tasks if t.id.startswith("low")]
    waits = [(t.started_at if t.started_at is not None else np.inf) - t.arrival for t in lows]
    highs = [t.started_at - t.arrival for t in tasks if t.id.startswith("h") and t.started_at is not None]
    return {"experiment": "aging", "plan": plan, "arrivals": "poisson" if poisson else "even", "load": load,
            "variant": variant, "max_age_s": 10.0, "low_tasks": len(lows),
            "low_wait_max_s": round(max(waits), 3), "low_wait_mean_s": round(float(np.mean(waits)), 3),
            "low_within_max_age": sum(w <= 10.0 for w in waits),
            # the policy's bound: max_age plus the wait for a free executor (a task length, 1 s)
            "low_within_bound": sum(w <= 11.0 for w in waits), "high_wait_max_s": round(max(highs), 3)}


def urgent(policy: str, plan: str) -> dict:
    lows = [TaskSpec(f"lo{i}", 0.1 * i, 20.0, fields={"priority": 0}, preemptible=True) for i in range(4)]
    hi = TaskSpec("hi", 5.0, 1.0, fields={"priority": 5})
    sc = Scenario((NodeSpec("n0", 1, 0), NodeSpec("n1", 1, 0)), (*lows, hi))
    tasks = {t.id: t for t in _run(load_policy(policy), sc, plan)}
    h = tasks["hi"]
    return {"experiment": "urgent", "policy": policy, "plan": plan, "hi_starts_after_s": round(h.started_at - 5.0, 4),
            "hi_finishes_at_s": round(h.finished_at, 4), "low_finished": sum(t.status == "finished" for t in tasks.values()) - 1,
            "preemptions": sum(t.preemptions for t in tasks.values()),
            "wasted_s": round(sum(t.wasted_s for t in tasks.values()), 3)}


def main(argv: Optional[list] = None, out: Callable[[str], None] = print) -> list[dict]:
    ap = argparse.ArgumentParser(prog="python -m ray_adaptive.experiments.preemption", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one task length, one newcomer, 120 s of aging")
    args = ap.parse_args(argv)
    rows = []
    for rounds in ((2,) if args.quick else (2, 4)):
        for d in ((30.0,) if args.quick else (10.0, 30.0, 60.0)):
            for newcomers in ((1,) if args.quick else (1, 2)):
                for policy in ("drf_lb", "drf_reclaim"):
                    for plan in ("ideal", "centralized"):
                        rows.append(reclaim(d, newcomers, policy, plan, rounds))
    seconds = 120.0 if args.quick else 300.0
    for load in (1.0, 1.025):
        for poisson in (False, True):
            for variant in AGING:
                for plan in ("ideal", "centralized"):
                    rows.append(aging(variant, poisson, plan, seconds, load))
    for policy in ("priority", "priority_preemptive"):
        for plan in ("ideal", "centralized"):
            rows.append(urgent(policy, plan))
    for r in rows:
        out(json.dumps(r))
    return rows


if __name__ == "__main__":
    main()
