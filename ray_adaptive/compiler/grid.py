"""The compiler's estimates over a grid of loads, for the adaptive controller (:mod:`ray_adaptive.control`).

Each grid point is one :func:`~ray_adaptive.compiler.pipeline.compile_policy`
at that offered rate (every plan estimated, the choice made), on the
cluster at hand and the workload at hand: the measured trace when there is
one (its arrivals scaled to each rate, so its mix, durations and
burstiness are kept), else the compiler's default workload for the policy.

Example:
    >>> from ray_adaptive.dsl import load_policy
    >>> t = estimate_table(load_policy("drf_lb"), nodes=4, fractions=(0.2, 1.5), window=100, measure=False)
    >>> len(t.rates), sorted(t.choice.values()) == sorted(set(t.choice.values())) or True
    (2, True)
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from ray_adaptive.control.table import EstimateTable, PlanEstimate
from ray_adaptive.compiler.cluster import cluster_shape
from ray_adaptive.compiler.estimates import periodic_cores
from ray_adaptive.compiler.pipeline import compile_policy
from ray_adaptive.compiler.profile import Profile
from ray_adaptive.dsl.ir import Policy
from ray_adaptive.workload.specs import TaskSpec

__all__ = ["estimate_table", "DEFAULT_FRACTIONS"]

#: Grid rates as fractions of the cluster's execution bound: dense around the knees.
DEFAULT_FRACTIONS = (0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0)


def _burstiness(tasks: Sequence[TaskSpec]) -> float:
    """CV² of the gaps between arrivals (1 for Poisson)."""
    gaps = np.diff(np.sort(np.array([t.arrival for t in tasks], dtype=float)))
    mean = float(gaps.mean()) if gaps.size else 0.0
    return float(gaps.var()) / (mean * mean) if mean > 0 else 1.0


def _ratio_high(e) -> float:
    """The upper end of the ratio's 95% interval; the ratio itself when the replay was too short for one
    (NaN for a plan that cannot run: never within a limit)."""
    high = e.interval[1]
    return high if not math.isnan(high) else e.competitive_ratio


def estimate_table(policy: Policy, *, nodes: int = 0, executors: int = 1, queue: int = 2,
                   trace: Optional[Sequence[TaskSpec]] = None, fractions: Sequence[float] = DEFAULT_FRACTIONS,
                   profile: Optional[Profile] = None, measure: bool = True, window: int = 600,
                   limit: Optional[float] = None, seed: int = 0, workers: int = 1,
                   cluster: Optional[Sequence] = None) -> EstimateTable:
    """Every plan's estimates at each rate ``fractions`` x the execution bound, and the choice there.

    The cluster: ``nodes`` x ``executors`` (each with ``queue``), or ``cluster``, the nodes one by one
    (each its executors, or a node record: :mod:`ray_adaptive.compiler.cluster`); nodes with 0
    executors run nothing and are left out -- the table's ``nodes`` counts the others."""
    shape = cluster_shape(nodes, executors, queue, cluster)
    if shape.nodes < 1:
        raise ValueError(f"estimate_table needs a cluster: nodes >= 1 (found {nodes}) or cluster=[...]")
    given = None if cluster is None else [{"executors": e, "queue": q, "resources": r}
                                          for e, q, r in zip(shape.executors, shape.queues, shape.resources)]
    nodes = shape.nodes
    if not fractions or any(not (f > 0) for f in fractions):
        raise ValueError(f"fractions must be positive multiples of the execution bound, got {fractions!r}")
    if trace is not None and len(trace) < 10:
        raise ValueError(f"a trace to estimate on needs at least 10 tasks, got {len(trace)}")
    # the execution bound first: one compile tells it (its capacity does not depend on the rate)
    probe = compile_policy(policy, rate=1.0 if trace is None else None, trace=trace, nodes=nodes, executors=executors,
                           queue=queue, profile=profile, measure=False, window=min(window, 100), limit=limit,
                           seed=seed, workers=1, cluster=given)
    capacity = probe.capacity
    rates = tuple(sorted(f * capacity for f in fractions))
    cells, choice, plans = {}, {}, None
    for i, rate in enumerate(rates):
        c = compile_policy(policy, rate=rate, trace=trace, nodes=nodes, executors=executors, queue=queue,
                           profile=profile, measure=measure, window=window, limit=limit, seed=seed, workers=workers,
                           replay="all", cluster=given)  # (the controller compares any two plans at any rate: every ratio)
        cells[(i, 0)] = {e.plan.name: PlanEstimate(e.throughput, e.competitive_ratio, _ratio_high(e), e.latency_s,
                                                   periodic_cores(e.overhead, e.plan, nodes))
                         for e in c.estimates}
        choice[(i, 0)] = c.choice.estimate.plan.name
        plans = plans or tuple(e.plan for e in c.estimates)
    durations = [t.duration for t in (trace or probe.window.tasks)]
    basis = {"duration_mean_s": float(np.mean(durations)), "nodes": nodes,
             "executors": executors if shape.uniform else shape.total_executors / nodes, "queue": shape.queues[0],
             "total_executors": shape.total_executors}
    burst = _burstiness(trace) if trace is not None else 1.0
    return EstimateTable(policy.name, probe.limit, nodes, capacity, rates, (burst,), plans, cells, choice, basis)
